package writeprotect_test

import (
	"context"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// cassandraBackend gives a test a Cassandra store on a fresh keyspace
// (dropped at the end) with the schema applied. Leases expire in real
// time, so the scenarios use a short one.
func cassandraBackend(t testing.TB) (*backend, *cassandra.Store) {
	t.Helper()
	hosts, keyspace := testenv.CassandraKeyspace(t)
	cfg := cassandra.Config{
		ContactPoints:  hosts,
		Keyspace:       keyspace,
		Replication:    cassandra.SimpleReplication(1),
		RequestTimeout: 20 * time.Second, // LWTs on a small shared machine
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cassandra.ApplySchemaWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s, err := cassandra.New(ctx, cfg, cassandra.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &backend{name: "cassandra", store: s, lease: 2 * time.Second}, s
}

func TestCassandra(t *testing.T) {
	b, _ := cassandraBackend(t)
	runScenarios(t, scale{concurrentTxs: 10, instances: 4, raceTxs: 20}, func(*testing.T) *backend { return b })
}

// cassandraCounter reads the store's own statement counters.
type cassandraCounter struct{ s *cassandra.Store }

func (c cassandraCounter) reset() { c.s.ResetStats() }
func (c cassandraCounter) counts() stmts {
	st := c.s.Stats()
	return stmts{Reads: st.Reads, Writes: st.Writes + st.Batches, LWTs: st.LWTs}
}

// The statements per step of the package documentation, as Cassandra
// counts them.
func TestStatementsCassandra(t *testing.T) {
	b, s := cassandraBackend(t)
	checkStatements(t, b, cassandraCounter{s})
}
