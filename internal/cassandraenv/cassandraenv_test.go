package cassandraenv_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/cassandraenv"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// The store's configuration takes every STACKSAGA_CASSANDRA_* setting but
// the contact points and keyspace, which the flags give, on top of a
// development keyspace's settings.
func TestConfigFollowsEnv(t *testing.T) {
	ca := testenv.OtherCA(t)
	env := map[string]string{
		cassandra.EnvTLSCAFile: ca, cassandra.EnvUsername: "saga", cassandra.EnvPassword: "pw",
		cassandra.EnvContactPoints: "10.0.0.1:9042", cassandra.EnvKeyspace: "elsewhere", cassandra.EnvRequestTimeout: "3s",
	}
	cfg, cl, err := cassandraenv.Config("--cassandra", []string{"127.0.0.1:9142", "127.0.0.2:9142"}, "demo_ks",
		func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if cl.SslOpts == nil || cfg.TLS.CAFile != ca || cfg.Username != "saga" || cfg.Password != "pw" || cfg.RequestTimeout != 3*time.Second {
		t.Errorf("the variables are not applied: TLS options %v, %+v", cl.SslOpts, cfg)
	}
	if strings.Join(cfg.ContactPoints, ",") != "127.0.0.1:9142,127.0.0.2:9142" || cfg.Keyspace != "demo_ks" {
		t.Errorf("contact points %v, keyspace %q: want the flags'", cfg.ContactPoints, cfg.Keyspace)
	}
	if r := cfg.Replication; !cfg.CreateSchema || r.Class != cassandra.SimpleStrategy || r.ReplicationFactor != 1 {
		t.Errorf("create schema %v, replication %q: want a development keyspace's", cfg.CreateSchema, cfg.Replication)
	}
	_, cl, err = cassandraenv.Config("--cassandra", []string{"127.0.0.1:9042"}, "demo_ks", func(string) (string, bool) { return "", false })
	if err != nil || cl.SslOpts != nil {
		t.Errorf("without variables: TLS options %v, %v; want plain connections", cl.SslOpts, err)
	}
}

// A setting that does not hold fails, naming the tool's flag and the
// setting's key.
func TestConfigNamesTheBadSetting(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"missing CA file": {cassandra.EnvTLSCAFile: filepath.Join(t.TempDir(), "missing.pem")},
		"bad timeout":     {cassandra.EnvRequestTimeout: "soon"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := cassandraenv.Config("--cass", []string{"127.0.0.1:9042"}, "ks", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err == nil || !strings.HasPrefix(err.Error(), "--cass: ") {
				t.Fatalf("err = %v, want one naming --cass", err)
			}
			for k := range env {
				if !strings.Contains(err.Error(), k) && !strings.Contains(err.Error(), keyOf(k)) {
					t.Errorf("%v names neither %s nor its YAML key", err, k)
				}
			}
		})
	}
}

// keyOf guesses the YAML key of a STACKSAGA_CASSANDRA_* variable's error
// message ("tls.ca-file" for STACKSAGA_CASSANDRA_TLS_CA_FILE).
func keyOf(env string) string {
	k := strings.ToLower(strings.TrimPrefix(env, "STACKSAGA_CASSANDRA_"))
	if rest, ok := strings.CutPrefix(k, "tls_"); ok {
		return "tls." + strings.ReplaceAll(rest, "_", "-")
	}
	return strings.ReplaceAll(k, "_", "-")
}
