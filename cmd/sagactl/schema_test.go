package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// firstReleaseKeyspace returns a fresh keyspace holding the event store's
// tables as the first release created them (the fixture of
// eventstore/cassandra: its schema.cql of then, verbatim), and a session.
func firstReleaseKeyspace(t *testing.T) (hosts []string, keyspace string, s *gocql.Session) {
	t.Helper()
	hosts, keyspace = testenv.CassandraKeyspace(t)
	data, err := os.ReadFile("../../eventstore/cassandra/testdata/schema_v1.cql")
	if err != nil {
		t.Fatal(err)
	}
	cl := gocql.NewCluster(hosts...)
	cl.Timeout = time.Minute
	cl.Logger = gocql.NewLogger(gocql.LogLevelNone)
	s, err = cl.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	var lines []string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			lines = append(lines, line)
		}
	}
	script := strings.NewReplacer("${keyspace}", keyspace, "${replication}", cassandra.SimpleReplication(1).CQL()).Replace(strings.Join(lines, "\n"))
	for _, stmt := range strings.Split(script, ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			if err := s.Query(stmt).Exec(); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
	}
	return hosts, keyspace, s
}

// TestSchemaApplyUpgradesOldKeyspace: diff lists the 10 columns a
// first-release keyspace lacks and the tables added since (es_admin_audit,
// es_business_key), apply adds them (and says so), diff then finds
// nothing, and the store writes sagas with the new fields.
func TestSchemaApplyUpgradesOldKeyspace(t *testing.T) {
	clearEnv(t)
	hosts, ks, _ := firstReleaseKeyspace(t)
	flags := []string{"--hosts", strings.Join(hosts, ","), "--keyspace", ks, "--replication", "SimpleStrategy:1"}
	var alters []string
	for _, table := range []string{"es_transaction", "es_frozen_transaction"} {
		for _, col := range []string{"lifetime_start timestamp", "pause_event text", "trace_id text", "trace_parent text", "definition_version int"} {
			alters = append(alters, "ALTER TABLE "+ks+"."+table+" ADD "+col)
		}
	}

	all, err := cassandra.SchemaStatements(ks, cassandra.SimpleReplication(1))
	if err != nil {
		t.Fatal(err)
	}
	pending := alters
	for _, stmt := range all {
		if strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS "+ks+"."+cassandra.TableAdminAudit+" ") ||
			strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS "+ks+"."+cassandra.TableBusinessKey+" ") {
			pending = append(pending, stmt)
		}
	}

	code, out, errOut := sagactl(t, append([]string{"schema", "diff"}, flags...)...)
	if code != 0 {
		t.Fatalf("diff: exit %d: %s", code, errOut)
	}
	want := "-- keyspace " + ks + " on " + strings.Join(hosts, ",") + ": 12 statements to run (sagactl schema apply runs them)\n\n" +
		strings.Join(pending, ";\n\n") + ";\n"
	if out != want {
		t.Fatalf("diff printed\n%s\nwant\n%s", out, want)
	}

	code, out, errOut = sagactl(t, append([]string{"schema", "apply"}, flags...)...)
	if code != 0 {
		t.Fatalf("apply: exit %d: %s", code, errOut)
	}
	for _, a := range alters {
		if !strings.Contains(out, "  upgraded: "+a+"\n") {
			t.Errorf("apply output does not list %q:\n%s", a, out)
		}
	}
	for _, table := range []string{cassandra.TableAdminAudit, cassandra.TableBusinessKey} {
		if created := "  created: table " + ks + "." + table + "\n"; !strings.Contains(out, created) {
			t.Errorf("apply output does not list %q:\n%s", created, out)
		}
	}

	code, out, errOut = sagactl(t, append([]string{"schema", "diff"}, flags...)...)
	if code != 0 || out != "-- keyspace "+ks+" on "+strings.Join(hosts, ",")+": up to date\n" {
		t.Fatalf("diff after apply: exit %d: %q %s", code, out, errOut)
	}
	code, out, _ = sagactl(t, append([]string{"schema", "apply"}, flags...)...)
	if code != 0 || strings.Contains(out, "upgraded") || strings.Contains(out, "created") {
		t.Fatalf("second apply: exit %d: %s", code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cassandra.New(ctx, cassandra.Config{ContactPoints: hosts, Keyspace: ks})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	scope := storetest.UniqueScope(t)
	tx := eventstore.Transaction{Scope: scope, TxID: "tx-1", State: eventstore.StatePaused, Version: 1,
		PauseEvent: "payment", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", LifetimeStart: time.Now().UTC().Truncate(time.Millisecond)}
	if err := s.CreateTransaction(ctx, tx, nil); err != nil {
		t.Fatalf("the upgraded schema does not take a saga: %v", err)
	}
	if got, err := s.LoadTransaction(ctx, scope, tx.TxID); err != nil || got.TraceID != tx.TraceID || got.PauseEvent != tx.PauseEvent {
		t.Fatalf("LoadTransaction: %+v, %v", got, err)
	}
}

// TestSchemaDiffWrongType: a column of another type fails diff and apply
// (exit 1) with an error naming table, column and both types.
func TestSchemaDiffWrongType(t *testing.T) {
	clearEnv(t)
	hosts, ks, s := firstReleaseKeyspace(t)
	if err := s.Query("ALTER TABLE " + ks + ".es_frozen_transaction ADD pause_event blob").Exec(); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--hosts", strings.Join(hosts, ","), "--keyspace", ks, "--replication", "SimpleStrategy:1"}
	for _, cmd := range []string{"diff", "apply"} {
		code, out, errOut := sagactl(t, append([]string{"schema", cmd}, flags...)...)
		want := "table " + ks + ".es_frozen_transaction: column pause_event has type blob, want text"
		if code != 1 || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and %q", cmd, code, out, errOut, want)
		}
	}
}

// TestSchemaDiffMissingKeyspace: diff of a keyspace that does not exist
// prints the whole script, as CQL, and creates nothing.
func TestSchemaDiffMissingKeyspace(t *testing.T) {
	clearEnv(t)
	hosts := testenv.CassandraHosts(t)
	ks := testenv.UniqueName(t, "nodiff")
	t.Cleanup(func() { dropKeyspace(t, hosts, ks) }) // should diff ever create it
	code, out, errOut := sagactl(t, "schema", "diff", "--hosts", strings.Join(hosts, ","), "--keyspace", ks, "--replication", "SimpleStrategy:1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	stmts, err := cassandra.SchemaStatements(ks, cassandra.SimpleReplication(1))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, fmt.Sprintf(": %d statements to run", len(stmts))) || !strings.HasSuffix(out, "\n"+strings.Join(stmts, ";\n\n")+";\n") {
		t.Fatalf("diff of a missing keyspace:\n%s", out)
	}
	// Still missing: diff changed nothing.
	code, out, _ = sagactl(t, "schema", "diff", "--hosts", strings.Join(hosts, ","), "--keyspace", ks, "--replication", "SimpleStrategy:1")
	if code != 0 || !strings.Contains(out, fmt.Sprintf(": %d statements to run", len(stmts))) {
		t.Fatalf("second diff: exit %d\n%.200s", code, out)
	}
}
