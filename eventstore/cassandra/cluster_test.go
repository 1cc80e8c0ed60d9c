package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// clusterKeyspace creates on the three-node cluster a fresh keyspace
// replicated three times in the cluster's data centre, with the tables
// named (all of the schema when none is), and drops it when t ends.
func clusterKeyspace(t *testing.T, c testenv.CassandraCluster, tables ...string) string {
	t.Helper()
	keyspace := testenv.UniqueName(t, "ks")
	stmts, err := cassandra.SchemaStatements(keyspace, cassandra.NetworkReplication(map[string]int{c.DC: 3}))
	if err != nil {
		t.Fatal(err)
	}
	var run []string
	for _, stmt := range stmts {
		keep := strings.HasPrefix(stmt, "CREATE KEYSPACE") || len(tables) == 0
		for _, table := range tables {
			keep = keep || strings.Contains(stmt, keyspace+"."+table+" (")
		}
		if keep {
			run = append(run, stmt)
		}
	}
	ddl(t, c.Hosts, run...)
	t.Cleanup(func() { ddl(t, c.Hosts, "DROP KEYSPACE IF EXISTS "+keyspace) })
	return keyspace
}

// ddl runs schema statements on hosts, each awaiting schema agreement.
func ddl(t *testing.T, hosts []string, stmts ...string) {
	t.Helper()
	cl := gocql.NewCluster(hosts...)
	cl.Timeout, cl.ConnectTimeout = time.Minute, 10*time.Second
	cl.Logger = gocql.NewLogger(gocql.LogLevelNone)
	s, err := cl.CreateSession()
	if err != nil {
		t.Fatalf("cassandra session on %v: %v", hosts, err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, stmt := range stmts {
		if err := s.Query(stmt).ExecContext(ctx); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		if err := s.AwaitSchemaAgreement(ctx); err != nil {
			t.Fatalf("schema agreement after %s: %v", stmt, err)
		}
	}
}

// The startup check accepts the defaults (LOCAL_QUORUM, LOCAL_SERIAL,
// datacenter1) on a keyspace replicated three times on the three-node
// cluster, and refuses a local-datacenter the cluster lacks, naming it.
func TestClusterConsistencyCheck(t *testing.T) {
	c := testenv.CassandraClusterNodes(t)
	keyspace := clusterKeyspace(t, c, "none") // the keyspace alone
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := cassandra.New(ctx, cassandra.Config{ContactPoints: c.Hosts, Keyspace: keyspace, LocalDatacenter: c.DC})
	if err != nil {
		t.Fatalf("defaults refused on three nodes: %v", err)
	}
	_ = s.Close()
	_, err = cassandra.New(ctx, cassandra.Config{ContactPoints: c.Hosts, Keyspace: keyspace, LocalDatacenter: "dc-elsewhere"})
	if !errors.Is(err, cassandra.ErrInvalidConfig) {
		t.Fatalf("local-datacenter dc-elsewhere: err = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{`stacksaga.cassandra.local-datacenter: "dc-elsewhere" is not a data centre of the cluster (its nodes are in ` + c.DC + `)`,
		`stacksaga.cassandra.read-consistency-level: LOCAL_QUORUM needs replicas in local-datacenter "dc-elsewhere"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// On the single node, a keyspace replicated three times cannot meet
// LOCAL_QUORUM (two of three replicas; the node holds one): New refuses
// it, naming the level's key and value, the replication and the nodes,
// instead of failing every request later with Unavailable.
func TestConsistencyCheckRefusesFactorAboveNodes(t *testing.T) {
	hosts := testenv.CassandraHosts(t)
	keyspace := testenv.UniqueName(t, "ks")
	ddl(t, hosts, "CREATE KEYSPACE "+keyspace+" WITH replication = {'class': 'NetworkTopologyStrategy', 'datacenter1': 3}")
	t.Cleanup(func() { ddl(t, hosts, "DROP KEYSPACE IF EXISTS "+keyspace) })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := cassandra.New(ctx, cassandra.Config{ContactPoints: hosts, Keyspace: keyspace})
	if !errors.Is(err, cassandra.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{
		"stacksaga.cassandra.read-consistency-level: LOCAL_QUORUM needs 2 replicas, but keyspace " + keyspace +
			" has replication NetworkTopologyStrategy:datacenter1=3 and data centre \"datacenter1\" has 1 node(s) in datacenter1",
		"stacksaga.cassandra.write-consistency-level: LOCAL_QUORUM", "stacksaga.cassandra.serial-consistency-level: LOCAL_SERIAL",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// onlyHost sends every request to one node (the coordinator the test
// keeps running) while the driver still knows the others.
type onlyHost struct {
	gocql.HostSelectionPolicy
	ip string
}

func (p onlyHost) Pick(q gocql.ExecutableStatement) gocql.NextHost {
	next := p.HostSelectionPolicy.Pick(q)
	return func() gocql.SelectedHost {
		for {
			h := next()
			if h == nil || h.Info() == nil || h.Info().ConnectAddress().String() == p.ip {
				return h
			}
		}
	}
}

// clusterStore opens a store on keyspace whose requests all go to node 0,
// trying each LWT tries times.
func clusterStore(t *testing.T, c testenv.CassandraCluster, keyspace string, tries int) *cassandra.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := cassandra.New(ctx, cassandra.Config{
		ContactPoints: c.Hosts, Keyspace: keyspace, LocalDatacenter: c.DC,
		RequestTimeout: 30 * time.Second, // above the nodes' CAS (4s) and write (8s) timeouts
	}, cassandra.WithLWTAttempts(tries), cassandra.WithClusterConfig(func(cl *gocql.ClusterConfig) {
		cl.PoolConfig.HostSelectionPolicy = onlyHost{gocql.RoundRobinHostPolicy(), c.Nodes[0].Host}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Every outcome of a lightweight transaction, forced on the three-node
// cluster (replication factor 3, LOCAL_SERIAL: two replicas must take part)
// through a coordinator that stays up while the two other nodes are
// paused (SIGSTOP):
//   - applied, and not applied (the existing marker reported);
//   - a WriteTimeout of type CAS: the coordinator still believes the
//     paused nodes alive, sends them the Paxos round and times out; the
//     store reports eventstore.ErrOutcomeUnknown wrapping it;
//   - Unavailable, once its failure detector has convicted them: the
//     store retries, then reports ErrOutcomeUnknown wrapping it;
//   - after the nodes resume, the same insert (the same owner) learns the
//     outcome: applied, or refused by its own earlier write.
func TestClusterLWTOutcomes(t *testing.T) {
	c := testenv.CassandraClusterNodes(t)
	if len(c.Nodes) < 3 {
		t.Fatalf("the cluster has %d nodes, want 3", len(c.Nodes))
	}
	keyspace := clusterKeyspace(t, c, cassandra.TableExecutionMarkers)
	once := clusterStore(t, c, keyspace, 1)
	retrying := clusterStore(t, c, keyspace, 3)
	ctx := t.Context()
	scope := eventstore.Scope{Region: "r", Cluster: "c", Service: "s"}
	key := func(tx string) eventstore.MarkerKey {
		return eventstore.MarkerKey{Scope: scope, TxID: tx, Span: 1, Kind: "process", Site: "test"}
	}
	lease := func(tx, owner string) eventstore.Marker {
		return eventstore.Marker{MarkerKey: key(tx), State: eventstore.MarkerLeased, Owner: owner}
	}

	applied, _, err := once.InsertMarker(ctx, lease("t0", "a"), time.Hour)
	if err != nil || !applied {
		t.Fatalf("insert with every node up: applied %v, err %v", applied, err)
	}
	applied, found, err := once.InsertMarker(ctx, lease("t0", "b"), time.Hour)
	if err != nil || applied || found.Owner != "a" {
		t.Fatalf("second insert: applied %v, found %q, err %v; want refused, finding a", applied, found.Owner, err)
	}

	c.Nodes[1].Pause(t)
	c.Nodes[2].Pause(t)
	paused := time.Now()
	_, _, err = once.InsertMarker(ctx, lease("t1", "a"), time.Hour)
	var wt *gocql.RequestErrWriteTimeout
	if !errors.Is(err, eventstore.ErrOutcomeUnknown) || !errors.As(err, &wt) || wt.WriteType != "CAS" {
		t.Fatalf("insert %v after pausing two of three nodes: err = %v, want ErrOutcomeUnknown wrapping a WriteTimeout of type CAS", time.Since(paused).Round(time.Millisecond), err)
	}
	t.Logf("WriteTimeout CAS after %v: %v", time.Since(paused).Round(time.Millisecond), err)

	// Wait for the very thing asserted next: the coordinator's failure
	// detector convicting the paused nodes (Unavailable instead of a
	// timeout), bounded.
	deadline := time.Now().Add(3 * time.Minute)
	var un *gocql.RequestErrUnavailable
	for n := 0; ; n++ {
		_, _, err = retrying.InsertMarker(ctx, lease(fmt.Sprintf("t2-%d", n), "a"), time.Hour)
		if errors.As(err, &un) {
			break
		}
		if !errors.Is(err, eventstore.ErrOutcomeUnknown) {
			t.Fatalf("insert with two nodes paused: err = %v, want ErrOutcomeUnknown", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Unavailable %v after pausing two nodes; last: %v", time.Since(paused), err)
		}
	}
	if !errors.Is(err, eventstore.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "after 3 tries") {
		t.Fatalf("err = %v, want ErrOutcomeUnknown after 3 tries", err)
	}
	t.Logf("Unavailable (required %d, alive %d) %v after the pause: %v", un.Required, un.Alive, time.Since(paused).Round(time.Second), err)

	c.Nodes[1].Resume(t)
	c.Nodes[2].Resume(t)
	// The outcome is learnt by the same insert once a quorum answers:
	// applied, or refused by the marker the first try wrote.
	deadline = time.Now().Add(3 * time.Minute)
	for {
		applied, found, err = retrying.InsertMarker(ctx, lease("t1", "a"), time.Hour)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("insert after resuming the nodes: %v", err)
		}
	}
	if !applied && found.Owner != "a" {
		t.Fatalf("after resuming: applied %v, found %q; want applied or a's own marker", applied, found.Owner)
	}
	m, err := retrying.GetMarker(ctx, key("t1"))
	if err != nil || m.Owner != "a" || m.State != eventstore.MarkerLeased {
		t.Fatalf("marker after resuming: %+v, %v", m, err)
	}
}
