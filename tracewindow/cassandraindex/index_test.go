package cassandraindex_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/tracewindow/cassandraindex"
	"github.com/stacksaga-go/stacksaga/tracewindow/indextest"
)

// open returns an index on a fresh keyspace (tables created by New).
func open(t *testing.T, opts ...cassandraindex.Option) (*cassandraindex.Index, cassandra.Config) {
	t.Helper()
	hosts, ks := testenv.CassandraKeyspace(t)
	cfg := cassandra.Config{ContactPoints: hosts, Keyspace: ks}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	idx, err := cassandraindex.New(ctx, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idx.Close() })
	return idx, cfg
}

func flush(t *testing.T, idx *cassandraindex.Index) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := idx.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := idx.Stats(); s.Failed > 0 || s.Dropped > 0 {
		t.Fatalf("index writes failed: %+v", s)
	}
}

func TestConformance(t *testing.T) {
	idx, _ := open(t)
	n := 0
	indextest.Run(t, func(t *testing.T) indextest.Subject {
		n++
		return indextest.Subject{
			Index: idx, Sync: func(t *testing.T) { flush(t, idx) },
			Scope: eventstore.Scope{Region: "eu", Cluster: "c1", Service: testenv.UniqueName(t, "svc")},
		}
	})
}

// TestScanLimitsResume: with tiny scan limits a page stops early with a
// cursor, and paging on still lists every saga exactly once.
func TestScanLimitsResume(t *testing.T) {
	idx, _ := open(t, cassandraindex.WithScanLimits(4, 2))
	scope := eventstore.Scope{Region: "eu", Cluster: "c1", Service: "orders"}
	var want []string
	for i := range 20 {
		at := indextest.Base.Add(time.Duration(i) * 23 * time.Minute)
		st := eventstore.StateCompleted
		if i%4 == 0 {
			st = eventstore.StateCompensated
			want = append([]string{indextest.ID(t, at)}, want...)
			idx.Observe(scope, tracewindow.Entry{TxID: want[0], Domain: "order", State: st, UpdatedAt: at})
			continue
		}
		idx.Observe(scope, tracewindow.Entry{TxID: indextest.ID(t, at), Domain: "order", State: st, UpdatedAt: at})
	}
	flush(t, idx)
	q := tracewindow.Query{Scope: scope, Domain: "order", From: indextest.Base.Add(-10 * time.Hour), To: indextest.Base.Add(10 * time.Hour),
		States: []eventstore.State{eventstore.StateCompensated}, Limit: 3}
	var got []string
	short := 0
	for pages := 0; ; pages++ {
		if pages > 200 {
			t.Fatal("no end")
		}
		p, err := idx.Recent(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if p.Scanned > 4 {
			t.Fatalf("scanned %d rows, limit 4", p.Scanned)
		}
		if p.Next != "" && len(p.Entries) < q.Limit {
			short++
		}
		for _, e := range p.Entries {
			got = append(got, e.TxID)
		}
		if p.Next == "" {
			break
		}
		q.After = p.Next
	}
	if len(got) != len(want) {
		t.Fatalf("got %d sagas, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("at %d: %s want %s", i, got[i], want[i])
		}
	}
	if short == 0 {
		t.Fatal("no page stopped early: the limits were not exercised")
	}
}

// TestWriteCost: a saga's transitions observed within one flush interval
// cost one row in one batch; the domain row is written once per process.
func TestWriteCost(t *testing.T) {
	idx, _ := open(t, cassandraindex.WithFlushInterval(time.Hour))
	scope := eventstore.Scope{Region: "eu", Cluster: "c1", Service: "orders"}
	before := idx.Stats()
	const sagas, transitions = 10, 6
	for i := range sagas {
		at := indextest.Base.Add(time.Duration(i) * time.Second)
		id := indextest.ID(t, at)
		for k := range transitions {
			idx.Observe(scope, tracewindow.Entry{TxID: id, Domain: "order", State: eventstore.StateInProgress, Span: k, UpdatedAt: at.Add(time.Duration(k) * time.Millisecond)})
		}
	}
	flush(t, idx)
	s := idx.Stats()
	if got := s.Rows - before.Rows; got != sagas {
		t.Errorf("rows written %d, want %d (one per saga)", got, sagas)
	}
	if got := s.Batches - before.Batches; got != 1 {
		t.Errorf("batches %d, want 1 (one partition)", got)
	}
	if got := s.Writes - before.Writes; got != 1 {
		t.Errorf("single writes %d, want 1 (the domain row)", got)
	}
	if s.Coalesced != sagas*(transitions-1) {
		t.Errorf("coalesced %d, want %d", s.Coalesced, sagas*(transitions-1))
	}
	p, err := idx.Recent(context.Background(), tracewindow.Query{Scope: scope, Domain: "order", From: indextest.Base, To: indextest.Base.Add(time.Minute), Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range p.Entries {
		if e.Span != transitions-1 {
			t.Fatalf("%s: span %d, want the latest %d", e.TxID, e.Span, transitions-1)
		}
	}
	t.Logf("index cost: %d sagas x %d transitions -> %d rows, %d batches", sagas, transitions, s.Rows-before.Rows, s.Batches-before.Batches)
}

// TestWithoutSchemaMissingTable: a read-only index on a keyspace without
// the tables says so.
func TestWithoutSchemaMissingTable(t *testing.T) {
	hosts, ks := testenv.CassandraKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	idx, err := cassandraindex.New(ctx, cassandra.Config{ContactPoints: hosts, Keyspace: ks}, cassandraindex.WithoutSchema())
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	_, err = idx.Domains(ctx, eventstore.Scope{Region: "eu", Cluster: "c1", Service: "orders"})
	if !errors.Is(err, cassandraindex.ErrNoTable) {
		t.Fatalf("err %v, want ErrNoTable", err)
	}
}

// TestCloseFlushes: Close writes what is queued.
func TestCloseFlushes(t *testing.T) {
	idx, cfg := open(t, cassandraindex.WithFlushInterval(time.Hour))
	scope := eventstore.Scope{Region: "eu", Cluster: "c1", Service: "orders"}
	id := indextest.ID(t, indextest.Base)
	idx.Observe(scope, tracewindow.Entry{TxID: id, Domain: "order", State: eventstore.StateCompleted, UpdatedAt: indextest.Base})
	if err := idx.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ro, err := cassandraindex.New(ctx, cfg, cassandraindex.WithoutSchema())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	p, err := ro.Recent(ctx, tracewindow.Query{Scope: scope, Domain: "order", From: indextest.Base, To: indextest.Base, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 1 || p.Entries[0].TxID != id {
		t.Fatalf("after Close: %+v", p.Entries)
	}
}

// TestUpgradeAddsMissingColumns: index tables that lack columns of
// SchemaCQL (created by an older definition) get them at New, and the
// index writes and lists through them; a column of another type fails New
// with the table, the column and both types.
func TestUpgradeAddsMissingColumns(t *testing.T) {
	hosts, ks := testenv.CassandraKeyspace(t)
	cfg := cassandra.Config{ContactPoints: hosts, Keyspace: ks}
	cl, err := cfg.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := cassandra.Connect(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, stmt := range []string{
		"CREATE TABLE " + ks + "." + cassandraindex.TableByBucket + ` (region text, cluster text, service_name text, domain text, bucket timestamp,
		  transaction_id text, running_status text, span int, kind text, updated_at timestamp,
		  PRIMARY KEY ((region, cluster, service_name, domain, bucket), transaction_id)) WITH CLUSTERING ORDER BY (transaction_id DESC)`,
		"CREATE TABLE " + ks + "." + cassandraindex.TableDomains + ` (region text, cluster text, service_name text, domain text,
		  PRIMARY KEY ((region, cluster, service_name), domain))`,
	} {
		if err := admin.Query(stmt).ExecContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pending, err := cassandra.MissingColumnsCQL(ctx, admin, cassandraindex.SchemaCQL(ks))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ALTER TABLE " + ks + ".es_transactions_by_bucket ADD endpoint text",
		"ALTER TABLE " + ks + ".es_transactions_by_bucket ADD error text",
		"ALTER TABLE " + ks + ".es_transactions_by_bucket ADD definition_version int",
		"ALTER TABLE " + ks + ".es_transaction_domains ADD seen_at timestamp",
	}
	if !slices.Equal(pending, want) {
		t.Fatalf("pending %q, want %q", pending, want)
	}

	idx, err := cassandraindex.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idx.Close() })
	if pending, err := cassandra.MissingColumnsCQL(ctx, admin, cassandraindex.SchemaCQL(ks)); err != nil || len(pending) > 0 {
		t.Fatalf("after New: pending %q, %v", pending, err)
	}
	scope := eventstore.Scope{Region: "eu", Cluster: "c1", Service: "orders"}
	id := indextest.ID(t, indextest.Base)
	idx.Observe(scope, tracewindow.Entry{TxID: id, Domain: "order", State: eventstore.StateFailed, Endpoint: "charge", Error: "declined", Definition: 2, UpdatedAt: indextest.Base})
	flush(t, idx)
	p, err := idx.Recent(ctx, tracewindow.Query{Scope: scope, Domain: "order", From: indextest.Base, To: indextest.Base, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 1 || p.Entries[0].Endpoint != "charge" || p.Entries[0].Error != "declined" || p.Entries[0].Definition != 2 {
		t.Fatalf("listed %+v", p.Entries)
	}

	if err := admin.Query("DROP TABLE " + ks + "." + cassandraindex.TableDomains).ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.Query("CREATE TABLE " + ks + "." + cassandraindex.TableDomains + " (region text, cluster text, service_name text, domain text, seen_at text, PRIMARY KEY ((region, cluster, service_name), domain))").ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	bad, err := cassandraindex.New(ctx, cfg)
	if err == nil {
		_ = bad.Close()
		t.Fatal("New accepted seen_at text")
	}
	var cte *cassandra.ColumnTypeError
	if !errors.As(err, &cte) || !strings.Contains(err.Error(), "table "+ks+".es_transaction_domains: column seen_at has type text, want timestamp") {
		t.Fatalf("err %v", err)
	}
}

// TestInvalidConfig: the index connects with the event store's settings,
// validated the same way: a bad one fails New, naming its key, before
// connecting.
func TestInvalidConfig(t *testing.T) {
	_, err := cassandraindex.New(t.Context(), cassandra.Config{ContactPoints: []string{"127.0.0.1:1"}, ReadConsistency: "ONE", Keyspace: "Bad-Keyspace"})
	if !errors.Is(err, cassandra.ErrInvalidConfig) || !strings.Contains(err.Error(), "stacksaga.cassandra.read-consistency-level") ||
		!strings.Contains(err.Error(), "stacksaga.cassandra.keyspace") {
		t.Fatalf("err %v", err)
	}
}
