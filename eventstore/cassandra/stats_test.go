package cassandra

import (
	"context"
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

func TestObserverCountsByKindAndTable(t *testing.T) {
	o := newObserver()
	st := newStatements("ks")
	ctx := context.Background()
	q := func(stmt string, attempt int) {
		o.ObserveQuery(ctx, gocql.ObservedQuery{Statement: stmt, Attempt: attempt})
	}
	q(st.selectTx, 0)
	q(st.selectTx, 1) // a driver retry: not counted
	q(st.insertMarkerIfNotExists, 0)
	q(st.insertTxIfNotExists, 0)
	q(st.deleteMarkers, 0)
	q(st.selectMarkers, 0)
	q("CREATE TABLE IF NOT EXISTS ks.x (a int PRIMARY KEY)", 0)
	o.ObserveBatch(ctx, gocql.ObservedBatch{Statements: []string{st.upsertTx, st.insertTryout}})
	o.ObserveBatch(ctx, gocql.ObservedBatch{Statements: []string{st.upsertTx, st.insertTryout}, Attempt: 2})

	s := o.snapshot()
	if s.Reads != 2 || s.Writes != 1 || s.LWTs != 2 || s.Batches != 1 || s.Other != 1 || s.RoundTrips() != 7 {
		t.Fatalf("totals %+v", s)
	}
	want := map[string]TableStats{
		TableTransaction:       {Reads: 1, Writes: 1, LWTs: 1, Batched: 1},
		TableTransactionTryout: {Writes: 1, Batched: 1},
		TableExecutionMarkers:  {Reads: 1, Writes: 1, LWTs: 1},
	}
	if len(s.Tables) != len(want) {
		t.Fatalf("tables %+v, want %+v", s.Tables, want)
	}
	for name, w := range want {
		if s.Tables[name] != w {
			t.Errorf("%s: %+v, want %+v", name, s.Tables[name], w)
		}
	}

	before := s
	q(st.selectTryouts, 0)
	d := o.snapshot().Sub(before)
	if d.Reads != 1 || d.RoundTrips() != 1 || len(d.Tables) != 1 || d.Tables[TableTransactionTryout].Reads != 1 {
		t.Fatalf("Sub: %+v", d)
	}

	o.reset()
	if s := o.snapshot(); s.RoundTrips() != 0 || len(s.Tables) != 0 {
		t.Fatalf("after reset: %+v", s)
	}
}

func TestObserverClassifiesEveryStatement(t *testing.T) {
	o := newObserver()
	for stmt := range packageCQL(t) {
		c := o.classify(strings.ReplaceAll(stmt, keyspacePlaceholder, "ks"))
		if c.table == nil || c.kind == kindOther {
			t.Errorf("statement not attributed to a table: %s", stmt)
		}
	}
}
