package ringcoordinator

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Issue 35.13: a range from the wire must span exactly one cycle, start on
// a cycle boundary, not lie beyond the next publish, and have the size its
// part count allows (a master's slice: exactly that part of the ring).

// badRanges are messages no honest master or slave sends, at t0+30s with a
// one-minute cycle.
func badRanges() []struct {
	name string
	m    rangeMsg
} {
	minute := t0.Add(time.Minute)
	third, _ := SplitRing(3)
	mk := func(from, until time.Time, r eventstore.TokenRange, i, of int) rangeMsg {
		return rangeMsg{scopeMsg: scopeMsg{DefaultRegion, DefaultCluster}, From: "x", ValidForMinute: ms(from), ValidUntil: ms(until),
			Min: r.Min, Max: r.Max, Index: i, Of: of}
	}
	return []struct {
		name string
		m    rangeMsg
	}{
		{"valid for ten years", mk(minute, minute.AddDate(10, 0, 0), third[0], 0, 3)},
		{"valid for half a cycle", mk(minute, minute.Add(30*time.Second), third[0], 0, 3)},
		{"minute not on a cycle boundary", mk(minute.Add(7*time.Second), minute.Add(67*time.Second), third[0], 0, 3)},
		{"a minute a year ahead", mk(minute.AddDate(1, 0, 0), minute.AddDate(1, 0, 0).Add(time.Minute), third[0], 0, 3)},
		{"the whole ring as part 1 of 3", mk(minute, minute.Add(time.Minute), FullRing, 0, 3)},
	}
}

func TestWireRangesAreValidated(t *testing.T) {
	minute := t0.Add(time.Minute)
	third, _ := SplitRing(3)
	t.Run("slave", func(t *testing.T) {
		now := t0.Add(30 * time.Second)
		s := newTestSlave(t, &now)
		for _, c := range badRanges() {
			if err := s.onSlice(c.m); !errors.Is(err, ErrBadMessage) {
				t.Errorf("%s: onSlice = %v, want ErrBadMessage", c.name, err)
			}
		}
		// A slice must be exactly its part of the ring.
		wrongPart := slice(minute, third[1])
		wrongPart.Index = 0
		if err := s.onSlice(wrongPart); !errors.Is(err, ErrBadMessage) {
			t.Errorf("part 2 of 3 sent as part 1: onSlice = %v, want ErrBadMessage", err)
		}
		if a := s.Assignment(now); len(a.Minutes) != 0 {
			t.Fatalf("the slave holds %+v after refusing every slice", a.Minutes)
		}
		if err := s.onSlice(slice(minute, third[0])); err != nil {
			t.Fatalf("valid slice refused: %v", err)
		}
		// The next minute is accepted even from a master a cycle ahead.
		if err := s.onSlice(slice(minute.Add(time.Minute), third[0])); err != nil {
			t.Fatalf("slice for the minute after next refused: %v", err)
		}
	})
	t.Run("connector", func(t *testing.T) {
		now := t0.Add(30 * time.Second)
		c := newTestConnector(t, &now)
		for _, b := range badRanges() {
			if _, err := c.onRange(b.m, "s1"); !errors.Is(err, ErrBadMessage) {
				t.Errorf("%s: onRange = %v, want ErrBadMessage", b.name, err)
			}
		}
		if h := c.History(); len(h) != 0 {
			t.Fatalf("the connector holds %+v after refusing every range", h)
		}
		sub := slice(minute, tr(-100, 100))
		sub.Index, sub.Of = 1, 2
		if ok, err := c.onRange(sub, "s1"); !ok || err != nil {
			t.Fatalf("valid sub-range refused: %v %v", ok, err)
		}
	})
}

// scriptedPeer is a fake master or slave on a real transport: it accepts
// every registration or subscription, sends on its n-th stream the n-th
// script (the last one for every later stream), then holds the stream
// open. It answers an orchestrator's assign with slaveAddr.
// Items put on later are sent on whichever stream is open then.
type scriptedPeer struct {
	accepted  string // msgRegistered or msgSubscribed
	slaveAddr string
	mu        sync.Mutex
	scripts   [][][]byte
	streams   int
	later     chan []byte
}

func (p *scriptedPeer) RequestResponse(_ context.Context, req []byte) ([]byte, error) {
	typ, err := decode(req, "", nil)
	if err != nil {
		return nil, err
	}
	if typ != msgAssign {
		return encode(typ, nil), nil // anything else is acknowledged
	}
	return encode(msgSlaveAddr, slaveAddrMsg{SlaveID: "fake-slave", Addr: p.slaveAddr}), nil
}

func (p *scriptedPeer) RequestStream(ctx context.Context, _ []byte, send func([]byte) error) error {
	p.mu.Lock()
	var script [][]byte
	if len(p.scripts) > 0 {
		script = p.scripts[min(p.streams, len(p.scripts)-1)]
	}
	p.streams++
	p.mu.Unlock()
	if err := send(encode(p.accepted, acceptedMsg{ID: "fake"})); err != nil {
		return nil
	}
	for _, b := range script {
		if err := send(b); err != nil {
			return nil
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case b := <-p.later:
			if err := send(b); err != nil {
				return nil
			}
		}
	}
}

// TestWireRangesValidatedOverTheWire: a fake master sends a real slave a
// slice valid for ten years, and a fake slave sends a real connector such
// a range, over RSocket on loopback and over the memory transport. Neither
// takes it: each ends the stream and, on the next one, takes the honest
// range, which is then the one in force.
func TestWireRangesValidatedOverTheWire(t *testing.T) {
	transports(t, func(t *testing.T, tp Transport) {
		t.Cleanup(func() { checkNoLeaks(t) })
		now := t0.Add(30 * time.Second)
		clock := WithClock(func() time.Time { return now })
		minute := t0.Add(time.Minute)
		scope := scopeMsg{DefaultRegion, DefaultCluster}
		forever := func(typ string, r eventstore.TokenRange, of int) []byte {
			return encode(typ, rangeMsg{scopeMsg: scope, From: "fake", ValidForMinute: ms(minute), ValidUntil: ms(minute.AddDate(10, 0, 0)),
				Min: r.Min, Max: r.Max, Index: 0, Of: of})
		}
		honest := func(typ string, m time.Time, r eventstore.TokenRange, i, of int) []byte {
			return encode(typ, rangeMsg{scopeMsg: scope, From: "fake", ValidForMinute: ms(m), ValidUntil: ms(m.Add(time.Minute)),
				Min: r.Min, Max: r.Max, Index: i, Of: of})
		}
		listen := func(h Handler) string {
			ln, err := tp.Listen("127.0.0.1:0", h)
			if err != nil {
				t.Fatal(err)
			}
			r := run(ln.Serve)
			t.Cleanup(func() { r.stop(t) })
			return ln.Addr()
		}
		fakeSlave := &scriptedPeer{accepted: msgSubscribed, scripts: [][][]byte{
			{forever(msgRange, tr(-100, 100), 1), honest(msgRange, minute.Add(time.Minute), tr(1, 2), 0, 1)},
			{honest(msgRange, minute.Add(time.Minute), tr(1, 2), 0, 1)},
		}}
		half, _ := SplitRing(2)
		fakeMaster := &scriptedPeer{accepted: msgRegistered, slaveAddr: listen(fakeSlave), scripts: [][][]byte{
			{forever(msgSlice, FullRing, 1), honest(msgSlice, minute, half[1], 1, 2)},
			{honest(msgSlice, minute, half[1], 1, 2)},
		}}
		masterAddr := listen(fakeMaster)
		opts := []Option{WithTransport(tp), WithMaster(masterAddr), clock, WithLogger(testLogger(t)), WithBackoff(20*time.Millisecond, 100*time.Millisecond)}

		s, err := NewSlave(opts...)
		if err != nil {
			t.Fatal(err)
		}
		sr := run(s.Run)
		defer sr.stop(t)
		c, err := NewConnector(opts...)
		if err != nil {
			t.Fatal(err)
		}
		cr := run(c.Run)
		defer cr.stop(t)

		waitFor(t, 20*time.Second, "the slave holds a slice", func() bool { return len(s.Assignment(now).Minutes) > 0 })
		a := s.Assignment(now)
		if len(a.Minutes) != 1 || !a.Minutes[0].ValidUntil.Equal(minute.Add(time.Minute)) || a.Minutes[0].Slices[0].Range != rangeOf(half[1]) {
			t.Errorf("the slave holds %+v, want only the honest slice %v until %v", a.Minutes, half[1], minute.Add(time.Minute))
		}

		waitFor(t, 20*time.Second, "the connector holds a range", func() bool { return len(c.History()) > 0 })
		for _, h := range c.History() {
			if !h.ValidUntil.Equal(h.ValidForMinute.Add(time.Minute)) {
				t.Errorf("the connector took a range valid %v..%v", h.ValidForMinute, h.ValidUntil)
			}
		}
		if r, _, ok := c.Range(minute.Add(time.Minute + time.Second)); !ok || r != tr(1, 2) {
			t.Fatalf("in the minute after: the connector hands out %v %v, want the honest %v", r, ok, tr(1, 2))
		}
	})
}
