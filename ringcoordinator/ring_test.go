package ringcoordinator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Unit tests of the roles' ring logic, driven directly (no transport
// traffic, explicit times).

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var t0 = time.Date(2026, 3, 10, 10, 30, 0, 0, time.UTC)

func newTestMaster(t *testing.T, opts ...Option) *Master {
	t.Helper()
	m, err := NewMaster(append([]Option{WithTransport(NewMemoryTransport()), WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.ln.Close() })
	return m
}

func entry(id string) *slaveEntry { return &slaveEntry{id: id, addr: id + ":7071", out: newQueue()} }

// takeRanges decodes the range messages queued in q.
func takeRanges(t *testing.T, q *queue) []rangeMsg {
	t.Helper()
	items, _, _ := q.drain()
	var out []rangeMsg
	for _, b := range items {
		var m rangeMsg
		typ, err := decode(b, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if typ != msgSlice && typ != msgRange {
			continue
		}
		if _, err := decode(b, typ, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestMasterPublishesTheSeedSplitForTheNextMinute(t *testing.T) {
	m := newTestMaster(t)
	a, b, c := entry("s1"), entry("s2"), entry("s3")
	for _, e := range []*slaveEntry{a, b, c} {
		m.addSlave(e)
	}
	at, minute := nextPublish(t0.Add(10*time.Second), time.Minute, 30*time.Second)
	if !at.Equal(t0.Add(30*time.Second)) || !minute.Equal(t0.Add(time.Minute)) {
		t.Fatalf("next publish at %v for %v, want second 30 for the next minute", at, minute)
	}
	m.publish(at, minute)
	want := []eventstore.TokenRange{
		tr(-9223372036854775808, -3074457345618258603),
		tr(-3074457345618258602, 3074457345618258602),
		tr(3074457345618258603, 9223372036854775807),
	}
	for i, e := range []*slaveEntry{a, b, c} {
		got := takeRanges(t, e.out)
		if len(got) != 1 {
			t.Fatalf("slave %d got %d slices, want 1", i+1, len(got))
		}
		g := got[0]
		if g.tokenRange() != want[i] || g.Index != i || g.Of != 3 ||
			!fromMS(g.ValidForMinute).Equal(minute) || !fromMS(g.ValidUntil).Equal(minute.Add(time.Minute)) {
			t.Errorf("slave %d got %+v, want %v of minute %v", i+1, g, want[i], minute)
		}
	}
	// The same minute is never published twice (a clock stepping back).
	m.addSlave(entry("s4"))
	m.publish(at.Add(-time.Second), minute)
	if got := takeRanges(t, a.out); len(got) != 0 {
		t.Fatalf("minute published twice: %+v", got)
	}
	// A minute already over is not published.
	m.publish(minute.Add(2*time.Minute), minute.Add(time.Minute))
	if got := takeRanges(t, a.out); len(got) != 0 {
		t.Fatalf("a minute already over was published: %+v", got)
	}
}

func TestMasterLazyRebalance(t *testing.T) {
	minute := t0.Add(time.Minute)
	pub := func(m *Master) { m.publish(minute.Add(-30*time.Second), minute); minute = minute.Add(time.Minute) }

	t.Run("default: the next cycle splits among the slaves left", func(t *testing.T) {
		m := newTestMaster(t)
		a, b, c := entry("s1"), entry("s2"), entry("s3")
		m.addSlave(a)
		m.addSlave(b)
		m.addSlave(c)
		pub(m)
		takeRanges(t, a.out)
		takeRanges(t, c.out)
		m.removeSlave(b) // not the last: its slot is held until the next publish
		if n := len(m.slots); n != 3 {
			t.Fatalf("%d slots right after a middle slave left, want 3 (nothing recomputed before the next publish)", n)
		}
		pub(m)
		ra, rc := takeRanges(t, a.out), takeRanges(t, c.out)
		halves, _ := SplitRing(2)
		if len(ra) != 1 || len(rc) != 1 || ra[0].tokenRange() != halves[0] || rc[0].tokenRange() != halves[1] {
			t.Fatalf("after the cycle: %+v %+v, want the ring in halves", ra, rc)
		}
	})

	t.Run("held slot: frozen until its slave is replaced", func(t *testing.T) {
		m := newTestMaster(t, WithLazyRebalance(2))
		a, b, c := entry("s1"), entry("s2"), entry("s3")
		m.addSlave(a)
		m.addSlave(b)
		m.addSlave(c)
		pub(m)
		first := [][]rangeMsg{takeRanges(t, a.out), nil, takeRanges(t, c.out)}
		m.removeSlave(b)
		pub(m) // b's slot is held: a and c keep their slices, b's is frozen
		ra, rc := takeRanges(t, a.out), takeRanges(t, c.out)
		if ra[0].tokenRange() != first[0][0].tokenRange() || rc[0].tokenRange() != first[2][0].tokenRange() || ra[0].Of != 3 {
			t.Fatalf("with a held slot the others' slices moved: %+v %+v", ra, rc)
		}
		as := m.Assignment(minute.Add(-time.Minute))
		if len(as.Minutes) == 0 {
			t.Fatal("no minute in the master's view")
		}
		last := as.Minutes[len(as.Minutes)-1]
		if !last.Slices[1].Frozen || last.Slices[1].SlaveID != "" {
			t.Fatalf("the held slot's slice is %+v, want frozen", last.Slices[1])
		}
		d := entry("s4") // a slave registering takes the held slot
		m.addSlave(d)
		pub(m)
		rd := takeRanges(t, d.out)
		if len(rd) != 1 || rd[0].Index != 1 || rd[0].tokenRange() != first[0][0].tokenRange() && rd[0].Index != 1 {
			t.Fatalf("the new slave got %+v, want the held slot (part 2 of 3)", rd)
		}
	})

	t.Run("held slot: released after the grace", func(t *testing.T) {
		m := newTestMaster(t, WithLazyRebalance(1))
		a, b, c := entry("s1"), entry("s2"), entry("s3")
		m.addSlave(a)
		m.addSlave(b)
		m.addSlave(c)
		pub(m)
		m.removeSlave(b)
		pub(m) // held for one cycle
		if ra := takeRanges(t, a.out); ra[len(ra)-1].Of != 3 {
			t.Fatalf("held slot not kept for one cycle: %+v", ra)
		}
		pub(m) // released
		if ra := takeRanges(t, a.out); len(ra) != 1 || ra[0].Of != 2 {
			t.Fatalf("held slot not released after the grace: %+v", ra)
		}
	})

	t.Run("the last slave leaving frees its slot at once", func(t *testing.T) {
		m := newTestMaster(t, WithLazyRebalance(5))
		a, b := entry("s1"), entry("s2")
		m.addSlave(a)
		m.addSlave(b)
		m.removeSlave(b)
		if len(m.slots) != 1 {
			t.Fatalf("%d slots after the last slave left, want 1", len(m.slots))
		}
		pub(m)
		if ra := takeRanges(t, a.out); len(ra) != 1 || ra[0].tokenRange() != FullRing {
			t.Fatalf("the remaining slave got %+v, want the whole ring", ra)
		}
	})
}

func TestMasterRoundRobinAndScope(t *testing.T) {
	m := newTestMaster(t, WithScope("us-central", "c1"))
	ask := func(region, cluster string) (slaveAddrMsg, error) {
		b, err := m.RequestResponse(context.Background(), encode(msgAssign, assignMsg{scopeMsg: scopeMsg{region, cluster}, NodeID: "n"}))
		if err != nil {
			return slaveAddrMsg{}, err
		}
		var a slaveAddrMsg
		_, err = decode(b, msgSlaveAddr, &a)
		return a, err
	}
	if _, err := ask("us-central", "c1"); !errors.Is(err, ErrNoSlave) {
		t.Fatalf("no slave: %v, want ErrNoSlave", err)
	}
	for _, id := range []string{"s1", "s2", "s3"} {
		m.addSlave(entry(id))
	}
	var got []string
	for range 7 {
		a, err := ask("us-central", "c1")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a.SlaveID)
	}
	if strings.Join(got, ",") != "s1,s2,s3,s1,s2,s3,s1" {
		t.Fatalf("round robin gave %v", got)
	}
	for _, sc := range [][2]string{{"asia-south", "c1"}, {"us-central", "c2"}} {
		if _, err := ask(sc[0], sc[1]); !errors.Is(err, ErrForeignCluster) {
			t.Fatalf("orchestrator of %v: %v, want ErrForeignCluster", sc, err)
		}
	}
	// A slave of another cluster is refused too.
	err := m.RequestStream(context.Background(), encode(msgRegister, registerMsg{scopeMsg: scopeMsg{"us-central", "c2"}, SlaveID: "x", Addr: "x:1"}),
		func([]byte) error { return nil })
	if !errors.Is(err, ErrForeignCluster) {
		t.Fatalf("slave of another cluster: %v, want ErrForeignCluster", err)
	}
}

func TestProtocolVersionRefused(t *testing.T) {
	m := newTestMaster(t)
	v2 := []byte(`{"v":2,"type":"assign","body":{"region":"default","cluster":"default","node_id":"n"}}`)
	_, err := m.RequestResponse(context.Background(), v2)
	if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "version 2") || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("v2 request: %v, want ErrUnsupportedVersion naming both versions", err)
	}
	if _, err := decode([]byte(`{"type":"assign"}`), "", nil); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("no version: %v", err)
	}
	if _, err := decode([]byte(`nonsense`), "", nil); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("garbage: %v", err)
	}
	// Across the wire the refusal is a PeerError that still matches.
	pe := &PeerError{Message: err2msg(t, m, v2)}
	if !errors.Is(pe, ErrUnsupportedVersion) || errors.Is(pe, ErrNoSlave) {
		t.Fatalf("PeerError %q does not match as it should", pe.Message)
	}
}

func err2msg(t *testing.T, m *Master, req []byte) string {
	_, err := m.RequestResponse(context.Background(), req)
	if err == nil {
		t.Fatal("no error")
	}
	return err.Error()
}

func newTestSlave(t *testing.T, now *time.Time) *Slave {
	t.Helper()
	s, err := NewSlave(WithTransport(NewMemoryTransport()), WithLogger(quiet), WithMaster("mem-master"),
		WithClock(func() time.Time { return *now }), WithNodeID("s1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.ln.Close() })
	return s
}

// slice is a range message for minute: part i of 3 if r is the ring's part
// i of 3, else part 1 of 3.
func slice(minute time.Time, r eventstore.TokenRange) rangeMsg {
	m := rangeMsg{scopeMsg: scopeMsg{DefaultRegion, DefaultCluster}, From: "m", ValidForMinute: ms(minute), ValidUntil: ms(minute.Add(time.Minute)),
		Min: r.Min, Max: r.Max, Index: 0, Of: 3}
	thirds, _ := SplitRing(3)
	for i, p := range thirds {
		if p == r {
			m.Index = i
		}
	}
	return m
}

func TestSlaveSplitsEachMinuteOnce(t *testing.T) {
	now := t0.Add(30 * time.Second)
	s := newTestSlave(t, &now)
	slices, _ := SplitRing(3)
	m1 := t0.Add(time.Minute)

	// No orchestrator yet: the slice is pending, and the first to connect
	// gets it whole.
	if err := s.onSlice(slice(m1, slices[0])); err != nil {
		t.Fatal(err)
	}
	if a := s.Assignment(now); !a.Minutes[0].Slices[0].Pending {
		t.Fatalf("slice without orchestrators not pending: %+v", a)
	}
	o1 := &orchEntry{node: "n1", out: newQueue()}
	s.addOrch(o1)
	if got := takeRanges(t, o1.out); len(got) != 1 || got[0].tokenRange() != slices[0] {
		t.Fatalf("first orchestrator got %+v, want the whole pending slice", got)
	}
	// A second orchestrator connecting later gets nothing for that minute.
	o2 := &orchEntry{node: "n2", out: newQueue()}
	s.addOrch(o2)
	if got := takeRanges(t, o2.out); len(got) != 0 {
		t.Fatalf("late orchestrator got %+v for a minute already split", got)
	}
	// The next minute is split between both: the seed's second table.
	m2 := m1.Add(time.Minute)
	now = m1.Add(30 * time.Second)
	if err := s.onSlice(slice(m2, slices[0])); err != nil {
		t.Fatal(err)
	}
	r1, r2 := takeRanges(t, o1.out), takeRanges(t, o2.out)
	if len(r1) != 1 || len(r2) != 1 ||
		r1[0].tokenRange() != tr(-9223372036854775808, -6148914691236517206) ||
		r2[0].tokenRange() != tr(-6148914691236517205, -3074457345618258603) {
		t.Fatalf("split of slave 1's slice: %+v %+v, want the seed's table", r1, r2)
	}
	// A second slice for the same minute is ignored.
	if err := s.onSlice(slice(m2, slices[1])); err != nil {
		t.Fatal(err)
	}
	if r := takeRanges(t, o1.out); len(r) != 0 {
		t.Fatalf("second slice of a minute was split: %+v", r)
	}
	// o1 leaves: its part stays unassigned; re-connecting gets it back.
	s.removeOrch(o1)
	a := s.Assignment(now)
	if n := a.Minutes[len(a.Minutes)-1].Slices[0].Nodes[0]; n.NodeID != "n1" || n.Connected {
		t.Fatalf("departed node shown as %+v", n)
	}
	o1b := &orchEntry{node: "n1", out: newQueue()}
	s.addOrch(o1b)
	got := takeRanges(t, o1b.out)
	if len(got) != 2 || got[1].tokenRange() != r1[0].tokenRange() {
		t.Fatalf("re-connected node got %+v, want its parts back", got)
	}
	// A slice from another cluster is refused; one of a minute over is ignored.
	bad := slice(m2.Add(time.Minute), slices[1])
	bad.Cluster = "other"
	if err := s.onSlice(bad); !errors.Is(err, ErrForeignCluster) {
		t.Fatalf("foreign slice: %v", err)
	}
	if err := s.onSlice(slice(t0.Add(-time.Hour), slices[1])); err != nil {
		t.Fatal(err)
	}
}

func newTestConnector(t *testing.T, now *time.Time, opts ...Option) *Connector {
	t.Helper()
	c, err := NewConnector(append([]Option{WithTransport(NewMemoryTransport()), WithLogger(quiet), WithMaster("mem-master"),
		WithClock(func() time.Time { return *now }), WithGuard(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConnectorActivationGuardAndLoss(t *testing.T) {
	now := t0.Add(31 * time.Second)
	c := newTestConnector(t, &now)
	m1 := t0.Add(time.Minute)
	r1, r2 := tr(-100, 100), tr(101, 200)
	if ok, _ := c.onRange(slice(m1, r1), "s1"); !ok {
		t.Fatal("range not taken")
	}
	if _, _, ok := c.Range(now); ok {
		t.Fatal("range active before its minute")
	}
	if r, until, ok := c.Range(m1); !ok || r != r1 || !until.Equal(m1.Add(58*time.Second)) {
		t.Fatalf("at the minute's start: %v %v %v, want %v until second 58", r, until, ok, r1)
	}
	if _, _, ok := c.Range(m1.Add(58 * time.Second)); ok {
		t.Fatal("range active inside the guard")
	}
	// One range per minute.
	if ok, _ := c.onRange(slice(m1, r2), "s2"); ok {
		t.Fatal("second range for a minute taken")
	}
	// A range arriving after its guard started is ignored.
	now = m1.Add(59 * time.Second)
	if ok, _ := c.onRange(slice(m1.Add(-time.Minute+time.Minute), r2), "s1"); ok {
		t.Fatal("range taken too late")
	}
	// Loss of the stream: the current minute is kept, the next dropped.
	now = m1.Add(40 * time.Second)
	m2 := m1.Add(time.Minute)
	if ok, _ := c.onRange(slice(m2, r2), "s1"); !ok {
		t.Fatal("next minute's range not taken")
	}
	c.lost()
	if r, _, ok := c.Range(now); !ok || r != r1 {
		t.Fatal("current range dropped on loss")
	}
	if _, _, ok := c.Range(m2.Add(time.Second)); ok {
		t.Fatal("next minute's range kept after loss")
	}
	h := c.History()
	if len(h) != 2 || h[0].Dropped || !h[1].Dropped || !h[1].DroppedAt.Equal(now) {
		t.Fatalf("history %+v, want the second one dropped", h)
	}
	// Foreign and invalid messages are refused.
	bad := slice(m2, r2)
	bad.Region = "eu"
	if _, err := c.onRange(bad, "s1"); !errors.Is(err, ErrForeignCluster) {
		t.Fatalf("foreign range: %v", err)
	}
	bad = slice(m2, tr(5, 1))
	if _, err := c.onRange(bad, "s1"); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("empty range: %v", err)
	}
	// After Run's ctx ends the connector still only answers from its records.
	var src RangeSource = c.Ranges()
	if _, _, ok := src.Range(m2.Add(2 * time.Minute)); ok {
		t.Fatal("range long after every minute")
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []Option
		want string
	}{
		{"short cycle", []Option{WithCycle(100 * time.Millisecond)}, "cycle"},
		{"offset outside", []Option{WithCycle(time.Second), WithPublishOffset(2 * time.Second)}, "publish offset"},
		{"guard too long", []Option{WithGuard(40 * time.Second)}, "guard"},
		{"backoff", []Option{WithBackoff(time.Second, time.Millisecond)}, "backoff"},
		{"no master", []Option{WithMaster("")}, "no master"},
		{"empty scope", []Option{WithScope("", "x")}, "region"},
	} {
		_, err := NewConnector(append([]Option{WithTransport(NewMemoryTransport()), WithMaster("m")}, c.opts...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %s", c.name, err, c.want)
		}
	}
}

func TestCycleArithmetic(t *testing.T) {
	c := 3 * time.Second
	now := time.UnixMilli(1_000_000_000_500).UTC() // 1.5s into a 3s cycle
	if got := cycleStart(now, c); got.UnixMilli()%3000 != 0 || now.Sub(got) != 1500*time.Millisecond {
		t.Fatalf("cycleStart = %v", got)
	}
	at, minute := nextPublish(now, c, c/2)
	if !at.Equal(cycleStart(now, c).Add(c+c/2)) || !minute.Equal(cycleStart(now, c).Add(2*c)) {
		t.Fatalf("at the publish instant, the next is a cycle later: %v %v", at, minute)
	}
	before := time.UnixMilli(-1).UTC() // negative times round down too
	if got := cycleStart(before, c); got.UnixMilli() != -3000 {
		t.Fatalf("cycleStart(-1ms) = %d", got.UnixMilli())
	}
}
