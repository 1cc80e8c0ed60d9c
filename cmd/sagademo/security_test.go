package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// secureKafkaArgs are the demo's flags for the SASL_SSL listener of k:
// TLS trusting its CA, SASL/PLAIN as its user; the password is put in
// KAFKA_SASL_PASSWORD, where the demo reads it by default.
func secureKafkaArgs(t *testing.T, k testenv.KafkaSecure) []string {
	t.Helper()
	t.Setenv(kafkaflags.DefaultPasswordEnv, k.Password)
	return []string{"--kafka", k.Brokers[0], "--kafka-tls-ca", os.Getenv(testenv.EnvKafkaTLSCA),
		"--kafka-sasl-mechanism", "plain", "--kafka-sasl-user", k.User}
}

// secureCassandra points the store's STACKSAGA_CASSANDRA_TLS_* variables
// at c's CA and client certificate, and returns its TLS contact point.
func secureCassandra(t *testing.T, c testenv.CassandraSecure) string {
	t.Helper()
	t.Setenv(cassandra.EnvTLSCAFile, c.CAFile)
	t.Setenv(cassandra.EnvTLSCertFile, c.CertFile)
	t.Setenv(cassandra.EnvTLSKeyFile, c.KeyFile)
	return c.Hosts[0]
}

// The demo runs end to end with every Kafka client over TLS and
// SASL/PLAIN (scripts/services' SASL_SSL listener, which takes nothing
// else) and the Cassandra store over TLS with a client certificate (the
// node's TLS-only port, set through STACKSAGA_CASSANDRA_TLS_*): the
// workers, the orchestrator, a retry node re-driving transient failures
// and the duplicator's relay all reach the broker, and write protection
// still holds (no step runs twice).
func TestDemoOverTLS(t *testing.T) {
	k := testenv.KafkaSASLSSL(t)
	c := testenv.CassandraTLS(t)
	_, keyspace := testenv.CassandraKeyspace(t)
	args := append(secureKafkaArgs(t, k), "--cassandra", secureCassandra(t, c), "--keyspace", keyspace,
		"--sagas", "100", "--fail-rate", "0.1", "--duplicates", "1", "--mode", "strict",
		"--transient-rate", "0.1", "--window", "1", "--retry-nodes", "1", "--suffix", testenv.UniqueName(t, "tls"))
	m, counts := demoSummary(t, args...)
	t.Log(m[0])
	checkCounts(t, counts, 100, 10)
	if m[6] == "" {
		t.Errorf("summary %q lacks stmts_per_saga: the store is not Cassandra", m[0])
	}
	if m[7] != "0" {
		t.Errorf("duplicate_executions=%s, want 0: %s", m[7], m[0])
	}
	if m[8] == "" || atoi(m, 10)[0] == 0 {
		t.Errorf("summary %q: no step retried by the retry node", m[0])
	}
}

// The same with share groups: the workers' and the orchestrator's share
// consumers take the TLS and SASL options too.
func TestDemoShareGroupsOverTLS(t *testing.T) {
	k := testenv.KafkaSASLSSL(t)
	args := append(secureKafkaArgs(t, k), "--group-type", "share", "--sagas", "40", "--fail-rate", "0.1",
		"--suffix", testenv.UniqueName(t, "tlsshare"))
	checkCounts(t, runDemo(t, args...), 40, 4)
}

// runFails runs the demo with args, which must fail at the start: exit 1
// within two minutes (not hang), its error saying one of says.
func runFails(t *testing.T, args []string, says ...string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(append(args, "--quiet"), &stdout, &stderr) }()
	select {
	case code := <-done:
		msg := strings.ToLower(stderr.String())
		if code != 1 || !containsAny(msg, says) {
			t.Fatalf("exit %d, want 1 with one of %q\nstdout: %s\nstderr: %s", code, says, stdout.String(), stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the demo neither ran nor failed in 2 minutes; stderr so far:\n%s", stderr.String())
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, strings.ToLower(sub)) {
			return true
		}
	}
	return false
}

// The settings really are used: a wrong password, a Kafka CA that does not
// sign the broker's certificate, or a Cassandra CA that does not sign the
// node's, make the demo fail at the start with the refusal, instead of
// running (or hanging).
func TestDemoRefusedOverTLS(t *testing.T) {
	t.Run("wrong Kafka password", func(t *testing.T) {
		k := testenv.KafkaSASLSSL(t)
		t.Setenv("SAGADEMO_TEST_WRONG_PASSWORD", "not-the-password")
		args := append(secureKafkaArgs(t, k), "--kafka-sasl-password-env", "SAGADEMO_TEST_WRONG_PASSWORD", "--sagas", "5",
			"--suffix", testenv.UniqueName(t, "tlsbad"))
		runFails(t, args, "sasl")
	})
	t.Run("Kafka certificate of another CA", func(t *testing.T) {
		args := secureKafkaArgs(t, testenv.KafkaSASLSSL(t))
		for i, a := range args {
			if a == "--kafka-tls-ca" {
				args[i+1] = testenv.OtherCA(t)
			}
		}
		runFails(t, append(args, "--sagas", "5", "--suffix", testenv.UniqueName(t, "tlsbad")), "unknown authority", "x509", "certificate")
	})
	t.Run("Cassandra certificate of another CA", func(t *testing.T) {
		host := secureCassandra(t, testenv.CassandraTLS(t))
		t.Setenv(cassandra.EnvTLSCAFile, testenv.OtherCA(t))
		_, keyspace := testenv.CassandraKeyspace(t)
		runFails(t, []string{"--cassandra", host, "--keyspace", keyspace, "--sagas", "5"}, "unknown authority", "x509", "certificate")
	})
}

// Invalid security settings are refused before anything runs (exit 2), the
// error naming the flag or the variable.
func TestDemoRejectsBadSecurityFlags(t *testing.T) {
	t.Setenv("SAGADEMO_TEST_UNSET", "")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		says string
	}{
		{name: "TLS without --kafka", args: []string{"--kafka-tls"}, says: "need --kafka"},
		{name: "SASL without --kafka", args: []string{"--kafka-sasl-user", "u"}, env: map[string]string{kafkaflags.DefaultPasswordEnv: "pw"}, says: "need --kafka"},
		{name: "missing CA file", args: []string{"--kafka", "127.0.0.1:1", "--kafka-tls-ca", missing}, says: "--kafka-tls-ca:"},
		{name: "user without password", args: []string{"--kafka", "127.0.0.1:1", "--kafka-sasl-user", "u", "--kafka-sasl-password-env", "SAGADEMO_TEST_UNSET"}, says: "--kafka-sasl-user: no password"},
		{name: "unknown mechanism", args: []string{"--kafka", "127.0.0.1:1", "--kafka-sasl-user", "u", "--kafka-sasl-mechanism", "gssapi"}, env: map[string]string{kafkaflags.DefaultPasswordEnv: "pw"}, says: "--kafka-sasl-mechanism"},
		{name: "mechanism without user", args: []string{"--kafka", "127.0.0.1:1", "--kafka-sasl-mechanism", "scram-sha-256"}, says: "--kafka-sasl-mechanism: needs --kafka-sasl-user"},
		{name: "certificate without key", args: []string{"--kafka", "127.0.0.1:1", "--kafka-tls-cert", missing}, says: "--kafka-tls-cert: needs --kafka-tls-key"},
		{name: "missing Cassandra CA file", args: []string{"--cassandra", "127.0.0.1:1"}, env: map[string]string{cassandra.EnvTLSCAFile: missing}, says: "tls.ca-file"},
		{name: "bad Cassandra TLS variable", args: []string{"--cassandra", "127.0.0.1:1"}, env: map[string]string{cassandra.EnvTLSEnabled: "maybe"}, says: cassandra.EnvTLSEnabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.says) {
				t.Fatalf("exit %d, want 2 saying %q; stderr: %s", code, tc.says, stderr.String())
			}
		})
	}
}
