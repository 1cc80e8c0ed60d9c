package cassandra

import (
	"context"
	"crypto/tls"
	_ "embed"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

//go:embed schema.cql
var schemaTemplate string

// Replication strategy classes.
const (
	NetworkTopologyStrategy = "NetworkTopologyStrategy"
	SimpleStrategy          = "SimpleStrategy"
)

// Replication is the keyspace replication of the schema.
type Replication struct {
	// Class is NetworkTopologyStrategy (production) or SimpleStrategy
	// (local use). Default NetworkTopologyStrategy.
	Class string `yaml:"class"`
	// ReplicationFactor is SimpleStrategy's replication factor. Default 1.
	ReplicationFactor int `yaml:"replication-factor"`
	// DataCenters maps data-centre names to replication factors for
	// NetworkTopologyStrategy. Default {<local-datacenter>: 3}.
	DataCenters map[string]int `yaml:"datacenters"`
}

// SimpleReplication is SimpleStrategy with replication factor rf, for local
// single-node use.
func SimpleReplication(rf int) Replication {
	return Replication{Class: SimpleStrategy, ReplicationFactor: rf}
}

// NetworkReplication is NetworkTopologyStrategy with the given factor per
// data centre.
func NetworkReplication(dcs map[string]int) Replication {
	return Replication{Class: NetworkTopologyStrategy, DataCenters: maps.Clone(dcs)}
}

var dcName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// validate returns the problems of r, naming keys under prefix.
func (r Replication) validate(prefix string) []error {
	var errs []error
	switch r.Class {
	case SimpleStrategy:
		if r.ReplicationFactor < 1 {
			errs = append(errs, fmt.Errorf("%s.replication-factor: must be at least 1, got %d", prefix, r.ReplicationFactor))
		}
	case NetworkTopologyStrategy:
		if len(r.DataCenters) == 0 {
			errs = append(errs, fmt.Errorf("%s.datacenters: NetworkTopologyStrategy needs at least one data centre", prefix))
		}
		for _, dc := range slices.Sorted(maps.Keys(r.DataCenters)) {
			if !dcName.MatchString(dc) {
				errs = append(errs, fmt.Errorf("%s.datacenters: invalid data-centre name %q", prefix, dc))
			}
			if rf := r.DataCenters[dc]; rf < 1 {
				errs = append(errs, fmt.Errorf("%s.datacenters.%s: replication factor must be at least 1, got %d", prefix, dc, rf))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("%s.class: must be %s or %s, got %q", prefix, NetworkTopologyStrategy, SimpleStrategy, r.Class))
	}
	return errs
}

// CQL renders r as the replication map of CREATE KEYSPACE.
func (r Replication) CQL() string {
	if r.Class == SimpleStrategy {
		return fmt.Sprintf("{'class': 'SimpleStrategy', 'replication_factor': %d}", r.ReplicationFactor)
	}
	var b strings.Builder
	b.WriteString("{'class': 'NetworkTopologyStrategy'")
	for _, dc := range slices.Sorted(maps.Keys(r.DataCenters)) {
		fmt.Fprintf(&b, ", '%s': %d", dc, r.DataCenters[dc])
	}
	b.WriteString("}")
	return b.String()
}

// String renders r in the form ParseReplication reads.
func (r Replication) String() string {
	if r.Class == SimpleStrategy {
		return fmt.Sprintf("SimpleStrategy:%d", r.ReplicationFactor)
	}
	parts := make([]string, 0, len(r.DataCenters))
	for _, dc := range slices.Sorted(maps.Keys(r.DataCenters)) {
		parts = append(parts, fmt.Sprintf("%s=%d", dc, r.DataCenters[dc]))
	}
	return "NetworkTopologyStrategy:" + strings.Join(parts, ",")
}

// ParseReplication reads "SimpleStrategy:<rf>" (or "simple:<rf>") and
// "NetworkTopologyStrategy:<dc>=<rf>[,<dc>=<rf>...]" (or "network:..."),
// the form of sagactl's --replication flag and of the
// STACKSAGA_CASSANDRA_REPLICATION variable.
func ParseReplication(s string) (Replication, error) {
	class, rest, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || rest == "" {
		return Replication{}, fmt.Errorf("cassandra: replication %q: want SimpleStrategy:<rf> or NetworkTopologyStrategy:<dc>=<rf>[,<dc>=<rf>]", s)
	}
	switch strings.ToLower(class) {
	case "simple", "simplestrategy":
		rf, err := strconv.Atoi(rest)
		if err != nil {
			return Replication{}, fmt.Errorf("cassandra: replication %q: replication factor: %w", s, err)
		}
		r := SimpleReplication(rf)
		if errs := r.validate("replication"); len(errs) > 0 {
			return Replication{}, fmt.Errorf("cassandra: %w", errs[0])
		}
		return r, nil
	case "network", "networktopologystrategy":
		dcs := make(map[string]int)
		for _, part := range strings.Split(rest, ",") {
			dc, rfs, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok {
				return Replication{}, fmt.Errorf("cassandra: replication %q: %q is not <dc>=<rf>", s, part)
			}
			rf, err := strconv.Atoi(rfs)
			if err != nil {
				return Replication{}, fmt.Errorf("cassandra: replication %q: replication factor of %s: %w", s, dc, err)
			}
			dcs[dc] = rf
		}
		r := NetworkReplication(dcs)
		if errs := r.validate("replication"); len(errs) > 0 {
			return Replication{}, fmt.Errorf("cassandra: %w", errs[0])
		}
		return r, nil
	}
	return Replication{}, fmt.Errorf("cassandra: replication %q: unknown class %q", s, class)
}

var keyspaceName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

func checkKeyspace(ks string) error {
	if !keyspaceName.MatchString(ks) {
		return fmt.Errorf("keyspace %q: want a lowercase letter then up to 47 of [a-z0-9_]", ks)
	}
	return nil
}

// SchemaCQL renders the schema script (keyspace and 11 tables) for keyspace
// with replication r: what `sagactl schema print` prints.
func SchemaCQL(keyspace string, r Replication) (string, error) {
	if err := checkKeyspace(keyspace); err != nil {
		return "", fmt.Errorf("cassandra: %w", err)
	}
	if errs := r.validate("replication"); len(errs) > 0 {
		return "", fmt.Errorf("cassandra: %w", errs[0])
	}
	return strings.NewReplacer("${keyspace}", keyspace, "${replication}", r.CQL()).Replace(schemaTemplate), nil
}

// SchemaStatements splits the rendered schema into its statements, without
// comments.
func SchemaStatements(keyspace string, r Replication) ([]string, error) {
	script, err := SchemaCQL(keyspace, r)
	if err != nil {
		return nil, err
	}
	return splitStatements(script), nil
}

// splitStatements drops "--" comment lines and splits on ";" at line ends.
func splitStatements(script string) []string {
	var stmts []string
	var cur []string
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur = append(cur, strings.TrimRight(line, " \t\r"))
		if strings.HasSuffix(trimmed, ";") {
			stmt := strings.TrimSuffix(strings.Join(cur, "\n"), ";")
			stmts = append(stmts, strings.TrimSpace(stmt))
			cur = cur[:0]
		}
	}
	if len(cur) > 0 {
		stmts = append(stmts, strings.TrimSpace(strings.Join(cur, "\n")))
	}
	return stmts
}

// ApplySchema creates the keyspace (if absent, with replication r) and the 10
// tables (if absent) through session, waiting for schema agreement after
// each statement, then adds to tables created by an older release the
// columns they lack (Migrate). It is idempotent: nothing that exists is
// dropped or changed.
func ApplySchema(ctx context.Context, session *gocql.Session, keyspace string, r Replication) error {
	stmts, err := SchemaStatements(keyspace, r)
	if err != nil {
		return err
	}
	for _, stmt := range stmts {
		if err := session.Query(stmt).ExecContext(ctx); err != nil {
			return fmt.Errorf("cassandra: apply schema: %s: %w", firstLine(stmt), err)
		}
		if err := session.AwaitSchemaAgreement(ctx); err != nil {
			return fmt.Errorf("cassandra: apply schema: await agreement after %s: %w", firstLine(stmt), err)
		}
	}
	_, err = Migrate(ctx, session, keyspace)
	return err
}

// ApplySchemaWithConfig connects with cfg (without selecting its keyspace),
// applies the schema for cfg.Keyspace and cfg.Replication, and disconnects.
func ApplySchemaWithConfig(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		return err
	}
	return applySchemaWith(ctx, cfg, tlsCfg)
}

// applySchemaWith is ApplySchemaWithConfig on a validated cfg whose TLS
// files are already read (tlsCfg).
func applySchemaWith(ctx context.Context, cfg Config, tlsCfg *tls.Config) error {
	cluster := cfg.clusterWith(tlsCfg, nil, nil)
	cluster.Keyspace = ""
	// A DDL statement waits for the node to write the schema and for the
	// cluster to agree on it, which takes seconds more than a query on a
	// loaded node: the schema session allows at least schemaTimeout.
	if cluster.Timeout < schemaTimeout {
		cluster.Timeout, cluster.WriteTimeout = schemaTimeout, schemaTimeout
	}
	session, err := cluster.CreateSession()
	if err != nil {
		return fmt.Errorf("cassandra: connect to %v: %w", cfg.ContactPoints, err)
	}
	defer session.Close()
	return ApplySchema(ctx, session, cfg.Keyspace, cfg.Replication)
}

// schemaTimeout is the least request timeout of the session that applies
// the schema.
const schemaTimeout = time.Minute

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
