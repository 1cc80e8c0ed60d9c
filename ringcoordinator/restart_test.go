package ringcoordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Issue 35.12: "a minute's split is computed once, never changed" must
// survive the master's restart.

// sliceLog records, from the slaves' own views, every slice each slave
// held, and fails on two slaves holding overlapping slices of one minute.
type sliceLog struct {
	mu   sync.Mutex
	held map[time.Time]map[string]eventstore.TokenRange // minute -> slave -> slice
}

func (l *sliceLog) observe(slaves ...*Slave) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = map[time.Time]map[string]eventstore.TokenRange{}
	}
	for _, s := range slaves {
		for _, m := range s.Assignment(time.Now()).Minutes {
			for _, sl := range m.Slices {
				if l.held[m.ValidForMinute] == nil {
					l.held[m.ValidForMinute] = map[string]eventstore.TokenRange{}
				}
				l.held[m.ValidForMinute][s.ID()] = sl.Range.TokenRange()
			}
		}
	}
}

func (l *sliceLog) latest() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last time.Time
	for m := range l.held {
		if m.After(last) {
			last = m
		}
	}
	return last
}

func (l *sliceLog) checkNoOverlap(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for minute, bySlave := range l.held {
		for a, ra := range bySlave {
			for b, rb := range bySlave {
				if a < b && Overlaps(ra, rb) {
					t.Errorf("slaves %s and %s both held slices of minute %v that overlap: %v and %v", a, b, minute, rangeOf(ra), rangeOf(rb))
				}
			}
		}
	}
}

// TestRestartedMasterDoesNotRepublish: a master publishes the next minute
// to slaves S1 and S2 and stops; a new master on the same address, whose
// clock is behind (it reads one cycle before that minute), gets S1, S2 and
// a new slave S3. It must not publish that minute again (S1 and S2 would
// refuse the second slice, S3 would take a slice overlapping theirs): it
// publishes nothing within two cycles of its start, and then a split that
// no earlier slice overlaps.
func TestRestartedMasterDoesNotRepublish(t *testing.T) {
	transports(t, func(t *testing.T, tp Transport) {
		t.Cleanup(func() { checkNoLeaks(t) })
		const cycle = 2 * time.Second
		first, err := NewMaster(WithTransport(tp), WithCycle(cycle), WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		fr := run(first.Run)
		addr := first.Addr()
		var slaves []*Slave
		newSlave := func(id string) {
			s, err := NewSlave(WithTransport(tp), WithMaster(addr), WithCycle(cycle), WithNodeID(id),
				WithBackoff(20*time.Millisecond, 100*time.Millisecond), WithLogger(testLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			r := run(s.Run)
			t.Cleanup(func() { r.stop(t) })
			slaves = append(slaves, s)
		}
		newSlave("S1")
		newSlave("S2")
		var log sliceLog
		// Wait for a publish of the next minute to both, and stop the
		// master right after it.
		var next time.Time
		waitFor(t, 30*time.Second, "both slaves hold the next minute's slice", func() bool {
			now := time.Now()
			next = cycleStart(now, cycle).Add(cycle)
			for _, s := range slaves {
				a := s.Assignment(now)
				if len(a.Minutes) == 0 || !a.Minutes[len(a.Minutes)-1].ValidForMinute.Equal(next) {
					return false
				}
			}
			return true
		})
		fr.stop(t)
		log.observe(slaves...)

		// The new master's clock reads one cycle before that minute.
		behind := time.Since(next.Add(-cycle))
		second, err := NewMaster(WithTransport(tp), WithListen(addr), WithCycle(cycle), WithLogger(testLogger(t)),
			WithClock(func() time.Time { return time.Now().Add(-behind) }))
		if err != nil {
			t.Fatal(err)
		}
		sr := run(second.Run)
		defer sr.stop(t)
		newSlave("S3")
		t.Logf("%T: first master published %v; second master's clock is %v behind", tp, next, behind)
		waitFor(t, 30*time.Second, "a slice of a minute after it", func() bool {
			log.observe(slaves...)
			return log.latest().After(next)
		})
		for range 20 { // and keep watching a little
			log.observe(slaves...)
			time.Sleep(10 * time.Millisecond)
		}
		log.checkNoOverlap(t)
		if l := log.latest(); l.Before(next.Add(2 * cycle)) {
			t.Errorf("the restarted master published minute %v, within two cycles of its start (clock %v)", l, next.Add(-cycle))
		}
	})
}

// TestSlaveRefusesASecondSplitItsNodesHold: a slave's nodes n1 and n2
// hold the two halves of the current minute from a slave that is gone; they
// and a new node n3 now stream from slave S. A slice of that minute
// arriving at S (from a restarted master whose clock is behind) must not
// be split: n3 would scan a part of the ring n1 or n2 scans. The next
// minute is split among all three.
func TestSlaveRefusesASecondSplitItsNodesHold(t *testing.T) {
	transports(t, func(t *testing.T, tp Transport) {
		t.Cleanup(func() { checkNoLeaks(t) })
		minute := t0.Add(time.Minute)
		now := minute.Add(10 * time.Second)
		clock := WithClock(func() time.Time { return now })
		master := &scriptedPeer{accepted: msgRegistered, later: make(chan []byte, 4)}
		ln, err := tp.Listen("127.0.0.1:0", master)
		if err != nil {
			t.Fatal(err)
		}
		lr := run(ln.Serve)
		defer lr.stop(t)
		opts := []Option{WithTransport(tp), WithMaster(ln.Addr()), clock, WithLogger(testLogger(t)), WithBackoff(20*time.Millisecond, 100*time.Millisecond)}
		s, err := NewSlave(append(opts, WithNodeID("S"))...)
		if err != nil {
			t.Fatal(err)
		}
		master.slaveAddr = s.AdvertisedAddr()
		sr := run(s.Run)
		defer sr.stop(t)

		halves, _ := SplitRing(2)
		var nodes []*node
		for i := range 3 {
			c, err := NewConnector(append(opts, WithNodeID(fmt.Sprintf("n%d", i+1)))...)
			if err != nil {
				t.Fatal(err)
			}
			if i < 2 { // n1 and n2 hold the current minute from a slave now gone
				m := slice(minute, halves[i])
				m.Index, m.Of = i, 2
				if ok, err := c.onRange(m, "gone"); !ok || err != nil {
					t.Fatal(ok, err)
				}
				c.lost()
			}
			n := &node{c: c, r: run(c.Run)}
			t.Cleanup(func() { n.r.stop(t) })
			nodes = append(nodes, n)
		}
		waitFor(t, 20*time.Second, "3 nodes streaming from S", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.orchs) == 3
		})
		whole := func(m time.Time) []byte {
			return encode(msgSlice, rangeMsg{scopeMsg: scopeOf(&s.o), From: "restarted", ValidForMinute: ms(m), ValidUntil: ms(m.Add(time.Minute)),
				Min: MinToken, Max: MaxToken, Of: 1})
		}
		master.later <- whole(minute)
		master.later <- whole(minute.Add(time.Minute))
		waitFor(t, 20*time.Second, "the next minute split among the 3 nodes", func() bool {
			return len(minuteRanges(nodes, minute.Add(time.Minute))) == 3
		})
		checkNoOverlap(t, nodes)
		for i, n := range nodes {
			if i < 2 {
				continue
			}
			for _, h := range n.c.History() {
				if h.ValidForMinute.Equal(minute) {
					t.Errorf("node n%d got %v of minute %v, which its slave's other nodes hold", i+1, h.Range, minute)
				}
			}
		}
	})
}

// TestRestartedSlaveLeavesNoSliceUnscanned (issue 35.14): 2 slaves, 2
// nodes, one on each. Slave A stops; its node moves to slave B through the
// master. A restarts (same id) and registers again, with no node. The
// master must not give it a slice nobody scans: the ring is covered again
// by the 2 nodes, both on B.
func TestRestartedSlaveLeavesNoSliceUnscanned(t *testing.T) {
	transports(t, func(t *testing.T, tp Transport) {
		t.Cleanup(func() { checkNoLeaks(t) })
		const cycle = time.Second
		m, err := NewMaster(WithTransport(tp), WithCycle(cycle), WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		mr := run(m.Run)
		defer mr.stop(t)
		startSlave := func(id string) (*Slave, *runner) {
			s, err := NewSlave(WithTransport(tp), WithMaster(m.Addr()), WithCycle(cycle), WithNodeID(id),
				WithBackoff(20*time.Millisecond, 100*time.Millisecond), WithLogger(testLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			r := run(s.Run)
			t.Cleanup(func() { r.stop(t) })
			return s, r
		}
		a, ar := startSlave("A")
		b, _ := startSlave("B")
		waitFor(t, 20*time.Second, "slaves registered", func() bool { return a.Connected() && b.Connected() })
		nodes := []*node{startConnector(t, tp, m.Addr(), cycle, 0), startConnector(t, tp, m.Addr(), cycle, 0)}
		waitCovered(t, nodes, time.Now(), 20*time.Second, "a minute covered by the 2 nodes, one on each slave", func(hs []Holding) bool {
			return len(hs) == 2 && hs[0].SlaveID != hs[1].SlaveID
		})

		ar.stop(t)
		waitFor(t, 20*time.Second, "both nodes on slave B", func() bool {
			for _, n := range nodes {
				if ok, id, _ := n.c.Connected(); !ok || id != "B" {
					return false
				}
			}
			return true
		})
		a2, _ := startSlave("A")
		waitFor(t, 20*time.Second, "slave A registered again", a2.Connected)
		back := time.Now()
		waitCovered(t, nodes, back, 15*time.Second, "the ring covered by the 2 nodes after slave A restarted", nil)
		checkNoOverlap(t, nodes)
	})
}

// TestMasterGivesSlicesOnlyToSlavesWithNodes: the ring goes to the slaves
// that report orchestrators; to all of them when none does.
func TestMasterGivesSlicesOnlyToSlavesWithNodes(t *testing.T) {
	m := newTestMaster(t)
	a, b, c := entry("s1"), entry("s2"), entry("s3")
	for _, e := range []*slaveEntry{a, b, c} {
		m.addSlave(e)
	}
	minute := t0.Add(time.Minute)
	m.publish(minute.Add(-30*time.Second), minute)
	for i, e := range []*slaveEntry{a, b, c} {
		if got := takeRanges(t, e.out); len(got) != 1 || got[0].Of != 3 {
			t.Fatalf("no slave has nodes: slave %d got %+v, want a third of the ring", i+1, got)
		}
	}
	report := func(id string, n int) error {
		_, err := m.RequestResponse(context.Background(), encode(msgNodes, nodesMsg{scopeMsg: scopeOf(&m.o), SlaveID: id, Nodes: n}))
		return err
	}
	if err := report("s1", 2); err != nil {
		t.Fatal(err)
	}
	if err := report("s3", 1); err != nil {
		t.Fatal(err)
	}
	if err := report("nobody", 1); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("report of an unregistered slave: %v, want ErrBadMessage", err)
	}
	minute = minute.Add(time.Minute)
	m.publish(minute.Add(-30*time.Second), minute)
	halves, _ := SplitRing(2)
	ra, rb, rc := takeRanges(t, a.out), takeRanges(t, b.out), takeRanges(t, c.out)
	if len(ra) != 1 || len(rc) != 1 || len(rb) != 0 || ra[0].tokenRange() != halves[0] || rc[0].tokenRange() != halves[1] {
		t.Fatalf("s1 (2 nodes) got %+v, s2 (none) %+v, s3 (1 node) %+v; want the ring in halves between s1 and s3", ra, rb, rc)
	}
	if s := m.Assignment(minute).Slaves; len(s) != 3 || s[0].Nodes != 2 || s[1].Nodes != 0 || s[2].Nodes != 1 {
		t.Fatalf("master's view of its slaves: %+v", s)
	}
}
