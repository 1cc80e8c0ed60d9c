package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// testConfig returns a configuration for a fresh keyspace (dropped at the
// end of the test) with the schema applied.
func testConfig(t *testing.T) cassandra.Config {
	t.Helper()
	hosts, keyspace := testenv.CassandraKeyspace(t)
	cfg := cassandra.Config{
		ContactPoints:  hosts,
		Keyspace:       keyspace,
		Replication:    cassandra.SimpleReplication(1),
		RequestTimeout: 20 * time.Second, // LWTs and schema changes on a small shared machine
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cassandra.ApplySchemaWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newStore(t *testing.T, cfg cassandra.Config) *cassandra.Store {
	t.Helper()
	// Creating a whole schema (CreateSchema) is a dozen DDL statements,
	// each awaiting schema agreement: over a minute on a loaded node.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := cassandra.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	cfg := testConfig(t)
	storetest.Run(t, func(t *testing.T) eventstore.Store { return newStore(t, cfg) }, storetest.WithFeatures(storetest.Features{BlindCreate: true}))
}

// The statement counts the benchmarks rely on: one round trip per
// create and per transition (no lightweight transaction), the tryout in the
// same batch.
func TestStatementCounts(t *testing.T) {
	cfg := testConfig(t)
	s := newStore(t, cfg)
	ctx := t.Context()
	scope := storetest.UniqueScope(t)
	tx := eventstore.Transaction{Scope: scope, TxID: "tx-count", Domain: "d", State: eventstore.StateStarted, Version: 1}

	type step struct {
		name string
		do   func() error
		want cassandra.Stats
	}
	steps := []step{
		{"CreateTransaction with first tryout", func() error {
			return s.CreateTransaction(ctx, tx, &eventstore.Tryout{Index: 0, Outcome: "sent"})
		}, cassandra.Stats{Batches: 1, Tables: map[string]cassandra.TableStats{
			cassandra.TableTransaction: {Writes: 1, Batched: 1}, cassandra.TableTransactionTryout: {Writes: 1, Batched: 1}}}},
		{"CreateTransaction without tryout", func() error {
			other := tx
			other.TxID = "tx-count-2"
			return s.CreateTransaction(ctx, other, nil)
		}, cassandra.Stats{Writes: 1, Tables: map[string]cassandra.TableStats{cassandra.TableTransaction: {Writes: 1}}}},
		{"CreateTransactionWatched", func() error {
			other := tx
			other.TxID = "tx-count-3"
			dog := eventstore.RecoveryEntry{RecoveryPath: eventstore.RecoveryPath{Day: time.Now(), MinuteOfDay: 1, InstanceID: "i", Bucket: 1}, TxID: other.TxID}
			other.RestorePath = &dog.RecoveryPath
			return s.CreateTransactionWatched(ctx, other, nil, dog)
		}, cassandra.Stats{Batches: 1, Tables: map[string]cassandra.TableStats{
			cassandra.TableTransaction: {Writes: 1, Batched: 1}, cassandra.TableRecoveryByInstance: {Writes: 1, Batched: 1}}}},
		{"Transition with tryout", func() error {
			tx.Version, tx.State = 2, eventstore.StateInProgress
			return s.Transition(ctx, tx, &eventstore.Tryout{Index: 1, Outcome: "ok"})
		}, cassandra.Stats{Batches: 1, Tables: map[string]cassandra.TableStats{
			cassandra.TableTransaction: {Writes: 1, Batched: 1}, cassandra.TableTransactionTryout: {Writes: 1, Batched: 1}}}},
		// The delete of its version's tryout rides in the same batch.
		{"Transition without tryout", func() error { return s.Transition(ctx, tx, nil) },
			cassandra.Stats{Batches: 1, Tables: map[string]cassandra.TableStats{
				cassandra.TableTransaction: {Writes: 1, Batched: 1}, cassandra.TableTransactionTryout: {Writes: 1, Batched: 1}}}},
		// A raised Fence adds the range delete of the tryouts it fenced.
		{"Transition with a Fence", func() error {
			tx.Version, tx.Fence = 3, 1
			return s.Transition(ctx, tx, &eventstore.Tryout{Index: 3, Outcome: "ok"})
		}, cassandra.Stats{Batches: 1, Tables: map[string]cassandra.TableStats{
			cassandra.TableTransaction: {Writes: 1, Batched: 1}, cassandra.TableTransactionTryout: {Writes: 2, Batched: 2}}}},
		{"LoadTransaction", func() error { _, err := s.LoadTransaction(ctx, scope, tx.TxID); return err },
			cassandra.Stats{Reads: 1, Tables: map[string]cassandra.TableStats{cassandra.TableTransaction: {Reads: 1}}}},
		{"TransactionState", func() error { _, err := s.TransactionState(ctx, scope, tx.TxID); return err },
			cassandra.Stats{Reads: 1, Tables: map[string]cassandra.TableStats{cassandra.TableTransaction: {Reads: 1}}}},
		{"InsertMarker", func() error {
			_, _, err := s.InsertMarker(ctx, eventstore.Marker{MarkerKey: eventstore.MarkerKey{Scope: scope, TxID: tx.TxID, Kind: "process", Site: "w"}, State: eventstore.MarkerLeased, Owner: "o"}, 5*time.Second)
			return err
		}, cassandra.Stats{LWTs: 1, Tables: map[string]cassandra.TableStats{cassandra.TableExecutionMarkers: {LWTs: 1}}}},
		{"DeleteMarkers", func() error { return s.DeleteMarkers(ctx, scope, tx.TxID) },
			cassandra.Stats{Writes: 1, Tables: map[string]cassandra.TableStats{cassandra.TableExecutionMarkers: {Writes: 1}}}},
		{"RegisterRecovery", func() error {
			return s.RegisterRecovery(ctx, scope, eventstore.RecoveryEntry{RecoveryPath: eventstore.RecoveryPath{Day: time.Now(), MinuteOfDay: 1, InstanceID: "i", Bucket: 1}, TxID: tx.TxID})
		}, cassandra.Stats{Batches: 1, Tables: map[string]cassandra.TableStats{
			cassandra.TableDaysByYear: {Writes: 1, Batched: 1}, cassandra.TableWindowsByDay: {Writes: 1, Batched: 1},
			cassandra.TableInstancesByWindow: {Writes: 1, Batched: 1}, cassandra.TableBucketsByInstance: {Writes: 1, Batched: 1},
			cassandra.TableRecoveryByInstance: {Writes: 1, Batched: 1}}}},
	}
	for _, st := range steps {
		s.ResetStats()
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := s.Stats()
		if fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Errorf("%s: statements\n got %+v\nwant %+v", st.name, got, st.want)
		}
	}
}

// Round trip of every field through the real column types, including the
// frozen tuple list and map, and the empty values written for absent ones.
func TestEmptyValuesAreNotNull(t *testing.T) {
	cfg := testConfig(t)
	s := newStore(t, cfg)
	ctx := t.Context()
	scope := storetest.UniqueScope(t)
	tx := eventstore.Transaction{Scope: scope, TxID: "tx-empty", State: eventstore.StateStarted}
	if err := s.CreateTransaction(ctx, tx, &eventstore.Tryout{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadTransaction(ctx, scope, tx.TxID)
	if err != nil {
		t.Fatal(err)
	}
	if got.RestorePath != nil || got.Payload != nil || got.Hints != nil || got.Completed != nil || !got.CreatedAt.IsZero() {
		t.Fatalf("empty saga read back %+v", got)
	}
}

func TestNewFailsOnMissingKeyspace(t *testing.T) {
	hosts := testenv.CassandraHosts(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cassandra.New(ctx, cassandra.Config{ContactPoints: hosts, Keyspace: testenv.UniqueName(t, "absent")})
	if err == nil {
		t.Fatal("New on a keyspace that does not exist succeeded")
	}
}

func TestNewCreatesSchema(t *testing.T) {
	hosts := testenv.CassandraHosts(t)
	keyspace := testenv.UniqueName(t, "created")
	cfg := cassandra.Config{ContactPoints: hosts, Keyspace: keyspace, Replication: cassandra.SimpleReplication(1), CreateSchema: true, RequestTimeout: 30 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := cassandra.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		if err := dropKeyspace(cfg); err != nil {
			t.Errorf("drop keyspace %s: %v", keyspace, err)
		}
	})
	scope := storetest.UniqueScope(t)
	if _, err := s.LoadTransaction(ctx, scope, "x"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("LoadTransaction on the new schema: %v", err)
	}
	// Applying again is a no-op.
	if err := cassandra.ApplySchemaWithConfig(ctx, cfg); err != nil {
		t.Fatalf("second ApplySchema: %v", err)
	}
}

func dropKeyspace(cfg cassandra.Config) error {
	cl := gocql.NewCluster(cfg.ContactPoints...)
	cl.Timeout = time.Minute
	session, err := cl.CreateSession()
	if err != nil {
		return err
	}
	defer session.Close()
	return session.Query("DROP KEYSPACE IF EXISTS " + cfg.Keyspace).Exec()
}

// A frozen copy written by a release before the fence (at the server's
// time, later than any saga write timestamp) is still removed by Unfreeze,
// and a later Freeze is not shadowed by that delete.
func TestUnfreezeRemovesCopyAtServerTime(t *testing.T) {
	cfg := testConfig(t)
	s := newStore(t, cfg)
	ctx := t.Context()
	scope := storetest.UniqueScope(t)
	created := time.Now().Add(-25 * time.Hour).UTC()
	tx := eventstore.Transaction{Scope: scope, TxID: "tx-legacy", Domain: "d", State: eventstore.StateDisabled, Version: 5, CreatedAt: created}
	cl := gocql.NewCluster(cfg.ContactPoints...)
	cl.Keyspace, cl.Timeout = cfg.Keyspace, time.Minute
	session, err := cl.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	// What the old Freeze wrote: no USING TIMESTAMP.
	if err := session.Query(`INSERT INTO es_frozen_transaction (region, cluster, service_name, transaction_id, version, running_status, created_at, reason, frozen_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		scope.Region, scope.Cluster, scope.Service, tx.TxID, tx.Version, string(tx.State), created, "old release", time.Now()).ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetFrozen(ctx, scope, tx.TxID); err != nil {
		t.Fatalf("GetFrozen of the old copy: %v", err)
	}
	restore := tx
	restore.State, restore.Version, restore.Fence = eventstore.StateRetryPending, tx.Version+1, tx.Fence+1
	if err := s.Unfreeze(ctx, restore); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetFrozen(ctx, scope, tx.TxID); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("GetFrozen after Unfreeze of an old release's copy: %v, want ErrNotFound", err)
	}
	again := restore
	again.State, again.Version, again.Fence = eventstore.StateDisabled, restore.Version+1, restore.Fence+1
	if err := s.Freeze(ctx, again, "disabled again"); err != nil {
		t.Fatal(err)
	}
	if f, err := s.GetFrozen(ctx, scope, tx.TxID); err != nil || f.Reason != "disabled again" {
		t.Fatalf("GetFrozen after a later Freeze: %+v, %v; want the new copy", f, err)
	}
}
