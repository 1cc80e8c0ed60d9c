// Command sagabench measures the framework against its floor. It runs a
// fixed matrix of cells — embedded (in-process kfake broker and in-memory
// store), real Kafka with the in-memory store, real Kafka with Cassandra in
// RELAXED_WITH_DEDUP and in STRICT write protection, each at concurrency 1
// and 64, plus embedded at 256 — and prints one row per cell.
//
//	go run ./cmd/sagabench                       # embedded cells only
//	go run ./cmd/sagabench --kafka 127.0.0.1:9092 --cassandra 127.0.0.1:9042
//	go run ./cmd/sagabench --cells 'cassandra-*' --sagas 2000 --json
//
// Each cell runs the place-order saga of examples/placeorder (3 steps, no
// failures) through an orchestrator and three workers in this process, and
// reports sagas/s, the p50/p99/max/mean end-to-end latency (Start to the
// terminal event), the Cassandra round trips per saga by kind (from the
// store's statement counters), and the CPU time of this process per saga.
//
// It then runs the cell's floor: the bare sequence of Kafka hops and
// Cassandra statements a 3-step saga needs, issued by a minimal loop
// without the framework, at the same concurrency: per saga, produce a
// command, consume it, produce a reply, consume it, three times, with the
// same number and kinds of Cassandra statements the framework issued per
// saga in that cell (reads, writes, LWTs, batches of the same size), spread
// over the seven stages of the saga (start, then per step the worker and
// the orchestrator), each stage's statements issued together and the
// stages one after the other. The
// floor is also run as its two halves (Kafka hops alone, statements alone)
// so that a row says which one bounds it. The ratio column is
// framework/floor throughput.
//
// A cell measures the framework and the floor in --rounds rounds (default
// 3), a framework run and a floor run each, alternating which runs first:
// on a busy machine the first run of a cell is systematically the slower
// one. The row shows the median round by ratio; every round's ratio is
// listed after the table. The floor's halves run once, after the rounds;
// with --no-floor the framework runs once.
//
// After the table it checks the targets of the performance issue and, for
// each one missed, prints what the floor allows and why.
//
// The cluster cells (cluster.go) run the saga on the three-node cluster of
// `scripts/services up --cluster` (--cluster-kafka, --cluster-cassandra,
// defaulting to $KAFKA_CLUSTER_BROKERS and $CASSANDRA_CLUSTER_HOSTS), in a
// keyspace with replication factor 3, QUORUM and SERIAL, RELAXED and
// STRICT at concurrency 64, framework only: cluster-relaxed-c64 and
// cluster-strict-c64 with every node up (they create --cluster-keyspace if
// missing), cluster-down-relaxed-c64 and cluster-down-strict-c64 with
// exactly one Cassandra node down, which run only when named and never
// create anything. sagabench stops no node: it refuses (exit 2) when the
// nodes do not match the cells. On this project's machine:
//
//	eval "$(scripts/services env --cluster)"
//	go run ./cmd/sagabench --cells 'cluster-relaxed-c64,cluster-strict-c64'
//	kill "$(cat "$STACKSAGA_CLUSTER_DIR/cassandra-3/pid")"   # stop node 3
//	go run ./cmd/sagabench --cells 'cluster-down-*'
//	scripts/services up --cluster                           # restart it
//
// Security: the --kafka-tls* and --kafka-sasl-* flags (internal/kafkaflags)
// give every Kafka client of the real-Kafka cells TLS and SASL: the
// framework's, the floor's, and the admin clients that create and delete
// the topics. The Cassandra connections (the store, the floor's session,
// --fresh's drop) take the store's settings other than the contact points
// and keyspace from the STACKSAGA_CASSANDRA_* variables
// (cassandra.Config.ApplyEnv): TLS, credentials, consistency, timeouts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/cassandraenv"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/secretflag"
)

type options struct {
	sagas  int
	warmup int
	// warmServices is the most sagas run before the cells to warm the
	// real servers' JITs (warm.go); 0: none.
	warmServices int
	cells        string
	kafka        string
	cassandra    string
	keyspace     string
	// fresh: the Cassandra cells run in a keyspace of their own, keyspace
	// plus the run's id, dropped at the end.
	fresh   bool
	json    bool
	noFloor bool
	timeout time.Duration
	quiet   bool
	verbose bool
	cpuprof string
	memprof string
	// rounds is how many framework/floor pairs measure each cell (the
	// framework runs once with noFloor).
	rounds int
	// telemetry is the sampled fraction of sagas for the telemetry
	// runs; negative: no telemetry runs.
	telemetry float64
	// telemetryRounds is how many with/without pairs measure it.
	telemetryRounds int
	// kafkaSecurity describes the real-Kafka clients' TLS and SASL
	// (kafkaflags), kafkaOpts are their options.
	kafkaSecurity string
	kafkaOpts     []kgo.Opt
	// lookup reads the environment (os.LookupEnv).
	lookup func(string) (string, bool)
	// cassandraCfg is the store's configuration and cassandraCluster
	// its driver configuration (cassandraenv.Config), set by run when a
	// Cassandra cell runs, before any cell (bench then gives cassandraCfg
	// the run's keyspace); the floor's session and the keyspace drop take
	// its TLS and credentials.
	cassandraCfg     cassandra.Config
	cassandraCluster *gocql.ClusterConfig
	// recovery names the recovery cells to run instead of the matrix
	// (recovery.go); recoverySagas is how many sagas each measures.
	recovery      string
	recoverySagas int
	// recoveryChild, recoverySuffix and recoveryInstance make this
	// process a child of the crash cell (recoveryChild).
	recoveryChild, recoverySuffix, recoveryInstance string
	// clusterKafka and clusterCassandra are the three-node cluster's
	// endpoints for the cluster cells (cluster.go), clusterDC its data
	// centre and clusterKeyspace the cells' keyspace; clusterCfg and
	// clusterDriver are set like cassandraCfg when a cluster cell runs,
	// and clusterDown to its nodes found down then.
	clusterKafka, clusterCassandra, clusterDC, clusterKeyspace string
	clusterCfg                                                 cassandra.Config
	clusterDriver                                              *gocql.ClusterConfig
	clusterDown                                                []string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("sagabench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.sagas, "sagas", 2000, "sagas measured per cell (the floor runs as many)")
	fs.IntVar(&o.warmup, "warmup", -1, "sagas run before measuring, per cell (default: a tenth of --sagas, at most 200)")
	fs.IntVar(&o.warmServices, "warm-services", 0, fmt.Sprintf("before the cells, run at most this many sagas of the first real-services cell, unmeasured, in chunks of %d, until the local broker's and Cassandra's JIT compilers take under %d%% of their CPU in a chunk (a freshly started JVM compiles for tens of thousands of sagas); 0: no warming", warmChunk, warmJITPct))
	fs.StringVar(&o.cells, "cells", "", "comma-separated cell names or patterns (path.Match, e.g. 'cassandra-*'); default every cell the endpoints allow but the cluster-down-* ones, which run only when named (one Cassandra node of the cluster stopped first); 'list' lists them")
	fs.StringVar(&o.kafka, "kafka", os.Getenv("KAFKA_BROKERS"), "Kafka bootstrap brokers, comma-separated (default $KAFKA_BROKERS; unset: embedded cells only)")
	fs.StringVar(&o.cassandra, "cassandra", os.Getenv("CASSANDRA_HOSTS"), "Cassandra contact points, comma-separated (default $CASSANDRA_HOSTS; unset: no Cassandra cells)")
	fs.StringVar(&o.keyspace, "keyspace", "stacksaga_bench", "Cassandra keyspace (created with SimpleStrategy RF 1 if missing)")
	fs.BoolVar(&o.fresh, "fresh", false, "run the Cassandra cells in a new keyspace, --keyspace plus \"_\" and the run's id, and drop it at the end, so that rows and compaction left by earlier runs do not weigh on this one's figures (a cluster with auto_snapshot keeps a snapshot of it); cluster-relaxed-c64 and cluster-strict-c64 likewise in --cluster-keyspace plus the id; refused with the cluster-down-* cells, which cannot create a keyspace")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON instead of a table")
	fs.BoolVar(&o.noFloor, "no-floor", false, "measure the framework only")
	fs.IntVar(&o.rounds, "rounds", 3, "framework/floor pairs per cell, alternating which runs first; the row shows the median round's (with --no-floor the framework runs once)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up on a cell's phase after this long")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines on stderr")
	fs.BoolVar(&o.verbose, "v", false, "log framework warnings")
	fs.Float64Var(&o.telemetry, "telemetry", -1, "also run each cell's framework with OpenTelemetry on (metrics, and traces of this fraction of the sagas: 1 traces all, 0 metrics only) and report what it costs")
	fs.IntVar(&o.telemetryRounds, "telemetry-rounds", 3, "with --telemetry, alternate runs without and with telemetry this many times and report the median round's cost")
	fs.StringVar(&o.cpuprof, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&o.memprof, "memprofile", "", "write an allocation profile of the whole run to this file (go tool pprof -sample_index=alloc_space)")
	fs.StringVar(&o.recovery, "recovery", "", "run the recovery cells instead of the matrix, on real Kafka and Cassandra with the default configuration, in a keyspace of their own dropped at the end: comma-separated names among "+strings.Join(recoveryCellNames, ", ")+", or all; each prints p50/p99 of its healing time and a verdict against issue 37's target")
	fs.IntVar(&o.recoverySagas, "recovery-sagas", 50, "sagas measured per recovery cell")
	fs.StringVar(&o.recoveryChild, "recovery-child", "", "internal: run as a child process of the crash cell, in this role (orchestrator or workers)")
	fs.StringVar(&o.recoverySuffix, "recovery-suffix", "", "internal: the crash cell's names suffix")
	fs.StringVar(&o.recoveryInstance, "recovery-instance", "", "internal: the crash cell child's instance id")
	fs.StringVar(&o.clusterKafka, "cluster-kafka", os.Getenv("KAFKA_CLUSTER_BROKERS"), "the three-node cluster's Kafka brokers for the cluster cells, comma-separated (default $KAFKA_CLUSTER_BROKERS, which scripts/services env --cluster prints; unset: no cluster cells)")
	fs.StringVar(&o.clusterCassandra, "cluster-cassandra", os.Getenv("CASSANDRA_CLUSTER_HOSTS"), "the three-node cluster's Cassandra nodes for the cluster cells, every node, comma-separated (default $CASSANDRA_CLUSTER_HOSTS; unset: no cluster cells); a node whose CQL port refuses connections counts as down")
	fs.StringVar(&o.clusterDC, "cluster-dc", envOr("CASSANDRA_CLUSTER_DC", "datacenter1"), "the cluster's data centre (default $CASSANDRA_CLUSTER_DC, else datacenter1): the cluster keyspace has replication factor 3 in it")
	fs.StringVar(&o.clusterKeyspace, "cluster-keyspace", defaultClusterKeyspace, "the cluster cells' keyspace (NetworkTopologyStrategy, replication factor 3 in --cluster-dc; reads and writes at QUORUM, LWTs at SERIAL), created if missing by cluster-relaxed-c64 and cluster-strict-c64 while every node is up; the cluster-down-* cells need it made")
	kafkaSec := kafkaflags.Register(fs)
	o.lookup = os.LookupEnv
	if err := secretflag.Parse(fs, args); err != nil {
		return o, err
	}
	var errs []error
	if o.sagas < 1 {
		errs = append(errs, errors.New("--sagas must be at least 1"))
	}
	if o.warmup < 0 {
		o.warmup = min(o.sagas/10, 200)
	}
	if o.warmServices < 0 {
		errs = append(errs, errors.New("--warm-services must be at least 0"))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if o.rounds < 1 {
		errs = append(errs, errors.New("--rounds must be at least 1"))
	}
	if o.telemetryRounds < 1 {
		errs = append(errs, errors.New("--telemetry-rounds must be at least 1"))
	}
	if o.telemetry > 1 {
		errs = append(errs, errors.New("--telemetry must be a fraction from 0 to 1 (negative: off)"))
	}
	// --fresh drops the keyspace it names: only a name Cassandra takes as
	// it is (unquoted, never lower-cased), so that the drop can name
	// nothing but the run's own.
	if o.fresh && !keyspaceName.MatchString(o.keyspace+"_"+strings.Repeat("0", runIDLen)) {
		errs = append(errs, fmt.Errorf("--keyspace %q: with --fresh, at most %d lower-case letters, digits and underscores, starting with a letter (the run's keyspace adds \"_\" and a %d-character id)",
			o.keyspace, maxKeyspace-1-runIDLen, runIDLen))
	}
	if (o.clusterKafka == "") != (o.clusterCassandra == "") {
		errs = append(errs, errors.New("--cluster-kafka and --cluster-cassandra go together: the cluster cells use both (or neither, and do not run)"))
	}
	if !keyspaceName.MatchString(o.clusterKeyspace) || o.fresh && !keyspaceName.MatchString(o.clusterKeyspace+"_"+strings.Repeat("0", runIDLen)) {
		errs = append(errs, fmt.Errorf("--cluster-keyspace %q: at most %d lower-case letters, digits and underscores, starting with a letter (%d with --fresh)",
			o.clusterKeyspace, maxKeyspace, maxKeyspace-1-runIDLen))
	}
	if o.cassandra != "" && o.kafka == "" {
		errs = append(errs, errors.New("--cassandra needs --kafka: the Cassandra cells run on real Kafka"))
	}
	if kafkaSec.Requested() && o.kafka == "" {
		errs = append(errs, errors.New("--kafka-tls and --kafka-sasl-* need --kafka: the embedded cells' in-process broker takes neither TLS nor SASL"))
	}
	var err error
	if o.kafkaOpts, err = kafkaSec.Opts(o.lookup); err != nil {
		errs = append(errs, err)
	}
	if kafkaSec.Requested() {
		o.kafkaSecurity = kafkaSec.String()
	}
	if w := kafkaSec.Warning(); w != "" {
		fmt.Fprintln(stderr, "sagabench: warning: "+w)
	}
	return o, errors.Join(errs...)
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "sagabench:", err)
		return 2
	}
	if o.recoveryChild != "" {
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
		defer cancel()
		return recoveryChild(ctx, o, o.recoveryChild, o.recoverySuffix, o.recoveryInstance, stdout, stderr)
	}
	if o.recovery != "" {
		if o.recoverySagas < 1 {
			fmt.Fprintln(stderr, "sagabench: --recovery-sagas must be at least 1")
			return 2
		}
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
		defer cancel()
		return runRecovery(ctx, o, o.recovery, stdout, stderr)
	}
	if o.cells == "list" {
		for _, c := range matrix() {
			fmt.Fprintf(stdout, "%-25s %s\n", c.Name, c.describe())
		}
		return 0
	}
	cells, err := selectCells(matrix(), o.cells)
	if err != nil {
		fmt.Fprintln(stderr, "sagabench:", err)
		return 2
	}
	if err := checkClusterFlags(cells, o.fresh); err != nil {
		fmt.Fprintln(stderr, "sagabench:", err)
		return 2
	}
	if hasCluster, _, nodeDown := clusterSelection(cells); hasCluster && o.clusterCassandra != "" {
		hosts := splitList(o.clusterCassandra)
		o.clusterDown = downNodes(hosts, nodeProbeTimeout)
		if err := checkClusterNodes(cells, hosts, o.clusterDown); err != nil {
			fmt.Fprintln(stderr, "sagabench:", err)
			return 2
		}
		if o.clusterCfg, o.clusterDriver, err = clusterStoreConfig(hosts, o.clusterKeyspace, o.clusterDC, !nodeDown, o.lookup); err != nil {
			fmt.Fprintln(stderr, "sagabench:", err)
			return 2
		}
	}
	if o.cassandra != "" && slices.ContainsFunc(cells, func(c cellSpec) bool { return c.Cassandra && !c.Cluster }) {
		// Checked before any cell runs (the TLS files read), as a usage
		// error like the flags'.
		if o.cassandraCfg, o.cassandraCluster, err = cassandraenv.Config("--cassandra", splitList(o.cassandra), o.keyspace, o.lookup); err != nil {
			fmt.Fprintln(stderr, "sagabench:", err)
			return 2
		}
	}
	if o.cpuprof != "" {
		f, err := os.Create(o.cpuprof)
		if err != nil {
			fmt.Fprintln(stderr, "sagabench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "sagabench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if o.memprof != "" {
		defer func() {
			if err := writeHeapProfile(o.memprof); err != nil {
				fmt.Fprintln(stderr, "sagabench:", err)
			}
		}()
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	rep, err := bench(ctx, o, cells, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sagabench:", err)
		return 1
	}
	if o.json {
		if err := rep.writeJSON(stdout); err != nil {
			fmt.Fprintln(stderr, "sagabench:", err)
			return 1
		}
	} else {
		rep.writeTable(stdout)
	}
	for _, c := range rep.Cells {
		if c.Error != "" {
			return 1
		}
	}
	if rep.KeyspaceLeft != "" {
		return 1
	}
	return 0
}

// cellSpec is one cell of the matrix.
type cellSpec struct {
	Name string
	// Infra is embedded, kafka-memory, cassandra-relaxed or
	// cassandra-strict.
	Infra       string
	RealKafka   bool
	Cassandra   bool
	Mode        string // write protection: relaxed or strict
	Concurrency int
	// Cluster: the cell runs on the three-node cluster (cluster.go);
	// NodeDown: with exactly one Cassandra node down.
	Cluster, NodeDown bool
}

func (c cellSpec) describe() string {
	k, s := "in-process kfake broker", "in-memory store"
	if c.RealKafka {
		k = "real Kafka"
	}
	if c.Cassandra {
		s = "Cassandra"
	}
	if c.Cluster {
		k, s = "3-broker Kafka", fmt.Sprintf("3-node Cassandra (RF %d, QUORUM/SERIAL)", clusterReplicationFactor)
		if c.NodeDown {
			s += " with one node down"
		} else {
			s += " with every node up"
		}
	}
	d := fmt.Sprintf("%s + %s, %s write protection, concurrency %d", k, s, strings.ToUpper(c.Mode), c.Concurrency)
	if c.NodeDown {
		d += " (only when named: stop one node first)"
	}
	return d
}

// matrix returns every cell, in the order they run.
func matrix() []cellSpec {
	var cells []cellSpec
	for _, infra := range []struct {
		name       string
		kafka, cql bool
		mode       string
	}{
		{"embedded", false, false, "relaxed"},
		{"kafka-memory", true, false, "relaxed"},
		{"cassandra-relaxed", true, true, "relaxed"},
		{"cassandra-strict", true, true, "strict"},
	} {
		concs := []int{1, 64}
		if infra.name == "embedded" {
			concs = append(concs, 256) // the embedded target is at 256
		}
		for _, c := range concs {
			cells = append(cells, cellSpec{
				Name: fmt.Sprintf("%s-c%d", infra.name, c), Infra: infra.name,
				RealKafka: infra.kafka, Cassandra: infra.cql, Mode: infra.mode, Concurrency: c,
			})
		}
	}
	for _, down := range []bool{false, true} {
		for _, mode := range []string{"relaxed", "strict"} {
			infra := "cluster-" + mode
			if down {
				infra = "cluster-down-" + mode
			}
			cells = append(cells, cellSpec{
				Name: infra + "-c64", Infra: infra, RealKafka: true, Cassandra: true, Mode: mode, Concurrency: 64,
				Cluster: true, NodeDown: down,
			})
		}
	}
	return cells
}

// selectCells returns the cells matching the comma-separated patterns, in
// matrix order; when empty, every cell but the node-down ones, which run
// only when named (the operator stops a node for them first).
func selectCells(all []cellSpec, patterns string) ([]cellSpec, error) {
	if strings.TrimSpace(patterns) == "" {
		var out []cellSpec
		for _, c := range all {
			if !c.NodeDown {
				out = append(out, c)
			}
		}
		return out, nil
	}
	var pats []string
	for _, p := range strings.Split(patterns, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("--cells: bad pattern %q: %w", p, err)
			}
			pats = append(pats, p)
		}
	}
	var out []cellSpec
	used := make(map[string]bool)
	for _, c := range all {
		for _, p := range pats {
			if ok, _ := path.Match(p, c.Name); ok {
				out = append(out, c)
				used[p] = true
				break
			}
		}
	}
	for _, p := range pats {
		if !used[p] {
			return nil, fmt.Errorf("--cells: %q matches no cell (see --cells list)", p)
		}
	}
	return out, nil
}

// envOr is the variable k, or def when it is unset or empty.
func envOr(k, def string) string {
	if v := strings.TrimSpace(os.Getenv(k)); v != "" {
		return v
	}
	return def
}

// newLogger logs framework errors (warnings with -v) to w.
func newLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelError
	if verbose {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// writeHeapProfile writes the allocation profile of the run so far to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
