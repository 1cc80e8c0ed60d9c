package main

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// cellNames lists the names of cells.
func cellNames(cells []cellSpec) string {
	var names []string
	for _, c := range cells {
		names = append(names, c.Name)
	}
	return strings.Join(names, " ")
}

// The cluster cells are in the matrix; the node-down ones run only when
// named, since someone must stop a node for them first.
func TestClusterCellsSelection(t *testing.T) {
	all, err := selectCells(matrix(), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := cellNames(all); !strings.HasSuffix(got, "cassandra-strict-c64 cluster-relaxed-c64 cluster-strict-c64") {
		t.Errorf("default selection %s: want the every-node-up cluster cells last, and no node-down cell", got)
	}
	down, err := selectCells(matrix(), "cluster-down-*")
	if err != nil {
		t.Fatal(err)
	}
	if got := cellNames(down); got != "cluster-down-relaxed-c64 cluster-down-strict-c64" {
		t.Errorf("cluster-down-*: %s", got)
	}
	for _, c := range down {
		if !c.Cluster || !c.NodeDown || !c.Cassandra || !c.RealKafka || c.Concurrency != 64 {
			t.Errorf("%s: %+v", c.Name, c)
		}
	}
	if m := matrix()[len(matrix())-1]; !strings.Contains(m.describe(), "one node down") || !strings.Contains(m.describe(), "QUORUM") {
		t.Errorf("describe: %s", m.describe())
	}
}

// A run cannot hold both kinds of cluster cells, and the node-down cells
// cannot create a keyspace.
func TestClusterFlagsChecked(t *testing.T) {
	up, _ := selectCells(matrix(), "cluster-relaxed-c64,cluster-strict-c64")
	down, _ := selectCells(matrix(), "cluster-down-*")
	both, _ := selectCells(matrix(), "cluster-*")
	single, _ := selectCells(matrix(), "cassandra-*")
	if err := checkClusterFlags(both, false); !errors.Is(err, errClusterState) {
		t.Errorf("both kinds: %v, want errClusterState", err)
	}
	if err := checkClusterFlags(down, true); err == nil || !strings.Contains(err.Error(), "--fresh") {
		t.Errorf("node-down with --fresh: %v", err)
	}
	for _, ok := range [][]cellSpec{up, down, single} {
		if err := checkClusterFlags(ok, false); err != nil {
			t.Errorf("%s: %v", cellNames(ok), err)
		}
	}
	if err := checkClusterFlags(up, true); err != nil {
		t.Errorf("every-node-up cells with --fresh: %v", err)
	}
}

// The cluster cells check the nodes that are down against what they need,
// and the refusal names the nodes.
func TestClusterNodesChecked(t *testing.T) {
	hosts := []string{"127.0.0.1:9043", "127.0.0.2:9043", "127.0.0.3:9043"}
	up, _ := selectCells(matrix(), "cluster-relaxed-c64,cluster-strict-c64")
	down, _ := selectCells(matrix(), "cluster-down-*")
	single, _ := selectCells(matrix(), "cassandra-*")
	for _, tc := range []struct {
		name  string
		cells []cellSpec
		down  []string
		want  string // "" accepted; otherwise in the error
	}{
		{"up, all up", up, nil, ""},
		{"up, one down", up, hosts[2:], "127.0.0.3:9043"},
		{"down, one down", down, hosts[2:], ""},
		{"down, none down", down, nil, "every node accepts connections"},
		{"down, two down", down, hosts[1:], "127.0.0.2:9043, 127.0.0.3:9043"},
		{"single node cells", single, hosts[1:], ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkClusterNodes(tc.cells, hosts, tc.down)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, errClusterState) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want errClusterState naming %q", err, tc.want)
			}
		})
	}
}

// A node counts as down when its port refuses connections.
func TestDownNodes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := testenv.ClosedAddr(t)
	if got := downNodes([]string{ln.Addr().String(), closed}, 2*time.Second); len(got) != 1 || got[0] != closed {
		t.Errorf("down = %v, want [%s]", got, closed)
	}
}

// The cluster store has replication factor 3 in the data centre, QUORUM
// and SERIAL, whatever the variables say of them, and creates the schema
// only when every node is up.
func TestClusterStoreConfig(t *testing.T) {
	env := map[string]string{
		cassandra.EnvReplication: "SimpleStrategy:1", cassandra.EnvReadConsistency: "LOCAL_QUORUM",
		cassandra.EnvRequestTimeout: "7s",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	hosts := []string{"127.0.0.1:9043", "127.0.0.2:9043"}
	cfg, _, err := clusterStoreConfig(hosts, "ks", "dc9", false, lookup)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Replication
	if r.Class != cassandra.NetworkTopologyStrategy || r.DataCenters["dc9"] != 3 || len(r.DataCenters) != 1 || cfg.LocalDatacenter != "dc9" {
		t.Errorf("replication %v, local data centre %q", r, cfg.LocalDatacenter)
	}
	if cfg.ReadConsistency != cassandra.Quorum || cfg.WriteConsistency != cassandra.Quorum || cfg.SerialConsistency != cassandra.Serial {
		t.Errorf("levels %s/%s/%s", cfg.ReadConsistency, cfg.WriteConsistency, cfg.SerialConsistency)
	}
	if cfg.CreateSchema || cfg.Keyspace != "ks" || strings.Join(cfg.ContactPoints, ",") != strings.Join(hosts, ",") || cfg.RequestTimeout != 7*time.Second {
		t.Errorf("create schema %v, keyspace %q, contact points %v, timeout %v", cfg.CreateSchema, cfg.Keyspace, cfg.ContactPoints, cfg.RequestTimeout)
	}
	if cfg, _, _ = clusterStoreConfig(hosts, "ks", "dc9", true, lookup); !cfg.CreateSchema {
		t.Error("every node up: the schema is not created")
	}
}

// The cluster cells take the cluster's endpoints and keyspace (the run's
// own with --fresh), and run no floor.
func TestClusterOptions(t *testing.T) {
	o := options{kafka: "k:9092", cassandra: "c:9042", keyspace: "single", clusterKafka: "k:9192", clusterCassandra: "c:9043",
		clusterKeyspace: "clu", fresh: true, warmServices: 10}
	oc := clusterOptions(o, "abc123")
	if oc.kafka != "k:9192" || oc.cassandra != "c:9043" || oc.keyspace != "clu_abc123" || oc.cassandraCfg.Keyspace != "clu_abc123" || !oc.noFloor || oc.warmServices != 0 {
		t.Errorf("%+v", oc)
	}
	o.fresh = false
	if oc := clusterOptions(o, "abc123"); oc.keyspace != "clu" {
		t.Errorf("without --fresh: keyspace %q", oc.keyspace)
	}
}

// The flags: both cluster endpoints or neither; a keyspace name Cassandra
// takes as it is; node-down cells refused with --fresh before anything
// runs, and a cluster whose nodes do not match refused with exit 2.
func TestClusterFlags(t *testing.T) {
	var stderr bytes.Buffer
	for _, bad := range [][]string{
		{"--cluster-kafka", "127.0.0.1:9192", "--cluster-cassandra", ""},
		{"--cluster-kafka", "", "--cluster-cassandra", "127.0.0.1:9043"},
		{"--cluster-keyspace", "Bad-Name"},
	} {
		if _, err := parse(bad, &stderr); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
	closed := testenv.ClosedAddr(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cells", "cluster-*"}, "select one kind per run"},
		{[]string{"--cells", "cluster-down-*", "--fresh"}, "--fresh"},
		// Every node refuses: the node-down cells need exactly one down.
		{[]string{"--cells", "cluster-down-*"}, "2 do not accept connections"},
		{[]string{"--cells", "cluster-strict-c64"}, "2 of 2 do not accept connections"},
	} {
		stderr.Reset()
		args := append([]string{"--kafka", "", "--cassandra", "", "--cluster-kafka", closed, "--cluster-cassandra", closed + "," + closed}, tc.args...)
		if code := run(args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, %s; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// A cell counts the measured sagas that did not complete (the warm-up's
// and a saga's second terminal event aside), and the table says it for
// every cluster cell.
func TestNotCompletedCounted(t *testing.T) {
	var ts terminalStates
	ts.add("warm", eventstore.StateCompensated) // before reset: the warm-up's
	ts.reset()
	ts.add("a", eventstore.StateCompleted)
	ts.add("b", eventstore.StateCompensated)
	ts.add("b", eventstore.StateCompleted)
	ts.add("c", eventstore.StateCompensationFailed)
	if n := ts.notCompleted(); n != 2 {
		t.Errorf("not completed = %d, want 2", n)
	}
	rep := &report{Cells: []*cellResult{
		{Cell: "cluster-down-strict-c64", Store: "cassandra-cluster", Framework: measure{Sagas: 500}},
		{Cell: "cassandra-strict-c64", Store: "cassandra", Framework: measure{Sagas: 500, NotCompleted: 3}},
		{Cell: "kafka-memory-c64", Store: "memory", Framework: measure{Sagas: 500}},
	}}
	var out bytes.Buffer
	rep.writeTable(&out)
	for _, want := range []string{"cluster-down-strict-c64: 500 of 500 measured sagas COMPLETED, 0 compensated", "cassandra-strict-c64: 497 of 500 measured sagas COMPLETED, 3 compensated"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "kafka-memory-c64: 500 of 500") {
		t.Errorf("a single-node cell with every saga completed gets the line:\n%s", out.String())
	}
}
