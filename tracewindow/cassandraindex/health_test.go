package cassandraindex_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/tracewindow/cassandraindex"
)

// TestHealthAgreesWithTheListOnCassandra (issue 41, on real Cassandra): a
// saga finished without the orchestrator's listener (another process) is
// shown COMPLETED by the list, which reads states from the store and
// writes them back to the index; the health, counted from the index and
// cached for an hour here, counts it COMPLETED on the very next request:
// the write-back is flushed (the index otherwise writes only every flush
// interval, an hour here) and ends the cached document.
func TestHealthAgreesWithTheListOnCassandra(t *testing.T) {
	idx, cfg := open(t, cassandraindex.WithFlushInterval(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scfg := cfg
	scfg.Replication, scfg.CreateSchema, scfg.RequestTimeout = cassandra.SimpleReplication(1), true, 30*time.Second
	store, err := cassandra.New(ctx, scfg) // the event store's tables too
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	scope := eventstore.Scope{Region: "eu", Cluster: "c1", Service: "orders"}
	now := time.Now().UTC().Truncate(time.Millisecond)
	created := now.Add(-time.Minute)
	id, err := orchestrator.NewTxID(created, 1)
	if err != nil {
		t.Fatal(err)
	}
	tx := eventstore.Transaction{Scope: scope, TxID: id, Domain: "order", State: eventstore.StateInProgress, Version: 1,
		Payload: []byte{0x80}, CreatedAt: created, UpdatedAt: created}
	if err := store.CreateTransaction(ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	idx.Observe(scope, tracewindow.EntryOf(&tx))
	flush(t, idx)

	h, err := tracewindow.New(store, scope, tracewindow.WithIndex(idx), tracewindow.WithAnonymousReads(),
		tracewindow.WithClock(func() time.Time { return now }), tracewindow.WithHealthCache(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string, v any) {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d", path, res.StatusCode)
		}
		if err := json.NewDecoder(res.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var hd tracewindow.Health
	get("/api/health", &hd)
	if hd.InFlight != 1 || len(hd.Errors) != 0 {
		t.Fatalf("before: in flight %d errors %v", hd.InFlight, hd.Errors)
	}

	// Another process finishes it: the store only.
	tx.State, tx.Version, tx.UpdatedAt = eventstore.StateCompleted, 2, created.Add(time.Second)
	if err := store.Transition(ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	var l tracewindow.ListDoc
	get("/api/sagas?domain=order", &l)
	if len(l.Sagas) != 1 || l.Sagas[0].State != eventstore.StateCompleted {
		t.Fatalf("list: %+v", l.Sagas)
	}
	hd = tracewindow.Health{}
	get("/api/health", &hd)
	if hd.InFlight != 0 || hd.ByState[eventstore.StateCompleted] != 1 {
		t.Fatalf("after the list showed COMPLETED: in flight %d by state %v", hd.InFlight, hd.ByState)
	}
}
