package tracewindow_test

import (
	"context"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// listState returns the state the list endpoint shows for id (domain
// order, the default range), "" when it does not list it.
func (f *fixture) listState(id string) eventstore.State {
	f.t.Helper()
	var d listDoc
	if code := f.get("/api/sagas?domain=order&limit=200", &d); code != 200 {
		f.t.Fatalf("list: %d", code)
	}
	for _, s := range d.Sagas {
		if s.TxID == id {
			return s.State
		}
	}
	return ""
}

func (f *fixture) health() tracewindow.Health {
	f.t.Helper()
	var h tracewindow.Health
	if code := f.get("/api/health", &h); code != 200 {
		f.t.Fatalf("health: %d", code)
	}
	return h
}

// TestHealthRetryRegisteredFollowsTheList is issue 41's report: a saga
// parked RETRY_PENDING has a durable retry registered a few one-minute
// windows ahead (the fallback of its in-process retry); the in-process
// retry re-drives it and it completes at once, and the list shows it
// COMPLETED, but the directory entry stays until a retry node scans its
// window (two minutes or more later) and finds it done. The health's
// "retries registered" counted directory entries before reading their
// sagas' states, so it lagged the list by minutes. It counts only the
// sagas still RETRY_PENDING, as the list shows them, on the same clock.
func TestHealthRetryRegisteredFollowsTheList(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	w, err := recovery.NewWriter(f.store, recovery.DefaultConfig(), recovery.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's RETRY_PENDING saga, parked with its fallback retry
	// two windows ahead, as the orchestrator registers it.
	if _, err := w.RegisterRetry(ctx, f.scope, f.pending, "order", 2); err != nil {
		t.Fatal(err)
	}
	if st := f.listState(f.pending); st != eventstore.StateRetryPending {
		t.Fatalf("list shows %s, want RETRY_PENDING", st)
	}
	if h := f.health(); h.RetryPending != 1 || h.RetryRegistered != 1 {
		t.Fatalf("parked: retry_pending %d retry_registered %d, want 1 and 1", h.RetryPending, h.RetryRegistered)
	}

	// The in-process retry re-drives it one second later and it completes
	// (the orchestrator's listener feeds the index each time).
	tx, err := f.store.LoadTransaction(ctx, f.scope, f.pending)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []eventstore.State{eventstore.StateInProgress, eventstore.StateCompleted} {
		f.now = f.now.Add(time.Second)
		tx.State, tx.Version, tx.UpdatedAt, tx.Error = st, tx.Version+1, f.now, ""
		if err := f.store.Transition(ctx, tx, nil); err != nil {
			t.Fatal(err)
		}
		f.idx.Observe(f.scope, tracewindow.EntryOf(&tx))
	}
	if st := f.listState(f.pending); st != eventstore.StateCompleted {
		t.Fatalf("list shows %s, want COMPLETED", st)
	}
	// No retry node has scanned the window yet (it cannot before the
	// window ends): the directory still names the saga, for minutes.
	for _, later := range []time.Duration{0, 30 * time.Second, 90 * time.Second} {
		f.now = f.now.Add(later)
		h := f.health()
		if h.RetryPending != 0 || h.RetryRegistered != 0 {
			t.Fatalf("%v after the list showed COMPLETED: retry_pending %d retry_registered %d, want 0 and 0 (the list shows no saga RETRY_PENDING)",
				later, h.RetryPending, h.RetryRegistered)
		}
	}
}

// TestHealthAgreesOnceTheListShowsAChange: a saga changed without the
// orchestrator's listener (here `sagactl restore` from another process:
// recovery.Restore on the store) is shown in its new state by the list,
// which reads every listed saga's state from the store and writes it back
// to the index. The health served from its cache (5s) must not go on
// showing the old counts once the list has shown the change: the clock
// does not move here, so a cached document would be served.
func TestHealthAgreesOnceTheListShowsAChange(t *testing.T) {
	f := newFixture(t, tracewindow.WithHealthCache(5*time.Second))
	ctx := context.Background()
	before := f.health()
	if before.CompensationFailed != 1 || before.Terminated != before.CompensationFailed || before.RetryPending != 1 || before.Frozen != 2 {
		t.Fatalf("before: %+v", before)
	}
	w, err := recovery.NewWriter(f.store, recovery.DefaultConfig(), recovery.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recovery.Restore(ctx, f.store, w, f.scope, f.terminated, f.now); err != nil {
		t.Fatal(err)
	}
	if st := f.listState(f.terminated); st != eventstore.StateRetryPending {
		t.Fatalf("list shows %s, want RETRY_PENDING", st)
	}
	h := f.health()
	if h.CompensationFailed != 0 || h.RetryPending != 2 || h.RetryRegistered != 1 || h.Frozen != 1 || h.InFlight != before.InFlight+1 {
		t.Fatalf("after the list showed the restore: terminated %d retry_pending %d retry_registered %d frozen %d in_flight %d (before %d), want 0 2 1 1 %d",
			h.CompensationFailed, h.RetryPending, h.RetryRegistered, h.Frozen, h.InFlight, before.InFlight, before.InFlight+1)
	}
}

// TestHealthCacheTTLIsPublished: /api/config states how stale a health
// document may be, and the health is computed again once it is that old.
func TestHealthCacheTTLIsPublished(t *testing.T) {
	f := newFixture(t, tracewindow.WithHealthCache(5*time.Second))
	var c tracewindow.ConfigDoc
	if code := f.get("/api/config", &c); code != 200 || c.HealthCacheMS != 5000 {
		t.Fatalf("config %d: health_cache_ms %d, want 5000", code, c.HealthCacheMS)
	}
	first := f.health()
	f.now = f.now.Add(4 * time.Second)
	if h := f.health(); !h.GeneratedAt.Equal(first.GeneratedAt) {
		t.Fatalf("within the TTL: generated at %v, want the cached %v", h.GeneratedAt, first.GeneratedAt)
	}
	f.now = f.now.Add(time.Second)
	if h := f.health(); !h.GeneratedAt.Equal(f.now) {
		t.Fatalf("at the TTL: generated at %v, want %v", h.GeneratedAt, f.now)
	}
}
