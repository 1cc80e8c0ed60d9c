// Command sagademo runs place-order sagas end to end: an orchestrator and
// three workers (inventory, payment, shipping) in one process. With no
// --kafka flag it starts an in-process kfake broker and uses the in-memory
// event store, so it needs nothing installed.
//
//	go run ./cmd/sagademo --sagas 2000 --fail-rate 0.1
//
// It writes, on stderr, a banner line ("sagademo: N sagas, ..."), a
// progress line every second and at the end ("progress: started=..."), and
// a memory line ("memory: ..."); and, on stdout, one summary line:
//
//	sagas=N completed=X compensated=Y compensation_failed=0 stuck=0 elapsed=1.23s rate=812.3/s p50_ms=4.1 p99_ms=12.9 ...
//
// --quiet leaves the summary line alone.
//
// and exits non-zero if any saga is stuck (not terminal at the end).
//
// Recovery: --transient-rate makes a fraction of the steps fail retryably
// once, --crash-rate makes the orchestrator abandon a fraction of the sagas
// mid-way as if its process died (after the create, before publishing a
// step, in the middle of compensation), and --window sets the recovery
// window in seconds. The orchestrator is then also a retry node that
// re-drives and restores them; the summary adds retried=, restored= and
// directory_left= (rows left in sealed windows of the recovery directory
// after a final scan), and retry_p50_ms= / retry_p99_ms= (from a retryable
// failure's reply applied to the retried attempt's reply applied: the
// in-process retry, about a second with the defaults) and
// recovery_p50_ms= / recovery_p99_ms= (from a saga abandoned by
// --crash-rate to its next step reply applied: its restore watchdog, 5
// windows after its last transition here).
//
// Pausable sagas: --pause-rate makes the payment step of a fraction of the
// sagas authorise asynchronously: it pauses the saga (PAUSED, waiting for
// PAYMENT_AUTHORISATION), and a separate goroutine resumes each paused saga
// after a random delay of at most a second with orchestrator.Resume, as a
// payment gateway's webhook would; the summary adds paused= and resumed=.
//
// Cancels: --cancel-rate makes a fraction of the sagas cancelled at a
// random moment (within maxCancelDelay of their start) with
// orchestrator.Cancel, as a customer would; they end COMPENSATED (or
// COMPLETED, when the cancel comes after the last step), and the summary
// adds cancel_requested= (cancels asked), cancelled= (cancels the
// orchestrator applied) and cancel_too_late= (refused or ignored: the saga
// had ended).
// SQL barrier: --sql books the payment step in a PostgreSQL ledger through
// the SQL barrier (package sqlbarrier), on the server at $POSTGRES_DSN, in a
// fresh schema dropped at the end; the summary adds sql_effects= (ledger
// rows: debits and refunds) and sql_double_effects= (rows beyond the first
// for one saga and kind, read from the ledger itself: 0 when every effect
// was booked exactly once, --duplicates included).
//
// Security: with --kafka, the --kafka-tls* and --kafka-sasl-* flags
// (internal/kafkaflags) give every Kafka client of the demo TLS and SASL
// (the password from the environment, KAFKA_SASL_PASSWORD by default). With
// --cassandra, the store's connection settings other than the contact point
// and keyspace come from the STACKSAGA_CASSANDRA_* variables
// (cassandra.Config.ApplyEnv): TLS (STACKSAGA_CASSANDRA_TLS_CA_FILE, ...),
// credentials, consistency levels, timeouts.
package main

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver (--sql)
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/cassandraenv"
	"github.com/stacksaga-go/stacksaga/internal/duplicator"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/secretflag"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
	"github.com/stacksaga-go/stacksaga/sqlbarrier"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

type options struct {
	sagas       int
	concurrency int
	failRate    float64
	kafka       string
	cassandra   string
	keyspace    string
	suffix      string
	duplicates  int
	mode        string
	groupType   string
	timeout     time.Duration
	quiet       bool
	verbose     bool

	transientRate float64
	crashRate     float64
	window        time.Duration

	telemetry   bool
	cpuProfile  string
	metricsAddr string
	traceRatio  float64
	// afterRun, when set, is called with the result and the /metrics URL
	// once the sagas are done, before anything is shut down (tests scrape
	// the metrics there).
	afterRun   func(res result, metricsURL string)
	pauseRate  float64
	cancelRate float64
	retryNodes int
	// sql: the payment step books a PostgreSQL ledger through the SQL
	// barrier ($POSTGRES_DSN).
	sql bool

	// kafkaSecurity describes the Kafka clients' TLS and SASL
	// (kafkaflags), kafkaOpts are their options, given to every Kafka
	// client of the demo.
	kafkaSecurity string
	kafkaOpts     []kgo.Opt
	// cassandraCfg is the store's configuration with --cassandra: the
	// STACKSAGA_CASSANDRA_* variables applied, then the flags;
	// cassandraTLS says its connections use TLS.
	cassandraCfg cassandra.Config
	cassandraTLS bool
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("sagademo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.sagas, "sagas", 1000, "number of place-order sagas to run")
	fs.IntVar(&o.concurrency, "concurrency", 256, "sagas in flight at once")
	fs.Float64Var(&o.failRate, "fail-rate", 0, "fraction of sagas whose last step fails non-retryably (they compensate)")
	fs.StringVar(&o.kafka, "kafka", "", "Kafka bootstrap host:port (default: an in-process kfake broker)")
	fs.StringVar(&o.cassandra, "cassandra", "", "Cassandra host:port for the event store (default: the in-memory store)")
	fs.StringVar(&o.keyspace, "keyspace", "stacksaga_demo", "Cassandra keyspace (created with SimpleStrategy RF 1 if missing)")
	fs.IntVar(&o.duplicates, "duplicates", 0, "deliver every command and every reply K extra times")
	fs.StringVar(&o.mode, "mode", "relaxed", "write protection of the workers: strict (LWT leases), relaxed (RELAXED_WITH_DEDUP) or none")
	fs.StringVar(&o.groupType, "group-type", "consumer", "how workers and orchestrator consume: consumer (consumer groups) or share (Kafka share groups, KIP-932)")
	fs.StringVar(&o.suffix, "suffix", "", "suffix for every domain and service name (topics, groups), to share a broker with other runs")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up waiting for sagas after this long")
	fs.Float64Var(&o.transientRate, "transient-rate", 0, "fraction of steps whose first attempt fails retryably (re-driven by recovery)")
	fs.Float64Var(&o.crashRate, "crash-rate", 0, "fraction of sagas the orchestrator abandons mid-way as if its process died (restored by recovery)")
	fs.Float64Var(&o.pauseRate, "pause-rate", 0, "fraction of sagas whose payment step pauses them (asynchronous authorisation); a separate goroutine resumes each after a random delay of at most 1s")
	fs.Float64Var(&o.cancelRate, "cancel-rate", 0, "fraction of sagas cancelled (orchestrator.Cancel) at a random moment within 50ms of their start; they compensate what they completed")
	fs.IntVar(&o.retryNodes, "retry-nodes", 0, "run an embedded ring coordinator (master and slave) and N more orchestrator instances as retry nodes sharing the token ring (default: the one orchestrator is the retry node)")
	var windowSec float64
	fs.Float64Var(&windowSec, "window", 0, "recovery window interval in seconds (dividing 60, or whole minutes); default 2 with --transient-rate or --crash-rate, else the production 60")
	fs.BoolVar(&o.telemetry, "telemetry", false, "trace and measure with OpenTelemetry (in-process span exporter, Prometheus metrics); the summary adds spans=, duplicates_skipped= and stale_replies=")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve the Prometheus metrics at http://ADDR/metrics while the demo runs (implies --telemetry)")
	fs.Float64Var(&o.traceRatio, "trace-ratio", 1, "with --telemetry, the fraction of sagas traced (head sampling at Start; the workers follow the saga's decision); 0 turns tracing off, leaving the metrics")
	fs.BoolVar(&o.sql, "sql", false, "book the payment step in a PostgreSQL ledger through the SQL barrier, on the server at $POSTGRES_DSN; the summary adds sql_effects= and sql_double_effects=")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines")
	fs.BoolVar(&o.verbose, "v", false, "log framework warnings")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	kafkaSec := kafkaflags.Register(fs)
	if err := secretflag.Parse(fs, args); err != nil {
		return o, err
	}
	o.window = time.Duration(windowSec * float64(time.Second))
	if o.metricsAddr != "" {
		o.telemetry = true
	}
	var errs []error
	if o.transientRate < 0 || o.transientRate > 1 {
		errs = append(errs, errors.New("--transient-rate must be within [0, 1]"))
	}
	if o.crashRate < 0 || o.crashRate > 1 {
		errs = append(errs, errors.New("--crash-rate must be within [0, 1]"))
	}
	if o.pauseRate < 0 || o.pauseRate > 1 {
		errs = append(errs, errors.New("--pause-rate must be within [0, 1]"))
	}
	if o.cancelRate < 0 || o.cancelRate > 1 {
		errs = append(errs, errors.New("--cancel-rate must be within [0, 1]"))
	}
	if o.retryNodes < 0 {
		errs = append(errs, errors.New("--retry-nodes must be at least 0"))
	}
	if o.window == 0 && (o.transientRate > 0 || o.crashRate > 0 || o.retryNodes > 0) {
		o.window = 2 * time.Second
	}
	if o.window != 0 {
		if err := recovery.ValidInterval(o.window); err != nil {
			errs = append(errs, fmt.Errorf("--window: %w", err))
		}
	}
	if o.sagas < 1 {
		errs = append(errs, errors.New("--sagas must be at least 1"))
	}
	if o.concurrency < 1 {
		errs = append(errs, errors.New("--concurrency must be at least 1"))
	}
	switch o.mode {
	case "strict", "relaxed", "none":
	default:
		errs = append(errs, fmt.Errorf("--mode %q: want strict, relaxed or none", o.mode))
	}
	if _, err := topics.ParseGroupType(o.groupType); err != nil {
		errs = append(errs, fmt.Errorf("--group-type %q: want consumer or share", o.groupType))
	}
	if o.duplicates < 0 {
		errs = append(errs, errors.New("--duplicates must be at least 0"))
	}
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-addr: %w", err))
		}
	}
	if o.traceRatio < 0 || o.traceRatio > 1 {
		errs = append(errs, errors.New("--trace-ratio must be within [0, 1]"))
	}
	if o.failRate < 0 || o.failRate > 1 {
		errs = append(errs, errors.New("--fail-rate must be within [0, 1]"))
	}
	if kafkaSec.Requested() && o.kafka == "" {
		errs = append(errs, errors.New("--kafka-tls and --kafka-sasl-* need --kafka: the in-process broker takes neither TLS nor SASL"))
	}
	var err error
	if o.kafkaOpts, err = kafkaSec.Opts(os.LookupEnv); err != nil {
		errs = append(errs, err)
	}
	o.kafkaSecurity = kafkaSec.String()
	if w := kafkaSec.Warning(); w != "" {
		fmt.Fprintln(stderr, "sagademo: warning: "+w)
	}
	if o.cassandra != "" {
		var cl *gocql.ClusterConfig
		if o.cassandraCfg, cl, err = cassandraenv.Config("--cassandra", []string{o.cassandra}, o.keyspace, os.LookupEnv); err != nil {
			errs = append(errs, err)
		} else {
			o.cassandraTLS = cl.SslOpts != nil
		}
	}
	return o, errors.Join(errs...)
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parse(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sagademo:", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	var tel *demoTelemetry
	if opts.telemetry {
		if tel, err = newDemoTelemetry(opts); err != nil {
			fmt.Fprintln(stderr, "sagademo:", err)
			return 1
		}
		defer func() { _ = tel.close() }()
		if tel.metricsURL != "" && !opts.quiet {
			fmt.Fprintln(stderr, "sagademo: metrics at", tel.metricsURL)
		}
	}
	if opts.cpuProfile != "" {
		f, err := os.Create(opts.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "sagademo:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "sagademo:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	res, err := demo(ctx, opts, tel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sagademo:", err)
		return 1
	}
	fmt.Fprintln(stdout, res.summary())
	if res.stuck > 0 || res.endedDifferently > 0 || res.endedWrong > 0 || (res.endedTwice > 0 && opts.retryNodes == 0) {
		return 1
	}
	return 0
}

type result struct {
	sagas, completed, compensated, compensationFailed, stuck int
	elapsed                                                  time.Duration
	// p50 and p99 are end-to-end latencies (Start to the terminal
	// event) of the sagas that ended.
	p50, p99 time.Duration
	// stmtsPerSaga is set when the store is Cassandra.
	stmtsPerSaga float64
	hasStmts     bool
	// duplicateExecutions counts business-handler runs beyond the first
	// per transaction, span and kind, as the handlers saw them.
	duplicateExecutions int
	// endedTwice counts terminal events, naming the state the saga had
	// ended in already, beyond one per saga. With one orchestrator
	// instance that is a reply applied twice (the run exits 1); with more
	// (--retry-nodes), the listener's documented at-least-once delivery
	// (orchestrator.WithListener: a reply whose partition moves to another
	// instance while it is being applied is applied, and its event
	// emitted, by both), counted only.
	endedTwice int64
	// endedDifferently counts terminal events naming another end than the
	// saga's first one: never acceptable (the run exits 1).
	endedDifferently int64
	// endedWrong counts ended sagas whose stored row disagrees with their
	// end (another state, or a span twice in its completed steps): never
	// acceptable (the run exits 1).
	endedWrong int
	// Recovery figures, set when recovery is exercised.
	hasRecovery                  bool
	retried, restored, abandoned int64
	directoryLeft                int
	// retryP50/retryP99: from a retryable failure's reply being applied
	// (the saga parked) to the retried attempt's reply being applied, over
	// retries measured; recoveryP50/P99: from the orchestrator abandoning
	// a saga (--crash-rate) to its next step reply applied.
	retryP50, retryP99, recoveryP50, recoveryP99 time.Duration
	retries, recoveries                          int
	// Telemetry figures, set with --telemetry: spans exported, duplicate
	// deliveries the guards skipped, stale replies the orchestrator
	// ignored.
	hasTelemetry                 bool
	spans                        int64
	duplicatesSkipped, staleRepl int64
	// Pause figures, set with --pause-rate: sagas paused, and resumes that
	// continued one.
	hasPauses       bool
	paused, resumed int64
	// Cancel figures, set with --cancel-rate: cancels asked, applied, and
	// refused or ignored because the saga had ended.
	hasCancels                          bool
	cancelRequested, cancelled, tooLate int64
	// SQL figures, set with --sql: the payment ledger's rows and the rows
	// beyond the first for one saga and kind.
	hasSQL                bool
	sqlEffects, sqlDouble int64
}

func (r result) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sagas=%d completed=%d compensated=%d compensation_failed=%d stuck=%d elapsed=%.2fs rate=%.1f/s",
		r.sagas, r.completed, r.compensated, r.compensationFailed, r.stuck, r.elapsed.Seconds(),
		float64(r.completed+r.compensated+r.compensationFailed)/r.elapsed.Seconds())
	fmt.Fprintf(&b, " p50_ms=%.1f p99_ms=%.1f", ms(r.p50), ms(r.p99))
	if r.hasStmts {
		fmt.Fprintf(&b, " stmts_per_saga=%.1f", r.stmtsPerSaga)
	}
	fmt.Fprintf(&b, " duplicate_executions=%d ended_twice=%d", r.duplicateExecutions, r.endedTwice)
	if r.endedDifferently > 0 {
		fmt.Fprintf(&b, " ended_differently=%d", r.endedDifferently)
	}
	if r.endedWrong > 0 {
		fmt.Fprintf(&b, " ended_wrong=%d", r.endedWrong)
	}
	if r.hasRecovery {
		fmt.Fprintf(&b, " abandoned=%d retried=%d restored=%d directory_left=%d", r.abandoned, r.retried, r.restored, r.directoryLeft)
		if r.retries > 0 {
			fmt.Fprintf(&b, " retry_p50_ms=%.1f retry_p99_ms=%.1f", ms(r.retryP50), ms(r.retryP99))
		}
		if r.recoveries > 0 {
			fmt.Fprintf(&b, " recovery_p50_ms=%.1f recovery_p99_ms=%.1f", ms(r.recoveryP50), ms(r.recoveryP99))
		}
	}
	if r.hasTelemetry {
		fmt.Fprintf(&b, " spans=%d duplicates_skipped=%d stale_replies=%d", r.spans, r.duplicatesSkipped, r.staleRepl)
	}
	if r.hasPauses {
		fmt.Fprintf(&b, " paused=%d resumed=%d", r.paused, r.resumed)
	}
	if r.hasCancels {
		fmt.Fprintf(&b, " cancel_requested=%d cancelled=%d cancel_too_late=%d", r.cancelRequested, r.cancelled, r.tooLate)
	}
	if r.hasSQL {
		fmt.Fprintf(&b, " sql_effects=%d sql_double_effects=%d", r.sqlEffects, r.sqlDouble)
	}
	return b.String()
}

// chance reports whether key falls in a fraction f of all keys, salted:
// deterministic per key, so a decision does not change on a re-delivery.
func chance(key string, salt uint64, f float64) bool {
	if f <= 0 {
		return false
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	v := h.Sum64() ^ (salt * 0x9e3779b97f4a7c15)
	v ^= v >> 33
	v *= 0xff51afd7ed558ccd
	v ^= v >> 33
	return float64(v>>11)/float64(1<<53) < f
}

// failsAt reports whether saga i of a run with fail rate f fails: exactly
// round-down(f*n) of n sagas, spread evenly.
func failsAt(i int, f float64) bool {
	return int(float64(i+1)*f) > int(float64(i)*f)
}

func demo(ctx context.Context, opts options, tel *demoTelemetry, stderr io.Writer) (result, error) {
	logLevel := slog.LevelError
	if opts.verbose {
		logLevel = slog.LevelWarn
	}
	var logHandler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel})
	if tel != nil {
		logHandler = telemetry.LogHandler(logHandler)
	}
	logger := slog.New(logHandler)

	brokers := []string{opts.kafka}
	where := "kafka " + opts.kafka + " (" + opts.kafkaSecurity + ")"
	if opts.kafka == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return result{}, fmt.Errorf("start in-process broker: %w", err)
		}
		defer c.Close()
		brokers = c.ListenAddrs()
		where = "in-process kfake broker"
	}
	var store eventstore.Store = memory.New()
	storeName := "the in-memory store"
	var cass *cassandra.Store
	if opts.cassandra != "" {
		var err error
		if cass, err = cassandra.New(ctx, opts.cassandraCfg); err != nil {
			return result{}, fmt.Errorf("cassandra store: %w", err)
		}
		store = cass
		storeName = "Cassandra " + opts.cassandra + " keyspace " + opts.keyspace
		if opts.cassandraTLS {
			storeName += " (TLS)"
		}
		if tel != nil {
			reg, err := cass.RegisterMetrics(tel.meterProvider())
			if err != nil {
				_ = cass.Close()
				return result{}, err
			}
			defer func() { _ = reg.Unregister() }()
		}
	}
	defer store.Close()
	if !opts.quiet {
		fmt.Fprintf(stderr, "sagademo: %d sagas, concurrency %d, fail rate %.2f, duplicates %d, write protection %s, on %s with %s\n",
			opts.sagas, opts.concurrency, opts.failRate, opts.duplicates, opts.mode, where, storeName)
	}

	runCtx, stopAll := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr firstError
	failed := make(chan struct{}) // closed with runErr's first error
	fail := func(err error) {
		if runErr.set(err) {
			close(failed)
		}
	}
	goRun := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil {
				fail(fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
	defer func() { stopAll(); wg.Wait() }()
	// awaitRunning waits until running is closed, or a service failed (a
	// broker refusing the credentials, say), or ctx ended.
	awaitRunning := func(running <-chan struct{}) error {
		select {
		case <-running:
			return nil
		case <-failed:
			return runErr.get()
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	// Workers; their handlers count their own executions.
	var workers []*worker.Worker
	var guards []*writeprotect.Guard
	execs := &executions{seen: make(map[execKey]int32)}
	names := placeorder.DefaultNames().WithSuffix(opts.suffix)
	var ledger *sql.DB
	if opts.sql {
		db, drop, err := openLedger(ctx)
		if err != nil {
			return result{}, err
		}
		defer drop()
		ledger = db
	}
	type reg func(*worker.Worker, placeorder.Observer) error
	for svc, register := range map[string]reg{
		names.Inventory: placeorder.RegisterInventory,
		names.Payment:   placeorder.RegisterPayment,
		names.Shipping:  placeorder.RegisterShipping,
	} {
		gt, _ := topics.ParseGroupType(opts.groupType) // checked by validate
		wopts := []worker.Option{worker.WithBrokers(brokers...), worker.WithLogger(logger), worker.WithConcurrency(opts.concurrency), worker.WithGroupType(gt),
			worker.WithKafkaOpts(opts.kafkaOpts...)}
		if tel != nil {
			wopts = append(wopts, worker.WithTracerProvider(tel.tracerProvider()), worker.WithMeterProvider(tel.meterProvider()))
		}
		if opts.mode != "none" {
			cfg := writeprotect.DefaultConfig()
			cfg.DefaultMode = writeprotect.RelaxedWithDedup
			if opts.mode == "strict" {
				cfg.DefaultMode = writeprotect.Strict
			}
			g, err := writeprotect.New(store, cfg, writeprotect.WithLogger(logger), writeprotect.WithOwner(svc))
			if err != nil {
				return result{}, err
			}
			wopts = append(wopts, worker.WithGuard(g))
			guards = append(guards, g)
		}
		if svc == names.Payment && ledger != nil {
			// The payment step through the SQL barrier, which hands any
			// other command to the write protection above.
			bopts := []sqlbarrier.Option{sqlbarrier.WithLogger(logger)}
			if len(guards) > 0 && opts.mode != "none" {
				bopts = append(bopts, sqlbarrier.WithInner(guards[len(guards)-1]))
			}
			b, err := sqlbarrier.New(ledger, bopts...)
			if err != nil {
				return result{}, err
			}
			wopts = append(wopts, worker.WithGuard(b))
			register = func(w *worker.Worker, o placeorder.Observer) error { return placeorder.RegisterPaymentSQL(w, b, o) }
		}
		w, err := worker.New(svc, wopts...)
		if err != nil {
			return result{}, err
		}
		if err := register(w, execs.observe); err != nil {
			return result{}, err
		}
		workers = append(workers, w)
		goRun(svc, w.Run)
		if err := awaitRunning(w.Running()); err != nil {
			return result{}, err
		}
	}

	// Orchestrator; terminal events free a slot for the next saga, pauses
	// go to the resumer.
	slots := make(chan struct{}, opts.concurrency)
	res := &resumer{}
	var completed, compensated, compFailed atomic.Int64
	lat := newLatencies()
	retryGaps, crashGaps := newGaps(), newGaps()
	var ended sync.Map // txID → eventstore.State: the sagas whose terminal event came, and their end
	var endedTwice, endedDifferently atomic.Int64
	onEvent := func(e orchestrator.Event) {
		if e.To == eventstore.StateRetryPending && e.Outcome == string(topics.OutcomeRetryable) {
			retryGaps.mark(e.TxID, e.At, 0)
		} else {
			retryGaps.event(e.TxID, e.At, e.Outcome != "")
		}
		crashGaps.event(e.TxID, e.At, e.Outcome != "")
		switch e.To {
		case eventstore.StatePaused:
			res.add(e.TxID, topics.IdempotencyKey(e.TxID, e.Span, topics.Kind(e.Kind)))
			return
		case eventstore.StateCompleted, eventstore.StateCompensated, eventstore.StateCompensationFailed:
		default:
			return
		}
		// A saga ends once: a second terminal event for it is counted,
		// not taken for another saga's end (its slot was freed already:
		// taking one more would block this listener, and the orchestrator
		// with it, for ever). With several instances the same end may be
		// reported twice (a reply applied by an instance that lost its
		// partition meanwhile, and by its successor: WithListener); a
		// different end never.
		if first, again := ended.LoadOrStore(e.TxID, e.To); again {
			if first.(eventstore.State) != e.To {
				endedDifferently.Add(1)
				logger.Error("sagademo: a saga ended twice, differently", "tx", e.TxID, "first", first, "from", e.From, "to", e.To, "span", e.Span)
				return
			}
			endedTwice.Add(1)
			logger.Warn("sagademo: a saga's end was reported twice", "tx", e.TxID, "from", e.From, "to", e.To, "span", e.Span, "instances", 1+opts.retryNodes)
			return
		}
		switch e.To {
		case eventstore.StateCompleted:
			completed.Add(1)
		case eventstore.StateCompensated:
			compensated.Add(1)
		default:
			compFailed.Add(1)
		}
		lat.end(e.TxID, time.Now())
		<-slots
	}
	recovering := opts.transientRate > 0 || opts.crashRate > 0 || opts.retryNodes > 0
	gt, _ := topics.ParseGroupType(opts.groupType) // checked by validate
	oopts := []orchestrator.Option{orchestrator.WithGroupType(gt), orchestrator.WithKafkaOpts(opts.kafkaOpts...)}
	if tel != nil {
		oopts = append(oopts, orchestrator.WithTracerProvider(tel.tracerProvider()), orchestrator.WithMeterProvider(tel.meterProvider()))
	}
	if opts.window != 0 {
		rc := recovery.DefaultConfig()
		rc.Interval = opts.window
		// A stalled saga is restored after 5 windows without a transition
		// (10s with --window 2): far above a step's latency here.
		rc.Restore.DefaultDelayWindows = 5
		rc.LookbackDays = 1
		oopts = append(oopts, orchestrator.WithRecovery(rc))
		if opts.retryNodes == 0 {
			oopts = append(oopts, orchestrator.WithRetryNode(recovery.WithLogger(logger)))
		}
	}
	if opts.crashRate > 0 {
		points := []orchestrator.FaultPoint{orchestrator.FaultAfterCreate, orchestrator.FaultBeforePublish, orchestrator.FaultBeforePublishRevert}
		var crashed sync.Map
		oopts = append(oopts, orchestrator.WithFaultInjection(func(p orchestrator.FaultPoint, txID string) bool {
			// A saga dies at most once, at the point drawn for it (a saga
			// that never reaches it, say the revert point of one that
			// completes, is not abandoned).
			if !chance(txID, 1, opts.crashRate) || p != points[fnvIndex(txID, len(points))] {
				return false
			}
			_, again := crashed.LoadOrStore(txID, true)
			if !again {
				// Abandoned before publishing, the saga's transition is
				// still persisted (and its event emitted) after this.
				skip := 1
				if p == orchestrator.FaultAfterCreate {
					skip = 0
				}
				crashGaps.mark(txID, time.Now(), skip)
			}
			return !again
		}))
	}
	o, err := orchestrator.New(names.Order, placeorder.SagaNamed(names), append([]orchestrator.Option{
		orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store), orchestrator.WithLogger(logger),
		orchestrator.WithConcurrency(opts.concurrency),
		orchestrator.WithListener(onEvent)}, oopts...)...)
	if err != nil {
		return result{}, err
	}
	goRun("orchestrator", o.Run)
	if opts.pauseRate > 0 {
		goRun("resumer", func(ctx context.Context) error { return res.run(ctx, o) })
	}
	var retryNodes []*orchestrator.Orchestrator[placeorder.Order]
	if opts.retryNodes > 0 {
		// An embedded ring coordinator (over an in-process transport) and
		// N more instances of the orchestrator, each a retry node scanning
		// the slice of the token ring its connector is handed.
		tp := ringcoordinator.NewMemoryTransport()
		cyc := ringcoordinator.WithCycle(2 * time.Second)
		quiet := ringcoordinator.WithLogger(logger)
		m, err := ringcoordinator.NewMaster(ringcoordinator.WithTransport(tp), cyc, quiet)
		if err != nil {
			return result{}, err
		}
		goRun("ring master", m.Run)
		sl, err := ringcoordinator.NewSlave(ringcoordinator.WithTransport(tp), ringcoordinator.WithMaster(m.Addr()), cyc, quiet)
		if err != nil {
			return result{}, err
		}
		goRun("ring slave", sl.Run)
		for i := range opts.retryNodes {
			c, err := ringcoordinator.NewConnector(ringcoordinator.WithTransport(tp), ringcoordinator.WithMaster(m.Addr()), cyc, quiet)
			if err != nil {
				return result{}, err
			}
			goRun(fmt.Sprintf("ring connector %d", i), c.Run)
			rn, err := orchestrator.New(names.Order, placeorder.SagaNamed(names), append([]orchestrator.Option{
				orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store), orchestrator.WithLogger(logger),
				orchestrator.WithConcurrency(opts.concurrency), orchestrator.WithListener(onEvent),
				orchestrator.WithRetryNode(recovery.WithRanges(c.Ranges()), recovery.WithLogger(logger)),
			}, oopts...)...)
			if err != nil {
				return result{}, err
			}
			retryNodes = append(retryNodes, rn)
			goRun(fmt.Sprintf("retry node %d", i), rn.Run)
		}
	}
	var relay *duplicator.Relay
	stopRelay := func() {}
	defer func() { stopRelay() }()
	if opts.duplicates > 0 {
		relay, err = duplicator.New(brokers, []string{
			topics.CommandTopic(names.Inventory), topics.CommandTopic(names.Payment),
			topics.CommandTopic(names.Shipping), topics.CallbackTopic(names.Domain),
		}, opts.duplicates, opts.kafkaOpts...)
		if err != nil {
			return result{}, err
		}
		relayCtx, cancelRelay := context.WithCancel(runCtx)
		relayDone := make(chan struct{})
		stopRelay = func() { cancelRelay(); <-relayDone }
		go func() {
			defer close(relayDone)
			if err := relay.Run(relayCtx); err != nil && relayCtx.Err() == nil {
				fail(fmt.Errorf("duplicator: %w", err))
			}
		}()
	}
	if err := awaitRunning(o.Running()); err != nil {
		return result{}, err
	}
	for _, rn := range retryNodes {
		if err := awaitRunning(rn.Running()); err != nil {
			return result{}, err
		}
	}

	terminal := func() int { return int(completed.Load() + compensated.Load() + compFailed.Load()) }
	var stmts0 cassandra.Stats
	if cass != nil {
		stmts0 = cass.Stats()
	}
	mem := &memSampler{}
	if !opts.quiet {
		mem.baseline()
	}
	start := time.Now()
	deadline := time.NewTimer(opts.timeout)
	defer deadline.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	sample := time.NewTicker(100 * time.Millisecond)
	defer sample.Stop()
	var startErr firstError
	started := 0
	cancels := &canceller{o: o, ctx: runCtx}
	res.cancelled = cancels.targeted
	report := func() {
		if opts.quiet {
			return
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(stderr, "progress: started=%d done=%d in_flight=%d heap_in_use=%.1fMiB elapsed=%.1fs\n",
			started, terminal(), started-terminal(), float64(ms.HeapInuse)/(1<<20), time.Since(start).Seconds())
	}
loop:
	for terminal() < opts.sagas {
		if started < opts.sagas {
			select {
			case slots <- struct{}{}:
				i := started
				started++
				go func() {
					ord := placeorder.Order{OrderID: fmt.Sprintf("order-%d", i), CustomerID: "c-1", Item: "book", Quantity: 1, Amount: 1999,
						FailShipping: failsAt(i, opts.failRate), AsyncPayment: chance(fmt.Sprintf("order-%d", i), 9, opts.pauseRate)}
					for step := range 3 {
						if chance(ord.OrderID, uint64(2+step), opts.transientRate) {
							ord.TransientOnce |= 1 << step
						}
					}
					t0 := time.Now()
					txID, err := o.Start(runCtx, ord)
					if err != nil {
						startErr.set(err)
						return
					}
					lat.begin(txID, t0)
					if chance(ord.OrderID, 11, opts.cancelRate) {
						cancels.add(txID)
					}
				}()
				continue
			case <-progress.C:
				report()
			case <-sample.C:
				mem.sample(started - terminal())
			case <-deadline.C:
				break loop
			case <-ctx.Done():
				break loop
			}
		} else {
			select {
			case <-time.After(2 * time.Millisecond):
			case <-sample.C:
				mem.sample(started - terminal())
			case <-progress.C:
				report()
			case <-deadline.C:
				break loop
			case <-ctx.Done():
				break loop
			}
		}
		if err := startErr.get(); err != nil {
			return result{}, fmt.Errorf("start saga: %w", err)
		}
		if err := runErr.get(); err != nil {
			return result{}, err
		}
		if e := res.failed(); e != nil {
			return result{}, fmt.Errorf("resume: %w", e)
		}
		if e := cancels.err.get(); e != nil {
			return result{}, fmt.Errorf("cancel: %w", e)
		}
	}
	elapsed := time.Since(start)
	cancels.wg.Wait()
	if relay != nil && terminal() == opts.sagas {
		// Copies still on their way would run after the count: let the
		// relay and the workers go quiet first, so duplicate_executions
		// covers every copy delivered. Then stop the relay and let what it
		// copied drain, so that the counts (and the metrics) no longer move.
		settle(relay, workers, o, true)
		if relay.Copied() == 0 {
			// Not a single duplicate delivered: the counts would say the
			// sagas survived duplicates they never saw.
			return result{}, errors.New("duplicator: --duplicates copied no record in 15s after the sagas ended: the relay cannot read or write the topics")
		}
		stopRelay()
		settle(relay, workers, o, false)
	}
	report()
	if e := res.failed(); e != nil {
		return result{}, fmt.Errorf("resume: %w", e)
	}
	out := result{
		sagas: opts.sagas, completed: int(completed.Load()), compensated: int(compensated.Load()),
		compensationFailed: int(compFailed.Load()), elapsed: elapsed,
	}
	out.stuck = opts.sagas - (out.completed + out.compensated + out.compensationFailed)
	out.endedTwice, out.endedDifferently = endedTwice.Load(), endedDifferently.Load()
	if out.endedWrong, err = checkEnds(ctx, store, o.Scope(), &ended, logger); err != nil {
		return result{}, err
	}
	out.p50, out.p99 = lat.quantiles()
	out.duplicateExecutions = execs.duplicates()
	if ledger != nil {
		out.hasSQL = true
		if out.sqlEffects, out.sqlDouble, err = placeorder.LedgerEffects(ctx, ledger); err != nil {
			return result{}, err
		}
	}
	if opts.pauseRate > 0 {
		out.hasPauses = true
		out.paused, out.resumed = res.paused.Load(), res.resumed.Load()
	}
	if opts.cancelRate > 0 {
		if e := cancels.err.get(); e != nil {
			return result{}, fmt.Errorf("cancel: %w", e)
		}
		out.hasCancels = true
		st := o.Stats()
		out.cancelRequested, out.cancelled = cancels.requested.Load(), st.Cancelled
		for _, rn := range retryNodes {
			out.cancelled += rn.Stats().Cancelled
		}
		out.tooLate = out.cancelRequested - out.cancelled
	}
	if recovering || opts.window != 0 {
		st := o.Stats()
		out.hasRecovery = true
		out.retried, out.restored, out.abandoned = st.Retried, st.Restored, st.Abandoned
		out.retryP50, out.retryP99, out.retries = retryGaps.quantiles()
		out.recoveryP50, out.recoveryP99, out.recoveries = crashGaps.quantiles()
		eng := o.RecoveryEngine()
		for _, rn := range retryNodes {
			rs := rn.Stats()
			out.retried, out.restored = out.retried+rs.Retried, out.restored+rs.Restored
			if eng == nil {
				eng = rn.RecoveryEngine()
			}
		}
		if eng != nil && out.stuck == 0 {
			// One more pass drops what the sagas' ends left due in
			// sealed windows; what remains there was never handled.
			if _, err := eng.Scan(ctx); err != nil {
				fmt.Fprintln(stderr, "sagademo: final recovery scan:", err)
			}
			n, err := sealedRows(ctx, store, o.Scope(), eng.Windows(), time.Now())
			if err != nil {
				return result{}, fmt.Errorf("count directory rows: %w", err)
			}
			out.directoryLeft = n
		}
	}
	if cass != nil {
		out.hasStmts = true
		out.stmtsPerSaga = float64(cass.Stats().Sub(stmts0).RoundTrips()) / float64(opts.sagas)
	}
	if tel != nil {
		out.hasTelemetry = true
		out.spans = tel.exported(ctx)
		for _, g := range guards {
			out.duplicatesSkipped += int64(g.Stats().DuplicatesSkipped)
		}
		out.staleRepl = o.Stats().StaleReplies
	}
	if !opts.quiet {
		mem.retained(out.sagas - out.stuck)
		fmt.Fprintln(stderr, mem.String())
	}
	if opts.afterRun != nil {
		url := ""
		if tel != nil {
			url = tel.metricsURL
		}
		opts.afterRun(out, url)
	}
	return out, nil
}

// checkEnds reads the row of every saga in ended (txID → the state its
// first terminal event named) and counts those whose row disagrees: in
// another state, or with a span twice among its completed steps (a step's
// reply applied on top of a row that had it already).
func checkEnds(ctx context.Context, store eventstore.Store, scope eventstore.Scope, ended *sync.Map, logger *slog.Logger) (int, error) {
	wrong := 0
	var err error
	ended.Range(func(k, v any) bool {
		var tx eventstore.Transaction
		tx, err = store.LoadTransaction(ctx, scope, k.(string))
		if err != nil {
			err = fmt.Errorf("check the end of %s: %w", k, err)
			return false
		}
		seen := map[int]bool{}
		twice := false
		for _, c := range tx.Completed {
			twice = twice || seen[c.Span]
			seen[c.Span] = true
		}
		if tx.State != v.(eventstore.State) || twice {
			wrong++
			logger.Error("sagademo: a saga's row disagrees with its end", "tx", tx.TxID, "ended", v, "state", tx.State, "completed", tx.Completed)
		}
		return true
	})
	return wrong, err
}

// maxResumeDelay bounds the delay before the resumer resumes a paused saga.
const maxResumeDelay = time.Second

// resumer plays the payment gateway of the sagas that paused for an
// asynchronous authorisation: from its own goroutine (run), it resumes
// each paused saga after a random delay of at most maxResumeDelay.
type resumer struct {
	mu      sync.Mutex
	pending []pendingResume
	// paused counts the pauses seen, resumed the resumes that continued a
	// saga.
	paused, resumed atomic.Int64
	err             firstError
	// cancelled reports whether a saga was to be cancelled (--cancel-rate):
	// its resume may find it cancelled.
	cancelled func(txID string) bool
}

type pendingResume struct {
	txID, key string
	due       time.Time
}

// add queues the resume of txID with key; it never blocks (it runs on the
// orchestrator's listener).
func (r *resumer) add(txID, key string) {
	r.paused.Add(1)
	due := time.Now().Add(rand.N(maxResumeDelay + 1))
	r.mu.Lock()
	r.pending = append(r.pending, pendingResume{txID: txID, key: key, due: due})
	r.mu.Unlock()
}

// run resumes the queued sagas as they fall due (16 at once at most) until
// ctx ends.
func (r *resumer) run(ctx context.Context, o *orchestrator.Orchestrator[placeorder.Order]) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		now := time.Now()
		r.mu.Lock()
		var due []pendingResume
		kept := r.pending[:0]
		for _, p := range r.pending {
			if p.due.After(now) {
				kept = append(kept, p)
			} else {
				due = append(due, p)
			}
		}
		r.pending = kept
		r.mu.Unlock()
		for _, p := range due {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			wg.Go(func() {
				defer func() { <-sem }()
				res, err := o.Resume(ctx, p.txID, p.key, map[string]string{placeorder.StatusKey: placeorder.PaymentAuthorised})
				switch {
				case err != nil && errors.Is(err, orchestrator.ErrNotPaused) && r.cancelled != nil && r.cancelled(p.txID):
					// cancelled while paused (--cancel-rate)
				case err != nil && ctx.Err() == nil:
					r.err.set(fmt.Errorf("%s: %w", p.txID, err))
				case err == nil && res.Continued:
					r.resumed.Add(1)
				}
			})
		}
	}
}

// failed returns the first error of a resume, if any.
func (r *resumer) failed() error { return r.err.get() }

// firstError keeps the first error set, for goroutines that race to report
// one (an atomic.Value would panic on a second error of another type).
type firstError struct{ p atomic.Pointer[error] }

// set records err if no error was recorded yet, and reports whether it did.
func (f *firstError) set(err error) bool { return f.p.CompareAndSwap(nil, &err) }

// get is the recorded error, or nil.
func (f *firstError) get() error {
	if p := f.p.Load(); p != nil {
		return *p
	}
	return nil
}

// memSampler reports the process's heap: in use when the sagas in flight
// first reached their peak (per in-flight saga), and what the run left
// behind once every saga ended (per saga): the live heap after a
// collection, less the live heap before the first saga. The in-memory
// store keeps every saga's rows and markers and the in-process broker every
// record, so on the embedded default the heap grows with every saga; on
// Cassandra and a real broker the retained share should stay near zero.
type memSampler struct {
	peak     int
	heapPeak uint64
	base     uint64 // live heap before the first saga (after a collection)
	left     uint64 // live heap after the run (after a collection)
	ended    int    // sagas that ended
}

// liveHeap collects garbage and returns the bytes of live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// baseline records the live heap before the first saga.
func (m *memSampler) baseline() { m.base = liveHeap() }

// retained records the live heap after the run, in which ended sagas ended.
func (m *memSampler) retained(ended int) { m.left, m.ended = liveHeap(), ended }

func (m *memSampler) sample(inFlight int) {
	if inFlight <= m.peak || inFlight == 0 {
		return
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.peak, m.heapPeak = inFlight, ms.HeapInuse
}

// retainedBytes is the live heap the run left: after less before, never
// negative (a collection after the run may free what the baseline held,
// the start's own garbage: then the run retained nothing).
func (m *memSampler) retainedBytes() uint64 {
	if m.left < m.base {
		return 0
	}
	return m.left - m.base
}

func (m *memSampler) String() string {
	if m.peak == 0 {
		return "memory: no sample"
	}
	s := fmt.Sprintf("memory: in_flight_peak=%d heap_in_use=%.1fMiB per_in_flight_saga=%.1fKiB",
		m.peak, float64(m.heapPeak)/(1<<20), float64(m.heapPeak)/1024/float64(m.peak))
	if m.ended > 0 {
		left := float64(m.retainedBytes())
		s += fmt.Sprintf(" retained=%.1fMiB retained_per_saga=%.2fKiB", left/(1<<20), left/1024/float64(m.ended))
	}
	return s + " (whole process: store, broker, workers included)"
}

// execKey names one business step execution.
type execKey struct {
	tx   string
	span int
	kind topics.Kind
}

// executions counts business-handler runs per transaction, span and kind,
// from inside the handlers (not from the framework's own counters).
type executions struct {
	mu   sync.Mutex
	seen map[execKey]int32
}

func (e *executions) observe(s *worker.Step) {
	e.mu.Lock()
	e.seen[execKey{s.TxID, s.Span, s.Kind}]++
	e.mu.Unlock()
}

// duplicates returns the runs beyond the first per key.
func (e *executions) duplicates() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.seen {
		n += int(c) - 1
	}
	return n
}

// settle waits until the relay copies nothing more, the workers process
// nothing more and the orchestrator reads no more replies, for 600ms (at
// most 15s); with firstCopy, only once the relay has copied something (a
// relay that cannot read or write the topics never does).
func settle(relay *duplicator.Relay, workers []*worker.Worker, o *orchestrator.Orchestrator[placeorder.Order], firstCopy bool) {
	progress := func() uint64 {
		n := uint64(relay.Copied())
		for _, w := range workers {
			n += w.Stats().Processed
		}
		st := o.Stats()
		return n + uint64(st.Replies+st.StaleReplies+st.ForeignReplies)
	}
	last, quiet := progress(), 0
	for deadline := time.Now().Add(15 * time.Second); quiet < 3 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		if n := progress(); n != last || firstCopy && relay.Copied() == 0 {
			last, quiet = n, 0
		} else {
			quiet++
		}
	}
}

// fnvIndex maps key to one of n indexes.
func fnvIndex(key string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// sealedRows counts the tier-5 rows of the recovery directory left in the
// sealed windows of scope over the last two days.
func sealedRows(ctx context.Context, dir eventstore.Directory, scope eventstore.Scope, win recovery.Windows, now time.Time) (int, error) {
	days, err := dir.ListDays(ctx, scope, win.AddDays(win.At(now).Day, -2), win.At(now).Day)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, day := range days {
		slots, err := dir.ListWindows(ctx, scope, day)
		if err != nil {
			return 0, err
		}
		for _, slot := range slots {
			if !win.FromSlot(day, slot).Sealed(now) {
				continue
			}
			insts, err := dir.ListInstances(ctx, scope, day, slot, eventstore.FullRing)
			if err != nil {
				return 0, err
			}
			for _, in := range insts {
				buckets, err := dir.ListBuckets(ctx, scope, day, slot, in.ID)
				if err != nil {
					return 0, err
				}
				for _, b := range buckets {
					es, err := dir.ListRecoveryEntries(ctx, scope, eventstore.RecoveryPath{Day: day, MinuteOfDay: slot, InstanceID: in.ID, Bucket: b}, "", 0)
					if err != nil {
						return 0, err
					}
					n += len(es)
				}
			}
		}
	}
	return n, nil
}

// latencies pairs each saga's start with its terminal event (which may come
// first: Start returns after the first command is out).
type latencies struct {
	mu     sync.Mutex
	starts map[string]time.Time
	ends   map[string]time.Time
	vals   []time.Duration
}

func newLatencies() *latencies {
	return &latencies{starts: make(map[string]time.Time), ends: make(map[string]time.Time)}
}

func (l *latencies) begin(txID string, t0 time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t1, ok := l.ends[txID]; ok {
		delete(l.ends, txID)
		l.vals = append(l.vals, t1.Sub(t0))
		return
	}
	l.starts[txID] = t0
}

// end records the first terminal event of txID.
func (l *latencies) end(txID string, t1 time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t0, ok := l.starts[txID]; ok {
		delete(l.starts, txID)
		l.vals = append(l.vals, t1.Sub(t0))
		return
	}
	if _, dup := l.ends[txID]; !dup {
		l.ends[txID] = t1
	}
}

// quantiles returns the median and the 99th percentile (nearest rank).
func (l *latencies) quantiles() (p50, p99 time.Duration) {
	l.mu.Lock()
	s := slices.Clone(l.vals)
	l.mu.Unlock()
	if len(s) == 0 {
		return 0, 0
	}
	slices.Sort(s)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.5) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return at(0.50), at(0.99)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// gaps measures, per saga, the time from a mark (a retryable failure
// parked it; the orchestrator abandoned it as if its process died) to the
// saga's next applied step reply: how long recovery took to move it on.
type gaps struct {
	mu      sync.Mutex
	pending map[string]gap
	vals    []time.Duration
}

type gap struct {
	at   time.Time
	skip int // events to let pass first (the abandoning transition itself)
}

func newGaps() *gaps { return &gaps{pending: make(map[string]gap)} }

// mark starts a gap of txID at t, ending at the first event after skip more.
func (g *gaps) mark(txID string, t time.Time, skip int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending[txID] = gap{at: t, skip: skip}
}

// event ends txID's open gap at a reply applied at t (outcome set).
func (g *gaps) event(txID string, t time.Time, replyApplied bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pending[txID]
	if !ok {
		return
	}
	if p.skip > 0 {
		p.skip--
		g.pending[txID] = p
		return
	}
	if !replyApplied {
		return
	}
	delete(g.pending, txID)
	g.vals = append(g.vals, t.Sub(p.at))
}

// quantiles returns the median and the 99th percentile (nearest rank) and
// how many gaps were measured.
func (g *gaps) quantiles() (p50, p99 time.Duration, n int) {
	g.mu.Lock()
	l := &latencies{vals: slices.Clone(g.vals)}
	g.mu.Unlock()
	p50, p99 = l.quantiles()
	return p50, p99, len(l.vals)
}

// maxCancelDelay bounds the delay before a saga of --cancel-rate is
// cancelled.
const maxCancelDelay = 50 * time.Millisecond

// canceller cancels the sagas of --cancel-rate, each after a random delay
// of at most maxCancelDelay, as a customer would.
type canceller struct {
	o         *orchestrator.Orchestrator[placeorder.Order]
	ctx       context.Context
	wg        sync.WaitGroup
	ids       sync.Map
	requested atomic.Int64
	err       firstError
}

// add cancels txID after a random delay (on its own goroutine).
func (c *canceller) add(txID string) {
	c.ids.Store(txID, true)
	c.wg.Go(func() {
		select {
		case <-time.After(rand.N(maxCancelDelay + 1)):
		case <-c.ctx.Done():
			return
		}
		c.requested.Add(1)
		err := c.o.Cancel(orchestrator.WithActor(c.ctx, "sagademo"), txID, "demo --cancel-rate")
		if err != nil && !errors.Is(err, orchestrator.ErrEnded) && c.ctx.Err() == nil {
			c.err.set(fmt.Errorf("%s: %w", txID, err))
		}
	})
}

// targeted reports whether txID is one of the sagas to cancel.
func (c *canceller) targeted(txID string) bool {
	_, ok := c.ids.Load(txID)
	return ok
}

// openLedger opens the PostgreSQL at $POSTGRES_DSN on a fresh schema that
// holds the barrier table and the payment ledger; drop deletes the schema.
func openLedger(ctx context.Context) (db *sql.DB, drop func(), err error) {
	dsn := strings.TrimSpace(os.Getenv("POSTGRES_DSN"))
	if dsn == "" {
		return nil, nil, errors.New("--sql: POSTGRES_DSN is not set (scripts/services up postgres; eval \"$(scripts/services env)\")")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("--sql: POSTGRES_DSN: %w", err)
	}
	var rb [6]byte
	_, _ = crand.Read(rb[:])
	schema := "sagademo_" + hex.EncodeToString(rb[:])
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("--sql: %w", err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		_ = admin.Close()
		return nil, nil, fmt.Errorf("--sql: create schema: %w", err)
	}
	drop = func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = admin.ExecContext(dctx, "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close()
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	if db, err = sql.Open("pgx", u.String()); err != nil {
		drop()
		return nil, nil, fmt.Errorf("--sql: %w", err)
	}
	db.SetMaxOpenConns(32)
	if err := placeorder.CreateLedger(ctx, db); err != nil {
		_ = db.Close()
		drop()
		return nil, nil, fmt.Errorf("--sql: %w", err)
	}
	inner := drop
	return db, func() { _ = db.Close(); inner() }, nil
}
