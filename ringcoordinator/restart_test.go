package ringcoordinator

import (
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
