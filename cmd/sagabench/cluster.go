package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/cassandraenv"
)

// The cluster cells run the place-order saga on the three-node cluster of
// `scripts/services up --cluster` (docs/clusters.md): its three Kafka
// brokers (topics with replication factor 3, min.insync.replicas 2) and
// its three Cassandra nodes, in a keyspace with replication factor 3 in
// --cluster-dc (NetworkTopologyStrategy), reads and writes at QUORUM and
// lightweight transactions at SERIAL. They run the framework only (no
// floor: the floor creates a table, which Cassandra cannot do with a node
// down, and its single-node comparison is what the other cells are for).
//
// cluster-relaxed-c64 and cluster-strict-c64 need every Cassandra node
// up; the cluster-down-* cells need exactly one down, which the operator arranges beforehand
// (sagabench never stops a node): the keyspace is made by a run of the
// every-node-up cells without --fresh while every node is up, then one node is
// stopped, then the cluster-down-* cells run in that keyspace without
// creating anything (Cassandra cannot change a schema while a node is
// down: it waits for every node to agree). A node counts as down when its
// CQL port refuses connections.
const (
	// clusterReplicationFactor is the cluster keyspace's replication
	// factor in --cluster-dc.
	clusterReplicationFactor = 3
	// defaultClusterKeyspace is --cluster-keyspace's default.
	defaultClusterKeyspace = "stacksaga_bench_cluster"
	// nodeProbeTimeout bounds the dial of each node's CQL port.
	nodeProbeTimeout = 3 * time.Second
)

// errClusterState is the error of cluster cells that do not match the
// cluster's nodes (a node down for an every-node-up cell, or not exactly
// one down for a node-down cell): a usage error, reported before any cell
// runs.
var errClusterState = errors.New("the cluster's nodes do not match the cluster cells")

// clusterSelection says what the selected cells need of the cluster: any
// cluster cell, every-node-up ones, node-down ones.
func clusterSelection(cells []cellSpec) (has, up, down bool) {
	for _, c := range cells {
		if !c.Cluster {
			continue
		}
		has = true
		if c.NodeDown {
			down = true
		} else {
			up = true
		}
	}
	return has, up, down
}

// checkClusterFlags checks the cluster cells among cells against the
// flags, before the cluster is asked anything: both kinds at once cannot
// run (the cluster is in one state), and node-down cells cannot create a
// keyspace (--fresh).
func checkClusterFlags(cells []cellSpec, fresh bool) error {
	_, up, down := clusterSelection(cells)
	if up && down {
		return fmt.Errorf("--cells: cluster-relaxed-c64 and cluster-strict-c64 need every Cassandra node up, the cluster-down-* cells exactly one down: select one kind per run (%w)", errClusterState)
	}
	if down && fresh {
		return errors.New("--fresh with the cluster-down-* cells: a keyspace cannot be created while a node is down (Cassandra waits for every node to agree on the schema); " +
			"run cluster-relaxed-c64 or cluster-strict-c64 without --fresh while every node is up first, which creates --cluster-keyspace, then stop one node and run the cluster-down-* cells in it")
	}
	return nil
}

// checkClusterNodes checks the Cassandra nodes that are down (of hosts)
// against what the selected cluster cells need.
func checkClusterNodes(cells []cellSpec, hosts, down []string) error {
	_, up, nodeDown := clusterSelection(cells)
	switch {
	case up && len(down) > 0:
		return fmt.Errorf("cluster-relaxed-c64 and cluster-strict-c64 need every Cassandra node of --cluster-cassandra up, but %d of %d do not accept connections (%s): "+
			"restart them (scripts/services up --cluster), or run the cluster-down-* cells with exactly one node down: %w",
			len(down), len(hosts), strings.Join(down, ", "), errClusterState)
	case nodeDown && len(down) != 1:
		what := "every node accepts connections"
		if len(down) > 1 {
			what = fmt.Sprintf("%d do not accept connections (%s): a quorum of %d replicas needs %d", len(down), strings.Join(down, ", "), clusterReplicationFactor, clusterReplicationFactor/2+1)
		}
		return fmt.Errorf("the cluster-down-* cells need exactly one Cassandra node of --cluster-cassandra (%s) down, but %s; "+
			"stop one node first (docs/clusters.md, \"Benchmark on the cluster\"): %w", strings.Join(hosts, ", "), what, errClusterState)
	}
	return nil
}

// downNodes returns the hosts whose port refuses connections (or does not
// answer within timeout), in the order of hosts.
func downNodes(hosts []string, timeout time.Duration) []string {
	isDown := make([]bool, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", h, timeout)
			if err != nil {
				isDown[i] = true
				return
			}
			c.Close()
		}()
	}
	wg.Wait()
	var out []string
	for i, h := range hosts {
		if isDown[i] {
			out = append(out, h)
		}
	}
	return out
}

// clusterStoreConfig is the cluster cells' store configuration: the
// STACKSAGA_CASSANDRA_* settings (TLS, credentials, timeouts) on
// --cluster-cassandra and keyspace, with replication factor 3 in dc,
// QUORUM reads and writes and SERIAL lightweight transactions, whatever
// those variables say of them. createSchema is false for the node-down
// cells, which use a keyspace made while every node was up.
func clusterStoreConfig(hosts []string, keyspace, dc string, createSchema bool, lookup func(string) (string, bool)) (cassandra.Config, *gocql.ClusterConfig, error) {
	cfg, cl, err := cassandraenv.Config("--cluster-cassandra", hosts, keyspace, lookup)
	if err != nil {
		return cassandra.Config{}, nil, err
	}
	cfg.LocalDatacenter = dc
	cfg.Replication = cassandra.NetworkReplication(map[string]int{dc: clusterReplicationFactor})
	cfg.ReadConsistency, cfg.WriteConsistency, cfg.SerialConsistency = cassandra.Quorum, cassandra.Quorum, cassandra.Serial
	cfg.CreateSchema = createSchema
	return cfg, cl, nil
}

// clusterOptions are o for the cluster cells: the cluster's endpoints and
// keyspace (the run's own with --fresh), no floor, no service warming.
func clusterOptions(o options, runID string) options {
	oc := o
	oc.kafka, oc.cassandra, oc.keyspace = o.clusterKafka, o.clusterCassandra, o.clusterKeyspace
	if o.fresh {
		oc.keyspace += "_" + runID
	}
	oc.cassandraCfg, oc.cassandraCluster = o.clusterCfg, o.clusterDriver
	oc.cassandraCfg.Keyspace = oc.keyspace
	oc.noFloor, oc.warmServices = true, 0
	return oc
}
