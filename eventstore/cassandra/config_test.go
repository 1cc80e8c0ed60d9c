package cassandra

import (
	"context"
	"crypto/tls"
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

// An explicit `enabled: false` in the YAML tls block turns TLS off
// whatever the block's other keys set (its files are not even read), as
// STACKSAGA_CASSANDRA_TLS_ENABLED=false does; that variable set to true,
// or Enabled or Config set in code, turns it back on with the block's keys.
func TestLoadConfigTLSEnabledFalse(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.pem")
	off := map[string]string{
		"block": "stacksaga:\n  cassandra:\n    tls:\n      enabled: false\n      ca-file: " + missing +
			"\n      server-name: node-1\n      insecure-skip-verify: true\n",
		"flow, enabled last": "stacksaga:\n  cassandra:\n    tls: {ca-file: " + missing + ", cert-file: c.pem, enabled: false}\n",
		"merged from an anchor": "x-tls: &tls {enabled: false}\nstacksaga:\n  cassandra:\n    tls:\n      <<: *tls\n      ca-file: " +
			missing + "\n",
		"only enabled": "stacksaga:\n  cassandra:\n    tls: {enabled: false}\n",
	}
	for name, doc := range off {
		t.Run(name, func(t *testing.T) {
			c, err := loadConfig([]byte(doc), noEnv)
			if err != nil {
				t.Fatalf("enabled: false still read the tls keys: %v", err)
			}
			if c.TLS.on() {
				t.Fatalf("enabled: false left TLS on: %+v", c.TLS)
			}
			cl, err := c.ClusterConfig()
			if err != nil || cl.SslOpts != nil {
				t.Fatalf("enabled: false: driver TLS options %+v, %v; want none", cl.SslOpts, err)
			}
		})
	}

	p := newTestPKI(t)
	offWithCA := "stacksaga:\n  cassandra:\n    tls:\n      enabled: false\n      ca-file: " + p.caFile + "\n      server-name: node-1\n"
	// Back on from the environment, with the YAML's keys.
	c, err := loadConfig([]byte(offWithCA), envMap(map[string]string{EnvTLSEnabled: "true"}))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	if o := cl.SslOpts; o == nil || o.Config.RootCAs == nil || o.Config.ServerName != "node-1" || !o.EnableHostVerification {
		t.Fatalf("%s=true over enabled: false: driver TLS options %+v, want the YAML's CA file and server name", EnvTLSEnabled, o)
	}
	// The environment's file variables do not turn it back on; false
	// there still clears everything.
	c, err = loadConfig([]byte(offWithCA), envMap(map[string]string{EnvTLSCAFile: p.caFile, EnvTLSServerName: "node-2"}))
	if err != nil || c.TLS.on() {
		t.Fatalf("enabled: false with TLS file variables: %+v, %v; want TLS off", c.TLS, err)
	}
	c, err = loadConfig([]byte(offWithCA), envMap(map[string]string{EnvTLSEnabled: "false"}))
	if err != nil || c.TLS != (TLS{}) {
		t.Fatalf("%s=false over enabled: false: %+v, %v; want TLS{}", EnvTLSEnabled, c.TLS, err)
	}
	// Back on from code.
	c, err = loadConfig([]byte(offWithCA), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	on := c
	on.TLS.Enabled = true
	if cl, err := on.ClusterConfig(); err != nil || cl.SslOpts == nil || cl.SslOpts.Config.ServerName != "node-1" {
		t.Fatalf("Enabled set in code over enabled: false: %+v, %v", cl, err)
	}
	own, err := loadConfig([]byte(off["only enabled"]), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	own.TLS.Config = &tls.Config{ServerName: "mine", MinVersion: tls.VersionTLS13}
	if cl, err := own.ClusterConfig(); err != nil || cl.SslOpts == nil || cl.SslOpts.Config.ServerName != "mine" {
		t.Fatalf("Config set in code over enabled: false: %+v, %v", cl, err)
	}
	// A TLS written in code is unaffected: its false Enabled is no
	// explicit false.
	if !(TLS{CAFile: p.caFile}).on() || (TLS{}).on() {
		t.Fatal("TLS literals: on() changed")
	}
}

// enabled: true, an absent or null enabled next to other keys, and no tls
// block at all behave as before.
func TestLoadConfigTLSEnabled(t *testing.T) {
	p := newTestPKI(t)
	for _, tc := range []struct {
		name, tls string
		on        bool
	}{
		{"enabled: true alone", "{enabled: true}", true},
		{"enabled: true with a CA file", "{enabled: true, ca-file: " + p.caFile + "}", true},
		{"a CA file alone", "{ca-file: " + p.caFile + "}", true},
		{"null enabled with a CA file", "{enabled: ~, ca-file: " + p.caFile + "}", true},
		{"an empty block", "{}", false},
		{"a null block", "~", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig([]byte("stacksaga:\n  cassandra:\n    tls: "+tc.tls+"\n"), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			if c.TLS.on() != tc.on {
				t.Fatalf("tls %s: on() = %v, want %v (%+v)", tc.tls, c.TLS.on(), tc.on, c.TLS)
			}
			cl, err := c.ClusterConfig()
			if err != nil || (cl.SslOpts != nil) != tc.on {
				t.Fatalf("tls %s: driver TLS options %+v, %v", tc.tls, cl.SslOpts, err)
			}
		})
	}
	c, err := loadConfig([]byte("stacksaga:\n  cassandra:\n    tls:\n      enabled: true\n      server-name: x\n"), noEnv)
	if err != nil || c.TLS != (TLS{Enabled: true, ServerName: "x"}) {
		t.Fatalf("enabled: true: %+v, %v", c.TLS, err)
	}
}

// A tls.enabled that is no bool fails, naming its key, and the
// document's other decoding errors are still reported with it.
func TestLoadConfigTLSEnabledInvalid(t *testing.T) {
	_, err := loadConfig([]byte("stacksaga:\n  cassandra:\n    connections-per-host: many\n    tls:\n      enabled: maybe\n      insecure-skip-verify: perhaps\n      server-name: x\n"), noEnv)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"stacksaga.cassandra.tls.enabled: line 5: cannot unmarshal !!str `maybe` into bool",
		"line 6: cannot unmarshal !!str `perhaps` into bool",
		"line 3: cannot unmarshal !!str `many` into int",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("report lacks %q:\n%v", want, msg)
		}
	}
	if n := strings.Count(msg, "maybe"); n != 1 {
		t.Errorf("the bad enabled value is reported %d times:\n%v", n, msg)
	}
	if strings.Contains(msg, "tls.enabled: line 6") || strings.Contains(msg, "tls.enabled: line 3") {
		t.Errorf("another key's error is named tls.enabled:\n%v", msg)
	}
	// The same in flow style, two bad bools on one line.
	_, err = loadConfig([]byte("stacksaga:\n  cassandra:\n    tls: {enabled: maybe, insecure-skip-verify: maybe}\n"), noEnv)
	if !errors.Is(err, ErrInvalidConfig) || strings.Count(err.Error(), "stacksaga.cassandra.tls.enabled:") != 1 ||
		strings.Count(err.Error(), "`maybe` into bool") != 2 {
		t.Fatalf("flow style: %v", err)
	}
}

// A tls block that is not a mapping is refused naming the key, not an
// internal type; an empty one sets nothing.
func TestLoadConfigTLSNotAMapping(t *testing.T) {
	for _, doc := range []string{"tls: true", "tls: [a, b]"} {
		_, err := loadConfig([]byte("stacksaga:\n  cassandra:\n    "+doc+"\n"), noEnv)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "stacksaga.cassandra.tls: line 3: want a mapping") ||
			strings.Contains(err.Error(), "fields") {
			t.Errorf("%s: %v, want ErrInvalidConfig naming stacksaga.cassandra.tls", doc, err)
		}
	}
	for _, doc := range []string{"tls:", "tls: ~"} {
		c, err := loadConfig([]byte("stacksaga:\n  cassandra:\n    contact-points: [127.0.0.1]\n    "+doc+"\n"), noEnv)
		if err != nil || c.TLS.on() {
			t.Errorf("%s: TLS %+v, %v; want it off and no error", doc, c.TLS, err)
		}
	}
}
