package cassandra

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// Topology is what New checks the consistency levels against: the
// keyspace's replication as Cassandra holds it, and the nodes the driver
// found in the cluster's ring.
type Topology struct {
	// Replication is the keyspace's replication (not
	// stacksaga.cassandra.replication, which only a schema apply uses).
	Replication Replication
	// Nodes counts the nodes of each data centre, down ones included.
	Nodes map[string]int
	// Up counts the nodes of each data centre that the driver sees up.
	Up map[string]int
}

// replicationOf reads a keyspace's replication from the driver's metadata
// (StrategyClass may be the full Java class name).
func replicationOf(ks *gocql.KeyspaceMetadata) (Replication, error) {
	class := ks.StrategyClass[strings.LastIndexByte(ks.StrategyClass, '.')+1:]
	rf := func(v any) (int, error) { return strconv.Atoi(strings.TrimSpace(fmt.Sprint(v))) }
	switch class {
	case SimpleStrategy:
		n, err := rf(ks.StrategyOptions["replication_factor"])
		if err != nil {
			return Replication{}, fmt.Errorf("keyspace %s: SimpleStrategy replication_factor %v: %w", ks.Name, ks.StrategyOptions["replication_factor"], err)
		}
		return SimpleReplication(n), nil
	case NetworkTopologyStrategy:
		dcs := make(map[string]int)
		for dc, v := range ks.StrategyOptions {
			if dc == "class" {
				continue
			}
			n, err := rf(v)
			if err != nil {
				return Replication{}, fmt.Errorf("keyspace %s: replication factor of %s %v: %w", ks.Name, dc, v, err)
			}
			dcs[dc] = n
		}
		return NetworkReplication(dcs), nil
	}
	return Replication{}, fmt.Errorf("keyspace %s: replication class %q: the store knows %s and %s", ks.Name, ks.StrategyClass, SimpleStrategy, NetworkTopologyStrategy)
}

// topologyOf reads the keyspace's replication and counts the ring's nodes.
func topologyOf(session *gocql.Session, keyspace string) (Topology, error) {
	ks, err := session.KeyspaceMetadata(keyspace)
	if err != nil {
		return Topology{}, fmt.Errorf("cassandra: read the replication of keyspace %s: %w", keyspace, err)
	}
	r, err := replicationOf(ks)
	if err != nil {
		return Topology{}, fmt.Errorf("cassandra: %w", err)
	}
	t := Topology{Replication: r, Nodes: map[string]int{}, Up: map[string]int{}}
	for _, h := range session.GetHosts() {
		t.Nodes[h.DataCenter()]++
		if h.IsUp() {
			t.Up[h.DataCenter()]++
		}
	}
	return t, nil
}

func quorum(rf int) int { return rf/2 + 1 }

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// local reports whether c counts replicas in the local data centre only.
func (c Consistency) local() bool { return c == LocalQuorum || c == LocalSerial }

// CheckTopology reports whether the consistency levels of c can be met by
// the keyspace's replication on the cluster's nodes (t), naming the key and
// value of each level that cannot and the replication and nodes that refuse
// it; the error wraps ErrInvalidConfig. It refuses what makes every request
// at that level fail (Unavailable), however healthy the cluster:
//   - local-datacenter naming no data centre of the cluster;
//   - a LOCAL_ level in a data centre where the keyspace has no replica
//     (e.g. a replication naming "dc1" on a cluster whose nodes are in
//     "datacenter1");
//   - a quorum larger than the replicas that can exist: a replication
//     factor 3 on a one-node cluster (QUORUM and LOCAL_QUORUM need 2 of
//     the 3, and a node holds one replica), a factor in a data centre that
//     has no node.
//
// A replication factor 1 is not refused: its quorum is 1, met by the one
// replica (it survives no node's loss, which warnings reports, as it does a
// factor above the data centre's nodes, and fewer nodes up than a quorum).
func (c Config) CheckTopology(t Topology) (warnings []string, err error) {
	c = c.withDefaults()
	p := yamlconfig.Problems{Prefix: keyPrefix}
	dcs := slices.Sorted(maps.Keys(t.Nodes))
	r := t.Replication
	repl := fmt.Sprintf("keyspace %s has replication %s", c.Keyspace, r)
	if t.Nodes[c.LocalDatacenter] == 0 {
		p.Add("local-datacenter", "%q is not a data centre of the cluster (its nodes are in %s)", c.LocalDatacenter, strings.Join(dcs, ", "))
	}
	// rf: the replication factor of a data centre; replicas: how many of
	// them can exist (one per node); the keyspace's total under SimpleStrategy.
	rf := func(dc string) int {
		if r.Class == SimpleStrategy {
			return r.ReplicationFactor
		}
		return r.DataCenters[dc]
	}
	var total, replicas, up int
	if r.Class == SimpleStrategy {
		total, replicas, up = r.ReplicationFactor, min(r.ReplicationFactor, sum(t.Nodes)), min(r.ReplicationFactor, sum(t.Up))
	} else {
		for dc, n := range r.DataCenters {
			total += n
			replicas += min(n, t.Nodes[dc])
			up += min(n, t.Up[dc])
		}
	}
	levels := []struct {
		key string
		cl  Consistency
	}{{"read-consistency-level", c.ReadConsistency}, {"write-consistency-level", c.WriteConsistency}, {"serial-consistency-level", c.SerialConsistency}}
	warned := map[string]bool{}
	warn := func(format string, args ...any) {
		if w := fmt.Sprintf(format, args...); !warned[w] {
			warned[w] = true
			warnings = append(warnings, w)
		}
	}
	for _, l := range levels {
		need, have, live, where := quorum(total), replicas, up, "the cluster"
		if l.cl.local() && r.Class == NetworkTopologyStrategy {
			n := rf(c.LocalDatacenter)
			if n == 0 {
				p.Add(l.key, "%s needs replicas in local-datacenter %q, but %s: none there", l.cl, c.LocalDatacenter, repl)
				continue
			}
			need, have, live, where = quorum(n), min(n, t.Nodes[c.LocalDatacenter]), min(n, t.Up[c.LocalDatacenter]), fmt.Sprintf("data centre %q", c.LocalDatacenter)
		}
		if need > have {
			p.Add(l.key, "%s needs %d replicas, but %s and %s has %s: at most %d replicas exist there",
				l.cl, need, repl, where, nodeCounts(t.Nodes, dcs), have)
			continue
		}
		if live < need {
			warn("%s%s=%s needs %d replicas, but the driver sees only %d of them up (%s up of %s): requests fail until nodes return",
				keyPrefix, l.key, l.cl, need, live, nodeCounts(t.Up, dcs), nodeCounts(t.Nodes, dcs))
		}
	}
	for _, dc := range slices.Sorted(maps.Keys(r.DataCenters)) {
		if r.Class == NetworkTopologyStrategy && t.Nodes[dc] == 0 {
			warn("%s, but data centre %q has no node (the cluster's: %s)", repl, dc, strings.Join(dcs, ", "))
		}
	}
	for _, dc := range dcs {
		n := rf(dc)
		switch {
		case n == 1 && t.Nodes[dc] > 1:
			warn("%s: one replica in data centre %q of %d nodes; losing that node loses the saga rows it holds", repl, dc, t.Nodes[dc])
		case n > t.Nodes[dc] && t.Nodes[dc] > 0 && quorum(n) <= t.Nodes[dc]:
			warn("%s: replication factor %d in data centre %q of %d nodes; a quorum needs every node", repl, n, dc, t.Nodes[dc])
		}
	}
	return warnings, p.Err(ErrInvalidConfig)
}

// nodeCounts renders per-DC node counts: "3 nodes in datacenter1".
func nodeCounts(m map[string]int, dcs []string) string {
	if len(dcs) == 0 {
		return "no node"
	}
	parts := make([]string, 0, len(dcs))
	for _, dc := range dcs {
		parts = append(parts, fmt.Sprintf("%d node(s) in %s", m[dc], dc))
	}
	return strings.Join(parts, ", ")
}

// checkTopology is New's check of cfg's consistency levels against the
// keyspace and the ring (CheckTopology): it logs the warnings and returns
// the refusal.
func checkTopology(ctx context.Context, session *gocql.Session, cfg Config, log *slog.Logger) error {
	t, err := topologyOf(session, cfg.Keyspace)
	if err != nil {
		return err
	}
	warnings, err := cfg.CheckTopology(t)
	for _, w := range warnings {
		log.WarnContext(ctx, "cassandra: "+w)
	}
	if err != nil {
		return fmt.Errorf("cassandra: the consistency levels cannot be met on keyspace %s: %w", cfg.Keyspace, err)
	}
	return nil
}
