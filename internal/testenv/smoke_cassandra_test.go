package testenv_test

import (
	"context"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

func session(t *testing.T, hosts []string, keyspace string) *gocql.Session {
	t.Helper()
	cluster := gocql.NewCluster(hosts...)
	cluster.Keyspace = keyspace
	cluster.Consistency = gocql.LocalQuorum
	cluster.SerialConsistency = gocql.LocalSerial
	cluster.Timeout = 30 * time.Second
	cluster.Logger = gocql.NewLogger(gocql.LogLevelNone)
	s, err := cluster.CreateSession()
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestCassandraSmoke proves the node is a real Cassandra with working
// lightweight transactions and TTLs: the pattern writeprotect's STRICT mode
// relies on (INSERT … IF NOT EXISTS USING TTL, lease expiry, re-acquire).
func TestCassandraSmoke(t *testing.T) {
	hosts, keyspace := testenv.CassandraKeyspace(t)
	s := session(t, hosts, keyspace)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var version string
	if err := s.Query("SELECT release_version FROM system.local").ScanContext(ctx, &version); err != nil {
		t.Fatalf("release_version: %v", err)
	}
	t.Logf("Cassandra %s, keyspace %s", version, keyspace)

	if err := s.Query(`CREATE TABLE lease (id text PRIMARY KEY, owner text)`).ExecContext(ctx); err != nil {
		t.Fatalf("create table: %v", err)
	}
	insert := func(owner string) (bool, map[string]any) {
		t.Helper()
		existing := map[string]any{}
		applied, err := s.Query(`INSERT INTO lease (id, owner) VALUES (?, ?) IF NOT EXISTS USING TTL 2`, "tx-1", owner).
			MapScanCASContext(ctx, existing)
		if err != nil {
			t.Fatalf("insert owner %s: %v", owner, err)
		}
		return applied, existing
	}

	if applied, _ := insert("a"); !applied {
		t.Fatal("first INSERT IF NOT EXISTS was not applied")
	}
	applied, existing := insert("b")
	if applied {
		t.Fatal("second INSERT IF NOT EXISTS was applied over a live row")
	}
	if existing["owner"] != "a" || existing["id"] != "tx-1" {
		t.Fatalf("second INSERT returned existing row %v, want id=tx-1 owner=a", existing)
	}

	var ttl int
	if err := s.Query(`SELECT TTL(owner) FROM lease WHERE id = ?`, "tx-1").ScanContext(ctx, &ttl); err != nil {
		t.Fatalf("select ttl: %v", err)
	}
	if ttl < 1 || ttl > 2 {
		t.Fatalf("TTL(owner) = %d, want 1..2", ttl)
	}

	// Poll (bounded) until the row expires.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := s.Query(`SELECT COUNT(*) FROM lease WHERE id = ?`, "tx-1").ScanContext(ctx, &n); err != nil {
			t.Fatalf("count: %v", err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("row with TTL 2 still present after 20s")
		}
		time.Sleep(200 * time.Millisecond)
	}

	if applied, existing := insert("c"); !applied {
		t.Fatalf("INSERT IF NOT EXISTS after expiry was not applied (existing %v)", existing)
	}
	var owner string
	if err := s.Query(`SELECT owner FROM lease WHERE id = ?`, "tx-1").ScanContext(ctx, &owner); err != nil || owner != "c" {
		t.Fatalf("owner after re-insert = %q, %v; want c", owner, err)
	}
}
