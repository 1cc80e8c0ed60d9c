package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/topics"
)

// bench runs cells and returns the report. A cell that fails is reported
// with its error; the others still run.
func bench(ctx context.Context, o options, cells []cellSpec, stderr io.Writer) (*report, error) {
	rep := &report{
		Sagas: o.sagas, Warmup: o.warmup, NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Kafka: o.kafka, KafkaSecurity: o.kafkaSecurity, Cassandra: o.cassandra, LoadStart: loadAvg(), Started: time.Now().UTC(), Rounds: o.rounds,
	}
	if o.noFloor {
		rep.Rounds, rep.NoFloor = 1, true
	}
	progress := func(format string, args ...any) {
		if !o.quiet {
			fmt.Fprintf(stderr, "sagabench: "+format+"\n", args...)
		}
	}
	runID := randomID()
	if o.fresh {
		o.keyspace += "_" + runID
	}
	if o.cassandraCluster != nil {
		o.cassandraCfg.Keyspace = o.keyspace
		rep.CassandraTLS = o.cassandraCluster.SslOpts != nil
	}
	var cass *cassandra.Store
	var floorCQL *floorSession
	// The cluster cells' options, store and whether their keyspace was
	// opened (cluster.go).
	oc := clusterOptions(o, runID)
	var cassCluster *cassandra.Store
	defer func() {
		if cassCluster != nil {
			_ = cassCluster.Close()
		}
		if o.fresh && rep.ClusterKeyspace != "" {
			if err := dropKeyspace(oc); err != nil {
				rep.KeyspaceLeft = strings.TrimSpace(rep.KeyspaceLeft + " " + err.Error())
				fmt.Fprintf(stderr, "sagabench: could not drop keyspace %s: %v\n", oc.keyspace, err)
			} else {
				progress("dropped keyspace %s", oc.keyspace)
			}
		}
	}()
	openCluster := func() error {
		if cassCluster != nil {
			return nil
		}
		rep.ClusterKeyspace = oc.keyspace
		rep.ClusterKafka, rep.ClusterCassandra = oc.kafka, oc.cassandra
		rep.ClusterDown = o.clusterDown // probed once, before any cell (main.go)
		if o.fresh {
			progress("fresh cluster keyspace %s, dropped at the end", oc.keyspace)
		}
		var err error
		if cassCluster, err = openStore(ctx, oc); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		return nil
	}
	defer func() {
		if cass != nil {
			_ = cass.Close()
		}
		if floorCQL != nil {
			floorCQL.close()
		}
		if o.fresh && rep.Keyspace != "" {
			if err := dropKeyspace(o); err != nil {
				// Said even with --quiet: the keyspace is left behind.
				rep.KeyspaceLeft = err.Error()
				fmt.Fprintf(stderr, "sagabench: could not drop keyspace %s: %v\n", o.keyspace, err)
			} else {
				progress("dropped keyspace %s", o.keyspace)
			}
		}
	}()
	openCassandra := func() error {
		if cass != nil {
			return nil
		}
		var err error
		rep.Keyspace = o.keyspace
		if o.fresh {
			progress("fresh keyspace %s, dropped at the end", o.keyspace)
		}
		if cass, err = openStore(ctx, o); err != nil {
			return err
		}
		floorCQL, err = openFloorSession(ctx, o)
		return err
	}
	if spec, ok := warmCell(o, cells); ok && o.warmServices > 0 {
		if spec.Cassandra {
			if err := openCassandra(); err != nil {
				return nil, err
			}
		}
		w, err := warmServices(ctx, o, spec, runID, cass, newLogger(stderr, o.verbose), progress)
		rep.ServicesWarmup = w
		if err != nil {
			return nil, err
		}
	}
	for _, spec := range cells {
		res := &cellResult{Cell: spec.Name, Infra: spec.Infra, Mode: strings.ToUpper(spec.Mode), Concurrency: spec.Concurrency, Store: "memory"}
		rep.Cells = append(rep.Cells, res)
		if spec.Cassandra {
			res.Store = "cassandra"
		}
		switch {
		case spec.Cluster && (o.clusterKafka == "" || o.clusterCassandra == ""):
			res.Skipped = "no --cluster-kafka and --cluster-cassandra (or KAFKA_CLUSTER_BROKERS and CASSANDRA_CLUSTER_HOSTS)"
			progress("%s: skipped: %s", spec.Name, res.Skipped)
			continue
		case spec.Cluster:
		case spec.RealKafka && o.kafka == "":
			res.Skipped = "no --kafka (or KAFKA_BROKERS)"
			progress("%s: skipped: %s", spec.Name, res.Skipped)
			continue
		case spec.Cassandra && o.cassandra == "":
			res.Skipped = "no --cassandra (or CASSANDRA_HOSTS)"
			progress("%s: skipped: %s", spec.Name, res.Skipped)
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		co, cellCass, cellFloor := o, cass, floorCQL
		switch {
		case spec.Cluster:
			if err := openCluster(); err != nil {
				return nil, err
			}
			co, cellCass, cellFloor = oc, cassCluster, nil
			res.Store = "cassandra-cluster"
		case spec.Cassandra:
			if err := openCassandra(); err != nil {
				return nil, err
			}
			cellCass, cellFloor = cass, floorCQL
		}
		progress("%s: %s, %d sagas (+%d warm-up)", spec.Name, spec.describe(), o.sagas, o.warmup)
		if err := runCell(ctx, co, spec, runID, cellCass, cellFloor, res, newLogger(stderr, o.verbose), progress); err != nil {
			res.Error = err.Error()
			progress("%s: failed: %v", spec.Name, err)
		}
		res.Load = loadAvg()
	}
	rep.LoadEnd = loadAvg()
	rep.Targets = append(checkTargets(rep.Cells), telemetryTargets(rep.Cells)...)
	return rep, nil
}

// runCell measures the framework in spec and its floor in o.rounds rounds,
// then the floor's two halves once. The cell's first framework run counts
// its statements and warms the services; it is not a round (the first run
// of a cell is systematically the slowest on a busy machine). A round is a
// framework run and a floor run; the order alternates — the framework first
// in round 1, the floor first in round 2, and so on — so that a machine's
// drift does not count against whichever always runs first. The cell
// reports the median round. With --no-floor the framework runs once (then
// the --telemetry rounds, if any).
func runCell(ctx context.Context, o options, spec cellSpec, runID string, cass *cassandra.Store, fs *floorSession, res *cellResult, logger *slog.Logger, progress func(string, ...any)) error {
	brokers := splitList(o.kafka)
	if !spec.RealKafka {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("start in-process broker: %w", err)
		}
		defer c.Close()
		brokers = c.ListenAddrs()
	}
	suffix := "b" + runID + "-" + spec.Name
	var kopts []kgo.Opt // TLS and SASL, for the real broker only
	if spec.RealKafka {
		kopts = o.kafkaOpts
	}
	var fwTopics []string // of every framework run of the cell
	if spec.RealKafka {
		// Leave the shared broker as it was found.
		defer func() { deleteTopics(brokers, kopts, fwTopics) }()
	}
	var store eventstore.Store = memory.New()
	if cass != nil && spec.Cassandra {
		store = cass
	}
	rounds := o.rounds
	if o.noFloor {
		rounds = 1
	}
	// tag names round i (from 0) in progress lines when there are several.
	tag := func(i int) string {
		if rounds == 1 {
			return ""
		}
		return fmt.Sprintf(" (round %d of %d)", i+1, rounds)
	}
	// runFramework is the framework's run in round i (from 0), or the
	// cell's first run (i < 0), on fresh topics: the cell's own names in
	// the first run, names ending in -fw<i+1> in round i.
	runFramework := func(i int) (measure, *roundTrips, error) {
		s := suffix
		if i >= 0 {
			s = fmt.Sprintf("%s-fw%d", suffix, i+1)
		}
		names := placeorder.DefaultNames().WithSuffix(s)
		fwTopics = append(fwTopics, frameworkTopics(names)...)
		fw := &framework{spec: spec, brokers: brokers, kafkaOpts: kopts, store: store, cass: cass, names: names, logger: logger}
		m, rt, err := fw.run(ctx, o.warmup, o.sagas, o.timeout)
		label := tag(i)
		if i < 0 && (!o.noFloor || o.telemetry >= 0) {
			label = " (first run: counts the statements, warms the services; not a round)"
		}
		if err != nil {
			return measure{}, nil, fmt.Errorf("framework%s: %w", label, err)
		}
		m = notUsed(spec, m)
		progress("%s: framework%s %.1f sagas/s, p50 %.1fms, p99 %.1fms, %.2f cpu-ms/saga", spec.Name, label, m.Rate, m.P50, m.P99, m.CPUPerSaga)
		return m, rt, nil
	}
	// telemetry measures the cost of telemetry (--telemetry).
	telemetry := func() error {
		if o.telemetry < 0 {
			return nil
		}
		return measureTelemetry(ctx, o, spec, suffix, brokers, kopts, store, cass, logger, res, progress)
	}

	// The cell's first framework run counts the statements a saga sends
	// (all runs send the same: they give the floor its plan) and warms
	// the brokers, Cassandra's JIT and the cell's tables, which make a
	// cell's first run systematically slower than the next ones; it is a
	// measured round only with --no-floor and no --telemetry.
	first, rt, err := runFramework(-1)
	if err != nil {
		return err
	}
	res.Framework, res.RoundTrips = first, rt
	if o.noFloor {
		if err := telemetry(); err != nil {
			return err
		}
		if res.TelemetryPlain != nil {
			res.Framework = *res.TelemetryPlain // a warm run, not the first
		}
		return nil
	}
	plan := planFromRoundTrips(rt)
	// Each run of fl provisions its own topics and saga ids (the prefix
	// gets the run's number), so the rounds share one floor.
	fl := &floor{spec: spec, brokers: brokers, kafkaOpts: kopts, session: fs, plan: plan, topicPrefix: "sagabench.floor-" + suffix, valueSize: envelopeSize()}
	if spec.RealKafka {
		defer func() { deleteTopics(brokers, kopts, fl.topics()) }()
	}
	runFloor := func(i int) (measure, error) {
		m, err := fl.run(ctx, true, plan.perSaga() > 0, o.warmup, o.sagas, o.timeout)
		if err != nil {
			return measure{}, fmt.Errorf("floor%s: %w", tag(i), err)
		}
		m = notUsed(spec, m)
		progress("%s: floor%s %.1f sagas/s, p50 %.1fms", spec.Name, tag(i), m.Rate, m.P50)
		return m, nil
	}
	var done []cellRound
	for i := range rounds {
		var r cellRound
		fw := func() (err error) { r.fw, _, err = runFramework(i); return err }
		floor := func() (err error) { r.floor, err = runFloor(i); return err }
		if err := inTurn(i, fw, floor); err != nil {
			return err
		}
		r.ratio = ratioOf(r.fw, r.floor)
		done = append(done, r)
		setRounds(res, done)
		progress("%s: framework/floor%s %.2f", spec.Name, tag(i), r.ratio)
	}
	if err := telemetry(); err != nil {
		return err
	}
	if plan.perSaga() > 0 {
		hops, err := fl.run(ctx, true, false, o.warmup, o.sagas, o.timeout)
		if err != nil {
			return fmt.Errorf("floor (Kafka hops alone): %w", err)
		}
		stmts, err := fl.run(ctx, false, true, o.warmup, o.sagas, o.timeout)
		if err != nil {
			return fmt.Errorf("floor (statements alone): %w", err)
		}
		hops, stmts = notUsed(spec, hops), notUsed(spec, stmts)
		res.FloorKafka, res.FloorCQL = &hops, &stmts
		progress("%s: floor halves: Kafka hops alone %.1f sagas/s, statements alone %.1f sagas/s", spec.Name, hops.Rate, stmts.Rate)
	}
	return nil
}

// inTurn runs round i's two runs: a then b in rounds 0, 2, ..., b then a
// in rounds 1, 3, ..., so that a machine's drift does not count against
// whichever would always run first. It stops at the first error.
func inTurn(i int, a, b func() error) error {
	if i%2 == 1 {
		a, b = b, a
	}
	if err := a(); err != nil {
		return err
	}
	return b()
}

// cellRound is one round of a cell: a framework run and a floor run.
type cellRound struct {
	fw, floor measure
	// ratio is framework/floor throughput.
	ratio float64
}

// ratioOf is fw's throughput over fl's (0 when fl has none).
func ratioOf(fw, fl measure) float64 {
	if fl.Rate <= 0 {
		return 0
	}
	return fw.Rate / fl.Rate
}

// setRounds sets res's framework and floor figures from the rounds done so
// far: the measures and ratio of the median round by ratio (the upper one
// of an even count), and every round's ratio, sorted.
func setRounds(res *cellResult, rounds []cellRound) {
	sorted := append([]cellRound(nil), rounds...)
	sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].ratio < sorted[b].ratio })
	med := sorted[len(sorted)/2]
	fl := med.floor
	res.Framework, res.Floor, res.Ratio = med.fw, &fl, med.ratio
	res.Ratios = make([]float64, len(sorted))
	for i, r := range sorted {
		res.Ratios[i] = r.ratio
	}
}

// cluster is a driver configuration of sagabench's own sessions (the
// floor's, the keyspace drop's) on the contact points of --cassandra, with
// the store's TLS and credentials (o.cassandraCluster).
func cluster(o options) *gocql.ClusterConfig {
	cl := gocql.NewCluster(splitList(o.cassandra)...)
	if sc := o.cassandraCluster; sc != nil {
		cl.SslOpts, cl.Authenticator = sc.SslOpts, sc.Authenticator
	}
	return cl
}

// openStore opens the framework's Cassandra store, creating the schema.
func openStore(ctx context.Context, o options) (*cassandra.Store, error) {
	s, err := cassandra.New(ctx, o.cassandraCfg)
	if err != nil {
		return nil, fmt.Errorf("cassandra store: %w", err)
	}
	return s, nil
}

// maxKeyspace is the longest keyspace name Cassandra accepts, and
// keyspaceName the names sagabench accepts (unquoted, so never changed by
// Cassandra's lower-casing).
const maxKeyspace = 48

var keyspaceName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// dropKeyspace drops o.keyspace, the --fresh run's own (its tables hold
// nothing but this run's sagas).
func dropKeyspace(o options) error {
	cl := cluster(o)
	cl.Consistency = gocql.One
	cl.Timeout = time.Minute // a schema change on a busy node
	cl.ConnectTimeout = 10 * time.Second
	cl.Logger = gocql.NewLogger(gocql.LogLevelNone)
	s, err := cl.CreateSession()
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return s.Query("DROP KEYSPACE IF EXISTS " + o.keyspace).ExecContext(ctx)
}

// frameworkTopics lists the topics the framework provisions for names.
func frameworkTopics(n placeorder.Names) []string {
	var ts []string
	for _, svc := range []string{n.Inventory, n.Payment, n.Shipping} {
		ts = append(ts, topics.WorkerTopics(svc)...)
	}
	return append(ts, topics.OrchestratorTopics(n.Domain)...)
}

// deleteTopics deletes names on brokers, best effort; kopts are the
// client's TLS and SASL options.
func deleteTopics(brokers []string, kopts []kgo.Opt, names []string) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, kopts...)...)
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _ = kadm.NewClient(cl).DeleteTopics(ctx, names...)
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

// runIDLen is the length of randomID's ids.
const runIDLen = 6

func randomID() string {
	var b [runIDLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// notUsed blanks the CPU figures of the local servers a cell does not use
// (their CPU then belongs to someone else).
func notUsed(spec cellSpec, m measure) measure {
	if !spec.RealKafka {
		m.KafkaCPUPerSaga = -1
	}
	if !spec.Cassandra {
		m.CassandraCPUPerSaga = -1
	}
	return m
}
