package recovery

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
)

// ListPaused and RequestResume run against the in-memory store and real
// Cassandra, each case in a scope of its own.
func TestAdminPaused(t *testing.T) {
	cases := []scenario{
		{"ListPaused", testListPaused},
		{"ListPausedPages", testListPausedPages},
		{"RequestResume", testRequestResume},
		{"RequestResumeRefused", testRequestResumeRefused},
	}
	t.Run("memory", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				s := memory.New()
				t.Cleanup(func() { _ = s.Close() })
				c.run(t, newEnv(t, s))
			})
		}
	})
	t.Run("cassandra", func(t *testing.T) {
		s := cassandraStore(t)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { c.run(t, newEnv(t, s)) })
		}
	})
}

// paused creates a saga PAUSED at span 1 (charge) by its first attempt, an
// hour old (within its lifetime), and registers its restore watchdog as an
// orchestrator does at its start.
func (e *env) paused(w *Writer, id string, mod func(tx *eventstore.Transaction)) eventstore.Transaction {
	e.t.Helper()
	tx := e.saga(id, eventstore.StatePaused, func(tx *eventstore.Transaction) {
		tx.Attempt, tx.Error, tx.PauseEvent = 1, "", "PAYMENT_AUTHORISATION"
		tx.CreatedAt, tx.UpdatedAt = e.clock.Now().Add(-time.Hour), e.clock.Now().Add(-10*time.Minute)
		if mod != nil {
			mod(tx)
		}
	})
	if w != nil {
		e.restore(w, id)
	}
	return tx
}

func (e *env) listPaused(page Page) PausedList {
	e.t.Helper()
	l, err := ListPaused(e.t.Context(), e.store, e.scope, e.cfg, e.clock.Now(), page)
	if err != nil {
		e.t.Fatalf("ListPaused: %v", err)
	}
	return l
}

func pausedIDs(l PausedList) []string {
	var out []string
	for _, s := range l.Sagas {
		out = append(out, s.TxID)
	}
	return out
}

// claim writes the claim of tx's pause for owner, as an orchestrator does.
func (e *env) claim(tx eventstore.Transaction, owner string, rc map[string]string) {
	e.t.Helper()
	m, err := eventstore.ResumeClaim(e.scope, tx.TxID, tx.Span, tx.Kind, tx.Attempt, owner, rc)
	if err != nil {
		e.t.Fatal(err)
	}
	if ok, _, err := e.store.InsertMarker(e.t.Context(), m, eventstore.ResumeClaimTTL); err != nil || !ok {
		e.t.Fatalf("claim %s: %v %v", tx.TxID, ok, err)
	}
}

func testListPaused(t *testing.T, e *env) {
	// The watchdog of a saga that paused yesterday (within the look-back).
	e.clock.Set(base.Add(-24 * time.Hour))
	yesterday := e.writer()
	p3 := e.paused(yesterday, "tx-03", func(tx *eventstore.Transaction) {
		tx.Span, tx.Kind, tx.Endpoint, tx.PauseEvent = 0, "revert", "stock-service.reserve", "REFUND_INITIATED"
	})
	e.clock.Set(base)
	w := e.writer()
	p1 := e.paused(w, "tx-01", nil) // waits for ever: a watchdog only
	deadline := eventstore.StoredTime(base.Add(30 * time.Minute))
	p2 := e.paused(w, "tx-02", func(tx *eventstore.Transaction) { tx.PausedUntil = deadline })
	e.retry(w, "tx-02", 31) // its deadline's retry: listed once, with both entries
	e.saga("tx-04", eventstore.StateInProgress, nil)
	e.restore(w, "tx-04")
	e.paused(nil, "tx-05", nil) // no directory entry at all
	p6 := e.paused(w, "tx-06", nil)
	e.claim(p6, eventstore.ClaimResume, map[string]string{"auth": "ok"})
	e.restore(w, "tx-07") // its saga row is gone

	reads := &entryReads{Store: e.store}
	l, err := ListPaused(t.Context(), reads, e.scope, e.cfg, e.clock.Now(), Page{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"tx-06", "tx-03", "tx-02", "tx-01"}; !slices.Equal(pausedIDs(l), want) {
		t.Fatalf("listed %v, want %v (newest first)", pausedIDs(l), want)
	}
	if l.Next != "" || l.Candidates != 6 || l.Entries != 7 {
		t.Errorf("Next %q, Candidates %d, Entries %d; want \"\", 6 sagas named by 7 entries", l.Next, l.Candidates, l.Entries)
	}
	var retry, restore bool
	for _, p := range reads.paths {
		retry, restore = retry || !p.Restore(), restore || p.Restore()
	}
	if !retry || !restore {
		t.Errorf("read retry buckets %v, restore buckets %v: want both", retry, restore)
	}
	byID := map[string]PausedSaga{}
	for _, s := range l.Sagas {
		byID[s.TxID] = s
	}
	if s := byID["tx-01"]; s.CorrelationKey != "tx-01:1:process" || s.PauseEvent != "PAYMENT_AUTHORISATION" || !s.PausedUntil.IsZero() ||
		len(s.Entries) != 1 || !s.Entries[0].Restore() || s.Claim != "" || !s.UpdatedAt.Equal(p1.UpdatedAt) || s.Endpoint != "payment-service.charge" {
		t.Errorf("tx-01 %+v", s)
	}
	if s := byID["tx-02"]; !s.PausedUntil.Equal(p2.PausedUntil) || len(s.Entries) != 2 || s.Entries[0].Restore() || !s.Entries[1].Restore() {
		// The watchdog lies 600 windows ahead, the retry 31: ordered by window.
		t.Errorf("tx-02 %+v", s)
	}
	if s := byID["tx-03"]; s.CorrelationKey != "tx-03:0:revert" || s.PauseEvent != "REFUND_INITIATED" || s.Kind != p3.Kind {
		t.Errorf("tx-03 %+v", s)
	}
	if s := byID["tx-06"]; s.Claim != eventstore.ClaimResume {
		t.Errorf("tx-06 claim %q, want a resume's", s.Claim)
	}
}

func testListPausedPages(t *testing.T, e *env) {
	w := e.writer()
	var all []string
	for i := range 7 {
		id := "tx-0" + string(rune('0'+i))
		if i%3 == 1 {
			e.saga(id, eventstore.StateCompleted, nil) // filtered out before the page is cut
			e.restore(w, id)
			continue
		}
		e.paused(w, id, nil)
		all = append(all, id)
	}
	slices.Reverse(all) // 06 05 03 02 00
	var got []string
	page := Page{Limit: 2}
	for n := 0; ; n++ {
		l := e.listPaused(page)
		if len(l.Sagas) > 2 {
			t.Fatalf("page of %d sagas, limit 2", len(l.Sagas))
		}
		got = append(got, pausedIDs(l)...)
		if l.Next == "" {
			break
		}
		page.After = l.Next
		if n > 5 {
			t.Fatal("paging does not end")
		}
	}
	if !slices.Equal(got, all) {
		t.Fatalf("pages gave %v, want %v", got, all)
	}
	if l := e.listPaused(Page{Offset: 2, Limit: 2}); !slices.Equal(pausedIDs(l), all[2:4]) || l.Next != all[3] {
		t.Errorf("offset 2 limit 2: %v next %q", pausedIDs(l), l.Next)
	}
	if l := e.listPaused(Page{Offset: 3, Limit: 2}); !slices.Equal(pausedIDs(l), all[3:]) || l.Next != "" {
		t.Errorf("offset 3 limit 2: %v next %q, want %v (the offset counts listed sagas only)", pausedIDs(l), l.Next, all[3:])
	}
}

// resume runs RequestResume at the clock.
func (e *env) resume(w *Writer, id, key string, rc map[string]string) (ResumeRequestResult, error) {
	return RequestResume(e.t.Context(), e.store, w, e.scope, id, key, rc, e.clock.Now())
}

func testRequestResume(t *testing.T, e *env) {
	ctx := t.Context()
	w := e.writer()
	tx := e.paused(w, "tx-1", func(tx *eventstore.Transaction) { tx.PausedUntil = eventstore.StoredTime(base.Add(time.Hour)) })
	key := "tx-1:1:process"
	rc := map[string]string{"auth": "ok", "ref": "psp-1"}
	res, err := e.resume(w, "tx-1", key, rc)
	if err != nil {
		t.Fatal(err)
	}
	ws := MustWindows(e.cfg.Interval)
	if !res.Claimed || res.AlreadyResumed || !res.Registered || res.Retry.Restore() || res.State != eventstore.StatePaused ||
		res.Span != 1 || res.Kind != "process" || res.Attempt != 1 || res.Event != "PAYMENT_AUTHORISATION" || !res.PausedUntil.Equal(tx.PausedUntil) {
		t.Fatalf("result %+v", res)
	}
	if want := ws.RetryWindow(e.clock.Now(), 1); res.Retry.MinuteOfDay != want.Slot || !res.RetryDue.Equal(want.End) {
		t.Errorf("retry in slot %d due %v, want W+1 (%v)", res.Retry.MinuteOfDay, res.RetryDue, want)
	}
	m, err := e.store.GetMarker(ctx, eventstore.ResumeClaimKey(e.scope, "tx-1", 1, "process", 1))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if got, err := eventstore.DecodeResumeContext(m.Reply); m.Owner != eventstore.ClaimResume || err != nil || !maps.Equal(got, rc) {
		t.Errorf("claim %+v with context %v %v", m, got, err)
	}
	if got := e.load("tx-1"); got.Version != tx.Version || got.State != eventstore.StatePaused {
		t.Errorf("the saga row changed: %+v", got)
	}
	if l := e.listPaused(Page{}); len(l.Sagas) != 1 || l.Sagas[0].Claim != eventstore.ClaimResume {
		t.Errorf("listed %+v", l.Sagas)
	}

	// A second request (a retried command): already resumed, the first
	// context kept, another retry registered since it still waits.
	e.windows(1)
	again, err := e.resume(w, "tx-1", key, map[string]string{"auth": "other"})
	if err != nil || again.Claimed || !again.AlreadyResumed || !again.Registered {
		t.Fatalf("second request: %+v %v", again, err)
	}
	if m2, _ := e.store.GetMarker(ctx, m.MarkerKey); !slices.Equal(m2.Reply, m.Reply) {
		t.Error("a second request replaced the resume context")
	}

	// The next retry-node pass after the window picks the saga up.
	r := &redrives{}
	en := e.engine(r)
	e.clock.Set(res.RetryDue)
	if e.scan(en); r.retries("tx-1") != 1 {
		t.Fatalf("picked up %d times after the first retry's window, want 1", r.retries("tx-1"))
	}

	// Once the saga moved on, the key still reports already resumed, and
	// nothing is registered.
	tx.State, tx.Span, tx.Endpoint, tx.Version, tx.PauseEvent, tx.PausedUntil = eventstore.StateInProgress, 2, "shipping-service.ship", tx.Version+1, "", time.Time{}
	if err := e.store.Transition(ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	regs := w.Stats().Registrations
	if late, err := e.resume(w, "tx-1", key, nil); err != nil || !late.AlreadyResumed || late.Registered || late.State != eventstore.StateInProgress {
		t.Errorf("request after the continuation: %+v %v", late, err)
	}
	if _, err := e.resume(w, "tx-1", "tx-1:2:process", nil); !errors.Is(err, ErrNotPaused) {
		t.Errorf("current step's key of a running saga: %v, want ErrNotPaused", err)
	}
	if w.Stats().Registrations != regs {
		t.Error("a request for a saga that moved on registered a retry")
	}
}

func testRequestResumeRefused(t *testing.T, e *env) {
	ctx := t.Context()
	w := e.writer()
	e.paused(w, "tx-1", nil)
	e.paused(w, "tx-2", nil)
	e.saga("tx-running", eventstore.StateInProgress, func(tx *eventstore.Transaction) { tx.CreatedAt = e.clock.Now() })
	e.paused(w, "tx-old", func(tx *eventstore.Transaction) { tx.CreatedAt = e.clock.Now().Add(-30 * time.Hour) })
	lost := e.paused(w, "tx-lost", nil)
	e.claim(lost, eventstore.ClaimDeadline, nil)
	regs := w.Stats().Registrations

	for _, c := range []struct {
		id, key string
		rc      map[string]string
		is      error
		stale   bool
		state   eventstore.State
		want    string
	}{
		{"tx-1", "nonsense", nil, ErrCorrelationKey, false, "", "wrong correlation key"},
		{"tx-1", "tx-2:1:process", nil, ErrCorrelationKey, false, "", "wrong correlation key"},
		{"tx-1", "tx-1:0:process", nil, ErrCorrelationKey, true, "", "stale"},
		{"tx-1", "tx-1:1:revert", nil, ErrCorrelationKey, true, "", "stale"},
		{"tx-1", "tx-1:1:process", map[string]string{"": "x"}, eventstore.ErrInvalid, false, "", "resume context key"},
		{"tx-1", "tx-1:1:process", map[string]string{"k": string([]byte{0xff})}, eventstore.ErrInvalid, false, "", "not valid UTF-8"},
		{"tx-missing", "tx-missing:1:process", nil, eventstore.ErrNotFound, false, "", "tx-missing"},
		{"tx-running", "tx-running:1:process", nil, ErrNotPaused, false, eventstore.StateInProgress, "is IN_PROGRESS, not PAUSED"},
		{"tx-old", "tx-old:1:process", nil, ErrNotPaused, false, eventstore.StatePaused, "outlived its transaction lifetime"},
		{"tx-lost", "tx-lost:1:process", nil, ErrNotPaused, false, eventstore.StatePaused, "deadline passed"},
	} {
		_, err := e.resume(w, c.id, c.key, c.rc)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want %v naming %q", c.id, c.key, err, c.is, c.want)
			continue
		}
		var ce *CorrelationError
		if errors.As(err, &ce) && (ce.Stale != c.stale || ce.TxID != c.id) {
			t.Errorf("%s %q: %+v, stale %v", c.id, c.key, ce, c.stale)
		}
		var np *NotPausedError
		if errors.As(err, &np) && (np.State != c.state || np.TxID != c.id) {
			t.Errorf("%s %q: %+v, want state %s", c.id, c.key, np, c.state)
		}
	}
	for _, id := range []string{"tx-1", "tx-2", "tx-old"} {
		if ms, err := e.store.ListMarkers(ctx, e.scope, id); err != nil || len(ms) != 0 {
			t.Errorf("%s: markers %v %v after refused requests", id, ms, err)
		}
	}
	if w.Stats().Registrations != regs {
		t.Error("a refused request registered a retry")
	}
	if _, err := RequestResume(ctx, e.store, nil, e.scope, "tx-1", "tx-1:1:process", nil, e.clock.Now()); err == nil {
		t.Error("no writer: no error")
	}
}
