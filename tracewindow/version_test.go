package tracewindow_test

import (
	"context"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// TestAPIDefinitionVersion (issue 40.3): the saga page and the list show
// each saga's definition version; a saga written before versions shows
// version 1.
func TestAPIDefinitionVersion(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tx, err := f.store.LoadTransaction(ctx, f.scope, f.inflight)
	if err != nil {
		t.Fatal(err)
	}
	tx.Definition, tx.Version = 2, tx.Version+1
	if err := f.store.Transition(ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	f.idx.Observe(f.scope, tracewindow.EntryOf(&tx))
	for id, want := range map[string]int{f.inflight: 2, f.compensated: 1} {
		var d tracewindow.Detail
		if code := f.get("/api/sagas/"+id, &d); code != 200 {
			t.Fatal(code)
		}
		if d.Saga.Definition != want {
			t.Errorf("saga %s: definition_version %d, want %d", id, d.Saga.Definition, want)
		}
	}
	var l listDoc
	f.get("/api/sagas", &l)
	seen := 0
	for _, s := range l.Sagas {
		want := 1
		if s.TxID == f.inflight {
			want = 2
		}
		if s.Definition != want {
			t.Errorf("list row %s: definition_version %d, want %d", s.TxID, s.Definition, want)
		}
		seen++
	}
	if seen == 0 {
		t.Fatal("empty list")
	}
	// The orchestrator's events carry the version into the index.
	if e := tracewindow.EntryOfEvent(orchestrator.Event{TxID: tx.TxID, Domain: "order", Version: 3, To: eventstore.StateInProgress}); e.Definition != 3 {
		t.Errorf("EntryOfEvent: definition %d, want 3", e.Definition)
	}
}
