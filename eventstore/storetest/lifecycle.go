package storetest

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// testLifecycleStates checks the states of a cancel and a terminate (issue
// 40): CANCELLING (not terminal, a step in flight) and TERMINATED
// (terminal) are stored and read back as any other state, with the history
// row that names who asked and why, and TERMINATED ends the saga as far as
// Terminal says.
func testLifecycleStates(t *testing.T, e *env) {
	ctx := t.Context()
	if eventstore.StateCancelling.Terminal() || !eventstore.StateTerminated.Terminal() {
		t.Fatalf("Terminal: CANCELLING %v, TERMINATED %v; want false, true", eventstore.StateCancelling.Terminal(), eventstore.StateTerminated.Terminal())
	}
	tx := fullTx(e.scope, "tx-lifecycle")
	must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction")
	var tries []*eventstore.Tryout
	for _, c := range []struct {
		state   eventstore.State
		outcome string
	}{
		{eventstore.StateCancelling, "cancelled"},
		{eventstore.StateTerminated, "terminated"},
	} {
		tx.State, tx.Version, tx.Error = c.state, tx.Version+1, c.outcome+" by alice: a reason"
		tr := tryoutAt(tx, c.outcome)
		tr.Error = tx.Error
		must(t, e.store.Transition(ctx, tx, tr), "Transition to "+string(c.state))
		tries = append(tries, tr)
		got, err := e.store.LoadTransaction(ctx, e.scope, tx.TxID)
		must(t, err, "LoadTransaction")
		checkTx(t, "saga "+string(c.state), got, tx)
		if sr, ok := e.store.(eventstore.StateReader); ok {
			st, err := sr.TransactionState(ctx, e.scope, tx.TxID)
			must(t, err, "TransactionState")
			if st != c.state {
				t.Fatalf("TransactionState %q, want %q", st, c.state)
			}
		}
	}
	h, err := e.store.Tryouts(ctx, e.scope, tx.TxID)
	must(t, err, "Tryouts")
	if len(h) != len(tries) {
		t.Fatalf("%d tryouts, want %d: %+v", len(h), len(tries), h)
	}
	for i, tr := range tries {
		if h[i].Outcome != tr.Outcome || h[i].Error != tr.Error {
			t.Errorf("tryout %d: %q %q, want %q %q", i, h[i].Outcome, h[i].Error, tr.Outcome, tr.Error)
		}
	}
}
