package storetest

import (
	"errors"
	"fmt"
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

// testDefinitionVersion checks Transaction.Definition (issue 40.3, the
// version of the domain's definition a saga started with): a row created
// without one reads back 0 (what a writer before versions leaves), a
// version set at create survives later transitions that carry it, the
// frozen copy keeps it, and a version outside 0..MaxDefinition fails with
// ErrInvalid and writes nothing.
func testDefinitionVersion(t *testing.T, e *env) {
	ctx := t.Context()
	old := fullTx(e.scope, "tx-definition-none")
	old.Definition = 0
	must(t, e.store.CreateTransaction(ctx, old, nil), "CreateTransaction without a definition version")
	got, err := e.store.LoadTransaction(ctx, e.scope, old.TxID)
	must(t, err, "LoadTransaction")
	if got.Definition != 0 {
		t.Fatalf("Definition %d of a row created without one, want 0", got.Definition)
	}
	tx := fullTx(e.scope, "tx-definition")
	tx.Definition = eventstore.MaxDefinition
	must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction with a definition version")
	tx.State, tx.Version = eventstore.StateCompensating, tx.Version+1
	must(t, e.store.Transition(ctx, tx, tryoutAt(tx, "non_retryable")), "Transition")
	got, err = e.store.LoadTransaction(ctx, e.scope, tx.TxID)
	must(t, err, "LoadTransaction")
	checkTx(t, "saga with a definition version", got, tx)
	must(t, e.store.Freeze(ctx, tx, "frozen"), "Freeze")
	f, err := e.store.GetFrozen(ctx, e.scope, tx.TxID)
	must(t, err, "GetFrozen")
	if f.Definition != tx.Definition {
		t.Fatalf("frozen Definition %d, want %d", f.Definition, tx.Definition)
	}
	for _, v := range []int{-1, eventstore.MaxDefinition + 1} {
		bad := fullTx(e.scope, fmt.Sprintf("tx-definition-bad%d", v))
		bad.Definition = v
		mustIs(t, e.store.CreateTransaction(ctx, bad, nil), eventstore.ErrInvalid, fmt.Sprintf("CreateTransaction with definition %d", v))
		mustIs(t, e.store.Transition(ctx, bad, nil), eventstore.ErrInvalid, fmt.Sprintf("Transition with definition %d", v))
		if _, err := e.store.LoadTransaction(ctx, e.scope, bad.TxID); !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("LoadTransaction of a refused create: %v, want ErrNotFound", err)
		}
	}
}
