package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// The schema upgrade on real Cassandra: keyspaces made by the first
// release (testdata/schema_v1.cql, its schema.cql verbatim) lack the
// columns added since; opening the store with CreateSchema adds them.

// adminSession is a session without keyspace for the test's own DDL and
// fixtures.
func adminSession(t *testing.T, hosts []string) *gocql.Session {
	t.Helper()
	cl := gocql.NewCluster(hosts...)
	cl.Timeout = time.Minute
	cl.Consistency = gocql.One
	cl.Logger = gocql.NewLogger(gocql.LogLevelNone)
	s, err := cl.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// createV1 creates the first release's tables in keyspace (which exists).
func createV1(t *testing.T, s *gocql.Session, keyspace string) {
	t.Helper()
	data, err := os.ReadFile("testdata/schema_v1.cql")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			lines = append(lines, line)
		}
	}
	script := strings.NewReplacer("${keyspace}", keyspace, "${replication}", cassandra.SimpleReplication(1).CQL()).Replace(strings.Join(lines, "\n"))
	n := 0
	for _, stmt := range strings.Split(script, ";") {
		if stmt = strings.TrimSpace(stmt); stmt == "" {
			continue
		}
		if err := s.Query(stmt).Exec(); err != nil {
			t.Fatalf("v1 schema: %s: %v", stmt, err)
		}
		n++
	}
	if n != 10 {
		t.Fatalf("v1 schema: %d statements, want 10", n)
	}
	if err := s.AwaitSchemaAgreement(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// v1Saga is a saga row as the first release wrote it.
var v1Saga = eventstore.Transaction{
	TxID: "tx-v1", Domain: "order", State: eventstore.StateInProgress, Version: 3,
	Span: 1, Kind: "process", Endpoint: "charge", Attempt: 2, Payload: []byte(`{"id":"o-1"}`),
	Completed: []eventstore.CompletedSpan{{Span: 0, Endpoint: "reserve", Compensable: true}},
	Hints:     map[string]string{"reserve": "r-9"}, Error: "timeout",
	RestorePath: &eventstore.RecoveryPath{Day: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), MinuteOfDay: 601, InstanceID: "node-a", Bucket: 3},
	CreatedAt:   time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), UpdatedAt: time.Date(2026, 11, 30, 10, 0, 5, 0, time.UTC),
}

// insertV1 writes tx into es_transaction and es_frozen_transaction with
// the first release's statements (its column list).
func insertV1(t *testing.T, s *gocql.Session, keyspace string, tx eventstore.Transaction) {
	t.Helper()
	cols := "region, cluster, service_name, transaction_id, domain, running_status, version, span, kind, endpoint, attempt, payload, completed, hints, error, restore_date, restore_window, restore_instance_id, restore_bucket, paused_until, created_at, updated_at"
	type tuple struct {
		Span        int
		Endpoint    string
		Compensable bool
	}
	var completed []tuple
	for _, c := range tx.Completed {
		completed = append(completed, tuple{c.Span, c.Endpoint, c.Compensable})
	}
	p := tx.RestorePath
	vals := []any{tx.Region, tx.Cluster, tx.Service, tx.TxID, tx.Domain, string(tx.State), tx.Version, tx.Span, tx.Kind, tx.Endpoint, tx.Attempt,
		tx.Payload, completed, tx.Hints, tx.Error, p.Day, p.MinuteOfDay, p.InstanceID, p.Bucket, time.Time{}, tx.CreatedAt, tx.UpdatedAt}
	marks := strings.TrimSuffix(strings.Repeat("?, ", 22), ", ")
	if err := s.Query("INSERT INTO "+keyspace+".es_transaction ("+cols+") VALUES ("+marks+")", vals...).Exec(); err != nil {
		t.Fatal(err)
	}
	err := s.Query("INSERT INTO "+keyspace+".es_frozen_transaction ("+cols+", reason, frozen_at) VALUES ("+marks+", ?, ?)",
		append(vals, "terminated", tx.UpdatedAt)...).Exec()
	if err != nil {
		t.Fatal(err)
	}
}

// columnsOf reads the columns of a table: name -> type.
func columnsOf(t *testing.T, s *gocql.Session, keyspace, table string) map[string]string {
	t.Helper()
	iter := s.Query("SELECT column_name, type FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?", keyspace, table).Iter()
	out := map[string]string{}
	var name, typ string
	for iter.Scan(&name, &typ) {
		out[name] = typ
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func migrateConfig(hosts []string, keyspace string) cassandra.Config {
	return cassandra.Config{
		ContactPoints: hosts, Keyspace: keyspace, Replication: cassandra.SimpleReplication(1),
		RequestTimeout: 30 * time.Second, CreateSchema: true,
	}
}

// v1Alters is the upgrade of a first-release keyspace: the columns its
// tables lack, then the tables it lacks (es_business_key), in schema order.
func v1Alters(t *testing.T, keyspace string) []string {
	t.Helper()
	var out []string
	for _, table := range []string{cassandra.TableTransaction, cassandra.TableFrozenTransaction} {
		for _, col := range []string{"lifetime_start timestamp", "pause_event text", "trace_id text", "trace_parent text", "definition_version int"} {
			out = append(out, "ALTER TABLE "+keyspace+"."+table+" ADD "+col)
		}
	}
	all, err := cassandra.SchemaStatements(keyspace, cassandra.SimpleReplication(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range all {
		if strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS "+keyspace+"."+cassandra.TableAdminAudit+" (") ||
			strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS "+keyspace+"."+cassandra.TableBusinessKey+" (") {
			out = append(out, stmt)
		}
	}
	if len(out) != 12 {
		t.Fatalf("the schema lacks the %s or %s table", cassandra.TableAdminAudit, cassandra.TableBusinessKey)
	}
	return out
}

// TestMigrateFirstReleaseKeyspace: a keyspace with the first release's
// tables and a saga written the old way. Before the upgrade the store's
// writes fail ("Undefined column name"); New with CreateSchema adds the 10
// columns and the tables added since (es_admin_audit, es_business_key), the old saga loads, and a full create/transition/pause/freeze
// with a trace id round-trips.
func TestMigrateFirstReleaseKeyspace(t *testing.T) {
	hosts, ks := testenv.CassandraKeyspace(t)
	admin := adminSession(t, hosts)
	createV1(t, admin, ks)
	scope := storetest.UniqueScope(t)
	old := v1Saga
	old.Scope = scope
	insertV1(t, admin, ks, old)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := migrateConfig(hosts, ks)

	// The problem: without the upgrade, today's statements fail.
	noSchema := cfg
	noSchema.CreateSchema = false
	plain, err := cassandra.New(ctx, noSchema)
	if err != nil {
		t.Fatal(err)
	}
	tx := eventstore.Transaction{Scope: scope, TxID: "tx-new", Domain: "order", State: eventstore.StateStarted, Version: 1, CreatedAt: time.Now()}
	err = plain.CreateTransaction(ctx, tx, nil)
	_ = plain.Close()
	if err == nil || !strings.Contains(err.Error(), "Undefined column name") {
		t.Fatalf("write on the old tables: %v, want Undefined column name", err)
	}

	pending, err := cassandra.MigrationCQLWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := v1Alters(t, ks); !slices.Equal(pending, want) {
		t.Fatalf("pending\n%s\nwant\n%s", strings.Join(pending, "\n"), strings.Join(want, "\n"))
	}

	s := newStore(t, cfg)
	for _, table := range []string{cassandra.TableTransaction, cassandra.TableFrozenTransaction} {
		cols := columnsOf(t, admin, ks, table)
		for col, want := range map[string]string{"lifetime_start": "timestamp", "pause_event": "text", "trace_id": "text", "trace_parent": "text", "definition_version": "int", "payload": "blob"} {
			if cols[col] != want {
				t.Errorf("%s.%s: type %q, want %q", table, col, cols[col], want)
			}
		}
	}
	if pending, err := cassandra.MigrationCQLWithConfig(ctx, cfg); err != nil || len(pending) > 0 {
		t.Fatalf("after the upgrade: pending %q, %v", pending, err)
	}

	// The old saga loads, the new fields empty.
	got, err := s.LoadTransaction(ctx, scope, old.TxID)
	if err != nil {
		t.Fatal(err)
	}
	// The first release wrote its rows at the server's time, not at the
	// version's timestamp: the row loads with the fence just above that
	// time, so that the next write lands over it.
	if got.Fence == 0 {
		t.Fatalf("old saga loads with fence 0: its next write would be discarded (below the server-time write)")
	}
	legacyFence := got.Fence
	got.Fence = 0
	if !reflect.DeepEqual(got, old) {
		t.Fatalf("old saga\n got %+v\nwant %+v", got, old)
	}
	got.Fence = legacyFence
	frozen, err := s.GetFrozen(ctx, scope, old.TxID)
	if err != nil || !reflect.DeepEqual(frozen.Transaction, old) || frozen.Reason != "terminated" {
		t.Fatalf("old frozen saga: %+v, %v", frozen, err)
	}
	if err := s.Transition(ctx, func() eventstore.Transaction {
		next := got
		next.Version, next.State, next.TraceID = 4, eventstore.StateCompleted, "0af7651916cd43dd8448eb211c80319c"
		return next
	}(), &eventstore.Tryout{Index: 0, Span: 1, Kind: "process", Endpoint: "charge", Outcome: "ok"}); err != nil {
		t.Fatalf("transition of the old saga: %v", err)
	}
	if after, err := s.LoadTransaction(ctx, scope, old.TxID); err != nil || after.State != eventstore.StateCompleted || after.Version != 4 {
		t.Fatalf("the old saga's transition did not land: %+v, %v", after, err)
	}

	// A new saga with every new column.
	now := time.Now().UTC().Truncate(time.Millisecond)
	tx = eventstore.Transaction{
		Scope: scope, TxID: "tx-new", Domain: "order", State: eventstore.StateStarted, Version: 1, Kind: "process", Endpoint: "reserve",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		LifetimeStart: now, CreatedAt: now, UpdatedAt: now,
	}
	if err := s.CreateTransaction(ctx, tx, &eventstore.Tryout{Index: 0, Kind: "process", Endpoint: "reserve", Outcome: "sent", StartedAt: now}); err != nil {
		t.Fatalf("create: %v", err)
	}
	tx.Version, tx.State, tx.PauseEvent, tx.PausedUntil, tx.UpdatedAt = 2, eventstore.StatePaused, "payment-confirmed", now.Add(time.Hour), now.Add(time.Second)
	tx.Completed = []eventstore.CompletedSpan{{Span: 0, Endpoint: "reserve", Compensable: true}}
	if err := s.Transition(ctx, tx, &eventstore.Tryout{Index: 1, Kind: "process", Endpoint: "reserve", Outcome: "paused", StartedAt: now}); err != nil {
		t.Fatalf("transition: %v", err)
	}
	loaded, err := s.LoadTransaction(ctx, scope, tx.TxID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(loaded, tx) {
		t.Fatalf("new saga\n got %+v\nwant %+v", loaded, tx)
	}
	if tries, err := s.Tryouts(ctx, scope, tx.TxID); err != nil || len(tries) != 2 || tries[1].Outcome != "paused" {
		t.Fatalf("tryouts %+v, %v", tries, err)
	}
	if err := s.Freeze(ctx, tx, "disabled"); err != nil {
		t.Fatal(err)
	}
	frozen, err = s.GetFrozen(ctx, scope, tx.TxID)
	if err != nil || frozen.TraceID != tx.TraceID || frozen.TraceParent != tx.TraceParent || frozen.PauseEvent != tx.PauseEvent ||
		!frozen.LifetimeStart.Equal(now) {
		t.Fatalf("frozen new saga: %+v, %v", frozen, err)
	}
}

// TestMigrateWrongColumnType: a column of the schema that exists with
// another type is not touched; the store fails to open naming table,
// column, found and wanted type, and adds nothing.
func TestMigrateWrongColumnType(t *testing.T) {
	hosts, ks := testenv.CassandraKeyspace(t)
	admin := adminSession(t, hosts)
	createV1(t, admin, ks)
	if err := admin.Query("ALTER TABLE " + ks + ".es_transaction ADD trace_id int").Exec(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := cassandra.New(ctx, migrateConfig(hosts, ks))
	if err == nil {
		_ = s.Close()
		t.Fatal("New succeeded on a trace_id int column")
	}
	var cte *cassandra.ColumnTypeError
	if !errors.As(err, &cte) || !errors.Is(err, cassandra.ErrSchemaMismatch) {
		t.Fatalf("err %v (%T), want a ColumnTypeError", err, err)
	}
	if *cte != (cassandra.ColumnTypeError{Keyspace: ks, Table: "es_transaction", Column: "trace_id", Found: "int", Want: "text"}) {
		t.Fatalf("error %+v", *cte)
	}
	want := fmt.Sprintf("table %s.es_transaction: column trace_id has type int, want text", ks)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	if _, err := cassandra.MigrationCQLWithConfig(ctx, migrateConfig(hosts, ks)); !errors.As(err, &cte) {
		t.Fatalf("MigrationCQL: %v", err)
	}
	cols := columnsOf(t, admin, ks, cassandra.TableTransaction)
	if _, ok := cols["pause_event"]; ok || cols["trace_id"] != "int" {
		t.Fatalf("the failed upgrade changed the table: %v", cols)
	}
}

// TestMigrateConcurrently: several instances starting at once on the same
// first-release keyspace all open, and the tables end up complete.
func TestMigrateConcurrently(t *testing.T) {
	hosts, ks := testenv.CassandraKeyspace(t)
	admin := adminSession(t, hosts)
	createV1(t, admin, ks)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const n = 3
	stores := make([]*cassandra.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = cassandra.New(ctx, migrateConfig(hosts, ks))
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d: %v", i, err)
		} else {
			t.Cleanup(func() { _ = stores[i].Close() })
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if pending, err := cassandra.MigrationCQLWithConfig(ctx, migrateConfig(hosts, ks)); err != nil || len(pending) > 0 {
		t.Fatalf("after the concurrent upgrades: pending %q, %v", pending, err)
	}
	scope := storetest.UniqueScope(t)
	for i, s := range stores {
		tx := eventstore.Transaction{Scope: scope, TxID: fmt.Sprintf("tx-%d", i), State: eventstore.StateStarted, Version: 1, TraceID: "0af7651916cd43dd8448eb211c80319c", PauseEvent: "e"}
		if err := s.CreateTransaction(ctx, tx, nil); err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
	}
}

// TestMigrationCQLNewKeyspace: on a keyspace that does not exist the
// pending statements are the whole schema; on one with some tables
// missing, their CREATE statements.
func TestMigrationCQLNewKeyspace(t *testing.T) {
	hosts, ks := testenv.CassandraKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := migrateConfig(hosts, ks+"_x")
	pending, err := cassandra.MigrationCQLWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	all, err := cassandra.SchemaStatements(cfg.Keyspace, cfg.Replication)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pending, all) {
		t.Fatalf("missing keyspace: %d statements pending, want the %d of the schema", len(pending), len(all))
	}

	admin := adminSession(t, hosts)
	if err := admin.Query("CREATE TABLE " + ks + ".es_transaction_tryout (region text, cluster text, service_name text, transaction_id text, tryout_index int, PRIMARY KEY ((region, cluster, service_name, transaction_id), tryout_index))").Exec(); err != nil {
		t.Fatal(err)
	}
	pending, err = cassandra.MigrationCQLWithConfig(ctx, migrateConfig(hosts, ks))
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 10+11 || !strings.HasPrefix(pending[0], "CREATE TABLE IF NOT EXISTS "+ks+".es_transaction (") ||
		pending[1] != "ALTER TABLE "+ks+".es_transaction_tryout ADD span int" {
		t.Fatalf("pending:\n%s", strings.Join(pending, "\n"))
	}
}
