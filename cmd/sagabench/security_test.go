package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// cellTopics lists the broker's topics of cell (sagabench's runs name
// theirs after the cell), over k's SASL_SSL listener.
func cellTopics(t *testing.T, k testenv.KafkaSecure, cell string) map[string]bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DialTLSConfig(k.TLS.Clone()),
		kgo.SASL(plain.Auth{User: k.User, Pass: k.Password}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ts, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	out := map[string]bool{}
	for _, name := range ts.Names() {
		if strings.Contains(name, "-"+cell) {
			out[name] = true
		}
	}
	return out
}

// A small Cassandra cell with every Kafka client over TLS and SASL/PLAIN
// (scripts/services' SASL_SSL listener, which takes nothing else) and every
// Cassandra connection over TLS with a client certificate (the node's
// TLS-only port, through STACKSAGA_CASSANDRA_TLS_*): the framework, the
// floor (its admin client, producers and consumers, its statements' own
// session) and its halves run; the run's fresh keyspace is dropped and the
// cell's topics deleted over them.
func TestCassandraCellOverTLS(t *testing.T) {
	k := testenv.KafkaSASLSSL(t)
	c := testenv.CassandraTLS(t)
	t.Setenv(kafkaflags.DefaultPasswordEnv, k.Password)
	t.Setenv(cassandra.EnvTLSCAFile, c.CAFile)
	t.Setenv(cassandra.EnvTLSCertFile, c.CertFile)
	t.Setenv(cassandra.EnvTLSKeyFile, c.KeyFile)
	const cell = "cassandra-relaxed-c64"
	before := cellTopics(t, k, cell)
	r := decode(t, runBench(t, "--json", "--fresh", "--sagas", "20", "--warmup", "2", "--rounds", "1", "--cells", cell,
		"--kafka", strings.Join(k.Brokers, ","), "--kafka-tls-ca", os.Getenv(testenv.EnvKafkaTLSCA), "--kafka-sasl-user", k.User,
		"--cassandra", strings.Join(c.Hosts, ","), "--keyspace", "tls_"+randomID(), "--timeout", "2m"))
	if r.KafkaSecurity != "TLS, SASL/PLAIN as "+k.User || !r.CassandraTLS {
		t.Errorf("report: kafka_security %q, cassandra_tls %v", r.KafkaSecurity, r.CassandraTLS)
	}
	if len(r.Cells) != 1 {
		t.Fatalf("%d cells", len(r.Cells))
	}
	cr := r.Cells[0]
	if cr.Error != "" || cr.Skipped != "" || cr.Framework.Sagas != 20 {
		t.Fatalf("cell: error %q, skipped %q, %d of 20 sagas", cr.Error, cr.Skipped, cr.Framework.Sagas)
	}
	if cr.RoundTrips == nil || cr.Floor == nil || cr.FloorKafka == nil || cr.FloorCQL == nil {
		t.Fatalf("missing figures: %+v", cr)
	}
	positive(t, cr.Cell, map[string]float64{"sagas/s": cr.Framework.Rate, "round trips": cr.RoundTrips.Total,
		"floor": cr.Floor.Rate, "floor kafka": cr.FloorKafka.Rate, "floor statements": cr.FloorCQL.Rate})
	if r.KeyspaceLeft != "" {
		t.Errorf("the run's keyspace %s is left: %s", r.Keyspace, r.KeyspaceLeft)
	}
	// Topic deletion is asynchronous on the broker: wait for the listing.
	var left []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		left = left[:0]
		for name := range cellTopics(t, k, cell) {
			if !before[name] {
				left = append(left, name)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("topics of the run left on the broker: %v", left)
	}
}

// The security flags are parsed into the clients' options; invalid ones
// are refused naming the flag, and TLS or SASL without --kafka too.
func TestParseSecurityFlags(t *testing.T) {
	var stderr bytes.Buffer
	t.Setenv("SAGABENCH_TEST_PASSWORD", "pw")
	o, err := parse([]string{"--kafka", "127.0.0.1:9093", "--cassandra", "", "--kafka-tls", "--kafka-sasl-user", "u",
		"--kafka-sasl-mechanism", "scram-sha-512", "--kafka-sasl-password-env", "SAGABENCH_TEST_PASSWORD"}, &stderr)
	if err != nil || len(o.kafkaOpts) != 2 || o.kafkaSecurity != "TLS, SASL/SCRAM-SHA-512 as u" {
		t.Fatalf("parse: %d options, security %q, %v", len(o.kafkaOpts), o.kafkaSecurity, err)
	}
	if o, err := parse([]string{"--kafka", "127.0.0.1:9092", "--cassandra", ""}, &stderr); err != nil || o.kafkaOpts != nil || o.kafkaSecurity != "" {
		t.Fatalf("parse without security flags: %d options, security %q, %v", len(o.kafkaOpts), o.kafkaSecurity, err)
	}
	t.Setenv("SAGABENCH_TEST_UNSET", "")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--kafka", "", "--cassandra", "", "--kafka-tls"}, "need --kafka"},
		{[]string{"--kafka", "127.0.0.1:9093", "--kafka-tls-ca", missing}, "--kafka-tls-ca:"},
		{[]string{"--kafka", "127.0.0.1:9093", "--kafka-sasl-user", "u", "--kafka-sasl-password-env", "SAGABENCH_TEST_UNSET"}, "--kafka-sasl-user: no password"},
		{[]string{"--kafka", "127.0.0.1:9093", "--kafka-sasl-user", "u", "--kafka-sasl-password-env", "SAGABENCH_TEST_PASSWORD", "--kafka-sasl-mechanism", "oauthbearer"}, "--kafka-sasl-mechanism"},
		{[]string{"--kafka", "127.0.0.1:9093", "--kafka-sasl-password-env", "SAGABENCH_TEST_PASSWORD"}, "--kafka-sasl-password-env: needs --kafka-sasl-user"},
	} {
		if _, err := parse(tc.args, &stderr); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("parse(%q): %v, want an error saying %q", tc.args, err, tc.says)
		}
	}
}

// A Cassandra setting of the environment that does not hold (a TLS CA
// file that is missing) fails the run before any cell runs, as a usage
// error (exit 2, as sagademo's).
func TestCassandraEnvCheckedFirst(t *testing.T) {
	t.Setenv(cassandra.EnvTLSCAFile, filepath.Join(t.TempDir(), "missing.pem"))
	var stdout, stderr bytes.Buffer
	code := run([]string{"--quiet", "--cells", "embedded-c1,cassandra-relaxed-c1", "--kafka", "127.0.0.1:1", "--cassandra", "127.0.0.1:1"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "tls.ca-file") || stdout.Len() != 0 {
		t.Fatalf("exit %d, want 2 naming tls.ca-file before any cell\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
}

// The table says when the clients used TLS or SASL (such rows do not
// compare with plaintext ones), and says nothing otherwise.
func TestTableSaysSecurity(t *testing.T) {
	var b bytes.Buffer
	(&report{KafkaSecurity: "TLS, SASL/PLAIN as u", CassandraTLS: true}).writeTable(&b)
	if lines := strings.Split(b.String(), "\n"); len(lines) < 2 || lines[1] != "sagabench: Kafka over TLS, SASL/PLAIN as u; Cassandra over TLS" {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	(&report{}).writeTable(&b)
	if strings.Contains(b.String(), "Kafka over") || strings.Contains(b.String(), "Cassandra over") {
		t.Errorf("a plaintext run's table mentions security:\n%s", b.String())
	}
}
