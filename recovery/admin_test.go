package recovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
)

// The admin operations run against the in-memory store and real Cassandra,
// each case in a scope of its own.
func TestAdmin(t *testing.T) {
	cases := []scenario{
		{"ListRetryPending", testListRetryPending},
		{"ListRetryPendingPages", testListRetryPendingPages},
		{"ListFrozen", testListFrozen},
		{"RestoreDisabled", testRestoreDisabled},
		{"RestoreTerminated", testRestoreTerminated},
		{"RestoreRetryPending", testRestoreRetryPending},
		{"NotRestorable", testNotRestorable},
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

// saga creates a saga row of the scenario's scope: created 30h before the
// clock, at span 1 of payment-service.charge, attempt 2.
func (e *env) saga(id string, st eventstore.State, mod func(tx *eventstore.Transaction)) eventstore.Transaction {
	e.t.Helper()
	now := e.clock.Now()
	tx := eventstore.Transaction{
		Scope: e.scope, TxID: id, Domain: "order-saga", State: st, Version: 4,
		Span: 1, Kind: "process", Endpoint: "payment-service.charge", Attempt: 2,
		Payload: []byte(`{"order":1}`), Error: "payment gateway timeout",
		Completed: []eventstore.CompletedSpan{{Span: 0, Endpoint: "stock-service.reserve", Compensable: true}},
		CreatedAt: now.Add(-30 * time.Hour), UpdatedAt: now.Add(-6 * time.Hour),
	}
	if mod != nil {
		mod(&tx)
	}
	tx.CreatedAt, tx.UpdatedAt = eventstore.StoredTime(tx.CreatedAt), eventstore.StoredTime(tx.UpdatedAt)
	first := &eventstore.Tryout{Index: 1, Span: 0, Kind: "process", Endpoint: "stock-service.reserve", Attempt: 1, Outcome: "ok", StartedAt: tx.CreatedAt, FinishedAt: tx.CreatedAt.Add(time.Second)}
	if err := e.store.CreateTransaction(e.t.Context(), tx, first); err != nil {
		e.t.Fatal(err)
	}
	return tx
}

// freeze copies tx into the frozen table.
func (e *env) freeze(tx eventstore.Transaction, reason string) {
	e.t.Helper()
	if err := e.store.Freeze(e.t.Context(), tx, reason); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) load(id string) eventstore.Transaction {
	e.t.Helper()
	tx, err := e.store.LoadTransaction(e.t.Context(), e.scope, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return tx
}

func (e *env) frozen(id string) bool {
	e.t.Helper()
	_, err := e.store.GetFrozen(e.t.Context(), e.scope, id)
	if err != nil && !errors.Is(err, eventstore.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

func (e *env) listPending(page Page) RetryPendingList {
	e.t.Helper()
	l, err := ListRetryPending(e.t.Context(), e.store, e.scope, e.cfg, e.clock.Now(), page)
	if err != nil {
		e.t.Fatalf("ListRetryPending: %v", err)
	}
	return l
}

func pendingIDs(l RetryPendingList) []string {
	var out []string
	for _, s := range l.Sagas {
		out = append(out, s.TxID)
	}
	return out
}

// entryReads records the tier-5 partitions read.
type entryReads struct {
	eventstore.Store
	mu    sync.Mutex
	paths []eventstore.RecoveryPath
}

func (r *entryReads) ListRecoveryEntries(ctx context.Context, scope eventstore.Scope, p eventstore.RecoveryPath, after string, limit int) ([]eventstore.RecoveryEntry, error) {
	r.mu.Lock()
	r.paths = append(r.paths, p)
	r.mu.Unlock()
	return r.Store.ListRecoveryEntries(ctx, scope, p, after, limit)
}

func testListRetryPending(t *testing.T, e *env) {
	// 23:40: a retry 30 windows ahead lands on the next day.
	e.clock.Set(at("2026-03-10T23:40:10Z"))
	e.cfg.PageSize = 2 // tier-5 rows are read in pages
	w := e.writer()
	pending := func(id string) { e.saga(id, eventstore.StateRetryPending, nil) }

	pending("tx-01") // registered in W+1 (not sealed yet)
	e.retry(w, "tx-01", 1)
	pending("tx-02") // registered twice: listed once, with both entries
	p2a := e.retry(w, "tx-02", 1)
	p2b := e.retry(w, "tx-02", 5)
	pending("tx-03") // registered in the next day
	p3 := e.retry(w, "tx-03", 30)
	if p3.Day.Equal(p2a.Day) {
		t.Fatalf("W+30 at 23:40 should be the next day, got %v", p3)
	}
	e.saga("tx-04", eventstore.StateInProgress, nil) // re-driven already
	e.retry(w, "tx-04", 1)
	pending("tx-05") // a watchdog only: found by its restore pickup
	e.restore(w, "tx-05")
	pending("tx-06")       // no registration at all
	e.retry(w, "tx-07", 1) // its saga row is gone
	// More rows than one page of a bucket.
	for i := range 3 {
		id := fmt.Sprintf("tx-1%d", i)
		pending(id)
		e.retry(w, id, 2)
	}

	// Registered two days ago, in a sealed window: within the look-back.
	e.clock.Set(at("2026-03-08T09:00:10Z"))
	old := e.writer()
	pending("tx-20")
	e.retry(old, "tx-20", 1)
	// Three days ago: beyond the look-back (2), so a retry node never
	// reads it either; its watchdog finds the saga.
	e.clock.Set(at("2026-03-07T09:00:10Z"))
	pending("tx-21")
	e.retry(e.writer(), "tx-21", 1)
	e.clock.Set(at("2026-03-10T23:40:10Z"))

	reads := &entryReads{Store: e.store}
	l, err := ListRetryPending(t.Context(), reads, e.scope, e.cfg, e.clock.Now(), Page{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tx-20", "tx-12", "tx-11", "tx-10", "tx-03", "tx-02", "tx-01"}
	if got := pendingIDs(l); !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v (newest first)", got, want)
	}
	if l.Next != "" || l.Candidates != 9 || l.Entries != 10 {
		t.Errorf("Next %q, Candidates %d, Entries %d; want \"\", 9 sagas named by 10 entries", l.Next, l.Candidates, l.Entries)
	}
	for _, p := range reads.paths {
		if p.Restore() {
			t.Errorf("read restore bucket %s", fmtPath(p))
		}
	}
	ws := MustWindows(e.cfg.Interval)
	for _, s := range l.Sagas {
		switch s.TxID {
		case "tx-02":
			if !slices.Equal(s.Retries, []eventstore.RecoveryPath{p2a, p2b}) {
				t.Errorf("tx-02 retries %v, want %v %v", s.Retries, p2a, p2b)
			}
			if want := ws.FromSlot(p2a.Day, p2a.MinuteOfDay).End; !s.Due.Equal(want) {
				t.Errorf("tx-02 due %v, want %v (end of its earliest window)", s.Due, want)
			}
			if s.Error != "payment gateway timeout" || s.Endpoint != "payment-service.charge" || string(s.Payload) != `{"order":1}` {
				t.Errorf("tx-02 not loaded whole: %+v", s.Transaction)
			}
		case "tx-03":
			if len(s.Retries) != 1 || s.Retries[0] != p3 {
				t.Errorf("tx-03 retries %v, want [%v]", s.Retries, p3)
			}
		case "tx-20":
			if !s.Due.Before(e.clock.Now()) {
				t.Errorf("tx-20 due %v: its window is sealed", s.Due)
			}
		}
	}

	// A look-back of 3 days reaches tx-21.
	e.cfg.LookbackDays = 3
	if got := pendingIDs(e.listPending(Page{})); !slices.Contains(got, "tx-21") {
		t.Errorf("look-back 3 listed %v, want tx-21 too", got)
	}
}

func testListRetryPendingPages(t *testing.T, e *env) {
	w := e.writer()
	var all []string
	for i := range 7 {
		id := fmt.Sprintf("tx-%02d", i)
		st := eventstore.StateRetryPending
		if i%3 == 1 {
			st = eventstore.StateCompleted // filtered out before the page is cut
		} else {
			all = append(all, id)
		}
		e.saga(id, st, nil)
		e.retry(w, id, 1+i%2)
	}
	slices.Reverse(all) // newest first: 06 05 03 02 00
	var got []string
	page := Page{Limit: 2}
	for n := 0; ; n++ {
		l := e.listPending(page)
		if len(l.Sagas) > 2 {
			t.Fatalf("page of %d sagas, limit 2", len(l.Sagas))
		}
		got = append(got, pendingIDs(l)...)
		if l.Next == "" {
			break
		}
		if l.Next != got[len(got)-1] {
			t.Fatalf("Next %q, want the page's last saga %q", l.Next, got[len(got)-1])
		}
		page.After = l.Next
		if n > 5 {
			t.Fatal("paging does not end")
		}
	}
	if !slices.Equal(got, all) {
		t.Fatalf("pages gave %v, want %v", got, all)
	}
	// Page numbers: Offset (page 2 of 2).
	if l := e.listPending(Page{Offset: 2, Limit: 2}); !slices.Equal(pendingIDs(l), all[2:4]) || l.Next != all[3] {
		t.Errorf("offset 2 limit 2: %v next %q, want %v next %q", pendingIDs(l), l.Next, all[2:4], all[3])
	}
	// The offset counts listed sagas, not the ones filtered out (04 and
	// 01 are not RETRY_PENDING).
	if l := e.listPending(Page{Offset: 3, Limit: 2}); !slices.Equal(pendingIDs(l), all[3:]) || l.Next != "" {
		t.Errorf("offset 3 limit 2: %v next %q, want %v", pendingIDs(l), l.Next, all[3:])
	}
	// Exactly the last page: no Next.
	if l := e.listPending(Page{After: all[2], Limit: 2}); !slices.Equal(pendingIDs(l), all[3:]) || l.Next != "" {
		t.Errorf("last page: %v next %q, want %v and no next", pendingIDs(l), l.Next, all[3:])
	}
	// A cursor that is not a listed id still starts below it.
	if l := e.listPending(Page{After: "tx-04"}); !slices.Equal(pendingIDs(l), []string{"tx-03", "tx-02", "tx-00"}) {
		t.Errorf("after tx-04: %v", pendingIDs(l))
	}
}

func frozenIDs(l FrozenList) []string {
	var out []string
	for _, s := range l.Sagas {
		out = append(out, s.TxID)
	}
	return out
}

func testListFrozen(t *testing.T, e *env) {
	ctx := t.Context()
	// DISABLED as the recovery Redriver leaves it.
	d := e.saga("tx-1", eventstore.StateDisabled, nil)
	e.freeze(d, "transaction lifetime 24h exceeded")
	// Terminated as the orchestrator does it: the copy is taken before the
	// transition to COMPENSATION_FAILED.
	c := e.saga("tx-2", eventstore.StateCompensating, func(tx *eventstore.Transaction) { tx.Kind = "revert"; tx.Span = 0 })
	e.freeze(c, "refund rejected")
	c.State, c.Version = eventstore.StateCompensationFailed, c.Version+1
	if err := e.store.Transition(ctx, c, nil); err != nil {
		t.Fatal(err)
	}
	// A second disabled one, and one whose row has gone.
	d3 := e.saga("tx-3", eventstore.StateDisabled, nil)
	e.freeze(d3, "transaction lifetime 24h exceeded")
	e.freeze(eventstore.Transaction{Scope: e.scope, TxID: "tx-4", State: eventstore.StateDisabled, Version: 1}, "gone")

	list := func(f FrozenFilter, p Page) FrozenList {
		t.Helper()
		l, err := ListFrozen(ctx, e.store, e.scope, f, p)
		if err != nil {
			t.Fatalf("ListFrozen %s: %v", f, err)
		}
		return l
	}
	all := list(FrozenAll, Page{})
	if got := frozenIDs(all); !slices.Equal(got, []string{"tx-4", "tx-3", "tx-2", "tx-1"}) || all.Total != 4 || all.Next != "" {
		t.Fatalf("all frozen: %v (total %d, next %q)", got, all.Total, all.Next)
	}
	live := map[string]eventstore.State{}
	for _, s := range all.Sagas {
		live[s.TxID] = s.LiveState
	}
	if live["tx-2"] != eventstore.StateCompensationFailed || live["tx-1"] != eventstore.StateDisabled || live["tx-4"] != "" {
		t.Errorf("live states %v", live)
	}
	if all.Sagas[2].Reason != "refund rejected" || all.Sagas[2].State != eventstore.StateCompensating {
		t.Errorf("frozen copy of tx-2: reason %q state %s", all.Sagas[2].Reason, all.Sagas[2].State)
	}
	if got := frozenIDs(list(FrozenDisabled, Page{})); !slices.Equal(got, []string{"tx-3", "tx-1"}) {
		t.Errorf("disabled: %v", got)
	}
	if got := frozenIDs(list(FrozenTerminated, Page{})); !slices.Equal(got, []string{"tx-2"}) {
		t.Errorf("terminated: %v", got)
	}
	p1 := list(FrozenDisabled, Page{Limit: 1})
	p2 := list(FrozenDisabled, Page{Limit: 1, After: p1.Next})
	if !slices.Equal(frozenIDs(p1), []string{"tx-3"}) || p1.Next != "tx-3" || !slices.Equal(frozenIDs(p2), []string{"tx-1"}) || p2.Next != "" {
		t.Errorf("disabled pages: %v next %q, %v next %q", frozenIDs(p1), p1.Next, frozenIDs(p2), p2.Next)
	}
	if got := frozenIDs(list(FrozenAll, Page{Offset: 3, Limit: 2})); !slices.Equal(got, []string{"tx-1"}) {
		t.Errorf("offset 3: %v", got)
	}
	// Page 2 of the disabled ones: the offset counts disabled sagas only.
	if l := list(FrozenDisabled, Page{Offset: 1, Limit: 1}); !slices.Equal(frozenIDs(l), []string{"tx-1"}) || l.Next != "" {
		t.Errorf("disabled offset 1: %v next %q", frozenIDs(l), l.Next)
	}
}

// redrives collects what an engine hands its Redriver.
type redrives struct {
	mu      sync.Mutex
	entries []eventstore.RecoveryEntry
}

func (r *redrives) Redrive(_ context.Context, e eventstore.RecoveryEntry) error {
	r.mu.Lock()
	r.entries = append(r.entries, e)
	r.mu.Unlock()
	return nil
}

func (r *redrives) retries(txID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.entries {
		if e.TxID == txID && !e.Restore() {
			n++
		}
	}
	return n
}

// restoreOK runs Restore at the clock and fails the test on an error.
func (e *env) restoreOK(w *Writer, id string) RestoreResult {
	e.t.Helper()
	res, err := Restore(e.t.Context(), e.store, w, e.scope, id, e.clock.Now())
	if err != nil {
		e.t.Fatalf("Restore %s: %v", id, err)
	}
	return res
}

func testRestoreDisabled(t *testing.T, e *env) {
	// The watchdog registered at its start, by another process.
	now := e.clock.Now()
	e.clock.Set(now.Add(-30 * time.Hour))
	oldWatchdog := e.restore(e.writer(), "tx-1")
	e.clock.Set(now)
	w := e.writer()
	tx := e.saga("tx-1", eventstore.StateDisabled, func(tx *eventstore.Transaction) { tx.RestorePath = &oldWatchdog })
	e.freeze(tx, "transaction lifetime 24h exceeded")
	if !e.cfg.Expired(tx.LifetimeFrom(), e.clock.Now()) {
		t.Fatal("the seeded saga should have outlived its lifetime")
	}
	res := e.restoreOK(w, "tx-1")
	// A write of the restore's version made from the state before it (the
	// owner's late reply, applied to what it cached) loses to the restore,
	// with its tryout, whatever its content (issue 35).
	late := tx
	late.State, late.Version, late.Span, late.UpdatedAt = eventstore.StateCompleted, tx.Version+1, 9, now.Add(time.Minute)
	if err := e.store.Transition(t.Context(), late, &eventstore.Tryout{Index: int(late.Version), Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}

	if res.From != eventstore.StateDisabled || res.To != eventstore.StateRetryPending || !res.Transitioned || !res.Unfrozen ||
		res.Version != tx.Version+1 || !res.LifetimeStart.Equal(eventstore.StoredTime(now)) || res.Watchdog == nil || len(res.Warnings) != 0 {
		t.Fatalf("result %+v", res)
	}
	if res.Span != 1 || res.Kind != "process" || res.Endpoint != "payment-service.charge" || res.Attempt != 2 {
		t.Errorf("step in result: span %d kind %s endpoint %s attempt %d", res.Span, res.Kind, res.Endpoint, res.Attempt)
	}
	got := e.load("tx-1")
	if got.State != eventstore.StateRetryPending || got.Version != tx.Version+1 || got.Fence != tx.Fence+1 || got.Kind != "process" || got.Attempt != 2 || got.Span != 1 {
		t.Errorf("saga after restore and a late write of its version: %+v", got)
	}
	if !got.LifetimeStart.Equal(eventstore.StoredTime(now)) || e.cfg.Expired(got.LifetimeFrom(), now.Add(time.Hour)) {
		t.Errorf("lifetime not extended: LifetimeStart %v", got.LifetimeStart)
	}
	if !got.CreatedAt.Equal(tx.CreatedAt) || !got.UpdatedAt.Equal(eventstore.StoredTime(now)) {
		t.Errorf("CreatedAt %v UpdatedAt %v", got.CreatedAt, got.UpdatedAt)
	}
	if !strings.HasPrefix(got.Error, "payment gateway timeout [restored from DISABLED at ") {
		t.Errorf("Error %q: the old error with a note", got.Error)
	}
	if got.RestorePath == nil || *got.RestorePath != *res.Watchdog || !res.Watchdog.Restore() {
		t.Errorf("RestorePath %v, result watchdog %v", got.RestorePath, res.Watchdog)
	}
	if e.frozen("tx-1") {
		t.Error("still frozen")
	}
	if tries, err := e.store.Tryouts(t.Context(), e.scope, "tx-1"); err != nil || len(tries) != 1 {
		t.Errorf("tryouts %v, %v: restore writes none", tries, err)
	}
	// The directory: the new watchdog and the retry are there, the old
	// watchdog is gone.
	hasEntry := func(p eventstore.RecoveryPath) bool {
		return slices.ContainsFunc(e.entries(p), func(en eventstore.RecoveryEntry) bool { return en.TxID == "tx-1" })
	}
	if hasEntry(oldWatchdog) || !hasEntry(*res.Watchdog) || !hasEntry(res.Retry) || res.Retry.Restore() {
		t.Errorf("directory: old watchdog %v, new %v, retry %v", hasEntry(oldWatchdog), hasEntry(*res.Watchdog), hasEntry(res.Retry))
	}
	ws := MustWindows(e.cfg.Interval)
	if want := ws.RetryWindow(now, 1); res.Retry.MinuteOfDay != want.Slot || !res.RetryDue.Equal(want.End) {
		t.Errorf("retry in slot %d due %v, want W+1 (%v)", res.Retry.MinuteOfDay, res.RetryDue, want)
	}
	if l := e.listPending(Page{}); !slices.Equal(pendingIDs(l), []string{"tx-1"}) {
		t.Errorf("retry-pending list %v", pendingIDs(l))
	}

	// The next retry-node pass after that window re-drives it.
	r := &redrives{}
	en := e.engine(r)
	if e.scan(en); r.retries("tx-1") != 0 {
		t.Fatal("re-driven before its window was sealed")
	}
	e.clock.Set(res.RetryDue)
	if e.scan(en); r.retries("tx-1") != 1 {
		t.Fatalf("re-driven %d times after its window, want 1", r.retries("tx-1"))
	}
}

func testRestoreTerminated(t *testing.T, e *env) {
	w := e.writer()
	tx := e.saga("tx-1", eventstore.StateCompensationFailed, func(tx *eventstore.Transaction) {
		tx.Span, tx.Kind, tx.Endpoint, tx.Attempt, tx.Error = 0, "revert", "stock-service.reserve", 3, "release rejected"
		tx.CreatedAt = e.clock.Now().Add(-time.Hour) // not expired: lifetime restarts anyway
	})
	e.freeze(tx, "release rejected")
	res := e.restoreOK(w, "tx-1")
	if res.From != eventstore.StateCompensationFailed || !res.Transitioned || !res.Unfrozen || res.Kind != "revert" || res.Endpoint != "stock-service.reserve" || res.Watchdog == nil {
		t.Fatalf("result %+v", res)
	}
	got := e.load("tx-1")
	if got.State != eventstore.StateRetryPending || got.Kind != "revert" || got.Span != 0 || got.Attempt != 3 ||
		!got.LifetimeStart.Equal(eventstore.StoredTime(e.clock.Now())) || got.RestorePath == nil ||
		got.Error != "release rejected [restored from COMPENSATION_FAILED at "+eventstore.StoredTime(e.clock.Now()).Format(time.RFC3339)+"]" {
		t.Errorf("saga after restore: %+v", got)
	}
	if e.frozen("tx-1") {
		t.Error("still frozen")
	}
	if e.t.Failed() {
		return
	}
	// Restoring again (a window later): it is RETRY_PENDING now, so only
	// a retry is added.
	e.windows(1)
	again := e.restoreOK(w, "tx-1")
	if again.Transitioned || again.Unfrozen || again.Watchdog != nil || again.Version != got.Version {
		t.Errorf("second restore %+v", again)
	}
	if l := e.listPending(Page{}); len(l.Sagas) != 1 || len(l.Sagas[0].Retries) != 2 {
		t.Errorf("retry-pending list %+v", l.Sagas)
	}
}

func testRestoreRetryPending(t *testing.T, e *env) {
	w := e.writer()
	tx := e.saga("tx-1", eventstore.StateRetryPending, nil)
	res := e.restoreOK(w, "tx-1")
	if res.From != eventstore.StateRetryPending || res.To != eventstore.StateRetryPending || res.Transitioned || res.Unfrozen ||
		res.Watchdog != nil || !res.LifetimeStart.IsZero() || res.Version != tx.Version || res.Retry.Restore() {
		t.Fatalf("result %+v", res)
	}
	if got := e.load("tx-1"); got.Version != tx.Version || !got.UpdatedAt.Equal(tx.UpdatedAt) || got.Error != tx.Error {
		t.Errorf("the saga row changed: %+v", got)
	}
	if l := e.listPending(Page{}); !slices.Equal(pendingIDs(l), []string{"tx-1"}) {
		t.Errorf("retry-pending list %v", pendingIDs(l))
	}
	// Interrupted restore: RETRY_PENDING but still frozen. Restoring again
	// finishes it.
	tx2 := e.saga("tx-2", eventstore.StateRetryPending, nil)
	e.freeze(tx2, "transaction lifetime 24h exceeded")
	if res := e.restoreOK(w, "tx-2"); !res.Unfrozen || res.Transitioned || e.frozen("tx-2") {
		t.Errorf("interrupted restore not finished: %+v, frozen %v", res, e.frozen("tx-2"))
	}
}

func testNotRestorable(t *testing.T, e *env) {
	w := e.writer()
	e.saga("tx-completed", eventstore.StateCompleted, nil)
	e.saga("tx-running", eventstore.StateInProgress, nil)
	e.saga("tx-compensated", eventstore.StateCompensated, nil)
	// Terminated outside a compensation (its entity no longer decoded).
	e.saga("tx-undecodable", eventstore.StateCompensationFailed, nil)
	for id, st := range map[string]eventstore.State{
		"tx-completed": eventstore.StateCompleted, "tx-running": eventstore.StateInProgress,
		"tx-compensated": eventstore.StateCompensated, "tx-undecodable": eventstore.StateCompensationFailed,
	} {
		before := e.load(id)
		_, err := Restore(t.Context(), e.store, w, e.scope, id, e.clock.Now())
		var nr *NotRestorableError
		if !errors.Is(err, ErrNotRestorable) || !errors.As(err, &nr) || nr.State != st || nr.TxID != id {
			t.Errorf("%s: %v, want a NotRestorableError of state %s", id, err, st)
			continue
		}
		if !strings.Contains(err.Error(), string(st)) {
			t.Errorf("%s: message %q does not name the state", id, err)
		}
		if after := e.load(id); after.Version != before.Version || after.State != before.State {
			t.Errorf("%s changed: %+v", id, after)
		}
	}
	if st := w.Stats(); st.Registrations != 0 {
		t.Errorf("%d registrations for sagas not restored", st.Registrations)
	}
	if _, err := Restore(t.Context(), e.store, w, e.scope, "tx-missing", e.clock.Now()); !errors.Is(err, eventstore.ErrNotFound) || errors.Is(err, ErrNotRestorable) {
		t.Errorf("missing saga: %v, want ErrNotFound", err)
	}
}
