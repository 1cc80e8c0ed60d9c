// Package indextest is the conformance suite of tracewindow.Index
// implementations: every index of the module runs it.
package indextest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// Subject is an index under test. Sync waits until everything observed is
// readable (nil for an index that is synchronous).
type Subject struct {
	Index tracewindow.Index
	Sync  func(t *testing.T)
	// Scope is the scope the subtest writes (zero: Scope). Give each
	// subject its own to share one database between subtests.
	Scope eventstore.Scope
}

func (s Subject) scope() eventstore.Scope {
	if s.Scope == (eventstore.Scope{}) {
		return Scope
	}
	return s.Scope
}

// Run runs the suite; newSubject returns a fresh, empty index per subtest.
func Run(t *testing.T, newSubject func(t *testing.T) Subject) {
	t.Run("PagingNewestFirstAcrossHours", func(t *testing.T) { testPaging(t, newSubject(t)) })
	t.Run("StateFilterAndRange", func(t *testing.T) { testFilter(t, newSubject(t)) })
	t.Run("LateWriteDoesNotRegress", func(t *testing.T) { testLateWrite(t, newSubject(t)) })
	t.Run("DomainsAndScopes", func(t *testing.T) { testDomains(t, newSubject(t)) })
	t.Run("Census", func(t *testing.T) { testCensus(t, newSubject(t)) })
	t.Run("InvalidQueries", func(t *testing.T) { testInvalid(t, newSubject(t)) })
}

// Base is the time the suite's sagas are created around.
var Base = time.Date(2031, 3, 14, 15, 0, 0, 0, time.UTC)

// Scope is the suite's scope.
var Scope = eventstore.Scope{Region: "eu", Cluster: "c1", Service: "orders"}

// ID returns a transaction id created at t.
func ID(t *testing.T, at time.Time) string {
	t.Helper()
	id, err := orchestrator.NewTxID(at, 3)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func entry(t *testing.T, domain string, at time.Time, st eventstore.State) tracewindow.Entry {
	return tracewindow.Entry{TxID: ID(t, at), Domain: domain, State: st, Span: 1, Kind: "process", Endpoint: "pay/charge", Definition: 2, UpdatedAt: at.Add(time.Second)}
}

func sync(t *testing.T, s Subject) {
	t.Helper()
	if s.Sync != nil {
		s.Sync(t)
	}
}

func ids(es []tracewindow.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.TxID
	}
	return out
}

// all pages through q and returns every entry, checking the order.
func all(t *testing.T, idx tracewindow.Index, q tracewindow.Query) []tracewindow.Entry {
	t.Helper()
	var out []tracewindow.Entry
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("more than 1000 pages: the cursor does not advance")
		}
		p, err := idx.Recent(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Entries) > q.Limit {
			t.Fatalf("page of %d entries, limit %d", len(p.Entries), q.Limit)
		}
		out = append(out, p.Entries...)
		if p.Next == "" {
			break
		}
		if q.After != "" && p.Next >= q.After {
			t.Fatalf("cursor %q does not move below %q", p.Next, q.After)
		}
		q.After = p.Next
	}
	for i := 1; i < len(out); i++ {
		if out[i].TxID >= out[i-1].TxID {
			t.Fatalf("not newest first at %d: %s then %s", i, out[i-1].TxID, out[i].TxID)
		}
	}
	return out
}

func testPaging(t *testing.T, s Subject) {
	var want []string
	// 30 sagas over 5 hours, some in the same millisecond's neighbourhood.
	for i := range 30 {
		at := Base.Add(time.Duration(i) * 10 * time.Minute)
		e := entry(t, "order", at, eventstore.StateCompleted)
		s.Index.Observe(s.scope(), e)
		want = append(want, e.TxID)
	}
	sync(t, s)
	slices.Reverse(want)
	q := tracewindow.Query{Scope: s.scope(), Domain: "order", From: Base.Add(-time.Hour), To: Base.Add(6 * time.Hour), Limit: 7}
	got := ids(all(t, s.Index, q))
	if !slices.Equal(got, want) {
		t.Fatalf("paged listing:\n got %d %v\nwant %d %v", len(got), got, len(want), want)
	}
	// The first page is full and has a cursor.
	p, err := s.Index.Recent(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 7 || p.Next != p.Entries[6].TxID {
		t.Fatalf("first page: %d entries, next %q", len(p.Entries), p.Next)
	}
	// A limit that ends exactly at the last saga has no next page.
	q.Limit = 30
	p, err = s.Index.Recent(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 30 || p.Next != "" {
		t.Fatalf("exact page: %d entries, next %q", len(p.Entries), p.Next)
	}
	// Entries carry what was observed.
	e := p.Entries[0]
	if e.Domain != "order" || e.State != eventstore.StateCompleted || e.Endpoint != "pay/charge" || e.Span != 1 || e.Kind != "process" || e.Definition != 2 {
		t.Fatalf("entry %+v", e)
	}
	if ct, _ := tracewindow.IDTime(e.TxID); !e.CreatedAt.Equal(ct) || !e.UpdatedAt.Equal(ct.Add(time.Second)) {
		t.Fatalf("entry times %v %v, id time %v", e.CreatedAt, e.UpdatedAt, ct)
	}
}

func testFilter(t *testing.T, s Subject) {
	states := []eventstore.State{eventstore.StateCompleted, eventstore.StateCompensated, eventstore.StateInProgress}
	byState := map[eventstore.State][]string{}
	for i := range 24 {
		at := Base.Add(time.Duration(i) * 7 * time.Minute)
		st := states[i%3]
		e := entry(t, "order", at, st)
		s.Index.Observe(s.scope(), e)
		byState[st] = append([]string{e.TxID}, byState[st]...)
	}
	sync(t, s)
	q := tracewindow.Query{Scope: s.scope(), Domain: "order", From: Base, To: Base.Add(3 * time.Hour), Limit: 3,
		States: []eventstore.State{eventstore.StateCompensated}}
	if got := ids(all(t, s.Index, q)); !slices.Equal(got, byState[eventstore.StateCompensated]) {
		t.Fatalf("COMPENSATED: got %v want %v", got, byState[eventstore.StateCompensated])
	}
	q.States = []eventstore.State{eventstore.StateCompensated, eventstore.StateInProgress}
	if got := all(t, s.Index, q); len(got) != 16 {
		t.Fatalf("two states: %d sagas, want 16", len(got))
	}
	// The range is inclusive at both ends, by creation time.
	q.States = nil
	q.From, q.To = Base.Add(14*time.Minute), Base.Add(28*time.Minute)
	got := all(t, s.Index, q)
	if len(got) != 3 {
		t.Fatalf("range 14m..28m: %d sagas, want 3 (14, 21, 28)", len(got))
	}
	if got[0].CreatedAt != Base.Add(28*time.Minute) || got[2].CreatedAt != Base.Add(14*time.Minute) {
		t.Fatalf("range bounds: %v .. %v", got[2].CreatedAt, got[0].CreatedAt)
	}
	// Another domain has none of them.
	q.Domain = "payment"
	if got := all(t, s.Index, q); len(got) != 0 {
		t.Fatalf("other domain: %d", len(got))
	}
}

func testLateWrite(t *testing.T, s Subject) {
	at := Base.Add(5 * time.Minute)
	e := entry(t, "order", at, eventstore.StateCompleted)
	e.UpdatedAt = at.Add(3 * time.Second)
	s.Index.Observe(s.scope(), e)
	sync(t, s)
	old := e
	old.State, old.UpdatedAt = eventstore.StateInProgress, at.Add(time.Second)
	s.Index.Observe(s.scope(), old)
	sync(t, s)
	q := tracewindow.Query{Scope: s.scope(), Domain: "order", From: Base, To: Base.Add(time.Hour), Limit: 10}
	got := all(t, s.Index, q)
	if len(got) != 1 || got[0].State != eventstore.StateCompleted {
		t.Fatalf("after a late older write: %+v", got)
	}
	newer := e
	newer.State, newer.UpdatedAt = eventstore.StateCompensated, at.Add(4*time.Second)
	s.Index.Observe(s.scope(), newer)
	sync(t, s)
	got = all(t, s.Index, q)
	if len(got) != 1 || got[0].State != eventstore.StateCompensated {
		t.Fatalf("after a newer write: %+v", got)
	}
	// An id that carries no creation time is not indexed.
	s.Index.Observe(s.scope(), tracewindow.Entry{TxID: "not-a-stacksaga-id", Domain: "order", State: eventstore.StateCompleted, UpdatedAt: at})
	sync(t, s)
	if got := all(t, s.Index, q); len(got) != 1 {
		t.Fatalf("a foreign id was indexed: %+v", got)
	}
}

func testDomains(t *testing.T, s Subject) {
	other := s.scope()
	other.Region += "-other"
	s.Index.Observe(s.scope(), entry(t, "order", Base, eventstore.StateCompleted))
	s.Index.Observe(s.scope(), entry(t, "billing", Base, eventstore.StateCompleted))
	s.Index.Observe(other, entry(t, "shipping", Base, eventstore.StateCompleted))
	sync(t, s)
	got, err := s.Index.Domains(context.Background(), s.scope())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"billing", "order"}) {
		t.Fatalf("domains %v", got)
	}
	q := tracewindow.Query{Scope: other, Domain: "order", From: Base.Add(-time.Hour), To: Base.Add(time.Hour), Limit: 10}
	if got := all(t, s.Index, q); len(got) != 0 {
		t.Fatalf("another scope sees %d sagas", len(got))
	}
}

func testCensus(t *testing.T, s Subject) {
	var oldest string
	for i, st := range []eventstore.State{
		eventstore.StateCompleted, eventstore.StateInProgress, eventstore.StateRetryPending,
		eventstore.StateCompensated, eventstore.StateInProgress, eventstore.StateDisabled,
	} {
		e := entry(t, fmt.Sprintf("d%d", i%2), Base.Add(time.Duration(i)*40*time.Minute), st)
		if oldest == "" && tracewindow.InFlight(st) {
			oldest = e.TxID
		}
		s.Index.Observe(s.scope(), e)
	}
	// Outside the window.
	s.Index.Observe(s.scope(), entry(t, "d0", Base.Add(-2*time.Hour), eventstore.StateInProgress))
	sync(t, s)
	c, err := s.Index.Census(context.Background(), s.scope(), Base, Base.Add(6*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[eventstore.State]int{
		"d0": {eventstore.StateCompleted: 1, eventstore.StateRetryPending: 1, eventstore.StateInProgress: 1},
		"d1": {eventstore.StateInProgress: 1, eventstore.StateCompensated: 1, eventstore.StateDisabled: 1},
	}
	if fmt.Sprint(c.ByDomain) != fmt.Sprint(want) {
		t.Fatalf("census %v, want %v", c.ByDomain, want)
	}
	if c.Oldest == nil || c.Oldest.TxID != oldest || c.Oldest.State != eventstore.StateInProgress {
		t.Fatalf("oldest %+v, want %s", c.Oldest, oldest)
	}
	if c.Truncated || c.Scanned != 6 {
		t.Fatalf("scanned %d truncated %v", c.Scanned, c.Truncated)
	}
}

func testInvalid(t *testing.T, s Subject) {
	good := tracewindow.Query{Scope: s.scope(), Domain: "order", From: Base, To: Base.Add(time.Hour), Limit: 10}
	for name, mod := range map[string]func(q *tracewindow.Query){
		"no domain":     func(q *tracewindow.Query) { q.Domain = "" },
		"from after to": func(q *tracewindow.Query) { q.From = q.To.Add(time.Second) },
		"range too long": func(q *tracewindow.Query) {
			q.From = q.To.Add(-tracewindow.MaxRange - time.Hour)
		},
		"limit 0":       func(q *tracewindow.Query) { q.Limit = 0 },
		"limit too big": func(q *tracewindow.Query) { q.Limit = tracewindow.MaxLimit + 1 },
		"bad cursor":    func(q *tracewindow.Query) { q.After = "x' OR 1=1" },
		"bad state":     func(q *tracewindow.Query) { q.States = []eventstore.State{"BOGUS"} },
		"empty scope":   func(q *tracewindow.Query) { q.Scope.Service = "" },
	} {
		q := good
		mod(&q)
		if _, err := s.Index.Recent(context.Background(), q); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
