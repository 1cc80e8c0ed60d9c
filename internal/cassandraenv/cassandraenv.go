// Package cassandraenv is the Cassandra store configuration of the
// project's command-line tools (sagademo, sagabench): the store's
// defaults, then a development keyspace's (replication factor 1, the
// schema created), then the STACKSAGA_CASSANDRA_* variables (TLS,
// credentials, consistency, timeouts, ...), then the tool's flags.
package cassandraenv

import (
	"fmt"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
)

// Config is the store's configuration for contactPoints and keyspace (the
// tool's flags, which win over the variables' contact points and
// keyspace), with the variables looked up with lookup, and its driver
// configuration. Building the driver configuration checks the settings
// and reads the TLS files, so that a bad setting fails before anything
// runs; its SslOpts say whether the connections use TLS. Errors name
// flag, the tool's Cassandra flag, and the setting at fault.
func Config(flag string, contactPoints []string, keyspace string, lookup func(string) (string, bool)) (cassandra.Config, *gocql.ClusterConfig, error) {
	cfg := cassandra.DefaultConfig()
	cfg.Replication = cassandra.SimpleReplication(1)
	cfg.CreateSchema = true
	if err := cfg.ApplyEnv(lookup); err != nil {
		return cassandra.Config{}, nil, fmt.Errorf("%s: the STACKSAGA_CASSANDRA_* settings: %w", flag, err)
	}
	cfg.ContactPoints = contactPoints
	cfg.Keyspace = keyspace
	cl, err := cfg.ClusterConfig()
	if err != nil {
		return cassandra.Config{}, nil, fmt.Errorf("%s: with the STACKSAGA_CASSANDRA_* settings: %w", flag, err)
	}
	return cfg, cl, nil
}
