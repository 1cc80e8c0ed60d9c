package cassandra_test

import (
	"context"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// The statements of the release before definition_version (issue 40.3),
// verbatim: what an orchestrator of that release runs against a keyspace
// the new release has migrated, during a rolling upgrade.
const (
	prevUpsertTx = `INSERT INTO {ks}.es_transaction (region, cluster, service_name, transaction_id, domain, running_status, version, span, kind, endpoint, attempt, payload, completed, hints, error, restore_date, restore_window, restore_instance_id, restore_bucket, paused_until, lifetime_start, pause_event, trace_id, trace_parent, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	prevSelectTx = `SELECT domain, running_status, version, span, kind, endpoint, attempt, payload, completed, hints, error, restore_date, restore_window, restore_instance_id, restore_bucket, paused_until, lifetime_start, pause_event, trace_id, trace_parent, created_at, updated_at FROM {ks}.es_transaction WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ?`
)

// TestDefinitionVersionAcrossReleases: a saga row written by this release
// with a definition version stays readable by the previous release's
// SELECT, a later write of the previous release (whose INSERT does not
// name definition_version) leaves the version in place, and a row the
// previous release created reads back version 0 (the orchestrator's
// version 1).
func TestDefinitionVersionAcrossReleases(t *testing.T) {
	hosts, ks := testenv.CassandraKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newStore(t, migrateConfig(hosts, ks))
	admin := adminSession(t, hosts)
	scope := storetest.UniqueScope(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	q := func(stmt string) string { return strings.ReplaceAll(stmt, "{ks}", ks) }
	prevWrite := func(tx eventstore.Transaction) {
		t.Helper()
		err := admin.Query(q(prevUpsertTx), tx.Region, tx.Cluster, tx.Service, tx.TxID, tx.Domain, string(tx.State), tx.Version, tx.Span, tx.Kind, tx.Endpoint, tx.Attempt,
			[]byte{}, []prevCompleted{}, map[string]string{}, tx.Error, gocql.UnsetValue, 0, "", 0, time.Time{}, time.Time{}, "", "", "", tx.CreatedAt, tx.UpdatedAt,
			eventstore.WriteTime(tx)).ExecContext(ctx)
		if err != nil {
			t.Fatalf("previous release's upsert: %v", err)
		}
	}

	tx := eventstore.Transaction{Scope: scope, TxID: "tx-def-new", Domain: "order", State: eventstore.StateInProgress, Version: 1,
		Span: 0, Kind: "process", Endpoint: "inv/reserve", Attempt: 1, Definition: 2, CreatedAt: now, UpdatedAt: now}
	if err := s.CreateTransaction(ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	row := map[string]any{}
	iter := admin.Query(q(prevSelectTx), scope.Region, scope.Cluster, scope.Service, tx.TxID).IterContext(ctx)
	if !iter.MapScan(row) {
		t.Fatalf("previous release's select found no row: %v", iter.Close())
	}
	if err := iter.Close(); err != nil || row["running_status"] != string(eventstore.StateInProgress) || row["version"] != int64(1) || len(row) != 22 {
		t.Fatalf("previous release's select: %v, %v", row, err)
	}

	next := tx
	next.State, next.Version, next.Span, next.Endpoint, next.UpdatedAt = eventstore.StateInProgress, 2, 1, "pay/charge", now.Add(time.Second)
	prevWrite(next)
	got, err := s.LoadTransaction(ctx, scope, tx.TxID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 2 || got.Endpoint != "pay/charge" || got.Definition != 2 {
		t.Fatalf("after the previous release's write: version %d endpoint %q definition %d; want 2 pay/charge 2", got.Version, got.Endpoint, got.Definition)
	}

	old := eventstore.Transaction{Scope: scope, TxID: "tx-def-old", Domain: "order", State: eventstore.StateStarted, Version: 1, CreatedAt: now, UpdatedAt: now}
	prevWrite(old)
	got, err = s.LoadTransaction(ctx, scope, old.TxID)
	if err != nil || got.Definition != 0 || got.State != eventstore.StateStarted {
		t.Fatalf("row of the previous release: definition %d state %q, %v; want 0 STARTED", got.Definition, got.State, err)
	}
}

// prevCompleted is an element of the completed column.
type prevCompleted struct {
	Span        int
	Endpoint    string
	Compensable bool
}
