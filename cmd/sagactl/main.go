// Command sagactl administers StackSaga's Cassandra event store: its
// schema, and the sagas that need an operator (parked, disabled,
// terminated).
//
//	sagactl schema print [--keyspace ks] [--replication spec] [--config file]
//	sagactl schema apply|diff [--hosts h1:9042,h2] [--keyspace ks] [--replication spec]
//	                          [--local-datacenter dc] [--username u] [--password-file f]
//	                          [--config file] [--timeout 2m]
//	sagactl list in-flight|all|retry-pending|paused|frozen|disabled|compensation-failed [--limit 50] [--after TXID | --page P]
//	sagactl show TXID
//	sagactl restore TXID | --all-disabled
//	sagactl resume TXID CORRELATION_KEY [key=value ...]
//	sagactl cancel|terminate TXID --reason TEXT --brokers H:9092
//	sagactl trace-window --addr 127.0.0.1:8088 --service S
//	sagactl ring [--master host:port] [--json]
//	sagactl sql-barrier print|apply [--table t] [--dsn-file f]
//	sagactl dlt list|show|replay TOPIC [--partition P --offset O] [--reason TEXT]
//
// print writes the schema script (the keyspace and the 11 tables, every
// statement CREATE ... IF NOT EXISTS) to stdout; apply runs it against a
// cluster, then adds to tables created by an older release the columns
// they lack (ALTER TABLE ... ADD; it never drops or changes a column, and
// fails naming table, column and types when a column has another type),
// and lists those ALTER statements and the tables it created in a
// keyspace that existed (tables a later release added); diff prints what apply would run on
// the live keyspace, as CQL (the whole script for a missing keyspace, the
// CREATE TABLE of missing tables, the ALTER TABLE of missing columns), and
// changes nothing. --replication is "SimpleStrategy:<rf>" or
// "NetworkTopologyStrategy:<dc>=<rf>[,<dc>=<rf>...]". Values come from the
// stacksaga.cassandra section of --config (if given), then the
// STACKSAGA_CASSANDRA_* environment variables, then the flags; the rest
// are the defaults of eventstore/cassandra.Config.
//
// list, show, restore and resume work on the sagas of one service
// (--service, --region, --cluster) through the store alone, with the
// connection flags of schema apply and --json for one JSON document on
// stdout. list pages newest first; restore hands a DISABLED,
// COMPENSATION_FAILED or RETRY_PENDING saga back to the retry nodes
// (recovery.Restore); resume claims a PAUSED saga's pause for a resume with
// a context and lets a retry node continue it (recovery.RequestResume).
// Exit codes: 0 done (or already resumed), 1 runtime error, 2 usage error,
// 3 saga not found, 4 saga not restorable (restore), not paused or wrong
// correlation key (resume). `sagactl list -h` prints the whole usage.
//
// sql-barrier print writes the DDL of package sqlbarrier's barrier table;
// sql-barrier apply creates or migrates it in a PostgreSQL database
// (sqlbarrier.CreateSchema), the URL coming from --dsn-file or
// STACKSAGA_SQLBARRIER_DSN.
//
// dlt (or dead-letters) list|show|replay TOPIC reads the dead-letter topic
// TOPIC.dlt straight from Kafka: each record's reason, writer, headers and
// saga; replay re-publishes selected records (--partition, --offset) to
// their origin topic and audits each in its saga's audit trail.
// `sagactl dlt -h` prints its usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/secretflag"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// usage is the top-level help; LISTS stands for the list names (listNames).
var usage = strings.ReplaceAll(`usage:
  sagactl schema print [--keyspace ks] [--replication spec] [--config file]
  sagactl schema apply|diff [--hosts h1:9042,h2] [--keyspace ks] [--replication spec]
                            [--local-datacenter dc] [--username u] [--password-file f]
                            [--config file] [--timeout 2m]
  sagactl list LISTS [--limit N] [--after TXID | --page P] [flags]
  sagactl show TXID [flags]
  sagactl restore TXID | --all-disabled [flags]
  sagactl resume TXID CORRELATION_KEY [key=value ...] [flags]
  sagactl cancel|terminate TXID --reason TEXT --brokers H:9092 [--kafka-tls-ca f] [--kafka-sasl-user u] [flags]
  sagactl trace-window --addr 127.0.0.1:8088 --service S [flags]
  sagactl ring [--master 127.0.0.1:7070] [--json]
  sagactl sql-barrier print|apply [--table stacksaga_barrier] [--dsn-file f] [--timeout 1m]
  sagactl dlt list|show|replay TOPIC [--partition P --offset O] [--reason TEXT] --brokers H:9092 [flags]
(sagactl list -h: the flags and exit codes of list, show, restore and resume)
`, "LISTS", strings.Join(listNames, "|"))

// run is main without the process: it returns the exit code (0 ok, 1
// failure, 2 usage, 3 not found, 4 not restorable or not paused).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help", "help":
			fmt.Fprint(stdout, usage)
			return exitOK
		case "list", "show", "restore", "resume", "cancel", "terminate":
			return runAdmin(ctx, args[0], args[1:], stdout, stderr)
		case "trace-window":
			return runTraceWindow(ctx, args[1:], stdout, stderr)
		case "ring":
			return runRing(ctx, args[1:], stdout, stderr)
		case "sql-barrier":
			return runSQLBarrier(ctx, args[1:], stdout, stderr)
		case "dlt", "dead-letters":
			return runDLT(ctx, args[1:], stdout, stderr)
		}
	}
	if len(args) < 2 || args[0] != "schema" || (args[1] != "print" && args[1] != "apply" && args[1] != "diff") {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	return runSchema(ctx, args, stdout, stderr)
}

// runSchema runs schema print, apply and diff.
func runSchema(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	connect := args[1] != "print" // apply and diff connect
	fs := flag.NewFlagSet("sagactl schema "+args[1], flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML file with a stacksaga.cassandra section")
	keyspace := fs.String("keyspace", "", "keyspace (default stacksaga_event_store)")
	replication := fs.String("replication", "", "SimpleStrategy:<rf> or NetworkTopologyStrategy:<dc>=<rf>[,...] (default NetworkTopologyStrategy:<local-datacenter>=3)")
	var hosts, localDC, username, passwordFile *string
	var timeout *time.Duration
	if connect {
		hosts = fs.String("hosts", "", "comma-separated contact points host[:port] (default 127.0.0.1:9042)")
		localDC = fs.String("local-datacenter", "", "local data centre (default datacenter1)")
		username = fs.String("username", "", "user for PasswordAuthenticator")
		fs.String("password", "", "refused: use --password-file or STACKSAGA_CASSANDRA_PASSWORD")
		passwordFile = fs.String("password-file", "", "file holding the password for PasswordAuthenticator")
		timeout = fs.Duration("timeout", 2*time.Minute, "bound on the whole command")
	}
	if err := secretflag.Parse(fs, args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sagactl: unexpected arguments %q\n%s", fs.Args(), usage)
		return 2
	}

	var cfg cassandra.Config
	var err error
	if *configPath != "" {
		cfg, err = cassandra.LoadConfigFile(*configPath)
	} else {
		cfg, err = cassandra.LoadConfig(nil)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sagactl: %v\n", err)
		return 1
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["keyspace"] {
		cfg.Keyspace = *keyspace
	}
	if connect {
		if set["hosts"] {
			cfg.ContactPoints = splitList(*hosts)
		}
		if set["local-datacenter"] {
			cfg.LocalDatacenter = *localDC
		}
		if set["username"] {
			cfg.Username = *username
		}
		if err := applyPassword(set, *passwordFile, &cfg.Password); err != nil {
			fmt.Fprintf(stderr, "sagactl: %v\n", err)
			return 2
		}
	}
	if set["replication"] {
		r, err := cassandra.ParseReplication(*replication)
		if err != nil {
			fmt.Fprintf(stderr, "sagactl: --replication: %v\n", err)
			return 2
		}
		cfg.Replication = r
	} else if set["local-datacenter"] && *configPath == "" && os.Getenv(cassandra.EnvReplication) == "" {
		// The default replication follows the data centre given here.
		cfg.Replication = cassandra.NetworkReplication(map[string]int{cfg.LocalDatacenter: 3})
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "sagactl: %v\n", err)
		return 1
	}

	if !connect {
		script, err := cassandra.SchemaCQL(cfg.Keyspace, cfg.Replication)
		if err != nil {
			fmt.Fprintf(stderr, "sagactl: %v\n", err)
			return 1
		}
		fmt.Fprint(stdout, script)
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cl, err := cfg.ClusterConfig()
	if err != nil {
		fmt.Fprintf(stderr, "sagactl: %v\n", err)
		return 1
	}
	cl.Keyspace = "" // it may not exist yet
	// A DDL statement waits for the node to write the schema and for the
	// cluster to agree on it: seconds more than a query on a loaded node.
	if cl.Timeout < time.Minute {
		cl.Timeout, cl.WriteTimeout = time.Minute, time.Minute
	}
	session, err := cassandra.Connect(ctx, cl)
	if err != nil {
		fmt.Fprintf(stderr, "sagactl: connect to %s: %v\n", strings.Join(cfg.ContactPoints, ","), err)
		return 1
	}
	defer session.Close()
	where := fmt.Sprintf("keyspace %s on %s", cfg.Keyspace, strings.Join(cfg.ContactPoints, ","))
	pending, err := cassandra.MigrationCQL(ctx, session, cfg.Keyspace, cfg.Replication)
	if err != nil {
		fmt.Fprintf(stderr, "sagactl: %v\n", err)
		return 1
	}
	if args[1] == "diff" {
		if len(pending) == 0 {
			fmt.Fprintf(stdout, "-- %s: up to date\n", where)
			return 0
		}
		fmt.Fprintf(stdout, "-- %s: %d statements to run (sagactl schema apply runs them)\n", where, len(pending))
		for _, stmt := range pending {
			fmt.Fprintf(stdout, "\n%s;\n", stmt)
		}
		return 0
	}
	if err := cassandra.ApplySchema(ctx, session, cfg.Keyspace, cfg.Replication); err != nil {
		fmt.Fprintf(stderr, "sagactl: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "schema applied: keyspace %s (%s) on %s\n", cfg.Keyspace, cfg.Replication, strings.Join(cfg.ContactPoints, ","))
	for _, stmt := range pending {
		switch {
		case strings.HasPrefix(stmt, "ALTER TABLE "):
			fmt.Fprintf(stdout, "  upgraded: %s\n", stmt)
		case strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS "):
			// A table added by a later release (the keyspace existed).
			name, _, _ := strings.Cut(strings.TrimPrefix(stmt, "CREATE TABLE IF NOT EXISTS "), " ")
			fmt.Fprintf(stdout, "  created: table %s\n", name)
		}
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
