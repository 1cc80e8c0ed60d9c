package stack

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestKeeperGrowsAfterEachCollection proves Ensure grows on its first call
// and after a garbage collection, and not on the calls in between.
func TestKeeperGrowsAfterEachCollection(t *testing.T) {
	// No collection while the calls in between run, not even the
	// runtime's periodic one. A collection from before may still be
	// counted late (its cleanup runs after it); a round that sees the
	// count move is done again.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var k Keeper
	k.Ensure()
	if k.grows != 1 {
		t.Fatalf("the first Ensure grew %d times, want 1", k.grows)
	}
	for round := 0; ; round++ {
		if round == 100 {
			t.Fatal("the collection count kept moving with collections off")
		}
		c := cycles.Load()
		k.Ensure() // catches up with a late count
		g := k.grows
		for range 100 {
			k.Ensure()
		}
		if cycles.Load() != c || k.cycle != c {
			continue
		}
		if k.grows != g {
			t.Fatalf("Ensure grew %d times in 100 calls without a collection, want 0", k.grows-g)
		}
		break
	}
	g := k.grows
	waitCounted(t)
	k.Ensure()
	if k.grows != g+1 {
		t.Fatalf("Ensure after a collection grew %d times, want 1", k.grows-g)
	}
}

// waitCounted collects garbage until a collection is counted, with a bound
// that only a broken counter reaches.
func waitCounted(t *testing.T) {
	t.Helper()
	before := cycles.Load()
	deadline := time.Now().Add(30 * time.Second)
	for cycles.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("no garbage collection was counted in 30s")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

func BenchmarkGrow(b *testing.B) {
	for b.Loop() {
		Grow()
	}
}

func BenchmarkKeeperEnsure(b *testing.B) {
	var k Keeper
	for b.Loop() {
		k.Ensure()
	}
}
