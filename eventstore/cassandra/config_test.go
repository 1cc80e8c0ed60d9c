package cassandra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func noEnv(string) (string, bool) { return "", false }

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadConfigDefaults(t *testing.T) {
	c, err := loadConfig(nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		ContactPoints:      []string{"127.0.0.1:9042"},
		Keyspace:           "stacksaga_event_store",
		LocalDatacenter:    "datacenter1",
		ReadConsistency:    LocalQuorum,
		WriteConsistency:   LocalQuorum,
		SerialConsistency:  LocalSerial,
		RequestTimeout:     10 * time.Second,
		ConnectTimeout:     10 * time.Second,
		ConnectionsPerHost: 2,
		TimestampGenerator: ServerTimestamps,
		ReconnectionPolicy: Reconnection{BaseDelay: time.Second, MaxDelay: 60 * time.Second, MaxRetries: 10},
		Replication:        Replication{Class: NetworkTopologyStrategy, DataCenters: map[string]int{"datacenter1": 3}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults\n got %+v\nwant %+v", c, want)
	}
	if !reflect.DeepEqual(DefaultConfig(), want) {
		t.Fatalf("DefaultConfig() %+v", DefaultConfig())
	}
}

const fullYAML = `
stacksaga:
  instance:
    region: us-central
  cassandra:
    contact-points: ["10.0.0.1:9042", "10.0.0.2"]
    keyspace: orders_es
    local-datacenter: dc-east
    username: cassandra
    password: secret
    read-consistency-level: QUORUM
    write-consistency-level: LOCAL_QUORUM
    serial-consistency-level: SERIAL
    request-timeout: 3s
    connect-timeout: 2s
    connections-per-host: 4
    timestamp-generator: client
    reconnection-policy:
      base-delay: 500ms
      max-delay: 30s
      max-retries: 7
    replication:
      class: NetworkTopologyStrategy
      datacenters: {dc-east: 3, dc-west: 2}
    create-schema: true
    # keys of other packages under stacksaga.cassandra are ignored here
    write-protection:
      default-mode: STRICT
    recovery:
      window-interval-minutes: 1
`

func TestLoadConfigYAML(t *testing.T) {
	c, err := loadConfig([]byte(fullYAML), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		ContactPoints:      []string{"10.0.0.1:9042", "10.0.0.2"},
		Keyspace:           "orders_es",
		LocalDatacenter:    "dc-east",
		Username:           "cassandra",
		Password:           "secret",
		ReadConsistency:    Quorum,
		WriteConsistency:   LocalQuorum,
		SerialConsistency:  Serial,
		RequestTimeout:     3 * time.Second,
		ConnectTimeout:     2 * time.Second,
		ConnectionsPerHost: 4,
		TimestampGenerator: ClientTimestamps,
		ReconnectionPolicy: Reconnection{BaseDelay: 500 * time.Millisecond, MaxDelay: 30 * time.Second, MaxRetries: 7},
		Replication:        Replication{Class: NetworkTopologyStrategy, DataCenters: map[string]int{"dc-east": 3, "dc-west": 2}},
		CreateSchema:       true,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("loaded\n got %+v\nwant %+v", c, want)
	}
	cl, err := c.cluster(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Timeout != 3*time.Second || cl.NumConns != 4 || cl.DefaultTimestamp != true || cl.Authenticator == nil || cl.Keyspace != "orders_es" {
		t.Fatalf("driver config not derived from the configuration: %+v", cl)
	}
}

func TestLoadConfigEnvOverrides(t *testing.T) {
	env := envMap(map[string]string{
		EnvContactPoints:     " 127.0.0.1:9142 , 127.0.0.2:9142 ",
		EnvKeyspace:          "from_env",
		EnvLocalDatacenter:   "dc9",
		EnvUsername:          "u",
		EnvPassword:          "p",
		EnvReadConsistency:   "quorum",
		EnvWriteConsistency:  "QUORUM",
		EnvSerialConsistency: "serial",
		EnvRequestTimeout:    "750ms",
		EnvConnectTimeout:    "1s",
		EnvReplication:       "SimpleStrategy:1",
		EnvCreateSchema:      "true",
	})
	c, err := loadConfig([]byte(fullYAML), env)
	if err != nil {
		t.Fatal(err)
	}
	if fmtC := strings.Join(c.ContactPoints, ","); fmtC != "127.0.0.1:9142,127.0.0.2:9142" {
		t.Errorf("contact points %q", fmtC)
	}
	if c.Keyspace != "from_env" || c.LocalDatacenter != "dc9" || c.Username != "u" || c.Password != "p" {
		t.Errorf("strings not overridden: %+v", c)
	}
	if c.ReadConsistency != Quorum || c.WriteConsistency != Quorum || c.SerialConsistency != Serial {
		t.Errorf("consistency not overridden: %+v", c)
	}
	if c.RequestTimeout != 750*time.Millisecond || c.ConnectTimeout != time.Second {
		t.Errorf("timeouts not overridden: %v %v", c.RequestTimeout, c.ConnectTimeout)
	}
	if c.Replication.String() != "SimpleStrategy:1" || !c.CreateSchema {
		t.Errorf("replication %v create-schema %v", c.Replication, c.CreateSchema)
	}
	// Set but empty variables do not override.
	c, err = loadConfig([]byte(fullYAML), envMap(map[string]string{EnvKeyspace: ""}))
	if err != nil || c.Keyspace != "orders_es" {
		t.Errorf("empty variable overrode the keyspace: %q %v", c.Keyspace, err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	const bad = `
stacksaga:
  cassandra:
    contact-points: ["", "host:99999"]
    keyspace: Bad-Name
    local-datacenter: "dc one"
    password: orphan
    read-consistency-level: ONE
    write-consistency-level: ALL
    serial-consistency-level: QUORUM
    request-timeout: -1s
    connections-per-host: -2
    timestamp-generator: atomic
    reconnection-policy: {base-delay: 2s, max-delay: 1s}
    replication: {class: SimpleStrategy, replication-factor: -1}
`
	_, err := loadConfig([]byte(bad), noEnv)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
	}
	for _, key := range []string{
		"stacksaga.cassandra.contact-points: empty contact point",
		`stacksaga.cassandra.contact-points: contact point "host:99999"`,
		"stacksaga.cassandra.keyspace:",
		"stacksaga.cassandra.local-datacenter:",
		"stacksaga.cassandra.username: required when a password is set",
		`stacksaga.cassandra.read-consistency-level: must be LOCAL_QUORUM or QUORUM, got "ONE"`,
		`stacksaga.cassandra.write-consistency-level: must be LOCAL_QUORUM or QUORUM, got "ALL"`,
		"stacksaga.cassandra.serial-consistency-level:",
		"stacksaga.cassandra.request-timeout:",
		"stacksaga.cassandra.connections-per-host:",
		"stacksaga.cassandra.timestamp-generator:",
		"stacksaga.cassandra.reconnection-policy.max-delay:",
		"stacksaga.cassandra.replication.replication-factor:",
	} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("report lacks %q:\n%v", key, err)
		}
	}
}

func TestEnvErrorsNameVariableAndKey(t *testing.T) {
	_, err := loadConfig(nil, envMap(map[string]string{EnvRequestTimeout: "soon", EnvReplication: "Paxos:3", EnvCreateSchema: "perhaps"}))
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
	}
	for _, want := range []string{
		"STACKSAGA_CASSANDRA_REQUEST_TIMEOUT (stacksaga.cassandra.request-timeout)",
		"STACKSAGA_CASSANDRA_REPLICATION (stacksaga.cassandra.replication)",
		"STACKSAGA_CASSANDRA_CREATE_SCHEMA (stacksaga.cassandra.create-schema)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("report lacks %q:\n%v", want, err)
		}
	}
}

func TestLoadConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stacksaga.yaml")
	if err := os.WriteFile(path, []byte("stacksaga:\n  cassandra:\n    keyspace: file_ks\n    replication: {class: SimpleStrategy}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{EnvKeyspace, EnvReplication, EnvContactPoints} {
		t.Setenv(v, "")
	}
	c, err := LoadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Keyspace != "file_ks" || c.Replication.String() != "SimpleStrategy:1" {
		t.Fatalf("loaded %+v", c)
	}
	if _, err := LoadConfigFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("LoadConfigFile of a missing file succeeded")
	}
	if err := os.WriteFile(path, []byte("stacksaga: [unclosed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfigFile(path); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), path) {
		t.Fatalf("malformed YAML: %v", err)
	}
}

// An invalid configuration fails at start, naming the key, before any
// connection is attempted.
func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := New(context.Background(), Config{ContactPoints: []string{"127.0.0.1:1"}, ReadConsistency: "ONE"})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "stacksaga.cassandra.read-consistency-level") {
		t.Fatalf("New with an invalid configuration: %v", err)
	}
}

func TestReplication(t *testing.T) {
	for in, want := range map[string]string{
		"SimpleStrategy:3":                    "{'class': 'SimpleStrategy', 'replication_factor': 3}",
		"simple:1":                            "{'class': 'SimpleStrategy', 'replication_factor': 1}",
		"NetworkTopologyStrategy:dc2=2,dc1=3": "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 2}",
		"network: datacenter1=1":              "{'class': 'NetworkTopologyStrategy', 'datacenter1': 1}",
	} {
		r, err := ParseReplication(in)
		if err != nil {
			t.Errorf("ParseReplication(%q): %v", in, err)
			continue
		}
		if r.CQL() != want {
			t.Errorf("ParseReplication(%q).CQL() = %s, want %s", in, r.CQL(), want)
		}
		if back, err := ParseReplication(r.String()); err != nil || back.CQL() != want {
			t.Errorf("round trip of %q through %q: %v %v", in, r.String(), back, err)
		}
	}
	for _, in := range []string{"", "SimpleStrategy", "SimpleStrategy:0", "SimpleStrategy:x", "NetworkTopologyStrategy:dc1", "NetworkTopologyStrategy:dc1=0", "NetworkTopologyStrategy:'x'=1", "Everywhere:3"} {
		if _, err := ParseReplication(in); err == nil {
			t.Errorf("ParseReplication(%q) accepted", in)
		}
	}
}

func TestSchemaStatements(t *testing.T) {
	stmts, err := SchemaStatements("ks_test", SimpleReplication(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) != 1+len(tableNames) {
		t.Fatalf("%d statements, want the keyspace and %d tables", len(stmts), len(tableNames))
	}
	if want := "CREATE KEYSPACE IF NOT EXISTS ks_test\n  WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}\n  AND durable_writes = true"; stmts[0] != want {
		t.Fatalf("keyspace statement\n%s\nwant\n%s", stmts[0], want)
	}
	for i, name := range tableNames {
		if !strings.HasPrefix(stmts[i+1], "CREATE TABLE IF NOT EXISTS ks_test."+name+" (") {
			t.Errorf("statement %d: %.60s..., want table %s", i+1, stmts[i+1], name)
		}
		if strings.Contains(stmts[i+1], "--") || strings.Contains(stmts[i+1], ";") || strings.Contains(stmts[i+1], "${") {
			t.Errorf("statement %d keeps a comment, separator or placeholder:\n%s", i+1, stmts[i+1])
		}
	}
	script, err := SchemaCQL("ks_test", NetworkReplication(map[string]int{"dc1": 3}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, "{'class': 'NetworkTopologyStrategy', 'dc1': 3}") {
		t.Fatal("NetworkTopologyStrategy not rendered")
	}
	if _, err := SchemaCQL("Bad Keyspace", SimpleReplication(1)); err == nil {
		t.Fatal("SchemaCQL accepted an invalid keyspace")
	}
	if _, err := SchemaCQL("ks", Replication{Class: "Other"}); err == nil {
		t.Fatal("SchemaCQL accepted an invalid replication")
	}
}
