package tracewindow_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// TestRepairFromTheStore: Repair writes into the index what it lost: a
// saga in flight it never saw (found through its restore watchdog), and a
// saga it holds in flight whose end it missed (no watchdog left: found by
// checking the index's rows against the store). The kill test on real
// Cassandra is cassandraindex's TestKillRestartListsEverySaga.
func TestRepairFromTheStore(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	rcfg := recovery.DefaultConfig()
	w, err := recovery.NewWriter(f.store, rcfg, recovery.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	// Unseen: in the store with a watchdog, never in the index.
	unseen := f.put("order", f.now.Add(-time.Minute), nil, eventstore.StateStarted, nil)
	if _, err := w.RegisterRestore(ctx, f.scope, unseen, "order"); err != nil {
		t.Fatal(err)
	}
	fresh := tracewindow.NewMemoryIndex(0)
	for _, id := range []string{f.inflight, f.pending} {
		tx, err := f.store.LoadTransaction(ctx, f.scope, id)
		if err != nil {
			t.Fatal(err)
		}
		fresh.Observe(f.scope, tracewindow.EntryOf(&tx))
	}
	// Ended without the index hearing it, its watchdog gone.
	tx, err := f.store.LoadTransaction(ctx, f.scope, f.inflight)
	if err != nil {
		t.Fatal(err)
	}
	tx.State, tx.Version, tx.UpdatedAt = eventstore.StateCompleted, tx.Version+1, f.now
	if err := f.store.Transition(ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	res, err := tracewindow.Repair(ctx, f.store, fresh, f.scope, rcfg, f.now)
	if err != nil {
		t.Fatal(err)
	}
	// The directory names the unseen saga; the frozen table the fixture's
	// DISABLED and COMPENSATION_FAILED ones.
	if res.Directory != 3 || res.Moved != 1 {
		t.Fatalf("repair %+v, want 3 sagas from the directory and the frozen table, 1 moved", res)
	}
	p, err := fresh.Recent(ctx, tracewindow.Query{Scope: f.scope, Domain: "order", From: f.now.Add(-time.Hour), To: f.now, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]eventstore.State{}
	for _, e := range p.Entries {
		got[e.TxID] = e.State
	}
	want := map[string]eventstore.State{unseen: eventstore.StateStarted, f.inflight: eventstore.StateCompleted, f.pending: eventstore.StateRetryPending}
	for id, st := range want {
		if got[id] != st {
			t.Errorf("after repair %s is %q, want %s (index %v)", id, got[id], st, got)
		}
	}
	if ids := idsOf(p.Entries); !slices.Contains(ids, unseen) {
		t.Errorf("the unseen saga is not listed: %v", ids)
	}
}
