package ringcoordinator

import (
	"testing"
	"time"
)

// TestFlowInMemory runs master, 2 slaves and 4 connectors over the memory
// transport with a 1s cycle and connector clocks skewed by up to ±15ms
// (under the 33ms guard): no two nodes ever hold overlapping ranges at the
// same true instant, the ring is covered, a slave that stops hands its
// nodes' share to the other at the next cycle, and everything returns
// when stopped.
func TestFlowInMemory(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) }) // registered first: runs after the other cleanups
	const cycle = time.Second
	tp := NewMemoryTransport()
	m, err := NewMaster(WithTransport(tp), WithCycle(cycle), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	mr := run(m.Run)
	defer mr.stop(t)
	var slaves []*Slave
	var srs []*runner
	for i := range 2 {
		s, err := NewSlave(WithTransport(tp), WithMaster(m.Addr()), WithNodeID(string(rune('A'+i))), WithCycle(cycle),
			WithBackoff(20*time.Millisecond, 200*time.Millisecond), WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		slaves = append(slaves, s)
		srs = append(srs, run(s.Run))
	}
	defer srs[1].stop(t)
	waitFor(t, 10*time.Second, "slaves registered", func() bool { return slaves[0].Connected() && slaves[1].Connected() })
	var nodes []*node
	for i, off := range []time.Duration{-15 * time.Millisecond, 0, 15 * time.Millisecond, 7 * time.Millisecond} {
		_ = i
		nodes = append(nodes, startConnector(t, tp, m.Addr(), cycle, off))
	}
	start := time.Now()
	m1 := waitCovered(t, nodes, start, 15*time.Second, "a minute covered by the 4 nodes", func(hs []Holding) bool { return len(hs) == 4 })
	checkNoOverlap(t, nodes)

	// Stop slave A away from the publish instant.
	waitPhase(cycle, 0.2)
	srs[0].stop(t)
	killed := cycleStart(time.Now(), cycle)
	m2 := waitCovered(t, nodes, killed, 15*time.Second, "the ring covered by slave B alone", func(hs []Holding) bool {
		return holdingsFrom(hs, "B")
	})
	if !m2.After(m1) {
		t.Fatalf("redistributed minute %v not after %v", m2, m1)
	}
	for _, r := range records(nodes) {
		if r.h.SlaveID == "A" && r.h.ValidForMinute.After(killed) {
			t.Fatalf("a node holds a range of stopped slave A for minute %v (stopped during %v)", r.h.ValidForMinute, killed)
		}
	}
	checkNoOverlap(t, nodes)
	if got := m.Assignment(time.Now()).Slaves; len(got) != 1 || got[0].ID != "B" {
		t.Fatalf("master's slaves %+v, want B alone", got)
	}
}
