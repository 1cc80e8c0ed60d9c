package tracewindow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// order is the fixture's domain entity.
type order struct {
	ID     string   `msgpack:"id"`
	Amount int      `msgpack:"amount"`
	Items  []string `msgpack:"items"`
	Steps  []string `msgpack:"steps"`
}

const token = "s3cret-admin-token-for-tests"

// fixture is a Trace Window over a memory store holding sagas of every
// shape, with a fixed clock.
type fixture struct {
	t     *testing.T
	store eventstore.Store
	idx   *tracewindow.MemoryIndex
	scope eventstore.Scope
	now   time.Time
	srv   *httptest.Server
	h     *tracewindow.Handler

	completed, compensated, retried, inflight, pending, disabled, terminated string
	bulk                                                                     []string // COMPLETED sagas of "order", newest first
	billing                                                                  []string

	mu       sync.Mutex
	redriven []string
}

func (f *fixture) clock() time.Time { return f.now }

func encode(t *testing.T, o order) []byte {
	b, err := msgpack.Marshal(&o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// step is one tryout of a saga being built.
type step struct {
	kind, endpoint, outcome, err string
	span, attempt                int
	gap, dur                     time.Duration
}

// put writes a saga created at created with the given steps (each starts
// gap after the previous one ended), ending in state with the current
// step (span, kind, endpoint, attempt) of the last step unless cur is set.
func (f *fixture) put(domain string, created time.Time, steps []step, state eventstore.State, cur *step) string {
	f.t.Helper()
	ctx := context.Background()
	id, err := orchestrator.NewTxID(created, 1)
	if err != nil {
		f.t.Fatal(err)
	}
	o := order{ID: id[:8], Amount: 42, Items: []string{"book", "pen"}}
	tx := eventstore.Transaction{Scope: f.scope, TxID: id, Domain: domain, State: eventstore.StateStarted, Version: 1,
		Payload: encode(f.t, o), CreatedAt: created, UpdatedAt: created}
	if len(steps) > 0 {
		tx.Span, tx.Kind, tx.Endpoint, tx.Attempt = steps[0].span, steps[0].kind, steps[0].endpoint, 1
	}
	if err := f.store.CreateTransaction(ctx, tx, nil); err != nil {
		f.t.Fatal(err)
	}
	at := created
	for _, s := range steps {
		start := at.Add(s.gap)
		end := start.Add(s.dur)
		before := tx.Payload
		if s.outcome == "ok" {
			o.Steps = append(o.Steps, s.kind+":"+s.endpoint)
			if s.kind == "process" && s.endpoint == "pay/charge" {
				o.Amount = 0
			}
		}
		after := encode(f.t, o)
		tx.Version++
		tx.Span, tx.Kind, tx.Endpoint, tx.Attempt = s.span, s.kind, s.endpoint, s.attempt
		tx.State = eventstore.StateInProgress
		if s.kind == "revert" {
			tx.State = eventstore.StateCompensating
		}
		if s.outcome == "ok" {
			tx.Payload = after
			if s.kind == "process" {
				tx.Completed = append(tx.Completed, eventstore.CompletedSpan{Span: s.span, Endpoint: s.endpoint, Compensable: true})
			}
		}
		if s.err != "" {
			tx.Error = s.err
		}
		tx.UpdatedAt = end
		tr := eventstore.Tryout{Index: int(tx.Version), Span: s.span, Kind: s.kind, Endpoint: s.endpoint, Attempt: s.attempt,
			Outcome: s.outcome, Error: s.err, Before: before, After: after, StartedAt: start, FinishedAt: end}
		if err := f.store.Transition(ctx, tx, &tr); err != nil {
			f.t.Fatal(err)
		}
		at = end
	}
	if cur != nil {
		tx.Span, tx.Kind, tx.Endpoint, tx.Attempt = cur.span, cur.kind, cur.endpoint, cur.attempt
		tx.UpdatedAt = at.Add(cur.gap)
	}
	tx.State = state
	tx.Version++
	if err := f.store.Transition(ctx, tx, nil); err != nil {
		f.t.Fatal(err)
	}
	f.idx.Observe(f.scope, tracewindow.EntryOf(&tx))
	return id
}

func newFixture(t *testing.T, opts ...tracewindow.Option) *fixture {
	t.Helper()
	f := &fixture{t: t, scope: eventstore.Scope{Region: "default", Cluster: "default", Service: "order-service"},
		now: time.Date(2031, 5, 6, 12, 0, 0, 0, time.UTC), idx: tracewindow.NewMemoryIndex(0)}
	f.store = memory.New(memory.WithClock(f.clock))
	t.Cleanup(func() { _ = f.store.Close() })
	ms := time.Millisecond
	fwd := func(span int, ep string, outcome string, attempt int, gap, dur time.Duration, err string) step {
		return step{kind: "process", span: span, endpoint: ep, outcome: outcome, attempt: attempt, gap: gap, dur: dur, err: err}
	}
	rev := func(span int, ep string, outcome string, gap, dur time.Duration, err string) step {
		return step{kind: "revert", span: span, endpoint: ep, outcome: outcome, attempt: 1, gap: gap, dur: dur, err: err}
	}
	// Bulk: 25 completed sagas over the last 20 hours, 5 of another domain.
	for i := range 25 {
		created := f.now.Add(-20*time.Hour + time.Duration(i)*45*time.Minute)
		f.bulk = append([]string{f.put("order", created, []step{fwd(0, "stock/reserve", "ok", 1, ms, 10*ms, "")}, eventstore.StateCompleted, nil)}, f.bulk...)
	}
	for i := range 5 {
		created := f.now.Add(-10*time.Hour + time.Duration(i)*time.Hour)
		f.billing = append([]string{f.put("billing", created, []step{fwd(0, "ledger/post", "ok", 1, ms, 5*ms, "")}, eventstore.StateCompleted, nil)}, f.billing...)
	}
	base := f.now.Add(-time.Minute)
	f.completed = f.put("order", base, []step{
		fwd(0, "stock/reserve", "ok", 1, 2*ms, 30*ms, ""),
		fwd(1, "pay/charge", "ok", 1, 3*ms, 50*ms, ""),
		fwd(2, "stock/ship", "ok", 1, 3*ms, 20*ms, ""),
	}, eventstore.StateCompleted, nil)
	f.compensated = f.put("order", base.Add(time.Second), []step{
		fwd(0, "stock/reserve", "ok", 1, 2*ms, 30*ms, ""),
		fwd(1, "pay/charge", "ok", 1, 3*ms, 50*ms, ""),
		fwd(2, "stock/ship", "non_retryable", 1, 3*ms, 20*ms, "cannot ship: address unknown"),
		rev(1, "pay/charge", "ok", 4*ms, 40*ms, ""),
		rev(0, "stock/reserve", "ok", 4*ms, 25*ms, ""),
	}, eventstore.StateCompensated, nil)
	f.retried = f.put("order", base.Add(2*time.Second), []step{
		fwd(0, "stock/reserve", "ok", 1, 2*ms, 30*ms, ""),
		fwd(1, "pay/charge", "retryable", 1, 3*ms, 15*ms, "payment gateway timeout"),
		fwd(1, "pay/charge", "ok", 2, 2*time.Second, 50*ms, ""),
		fwd(2, "stock/ship", "ok", 1, 3*ms, 20*ms, ""),
	}, eventstore.StateCompleted, nil)
	f.inflight = f.put("order", f.now.Add(-5*time.Second), []step{
		fwd(0, "stock/reserve", "ok", 1, 2*ms, 30*ms, ""),
	}, eventstore.StateInProgress, &step{kind: "process", span: 1, endpoint: "pay/charge", attempt: 1, gap: ms})
	f.pending = f.put("order", base.Add(3*time.Second), []step{
		fwd(0, "stock/reserve", "ok", 1, 2*ms, 30*ms, ""),
		fwd(1, "pay/charge", "retryable", 1, 3*ms, 15*ms, "payment gateway timeout"),
	}, eventstore.StateRetryPending, nil)
	f.disabled = f.put("order", f.now.Add(-30*time.Hour+time.Hour), []step{
		fwd(0, "stock/reserve", "retryable", 1, 2*ms, 30*ms, "stock service down"),
	}, eventstore.StateDisabled, nil)
	f.terminated = f.put("order", base.Add(4*time.Second), []step{
		fwd(0, "stock/reserve", "ok", 1, 2*ms, 30*ms, ""),
		fwd(1, "pay/charge", "non_retryable", 1, 3*ms, 15*ms, "card declined"),
		rev(0, "stock/reserve", "non_retryable", 4*ms, 25*ms, "stock ledger refused the release"),
	}, eventstore.StateCompensationFailed, nil)
	ctx := context.Background()
	for _, id := range []string{f.disabled, f.terminated} {
		tx, err := f.store.LoadTransaction(ctx, f.scope, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.store.Freeze(ctx, tx, "frozen by the fixture: "+string(tx.State)); err != nil {
			t.Fatal(err)
		}
	}
	base2 := []tracewindow.Option{tracewindow.WithIndex(f.idx), tracewindow.WithClock(f.clock), tracewindow.WithHealthCache(0), tracewindow.WithAnonymousReads()}
	h, err := tracewindow.New(f.store, f.scope, append(base2, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

// adminOpts enables restore (recovery.Restore) and a recording redrive.
func (f *fixture) adminOpts(t *testing.T) tracewindow.Option {
	w, err := recovery.NewWriter(f.store, recovery.DefaultConfig(), recovery.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	return tracewindow.WithAdmin(tracewindow.Admin{
		Token:   token,
		Restore: tracewindow.RecoveryRestore(f.store, w, f.scope, f.clock),
		Redrive: func(_ context.Context, id string) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if id != f.pending {
				return orchestrator.ErrNotRetryPending
			}
			f.redriven = append(f.redriven, id)
			return nil
		},
	})
}

// get fetches path and decodes the JSON body into v (if not nil).
func (f *fixture) get(path string, v any) int {
	f.t.Helper()
	res, err := http.Get(f.srv.URL + path)
	if err != nil {
		f.t.Fatal(err)
	}
	return decode(f.t, res, v)
}

func decode(t *testing.T, res *http.Response, v any) int {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: content type %q, body %s", res.Request.Method, res.Request.URL, ct, b)
	}
	if res.StatusCode >= 400 {
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || e.Error == "" {
			t.Fatalf("%s: status %d without a JSON error: %s", res.Request.URL, res.StatusCode, b)
		}
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", res.Request.URL, err, b)
		}
	}
	return res.StatusCode
}

type listDoc struct {
	Sagas []struct {
		tracewindow.Entry
		DurationMS int64 `json:"duration_ms"`
	} `json:"sagas"`
	Next    string `json:"next"`
	Scanned int    `json:"scanned"`
	Query   struct {
		Domain string             `json:"domain"`
		States []eventstore.State `json:"states"`
		From   time.Time          `json:"from"`
		To     time.Time          `json:"to"`
		Limit  int                `json:"limit"`
	} `json:"query"`
}

func (d listDoc) ids() []string {
	out := make([]string, len(d.Sagas))
	for i, s := range d.Sagas {
		out[i] = s.TxID
	}
	return out
}

func TestAPIConfigAndDomains(t *testing.T) {
	f := newFixture(t)
	var c tracewindow.ConfigDoc
	if code := f.get("/api/config", &c); code != 200 {
		t.Fatalf("config: %d", code)
	}
	if c.Scope.Service != "order-service" || !c.Index || len(c.Admin) != 0 || len(c.States) != len(tracewindow.States) {
		t.Fatalf("config %+v", c)
	}
	// max_limit is the bound the list endpoint enforces (MaxListLimit),
	// within what an index serves in one query (MaxLimit).
	if c.MaxLimit != tracewindow.MaxListLimit || tracewindow.MaxListLimit > tracewindow.MaxLimit {
		t.Fatalf("config max_limit %d, MaxListLimit %d, index MaxLimit %d", c.MaxLimit, tracewindow.MaxListLimit, tracewindow.MaxLimit)
	}
	var page json.RawMessage
	if code := f.get(fmt.Sprintf("/api/sagas?domain=order&limit=%d", c.MaxLimit), &page); code != 200 {
		t.Fatalf("list at max_limit: %d", code)
	}
	if code := f.get(fmt.Sprintf("/api/sagas?domain=order&limit=%d", c.MaxLimit+1), &page); code != 400 {
		t.Fatalf("list over max_limit: %d, want 400", code)
	}
	var d struct{ Domains []string }
	if code := f.get("/api/domains", &d); code != 200 || !slices.Equal(d.Domains, []string{"billing", "order"}) {
		t.Fatalf("domains %d %v", code, d.Domains)
	}
}

func TestAPIListPagingNewestFirst(t *testing.T) {
	f := newFixture(t)
	// Only the bulk sagas are older than 2 hours in "order" (the rest are
	// from the last minute, and the disabled one from 29 hours ago).
	to := f.now.Add(-2 * time.Hour).Format(time.RFC3339)
	q := "/api/sagas?domain=order&limit=7&to=" + url.QueryEscape(to)
	var all []string
	after := ""
	for pages := 0; ; pages++ {
		var d listDoc
		path := q
		if after != "" {
			path += "&after=" + after
		}
		if code := f.get(path, &d); code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
		if len(d.Sagas) > 7 || (d.Next != "" && len(d.Sagas) != 7) {
			t.Fatalf("page %d: %d sagas, next %q", pages, len(d.Sagas), d.Next)
		}
		all = append(all, d.ids()...)
		if d.Next == "" {
			break
		}
		after = d.Next
	}
	// The default range is the last 24 hours before "to": bulk sagas
	// created from 20h ago up to 2h ago.
	var want []string
	for _, id := range f.bulk {
		if c, _ := tracewindow.IDTime(id); !c.After(f.now.Add(-2 * time.Hour)) {
			want = append(want, id)
		}
	}
	if !slices.Equal(all, want) {
		t.Fatalf("paged list:\n got %v\nwant %v", all, want)
	}
	// Every domain, newest first: the last minute's sagas, merged.
	var d listDoc
	if code := f.get("/api/sagas?limit=200", &d); code != 200 {
		t.Fatal(code)
	}
	if len(d.Sagas) != 25+5+6 { // the disabled one is 29h old
		t.Fatalf("all domains: %d sagas", len(d.Sagas))
	}
	if !slices.IsSortedFunc(d.Sagas, func(a, b struct {
		tracewindow.Entry
		DurationMS int64 `json:"duration_ms"`
	}) int {
		return strings.Compare(b.TxID, a.TxID)
	}) {
		t.Fatal("all domains: not newest first")
	}
	// Paging over all domains with a small limit finds the same sagas.
	var merged []string
	for after := ""; ; {
		var p listDoc
		f.get("/api/sagas?limit=4&after="+after, &p)
		merged = append(merged, p.ids()...)
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if !slices.Equal(merged, d.ids()) {
		t.Fatalf("merged paging differs:\n%v\n%v", merged, d.ids())
	}
}

func TestAPIListFilters(t *testing.T) {
	f := newFixture(t)
	var d listDoc
	if code := f.get("/api/sagas?domain=order&state=COMPENSATED", &d); code != 200 {
		t.Fatal(code)
	}
	if !slices.Equal(d.ids(), []string{f.compensated}) || d.Sagas[0].State != eventstore.StateCompensated {
		t.Fatalf("COMPENSATED: %v", d.ids())
	}
	d = listDoc{}
	f.get("/api/sagas?state=in_flight", &d)
	if !slices.Equal(d.ids(), []string{f.inflight, f.pending}) {
		t.Fatalf("in flight: %v, want %v", d.ids(), []string{f.inflight, f.pending})
	}
	d = listDoc{}
	f.get("/api/sagas?state=compensation_failed,retry_pending", &d)
	if !slices.Equal(d.ids(), []string{f.terminated, f.pending}) {
		t.Fatalf("two states: %v", d.ids())
	}
	d = listDoc{}
	from := f.now.Add(-31 * time.Hour).UnixMilli()
	f.get("/api/sagas?state=DISABLED&from="+itoa(from), &d)
	if !slices.Equal(d.ids(), []string{f.disabled}) {
		t.Fatalf("disabled over 31h: %v", d.ids())
	}
	d = listDoc{}
	f.get("/api/sagas?domain=billing&limit=2", &d)
	if !slices.Equal(d.ids(), f.billing[:2]) || d.Next != f.billing[1] || d.Query.Domain != "billing" {
		t.Fatalf("billing: %v next %q", d.ids(), d.Next)
	}
	// Durations: a terminal saga's took, an in-flight one's age.
	d = listDoc{}
	f.get("/api/sagas?state=IN_PROGRESS", &d)
	if len(d.Sagas) != 1 || d.Sagas[0].DurationMS != 5000 {
		t.Fatalf("in-flight age: %+v", d.Sagas)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestAPIListReadsLiveStates: the index misses a change made without the
// orchestrator; the list shows the store's state and repairs the index.
func TestAPIListReadsLiveStates(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tx, err := f.store.LoadTransaction(ctx, f.scope, f.inflight)
	if err != nil {
		t.Fatal(err)
	}
	tx.State, tx.Version, tx.UpdatedAt = eventstore.StateCompleted, tx.Version+1, f.now
	if err := f.store.Transition(ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	var d listDoc
	f.get("/api/sagas?state=in_flight", &d)
	if !slices.Equal(d.ids(), []string{f.pending}) {
		t.Fatalf("in flight after a change the index missed: %v", d.ids())
	}
	p, err := f.idx.Recent(ctx, tracewindow.Query{Scope: f.scope, Domain: "order", From: f.now.Add(-time.Minute), To: f.now,
		States: []eventstore.State{eventstore.StateCompleted}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(idsOf(p.Entries), f.inflight) {
		t.Fatal("the index was not repaired")
	}
}

func idsOf(es []tracewindow.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.TxID
	}
	return out
}

func TestAPIBadParameters(t *testing.T) {
	f := newFixture(t)
	for _, q := range []string{
		"limit=0", "limit=abc", "limit=201", "limit=-3",
		"from=yesterday", "to=2031-13-01T00:00:00Z", "from=-5",
		"from=2031-05-06T12:00:00Z&to=2031-05-06T11:00:00Z",
		"from=2031-01-01T00:00:00Z&to=2031-03-01T00:00:00Z",
		"state=BOGUS", "state=COMPLETED,nope",
		"after=not-a-cursor", "after=" + url.QueryEscape("' OR 1=1"),
		"domain=" + url.QueryEscape("two words"),
	} {
		var e struct{ Error string }
		if code := f.get("/api/sagas?"+q, &e); code != 400 {
			t.Errorf("%s: status %d, want 400", q, code)
		} else if e.Error == "" {
			t.Errorf("%s: no error message", q)
		}
	}
	for _, p := range []string{"/api/search", "/api/search?tx=", "/api/search?tx=" + strings.Repeat("a", 200), "/api/search?tx=a%00b"} {
		if code := f.get(p, nil); code != 400 {
			t.Errorf("%s: status %d, want 400", p, code)
		}
	}
	if code := f.get("/api/sagas/"+strings.Repeat("x", 129), nil); code != 400 {
		t.Errorf("long id: %d", code)
	}
}

func TestAPIUnknownIDsAndRoutes(t *testing.T) {
	f := newFixture(t)
	unknown, _ := orchestrator.NewTxID(f.now, 1)
	var e struct{ Error string }
	if code := f.get("/api/sagas/"+unknown, &e); code != 404 || !strings.Contains(e.Error, unknown) {
		t.Fatalf("unknown saga: %d %q", code, e.Error)
	}
	if code := f.get("/api/search?tx="+unknown, nil); code != 404 {
		t.Fatalf("search unknown: %d", code)
	}
	if code := f.get("/api/nope", nil); code != 404 {
		t.Fatalf("unknown route: %d", code)
	}
	if code := f.get("/api/sagas/"+f.completed+"/history/extra", nil); code != 404 {
		t.Fatalf("deep route: %d", code)
	}
	res, err := http.Post(f.srv.URL+"/api/sagas", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if code := decode(t, res, nil); code != 405 || res.Header.Get("Allow") == "" {
		t.Fatalf("POST list: %d allow %q", code, res.Header.Get("Allow"))
	}
	if code := f.get("/api/sagas/"+f.completed+"/restore", nil); code != 405 {
		t.Fatalf("GET action: %d", code)
	}
	res, err = http.Get(f.srv.URL + "/nope.html")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Fatalf("unknown page: %d", res.StatusCode)
	}
}

func TestAPISearch(t *testing.T) {
	f := newFixture(t)
	var d struct{ Saga tracewindow.Entry }
	if code := f.get("/api/search?tx="+strings.ToUpper(f.compensated)+"%20", &d); code != 200 {
		t.Fatalf("search: %d", code)
	}
	if d.Saga.TxID != f.compensated || d.Saga.State != eventstore.StateCompensated || d.Saga.Domain != "order" {
		t.Fatalf("search result %+v", d.Saga)
	}
}

// TestAPISagaCompensated: the timeline lists the forward steps, then the
// compensations in reverse order, with durations; the compensation trail
// says which reverts ran, in what order, and that they succeeded.
func TestAPISagaCompensated(t *testing.T) {
	f := newFixture(t)
	var d tracewindow.Detail
	if code := f.get("/api/sagas/"+f.compensated, &d); code != 200 {
		t.Fatal(code)
	}
	if d.Saga.State != eventstore.StateCompensated || !d.Saga.Terminal || d.Refresh {
		t.Fatalf("saga %+v refresh %v", d.Saga, d.Refresh)
	}
	type lane struct {
		kind, ep string
		span     int
		dur      int64
		cat      string
	}
	var got []lane
	for _, l := range d.Timeline.Lanes {
		got = append(got, lane{l.Kind, l.Endpoint, l.Span, l.DurationMS, l.Segments[len(l.Segments)-1].Category})
	}
	want := []lane{
		{"process", "stock/reserve", 0, 30, "forward"},
		{"process", "pay/charge", 1, 50, "forward"},
		{"process", "stock/ship", 2, 20, "failed"},
		{"revert", "pay/charge", 1, 40, "revert"},
		{"revert", "stock/reserve", 0, 25, "revert"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lanes:\n got %+v\nwant %+v", got, want)
	}
	c := d.Compensation
	if !c.Triggered || c.Trigger == nil || c.Trigger.Endpoint != "stock/ship" || c.Trigger.Error != "cannot ship: address unknown" || c.Result != "compensated" {
		t.Fatalf("compensation %+v trigger %+v", c, c.Trigger)
	}
	if len(c.Steps) != 2 || c.Steps[0].Endpoint != "pay/charge" || c.Steps[1].Endpoint != "stock/reserve" ||
		c.Steps[0].Outcome != "ok" || c.Steps[1].Outcome != "ok" || c.Steps[0].Order != 1 || c.Steps[0].DurationMS != 40 {
		t.Fatalf("trail %+v", c.Steps)
	}
	if d.Timings.CompensationMS != 65 || d.Timings.ForwardMS != 100 || d.Timings.Attempts != 5 || d.Timings.EndedAt == nil {
		t.Fatalf("timings %+v", d.Timings)
	}
	if len(d.Retries) != 0 {
		t.Fatalf("retries %+v", d.Retries)
	}
	// Entity snapshots are JSON, in field order.
	if len(d.Steps) != 5 {
		t.Fatalf("%d steps", len(d.Steps))
	}
	s := d.Steps[1]
	if !strings.HasPrefix(string(s.Before), `{"id":`) || !strings.Contains(string(s.After), `"amount":0`) || !strings.Contains(string(s.Before), `"amount":42`) {
		t.Fatalf("charge before %s after %s", s.Before, s.After)
	}
	if d.Steps[2].Error != "cannot ship: address unknown" {
		t.Fatalf("error payload %q", d.Steps[2].Error)
	}
	if !strings.Contains(string(d.Saga.Entity), `"revert:stock/reserve"`) {
		t.Fatalf("entity now %s", d.Saga.Entity)
	}
}

func TestAPISagaRetryAudit(t *testing.T) {
	f := newFixture(t)
	var d tracewindow.Detail
	f.get("/api/sagas/"+f.retried, &d)
	if len(d.Retries) != 1 {
		t.Fatalf("retries %+v", d.Retries)
	}
	r := d.Retries[0]
	if r.Endpoint != "pay/charge" || len(r.Attempts) != 2 || r.Attempts[0].Outcome != "retryable" || r.Attempts[1].Outcome != "ok" ||
		r.Attempts[1].WaitBeforeMS != 2000 || r.Attempts[0].DurationMS != 15 || r.Attempts[1].Attempt != 2 {
		t.Fatalf("retry audit %+v", r)
	}
	var cats []string
	for _, s := range d.Timeline.Lanes[1].Segments {
		cats = append(cats, s.Category)
	}
	if !slices.Equal(cats, []string{"retry", "wait", "forward"}) {
		t.Fatalf("charge lane %v", cats)
	}
	if d.Timings.WaitingMS != 2000 {
		t.Fatalf("waiting %d", d.Timings.WaitingMS)
	}
}

func TestAPISagaInFlight(t *testing.T) {
	f := newFixture(t)
	var d tracewindow.Detail
	f.get("/api/sagas/"+f.inflight, &d)
	if !d.Refresh || !d.Saga.InFlight || len(d.Timeline.Lanes) != 2 {
		t.Fatalf("in flight: refresh %v lanes %+v", d.Refresh, d.Timeline.Lanes)
	}
	l := d.Timeline.Lanes[1]
	seg := l.Segments[0]
	if l.Endpoint != "pay/charge" || l.Outcome != "running" || seg.Category != "running" || !seg.Open || !seg.End.Equal(f.now) {
		t.Fatalf("running lane %+v", l)
	}
	if !d.Timeline.End.Equal(f.now) || d.Timings.EndedAt != nil || d.Timings.TotalMS != 5000 {
		t.Fatalf("timeline end %v timings %+v", d.Timeline.End, d.Timings)
	}
	// Parked: an open wait segment after the retryable attempt.
	d = tracewindow.Detail{}
	f.get("/api/sagas/"+f.pending, &d)
	l = d.Timeline.Lanes[1]
	if got := l.Segments[len(l.Segments)-1]; got.Category != "wait" || !got.Open || l.Outcome != "retrying" {
		t.Fatalf("pending lane %+v", l)
	}
	// A frozen saga shows its frozen copy.
	d = tracewindow.Detail{}
	f.get("/api/sagas/"+f.terminated, &d)
	if d.Saga.Frozen == nil || d.Compensation.Result != "compensation_failed" || d.Compensation.Steps[0].Outcome != "failed" ||
		d.Compensation.Steps[0].Error != "stock ledger refused the release" {
		t.Fatalf("terminated: frozen %+v compensation %+v", d.Saga.Frozen, d.Compensation)
	}
}

func TestAPIHealth(t *testing.T) {
	f := newFixture(t)
	var h tracewindow.Health
	if code := f.get("/api/health", &h); code != 200 {
		t.Fatal(code)
	}
	if h.InFlight != 2 || h.RetryPending != 1 || h.CompensationFailed != 1 || h.Frozen != 2 || h.Disabled != 0 {
		t.Fatalf("health %+v", h)
	}
	// The disabled saga is older than the 24h window.
	if h.ByState[eventstore.StateCompleted] != 25+5+2 || h.InFlightByDomain["order"][eventstore.StateInProgress] != 1 {
		t.Fatalf("by state %v in flight by domain %v", h.ByState, h.InFlightByDomain)
	}
	if h.Oldest == nil || h.Oldest.TxID != f.pending || h.Oldest.AgeMS != (time.Minute-3*time.Second).Milliseconds() {
		t.Fatalf("oldest %+v", h.Oldest)
	}
	if len(h.Errors) != 0 || h.Index == nil || h.Index.Truncated {
		t.Fatalf("errors %v index %+v", h.Errors, h.Index)
	}
}

func TestNoIndex(t *testing.T) {
	f := newFixture(t)
	h, err := tracewindow.New(f.store, f.scope, tracewindow.WithAnonymousReads())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	f.srv = srv
	if code := f.get("/api/sagas", nil); code != 501 {
		t.Fatalf("list without index: %d", code)
	}
	if code := f.get("/api/domains", nil); code != 501 {
		t.Fatalf("domains without index: %d", code)
	}
	if code := f.get("/api/sagas/"+f.completed, nil); code != 200 {
		t.Fatalf("saga without index: %d", code)
	}
	var hd tracewindow.Health
	if code := f.get("/api/health", &hd); code != 200 || hd.Frozen != 2 || len(hd.Errors) != 1 {
		t.Fatalf("health without index: %d %+v", code, hd)
	}
}

// post sends an admin action.
func (f *fixture) post(path, ctype, body string, hdr map[string]string) (int, map[string]any) {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	var m map[string]any
	code := decode(f.t, res, &m)
	if code == 401 && res.Header.Get("WWW-Authenticate") == "" {
		f.t.Errorf("401 without WWW-Authenticate")
	}
	return code, m
}

func TestAdminDisabledByDefault(t *testing.T) {
	f := newFixture(t)
	code, m := f.post("/api/sagas/"+f.disabled+"/restore", "application/json", "{}", map[string]string{"Authorization": "Bearer " + token})
	if code != 403 {
		t.Fatalf("restore on a read-only Trace Window: %d %v", code, m)
	}
	tx, _ := f.store.LoadTransaction(context.Background(), f.scope, f.disabled)
	if tx.State != eventstore.StateDisabled {
		t.Fatalf("state changed to %s", tx.State)
	}
}

func TestAdminTokenAndCSRF(t *testing.T) {
	f := newFixture(t)
	f = newFixtureWith(t, f)
	auth := map[string]string{"Authorization": "Bearer " + token}
	restore := "/api/sagas/" + f.disabled + "/restore"
	cases := []struct {
		name  string
		ctype string
		body  string
		hdr   map[string]string
		want  int
	}{
		{"no token", "application/json", "{}", nil, 401},
		{"wrong token", "application/json", "{}", map[string]string{"Authorization": "Bearer wrong-token-wrong-token"}, 401},
		{"basic auth", "application/json", "{}", map[string]string{"Authorization": "Basic " + token}, 401},
		{"form post without token", "application/x-www-form-urlencoded", "a=b", nil, 401},
		{"form post with token", "application/x-www-form-urlencoded", "a=b", auth, 415},
		{"multipart with token", "multipart/form-data; boundary=x", "--x--", auth, 415},
		{"text/plain with token", "text/plain", "{}", auth, 415},
		{"no content type", "", "{}", auth, 415},
		{"cross-site browser request", "application/json", "{}", map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site"}, 403},
		{"other origin", "application/json", "{}", map[string]string{"Authorization": "Bearer " + token, "Origin": "https://evil.example"}, 403},
		{"not JSON", "application/json", "{nope", auth, 400},
	}
	for _, c := range cases {
		if code, m := f.post(restore, c.ctype, c.body, c.hdr); code != c.want {
			t.Errorf("%s: status %d, want %d (%v)", c.name, code, c.want, m)
		}
	}
	if tx, _ := f.store.LoadTransaction(context.Background(), f.scope, f.disabled); tx.State != eventstore.StateDisabled {
		t.Fatalf("a refused request changed the saga: %s", tx.State)
	}
	// The right request restores it.
	code, m := f.post(restore, "application/json; charset=utf-8", "", auth)
	if code != 200 || m["ok"] != true {
		t.Fatalf("restore: %d %v", code, m)
	}
	if tx, _ := f.store.LoadTransaction(context.Background(), f.scope, f.disabled); tx.State != eventstore.StateRetryPending {
		t.Fatalf("after restore: %s", tx.State)
	}
	// Conflicts, unknown sagas, unknown and disabled actions.
	if code, m := f.post("/api/sagas/"+f.completed+"/restore", "application/json", "{}", auth); code != 409 {
		t.Fatalf("restore a completed saga: %d %v", code, m)
	}
	unknown, _ := orchestrator.NewTxID(f.now, 1)
	if code, _ := f.post("/api/sagas/"+unknown+"/restore", "application/json", "{}", auth); code != 404 {
		t.Fatalf("restore unknown: %d", code)
	}
	if code, _ := f.post("/api/sagas/"+f.completed+"/explode", "application/json", "{}", auth); code != 404 {
		t.Fatalf("unknown action: %d", code)
	}
	if code, _ := f.post("/api/sagas/"+f.inflight+"/resend", "application/json", "{}", auth); code != 404 {
		t.Fatalf("action not enabled: %d", code)
	}
	if code, _ := f.post("/api/sagas/"+f.pending+"/redrive", "application/json", "{}", auth); code != 200 || len(f.redriven) != 1 {
		t.Fatalf("redrive: %d %v", code, f.redriven)
	}
	if code, _ := f.post("/api/sagas/"+f.completed+"/redrive", "application/json", "{}", auth); code != 409 {
		t.Fatalf("redrive completed: %d", code)
	}
	// The saga page offers the actions that apply.
	var d tracewindow.Detail
	f.get("/api/sagas/"+f.pending, &d)
	if !slices.Equal(d.Actions, []string{"restore", "redrive"}) {
		t.Fatalf("actions of a parked saga: %v", d.Actions)
	}
	f.get("/api/sagas/"+f.completed, &d)
	if len(d.Actions) != 0 {
		t.Fatalf("actions of a completed saga: %v", d.Actions)
	}
	var c tracewindow.ConfigDoc
	f.get("/api/config", &c)
	if !slices.Equal(c.Admin, []string{"restore", "redrive"}) {
		t.Fatalf("config admin %v", c.Admin)
	}
}

// newFixtureWith re-serves f with the admin actions enabled.
func newFixtureWith(t *testing.T, f *fixture) *fixture {
	h, err := tracewindow.New(f.store, f.scope, tracewindow.WithIndex(f.idx), tracewindow.WithClock(f.clock), f.adminOpts(t), tracewindow.WithAnonymousReads())
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func TestNewValidates(t *testing.T) {
	s := memory.New()
	defer s.Close()
	scope := eventstore.Scope{Region: "r", Cluster: "c", Service: "s"}
	redrive := func(context.Context, string) error { return nil }
	for name, opts := range map[string][]tracewindow.Option{
		"short token":      {tracewindow.WithAdmin(tracewindow.Admin{Token: "short", Redrive: redrive}), tracewindow.WithAnonymousReads()},
		"no action":        {tracewindow.WithAdmin(tracewindow.Admin{Token: token}), tracewindow.WithAnonymousReads()},
		"short read token": {tracewindow.WithReadToken("short")},
		"no read auth":     {tracewindow.WithAdmin(tracewindow.Admin{Token: token, Redrive: redrive})},
	} {
		if _, err := tracewindow.New(s, scope, opts...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := tracewindow.New(s, scope); !errors.Is(err, tracewindow.ErrNoReadAuth) {
		t.Errorf("no read authentication: %v, want ErrNoReadAuth", err)
	}
	if _, err := tracewindow.New(s, eventstore.Scope{}, tracewindow.WithAnonymousReads()); err == nil {
		t.Error("empty scope: no error")
	}
}

func TestPageIsServed(t *testing.T) {
	f := newFixture(t)
	mux := http.NewServeMux()
	mux.Handle("/trace/", http.StripPrefix("/trace", f.h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{
		"/trace/":               "text/html",
		"/trace/assets/app.js":  "text/javascript",
		"/trace/assets/app.css": "text/css",
	} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), want) || len(b) < 100 {
			t.Fatalf("%s: %d %q %d bytes", path, res.StatusCode, res.Header.Get("Content-Type"), len(b))
		}
		if path == "/trace/" {
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Fatalf("CSP %q", csp)
			}
			if strings.Contains(string(b), "http://") || strings.Contains(string(b), "https://") {
				t.Fatal("the page loads something from elsewhere")
			}
		}
	}
	// The prefix without its slash redirects to it (relative links).
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Get(srv.URL + "/trace")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMovedPermanently && res.StatusCode != http.StatusTemporaryRedirect && res.StatusCode != http.StatusPermanentRedirect {
		t.Fatalf("/trace: %d", res.StatusCode)
	}
	if loc := res.Header.Get("Location"); loc != "/trace/" {
		t.Fatalf("/trace redirects to %q", loc)
	}
	// The API works under the prefix.
	res, err = http.Get(srv.URL + "/trace/api/sagas/" + f.completed)
	if err != nil {
		t.Fatal(err)
	}
	if code := decode(t, res, nil); code != 200 {
		t.Fatalf("API under the prefix: %d", code)
	}
}

// A traced saga shows its trace id, and the WithTraceLink template becomes
// its link with {trace_id} and {tx_id} filled in; a saga without a trace id
// gets no link from a template that needs one.
func TestAPISagaTraceLink(t *testing.T) {
	f := newFixture(t, tracewindow.WithTraceLink("http://127.0.0.1:16686/trace/{trace_id}?uiFind={tx_id}"))
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	tx, err := f.store.LoadTransaction(context.Background(), f.scope, f.completed)
	if err != nil {
		t.Fatal(err)
	}
	tx.TraceID, tx.TraceParent = traceID, "00-"+traceID+"-00f067aa0ba902b7-01"
	tx.Version++
	if err := f.store.Transition(context.Background(), tx, nil); err != nil {
		t.Fatal(err)
	}
	var d tracewindow.Detail
	if code := f.get("/api/sagas/"+f.completed, &d); code != 200 {
		t.Fatal(code)
	}
	if want := "http://127.0.0.1:16686/trace/" + traceID + "?uiFind=" + f.completed; d.Saga.TraceID != traceID || d.Saga.TraceURL != want {
		t.Fatalf("trace_id %q trace_url %q, want %q", d.Saga.TraceID, d.Saga.TraceURL, want)
	}
	d = tracewindow.Detail{}
	if code := f.get("/api/sagas/"+f.compensated, &d); code != 200 || d.Saga.TraceID != "" || d.Saga.TraceURL != "" {
		t.Fatalf("untraced saga: %d trace_id %q trace_url %q", code, d.Saga.TraceID, d.Saga.TraceURL)
	}
}

func TestTraceURL(t *testing.T) {
	for _, c := range []struct{ template, tx, trace, want string }{
		{"", "tx", "t1", ""},
		{"https://jaeger/trace/{trace_id}", "tx", "", ""},
		{"https://jaeger/trace/{trace_id}", "tx", "abc", "https://jaeger/trace/abc"},
		{"https://ui/search?tx={tx_id}", "01a2-b", "", "https://ui/search?tx=01a2-b"},
		{"javascript:alert({tx_id})", "tx", "t", ""},
	} {
		if got := tracewindow.TraceURL(c.template, c.tx, c.trace); got != c.want {
			t.Errorf("TraceURL(%q, %q, %q) = %q, want %q", c.template, c.tx, c.trace, got, c.want)
		}
	}
}
