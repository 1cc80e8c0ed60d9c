package ringcoordinator

import (
	"context"
	"fmt"
	"math/big"
	"sort"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// TestSimulation10000PodsAnd100Slaves runs 10,000 orchestrator pods and 100
// slaves through the roles' own logic (the master's registry, publish and
// round robin; each slave's split), without a network: every range is
// non-empty, the 10,000 ranges cover the ring exactly once with sizes
// within one token of each other, the slices and sub-ranges have the sizes
// the seed's arithmetic gives (2^64/100 and 2^64/10,000, rounded down or
// up), and the tier-3 directory of one window written by those 10,000 pods
// (one instance id each) is scanned exactly once, within the seed's 50,000
// rows-per-partition ceiling.
func TestSimulation10000PodsAnd100Slaves(t *testing.T) {
	const pods, nSlaves = 10000, 100
	now := t0.Add(30 * time.Second)
	minute := t0.Add(time.Minute)
	m := newTestMaster(t)
	slaves := make([]*Slave, nSlaves)
	entries := make([]*slaveEntry, nSlaves)
	byAddr := map[string]int{}
	tp := NewMemoryTransport()
	for i := range slaves {
		s, err := NewSlave(WithTransport(tp), WithLogger(quiet), WithMaster("m"),
			WithNodeID(fmt.Sprintf("slave-%03d", i)), WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.ln.Close() })
		slaves[i] = s
		entries[i] = &slaveEntry{id: s.id, addr: s.AdvertisedAddr(), out: newQueue()}
		byAddr[s.AdvertisedAddr()] = i
		m.addSlave(entries[i])
	}
	// Pods ask the master for a slave (round robin) and subscribe to it.
	queues := make([]*queue, pods)
	perSlave := make([]int, nSlaves)
	for p := range pods {
		b, err := m.RequestResponse(context.Background(), encode(msgAssign, assignMsg{scopeMsg: scopeOf(&m.o), NodeID: fmt.Sprint(p)}))
		if err != nil {
			t.Fatal(err)
		}
		var a slaveAddrMsg
		if _, err := decode(b, msgSlaveAddr, &a); err != nil {
			t.Fatal(err)
		}
		i := byAddr[a.Addr]
		perSlave[i]++
		queues[p] = newQueue()
		slaves[i].addOrch(&orchEntry{node: fmt.Sprintf("pod-%05d", p), out: queues[p]})
	}
	for i, n := range perSlave {
		if n != pods/nSlaves {
			t.Fatalf("slave %d got %d pods from the round robin, want %d", i, n, pods/nSlaves)
		}
	}
	// The master publishes; each slave splits its slice among its pods.
	m.publish(now, minute)
	ring := Size(FullRing)
	sliceLo, sliceHi := bounds(ring, nSlaves)
	for i, e := range entries {
		got := takeRanges(t, e.out)
		if len(got) != 1 {
			t.Fatalf("slave %d got %d slices", i, len(got))
		}
		if s := Size(got[0].tokenRange()); s.Cmp(sliceLo) < 0 || s.Cmp(sliceHi) > 0 {
			t.Fatalf("slave %d's slice has %s tokens, want %s..%s", i, s, sliceLo, sliceHi)
		}
		if err := slaves[i].onSlice(got[0]); err != nil {
			t.Fatal(err)
		}
	}
	all := make([]eventstore.TokenRange, 0, pods)
	for p, q := range queues {
		got := takeRanges(t, q)
		if len(got) != 1 {
			t.Fatalf("pod %d got %d ranges", p, len(got))
		}
		all = append(all, got[0].tokenRange())
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Min < all[j].Min })
	checkCover2(t, all)
	subLo, subHi := bounds(ring, pods)
	minSpan, maxSpan := Span(all[0]), Span(all[0])
	for _, r := range all {
		if r.Min > r.Max {
			t.Fatalf("empty range %v", r)
		}
		minSpan, maxSpan = min(minSpan, Span(r)), max(maxSpan, Span(r))
	}
	if maxSpan-minSpan > 1 {
		t.Fatalf("range sizes differ by %d tokens, want at most 1", maxSpan-minSpan)
	}
	lo, hi := new(big.Int).SetUint64(minSpan+1), new(big.Int).SetUint64(maxSpan+1)
	if lo.Cmp(subLo) < 0 || hi.Cmp(subHi) > 0 {
		t.Fatalf("sub-range sizes %s..%s outside 2^64/%d rounded: %s..%s", lo, hi, pods, subLo, subHi)
	}

	// One window's tier 3: each pod wrote with its own instance id.
	counts := make([]int, len(all))
	for p := range pods {
		tok := Token([]byte(fmt.Sprintf("7c9e6679-7425-40de-944b-%012d", p)))
		i := sort.Search(len(all), func(i int) bool { return all[i].Max >= tok })
		if i == len(all) || !all[i].Contains(tok) {
			t.Fatalf("instance token %d in no range", tok)
		}
		counts[i]++
	}
	total, most := 0, 0
	for _, n := range counts {
		total += n
		most = max(most, n)
	}
	const tier3Ceiling = 50000 // seed 000: tier-3 partition rows per window and service
	if total != pods || total >= tier3Ceiling {
		t.Fatalf("%d instances scanned (each once), want %d, under the %d-row ceiling", total, pods, tier3Ceiling)
	}
	if most > 12 {
		t.Fatalf("a retry node scans %d instances of the window; tokens should spread about 1 per range", most)
	}
	t.Logf("10,000 ranges of %d..%d tokens; one window's 10,000 instances: at most %d per node", minSpan+1, maxSpan+1, most)
}

// bounds returns floor(size/n) and ceil(size/n).
func bounds(size *big.Int, n int) (lo, hi *big.Int) {
	lo, rem := new(big.Int).DivMod(size, big.NewInt(int64(n)), new(big.Int))
	hi = new(big.Int).Set(lo)
	if rem.Sign() != 0 {
		hi.Add(hi, big.NewInt(1))
	}
	return lo, hi
}
