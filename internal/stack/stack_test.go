package stack

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestKeeperGrowsAfterEachCollection proves Ensure grows once per garbage
// collection and not on every call in between.
func TestKeeperGrowsAfterEachCollection(t *testing.T) {
	// No collection between the first two calls, not even the runtime's
	// periodic one.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var k Keeper
	k.Ensure()
	if !k.grown {
		t.Fatal("the first Ensure did not grow")
	}
	before := k.cycle
	k.Ensure()
	if k.cycle != before {
		t.Fatal("Ensure without a collection in between grew again")
	}
	// The count moves once the collection's cleanup has run; wait for
	// exactly that, with a bound that only a broken counter reaches.
	deadline := time.Now().Add(30 * time.Second)
	for cycles.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("no garbage collection was counted in 30s")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	k.Ensure()
	if k.cycle == before {
		t.Fatal("Ensure after a collection did not grow")
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
