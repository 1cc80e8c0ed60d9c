package ringcoordinator

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

func tr(lo, hi int64) eventstore.TokenRange { return eventstore.TokenRange{Min: lo, Max: hi} }

func checkParts(t *testing.T, what string, got []eventstore.TokenRange, want []eventstore.TokenRange) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d parts, want %d: %v", what, len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: part %d = [%d, %d], want [%d, %d]", what, i+1, got[i].Min, got[i].Max, want[i].Min, want[i].Max)
		}
	}
}

// TestSeedTableFourNodes is the seed's first table: the ring among 4 retry
// nodes (slots A-D), 4,611,686,018,427,387,904 tokens each.
func TestSeedTableFourNodes(t *testing.T) {
	got, err := SplitRing(4)
	if err != nil {
		t.Fatal(err)
	}
	checkParts(t, "4 nodes", got, []eventstore.TokenRange{
		tr(-9223372036854775808, -4611686018427387905),
		tr(-4611686018427387904, -1),
		tr(0, 4611686018427387903),
		tr(4611686018427387904, 9223372036854775807),
	})
	if s := Size(FullRing).String(); s != "18446744073709551616" {
		t.Errorf("ring size %s, want 18446744073709551616 (the seed's total)", s)
	}
	for i, p := range got {
		if s := Size(p).String(); s != "4611686018427387904" {
			t.Errorf("part %d has %s tokens, want the seed's 4611686018427387904", i+1, s)
		}
	}
}

// TestSeedTableThreeSlaves is the seed's master -> slave table (3 slaves).
func TestSeedTableThreeSlaves(t *testing.T) {
	got, err := SplitRing(3)
	if err != nil {
		t.Fatal(err)
	}
	checkParts(t, "3 slaves", got, []eventstore.TokenRange{
		tr(-9223372036854775808, -3074457345618258603),
		tr(-3074457345618258602, 3074457345618258602),
		tr(3074457345618258603, 9223372036854775807),
	})
}

// TestSeedTableTwoOrchestratorsUnderSlave1 is the seed's slave ->
// orchestrator table: slave 1's slice (of 3) among 2 orchestrators.
func TestSeedTableTwoOrchestratorsUnderSlave1(t *testing.T) {
	slaves, err := SplitRing(3)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Split(slaves[0], 2)
	if err != nil {
		t.Fatal(err)
	}
	checkParts(t, "slave 1 / 2 orchestrators", got, []eventstore.TokenRange{
		tr(-9223372036854775808, -6148914691236517206),
		tr(-6148914691236517205, -3074457345618258603),
	})
}

// checkCover checks that parts split r: contiguous, in order, non-empty,
// covering r exactly, sizes within one token of each other and equal to
// floor or ceil of size/n.
func checkCover(t *testing.T, r eventstore.TokenRange, parts []eventstore.TokenRange) {
	t.Helper()
	if len(parts) == 0 {
		t.Fatalf("no parts for [%d, %d]", r.Min, r.Max)
	}
	if parts[0].Min != r.Min || parts[len(parts)-1].Max != r.Max {
		t.Fatalf("parts of [%d, %d] span [%d, %d]", r.Min, r.Max, parts[0].Min, parts[len(parts)-1].Max)
	}
	n := big.NewInt(int64(len(parts)))
	lo := new(big.Int).Div(Size(r), n)
	hi := new(big.Int).Set(lo)
	if new(big.Int).Mod(Size(r), n).Sign() != 0 {
		hi.Add(hi, big.NewInt(1))
	}
	total := new(big.Int)
	for i, p := range parts {
		if p.Min > p.Max {
			t.Fatalf("part %d of %d is empty: [%d, %d]", i, len(parts), p.Min, p.Max)
		}
		if i > 0 && (parts[i-1].Max == math.MaxInt64 || p.Min != parts[i-1].Max+1) {
			t.Fatalf("part %d starts at %d, previous ends at %d", i, p.Min, parts[i-1].Max)
		}
		s := Size(p)
		if s.Cmp(lo) < 0 || s.Cmp(hi) > 0 {
			t.Fatalf("part %d of %d has %s tokens, want %s..%s", i, len(parts), s, lo, hi)
		}
		total.Add(total, s)
	}
	if total.Cmp(Size(r)) != 0 {
		t.Fatalf("parts hold %s tokens, range %s", total, Size(r))
	}
}

// TestSplitProperty: for any number of slaves and of orchestrators under
// each, the orchestrators' sub-ranges cover the ring exactly once, each
// non-empty and within one token of its siblings.
func TestSplitProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 400 {
		slaves := 1 + rng.IntN(300)
		if trial < 20 {
			slaves = trial + 1
		}
		slices, err := SplitRing(slaves)
		if err != nil {
			t.Fatal(err)
		}
		checkCover(t, FullRing, slices)
		var all []eventstore.TokenRange
		for _, s := range slices {
			orchs := 1 + rng.IntN(60)
			subs, err := Split(s, orchs)
			if err != nil {
				t.Fatal(err)
			}
			checkCover(t, s, subs)
			all = append(all, subs...)
		}
		checkCover2(t, all)
		// random tokens fall in exactly one sub-range
		for range 50 {
			tok := int64(rng.Uint64())
			n := 0
			for _, r := range all {
				if r.Contains(tok) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("token %d in %d sub-ranges", tok, n)
			}
		}
	}
}

// checkCover2 checks that ordered ranges tile the whole ring.
func checkCover2(t *testing.T, all []eventstore.TokenRange) {
	t.Helper()
	if all[0].Min != math.MinInt64 || all[len(all)-1].Max != math.MaxInt64 {
		t.Fatalf("ranges span [%d, %d], want the ring", all[0].Min, all[len(all)-1].Max)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Min != all[i-1].Max+1 {
			t.Fatalf("gap or overlap between %v and %v", all[i-1], all[i])
		}
	}
}

// TestSplitArbitraryRanges covers small and odd ranges, down to one token
// per part.
func TestSplitArbitraryRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		a, b := int64(rng.Uint64()), int64(rng.Uint64())
		if rng.IntN(3) == 0 {
			b = a + int64(rng.IntN(1000))
			if b < a {
				b = math.MaxInt64
			}
		}
		if a > b {
			a, b = b, a
		}
		r := tr(a, b)
		n := 1 + rng.IntN(100)
		if Span(r) < uint64(n-1) {
			n = int(Span(r)) + 1
		}
		parts, err := Split(r, n)
		if err != nil {
			t.Fatalf("Split([%d, %d], %d): %v", a, b, n, err)
		}
		checkCover(t, r, parts)
	}
	parts, err := Split(tr(5, 7), 3)
	if err != nil {
		t.Fatal(err)
	}
	checkParts(t, "3 tokens / 3", parts, []eventstore.TokenRange{tr(5, 5), tr(6, 6), tr(7, 7)})
}

func TestSplitErrors(t *testing.T) {
	for _, c := range []struct {
		r eventstore.TokenRange
		n int
	}{{FullRing, 0}, {FullRing, -1}, {tr(2, 1), 1}, {tr(1, 2), 3}} {
		if _, err := Split(c.r, c.n); !errors.Is(err, ErrInvalidSplit) {
			t.Errorf("Split(%v, %d) = %v, want ErrInvalidSplit", c.r, c.n, err)
		}
	}
}

// FuzzSplit checks the split invariants on any range and part count.
func FuzzSplit(f *testing.F) {
	f.Add(int64(math.MinInt64), int64(math.MaxInt64), 3)
	f.Add(int64(-10), int64(10), 7)
	f.Add(int64(0), int64(0), 1)
	f.Fuzz(func(t *testing.T, a, b int64, n int) {
		if a > b {
			a, b = b, a
		}
		n = 1 + (n%1000+1000)%1000
		r := tr(a, b)
		if Span(r) < uint64(n-1) {
			if _, err := Split(r, n); err == nil {
				t.Fatalf("Split(%v, %d) of a too small range succeeded", r, n)
			}
			return
		}
		parts, err := Split(r, n)
		if err != nil {
			t.Fatal(err)
		}
		checkCover(t, r, parts)
	})
}

func ExampleSplitRing() {
	slaves, _ := SplitRing(3)
	for i, s := range slaves {
		fmt.Printf("slave %d: [%d, %d]\n", i+1, s.Min, s.Max)
	}
	orchs, _ := Split(slaves[0], 2)
	for i, o := range orchs {
		fmt.Printf("slave 1, orchestrator %d: [%d, %d]\n", i+1, o.Min, o.Max)
	}
	// Output:
	// slave 1: [-9223372036854775808, -3074457345618258603]
	// slave 2: [-3074457345618258602, 3074457345618258602]
	// slave 3: [3074457345618258603, 9223372036854775807]
	// slave 1, orchestrator 1: [-9223372036854775808, -6148914691236517206]
	// slave 1, orchestrator 2: [-6148914691236517205, -3074457345618258603]
}
