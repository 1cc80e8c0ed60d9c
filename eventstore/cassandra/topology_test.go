package cassandra

import (
	"errors"
	"strings"
	"testing"
)

// CheckTopology refuses the consistency levels a keyspace's replication
// cannot meet on the cluster's nodes, naming the key, its value, the
// replication and the nodes; it lets through, with a warning, what works
// but survives no node's loss or finds too few nodes up.
func TestCheckTopology(t *testing.T) {
	dc1 := map[string]int{"datacenter1": 1}
	dc3 := map[string]int{"datacenter1": 3}
	nts3 := NetworkReplication(map[string]int{"datacenter1": 3})
	quorum := Config{ReadConsistency: Quorum, WriteConsistency: Quorum, SerialConsistency: Serial}
	for _, tc := range []struct {
		name     string
		cfg      Config
		topo     Topology
		refused  []string // substrings of the error; nil: accepted
		warnings []string // substrings of the warnings, in order
	}{
		{
			name: "defaults on three nodes",
			topo: Topology{Replication: nts3, Nodes: dc3, Up: dc3},
		},
		{
			name: "factor 3 on one node, LOCAL levels",
			topo: Topology{Replication: nts3, Nodes: dc1, Up: dc1},
			refused: []string{
				"stacksaga.cassandra.read-consistency-level: LOCAL_QUORUM needs 2 replicas",
				"stacksaga.cassandra.write-consistency-level: LOCAL_QUORUM needs 2 replicas",
				"stacksaga.cassandra.serial-consistency-level: LOCAL_SERIAL needs 2 replicas",
				"replication NetworkTopologyStrategy:datacenter1=3", "1 node(s) in datacenter1", "at most 1 replicas",
			},
		},
		{
			name:    "factor 3 on one node, QUORUM",
			cfg:     quorum,
			topo:    Topology{Replication: SimpleReplication(3), Nodes: dc1, Up: dc1},
			refused: []string{"read-consistency-level: QUORUM needs 2 replicas", "serial-consistency-level: SERIAL needs 2", "SimpleStrategy:3"},
		},
		{
			name: "replication names a data centre the cluster lacks",
			topo: Topology{Replication: NetworkReplication(map[string]int{"dc1": 3}), Nodes: dc3, Up: dc3},
			refused: []string{
				`read-consistency-level: LOCAL_QUORUM needs replicas in local-datacenter "datacenter1", but keyspace stacksaga_event_store has replication NetworkTopologyStrategy:dc1=3: none there`,
			},
			warnings: []string{`data centre "dc1" has no node (the cluster's: datacenter1)`},
		},
		{
			name:     "replication names a data centre the cluster lacks, QUORUM",
			cfg:      quorum,
			topo:     Topology{Replication: NetworkReplication(map[string]int{"dc1": 3}), Nodes: dc3, Up: dc3},
			refused:  []string{"write-consistency-level: QUORUM needs 2 replicas", "at most 0 replicas"},
			warnings: []string{`data centre "dc1" has no node`},
		},
		{
			name:     "local data centre unknown to the cluster",
			cfg:      Config{LocalDatacenter: "dc-east"},
			topo:     Topology{Replication: NetworkReplication(map[string]int{"dc-east": 3}), Nodes: dc3, Up: dc3},
			refused:  []string{`stacksaga.cassandra.local-datacenter: "dc-east" is not a data centre of the cluster (its nodes are in datacenter1)`},
			warnings: []string{`data centre "dc-east" has no node`},
		},
		{
			name: "factor 1 on one node: its quorum is that node",
			cfg:  quorum,
			topo: Topology{Replication: SimpleReplication(1), Nodes: dc1, Up: dc1},
		},
		{
			name:     "factor 1 on three nodes works but loses data with a node",
			topo:     Topology{Replication: NetworkReplication(dc1), Nodes: dc3, Up: dc3},
			warnings: []string{`one replica in data centre "datacenter1" of 3 nodes`},
		},
		{
			name:     "factor 3 on two nodes works with both up",
			topo:     Topology{Replication: nts3, Nodes: map[string]int{"datacenter1": 2}, Up: map[string]int{"datacenter1": 2}},
			warnings: []string{`replication factor 3 in data centre "datacenter1" of 2 nodes; a quorum needs every node`},
		},
		{
			name: "two of three nodes down at start",
			topo: Topology{Replication: nts3, Nodes: dc3, Up: dc1},
			warnings: []string{
				"read-consistency-level=LOCAL_QUORUM needs 2 replicas, but the driver sees only 1 of them up",
				"write-consistency-level=LOCAL_QUORUM", "serial-consistency-level=LOCAL_SERIAL",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warnings, err := tc.cfg.CheckTopology(tc.topo)
			if tc.refused == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			} else {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("err = %v, want ErrInvalidConfig", err)
				}
				for _, want := range tc.refused {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q:\n%v", want, err)
					}
				}
			}
			if len(warnings) != len(tc.warnings) {
				t.Fatalf("warnings = %q, want %d like %q", warnings, len(tc.warnings), tc.warnings)
			}
			for i, want := range tc.warnings {
				if !strings.Contains(warnings[i], want) {
					t.Errorf("warning %d = %q, want it to contain %q", i, warnings[i], want)
				}
			}
		})
	}
}
