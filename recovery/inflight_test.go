package recovery

import (
	"slices"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
)

// TestListInFlight: ListInFlight finds every saga that has not ended
// through the recovery directory (retry and restore entries) and the
// frozen table, newest first, with its filters and pages, on both stores.
func TestListInFlight(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		testListInFlight(t, newEnv(t, s))
	})
	t.Run("cassandra", func(t *testing.T) { testListInFlight(t, newEnv(t, cassandraStore(t))) })
}

func testListInFlight(t *testing.T, e *env) {
	e.clock.Set(at("2026-03-10T12:00:10Z"))
	w := e.writer()
	e.saga("tx-1", eventstore.StateStarted, nil)
	e.restore(w, "tx-1")
	e.saga("tx-2", eventstore.StateRetryPending, func(tx *eventstore.Transaction) { tx.Domain = "refund" })
	if _, err := w.RegisterRetry(t.Context(), e.scope, "tx-2", "refund", 1); err != nil { // a retry entry only
		t.Fatal(err)
	}
	e.saga("tx-3", eventstore.StatePaused, nil)
	e.restore(w, "tx-3")
	e.retry(w, "tx-3", 3) // named twice: listed once
	d := e.saga("tx-4", eventstore.StateDisabled, nil)
	e.freeze(d, "transaction lifetime exceeded") // no watchdog: the frozen table
	e.saga("tx-5", eventstore.StateCompleted, nil)
	e.restore(w, "tx-5") // ended, its watchdog left: not in flight
	c := e.saga("tx-6", eventstore.StateCompensationFailed, nil)
	e.freeze(c, "release refused")
	e.saga("tx-7", eventstore.StateInProgress, nil) // no entry at all: not found
	e.restore(w, "tx-8")                            // its saga row is gone
	all := func(eventstore.State) bool { return true }
	for _, c := range []struct {
		name string
		page Page
		f    SagaFilter
		want []string
	}{
		{"not ended", Page{}, SagaFilter{}, []string{"tx-4", "tx-3", "tx-2", "tx-1"}},
		{"every state named", Page{}, SagaFilter{States: all}, []string{"tx-6", "tx-5", "tx-4", "tx-3", "tx-2", "tx-1"}},
		{"one domain", Page{}, SagaFilter{Domain: "refund"}, []string{"tx-2"}},
		{"states", Page{}, SagaFilter{States: func(s eventstore.State) bool { return s == eventstore.StatePaused }}, []string{"tx-3"}},
		{"ids", Page{}, SagaFilter{IDs: func(id string) bool { return id != "tx-3" }}, []string{"tx-4", "tx-2", "tx-1"}},
		{"first page", Page{Limit: 2}, SagaFilter{}, []string{"tx-4", "tx-3"}},
		{"after", Page{Limit: 2, After: "tx-3"}, SagaFilter{}, []string{"tx-2", "tx-1"}},
		{"offset", Page{Limit: 3, Offset: 3}, SagaFilter{}, []string{"tx-1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := ListInFlight(t.Context(), e.store, e.scope, e.cfg, e.clock.Now(), c.page, c.f)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tx := range l.Sagas {
				got = append(got, tx.TxID)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("ListInFlight %+v: %v, want %v (entries %d, frozen %d, candidates %d)", c.page, got, c.want, l.Entries, l.Frozen, l.Candidates)
			}
			if wantNext := c.page.Limit > 0 && c.name == "first page"; wantNext != (l.Next != "") || wantNext && l.Next != "tx-3" {
				t.Fatalf("next %q", l.Next)
			}
		})
	}
	if _, err := ListInFlight(t.Context(), e.store, eventstore.Scope{}, e.cfg, e.clock.Now(), Page{}, SagaFilter{}); err == nil || !strings.Contains(err.Error(), "list in flight") {
		t.Fatalf("an empty scope: %v", err)
	}
}
