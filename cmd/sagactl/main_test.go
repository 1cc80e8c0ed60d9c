package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

func sagactl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func clearEnv(t *testing.T) {
	for _, v := range []string{cassandra.EnvContactPoints, cassandra.EnvKeyspace, cassandra.EnvLocalDatacenter, cassandra.EnvReplication, cassandra.EnvUsername, cassandra.EnvPassword} {
		t.Setenv(v, "")
	}
}

func TestSchemaPrint(t *testing.T) {
	clearEnv(t)
	code, out, errOut := sagactl(t, "schema", "print", "--keyspace", "shop_es", "--replication", "SimpleStrategy:1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want, err := cassandra.SchemaCQL("shop_es", cassandra.SimpleReplication(1))
	if err != nil {
		t.Fatal(err)
	}
	if out != want {
		t.Fatalf("printed script differs from SchemaCQL:\n%s", out)
	}

	// Defaults: the seed's keyspace, NetworkTopologyStrategy datacenter1: 3.
	code, out, _ = sagactl(t, "schema", "print")
	if code != 0 || !strings.Contains(out, "CREATE KEYSPACE IF NOT EXISTS stacksaga_event_store") ||
		!strings.Contains(out, "{'class': 'NetworkTopologyStrategy', 'datacenter1': 3}") {
		t.Fatalf("default print (exit %d):\n%.300s", code, out)
	}
}

func TestSchemaPrintFromConfigFile(t *testing.T) {
	clearEnv(t)
	path := filepath.Join(t.TempDir(), "stacksaga.yaml")
	yaml := "stacksaga:\n  cassandra:\n    keyspace: from_file\n    replication:\n      class: NetworkTopologyStrategy\n      datacenters: {eu: 3, us: 2}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := sagactl(t, "schema", "print", "--config", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "CREATE TABLE IF NOT EXISTS from_file.es_transaction (") || !strings.Contains(out, "'eu': 3, 'us': 2") {
		t.Fatalf("config file not used:\n%.400s", out)
	}
	// A flag beats the file.
	_, out, _ = sagactl(t, "schema", "print", "--config", path, "--keyspace", "from_flag")
	if !strings.Contains(out, "from_flag.es_transaction") {
		t.Fatal("--keyspace did not override the file")
	}
}

func TestUsageErrors(t *testing.T) {
	clearEnv(t)
	for _, args := range [][]string{
		nil,
		{"schema"},
		{"schema", "drop"},
		{"tables", "print"},
		{"schema", "print", "--replication", "Everywhere:3"},
		{"schema", "print", "--hosts", "x"}, // apply-only flag
		{"schema", "print", "extra"},
		{"schema", "diff", "extra"},
		{"schema", "diff", "--replication", "Everywhere:3"},
	} {
		if code, _, _ := sagactl(t, args...); code != 2 {
			t.Errorf("sagactl %q: exit %d, want 2", args, code)
		}
	}
	code, _, errOut := sagactl(t, "schema", "print", "--keyspace", "Not-Valid")
	if code != 1 || !strings.Contains(errOut, "stacksaga.cassandra.keyspace") {
		t.Errorf("invalid keyspace: exit %d, %s", code, errOut)
	}
}

func TestSchemaApply(t *testing.T) {
	clearEnv(t)
	hosts := testenv.CassandraHosts(t)
	keyspace := testenv.UniqueName(t, "sagactl")
	t.Cleanup(func() { dropKeyspace(t, hosts, keyspace) })
	for range 2 { // idempotent
		code, out, errOut := sagactl(t, "schema", "apply", "--hosts", strings.Join(hosts, ","), "--keyspace", keyspace, "--replication", "SimpleStrategy:1")
		if code != 0 {
			t.Fatalf("apply: exit %d: %s", code, errOut)
		}
		if !strings.Contains(out, "schema applied: keyspace "+keyspace) {
			t.Fatalf("apply output %q", out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cassandra.New(ctx, cassandra.Config{ContactPoints: hosts, Keyspace: keyspace})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	scope := storetest.UniqueScope(t)
	tx := eventstore.Transaction{Scope: scope, TxID: "tx-1", State: eventstore.StateStarted, Version: 1}
	if err := s.CreateTransaction(ctx, tx, nil); err != nil {
		t.Fatalf("the applied schema does not take a saga: %v", err)
	}
	if _, err := s.LoadTransaction(ctx, scope, "tx-2"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("LoadTransaction: %v", err)
	}
}

func dropKeyspace(t *testing.T, hosts []string, keyspace string) {
	cl := gocql.NewCluster(hosts...)
	cl.Timeout = time.Minute
	session, err := cl.CreateSession()
	if err != nil {
		t.Errorf("drop keyspace %s: %v", keyspace, err)
		return
	}
	defer session.Close()
	if err := session.Query("DROP KEYSPACE IF EXISTS " + keyspace).Exec(); err != nil {
		t.Errorf("drop keyspace %s: %v", keyspace, err)
	}
}
