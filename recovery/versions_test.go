package recovery

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
)

// TestInFlightByDefinition: the sagas of a domain in flight, by definition
// version, found by their restore watchdogs and the frozen DISABLED sagas;
// ended sagas, another domain's, and sagas frozen after a failed
// compensation are not counted.
func TestInFlightByDefinition(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2031, 5, 6, 12, 0, 0, 0, time.UTC)
	s := memory.New(memory.WithClock(func() time.Time { return now }))
	t.Cleanup(func() { _ = s.Close() })
	cfg := DefaultConfig()
	w, err := NewWriter(s, cfg, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	scope := eventstore.Scope{Region: "r", Cluster: "c", Service: "svc"}
	put := func(id, domain string, def int, st eventstore.State, watched bool, frozen bool) {
		t.Helper()
		tx := eventstore.Transaction{Scope: scope, TxID: id, Domain: domain, State: st, Version: 1, Definition: def, CreatedAt: now, UpdatedAt: now}
		if watched {
			p, _, err := w.RegisterWatchdog(ctx, scope, id, domain, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			tx.RestorePath = &p
		}
		if err := s.CreateTransaction(ctx, tx, nil); err != nil {
			t.Fatal(err)
		}
		if frozen {
			if err := s.Freeze(ctx, tx, "frozen"); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("a", "order", 0, eventstore.StateInProgress, true, false)         // before versions
	put("b", "order", 2, eventstore.StatePaused, true, false)             // in flight
	put("b2", "order", 2, eventstore.StateRetryPending, true, false)      // in flight
	put("c", "order", 2, eventstore.StateCompleted, true, false)          // ended, watchdog not yet gone
	put("e", "refund", 3, eventstore.StateInProgress, true, false)        // another domain
	put("f", "order", 1, eventstore.StateDisabled, false, true)           // frozen, restorable
	put("g", "order", 4, eventstore.StateCompensationFailed, false, true) // frozen, ended
	put("h", "order", 5, eventstore.StateDisabled, true, true)            // frozen and watched: once
	got, err := InFlightByDefinition(ctx, s, scope, cfg, now, "order")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int]int{0: 1, 1: 1, 2: 2, 5: 1}; !maps.Equal(got, want) {
		t.Fatalf("in flight by version %v, want %v", got, want)
	}
	if _, err := InFlightByDefinition(ctx, s, eventstore.Scope{}, cfg, now, "order"); err == nil {
		t.Fatal("empty scope: no error")
	}
}
