// Command sagademo runs place-order sagas end to end: an orchestrator and
// three workers (inventory, payment, shipping) in one process. With no
// --kafka flag it starts an in-process kfake broker and uses the in-memory
// event store, so it needs nothing installed.
//
//	go run ./cmd/sagademo --sagas 2000 --fail-rate 0.1
//
// It ends with one summary line:
//
//	sagas=N completed=X compensated=Y compensation_failed=0 stuck=0 elapsed=1.23s rate=812.3/s
//
// and exits non-zero if any saga is stuck (not terminal at the end).
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
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/duplicator"
	"github.com/stacksaga-go/stacksaga/orchestrator"
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
	timeout     time.Duration
	quiet       bool
	verbose     bool
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
	fs.StringVar(&o.suffix, "suffix", "", "suffix for every domain and service name (topics, groups), to share a broker with other runs")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up waiting for sagas after this long")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines")
	fs.BoolVar(&o.verbose, "v", false, "log framework warnings")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
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
	if o.duplicates < 0 {
		errs = append(errs, errors.New("--duplicates must be at least 0"))
	}
	if o.failRate < 0 || o.failRate > 1 {
		errs = append(errs, errors.New("--fail-rate must be within [0, 1]"))
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
	res, err := demo(ctx, opts, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sagademo:", err)
		return 1
	}
	fmt.Fprintln(stdout, res.summary())
	if res.stuck > 0 {
		return 1
	}
	return 0
}

type result struct {
	sagas, completed, compensated, compensationFailed, stuck int
	elapsed                                                  time.Duration
	// stmtsPerSaga is set when the store is Cassandra.
	stmtsPerSaga float64
	hasStmts     bool
	// duplicateExecutions counts business-handler runs beyond the first
	// per transaction, span and kind, as the handlers saw them.
	duplicateExecutions int
}

func (r result) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sagas=%d completed=%d compensated=%d compensation_failed=%d stuck=%d elapsed=%.2fs rate=%.1f/s",
		r.sagas, r.completed, r.compensated, r.compensationFailed, r.stuck, r.elapsed.Seconds(),
		float64(r.completed+r.compensated+r.compensationFailed)/r.elapsed.Seconds())
	if r.hasStmts {
		fmt.Fprintf(&b, " stmts_per_saga=%.1f", r.stmtsPerSaga)
	}
	fmt.Fprintf(&b, " duplicate_executions=%d", r.duplicateExecutions)
	return b.String()
}

// failsAt reports whether saga i of a run with fail rate f fails: exactly
// round-down(f*n) of n sagas, spread evenly.
func failsAt(i int, f float64) bool {
	return int(float64(i+1)*f) > int(float64(i)*f)
}

func demo(ctx context.Context, opts options, stderr io.Writer) (result, error) {
	logLevel := slog.LevelError
	if opts.verbose {
		logLevel = slog.LevelWarn
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))

	brokers := []string{opts.kafka}
	where := "kafka " + opts.kafka
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
		cfg := cassandra.DefaultConfig()
		cfg.ContactPoints = []string{opts.cassandra}
		cfg.Keyspace = opts.keyspace
		cfg.Replication = cassandra.SimpleReplication(1)
		cfg.CreateSchema = true
		var err error
		if cass, err = cassandra.New(ctx, cfg); err != nil {
			return result{}, fmt.Errorf("cassandra store: %w", err)
		}
		store = cass
		storeName = "Cassandra " + opts.cassandra + " keyspace " + opts.keyspace
	}
	defer store.Close()
	if !opts.quiet {
		fmt.Fprintf(stderr, "sagademo: %d sagas, concurrency %d, fail rate %.2f, duplicates %d, write protection %s, on %s with %s\n",
			opts.sagas, opts.concurrency, opts.failRate, opts.duplicates, opts.mode, where, storeName)
	}

	runCtx, stopAll := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr atomic.Value
	goRun := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil {
				runErr.CompareAndSwap(nil, fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
	defer func() { stopAll(); wg.Wait() }()

	// Workers; their handlers count their own executions.
	var workers []*worker.Worker
	execs := &executions{seen: make(map[execKey]int32)}
	names := placeorder.DefaultNames().WithSuffix(opts.suffix)
	type reg func(*worker.Worker, placeorder.Observer) error
	for svc, register := range map[string]reg{
		names.Inventory: placeorder.RegisterInventory,
		names.Payment:   placeorder.RegisterPayment,
		names.Shipping:  placeorder.RegisterShipping,
	} {
		wopts := []worker.Option{worker.WithBrokers(brokers...), worker.WithLogger(logger), worker.WithConcurrency(opts.concurrency)}
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
		select {
		case <-w.Running():
		case <-ctx.Done():
			return result{}, ctx.Err()
		}
	}

	// Orchestrator; terminal events free a slot for the next saga.
	slots := make(chan struct{}, opts.concurrency)
	var completed, compensated, compFailed atomic.Int64
	o, err := orchestrator.New(names.Order, placeorder.SagaNamed(names),
		orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store), orchestrator.WithLogger(logger),
		orchestrator.WithConcurrency(opts.concurrency),
		orchestrator.WithListener(func(e orchestrator.Event) {
			switch e.To {
			case eventstore.StateCompleted:
				completed.Add(1)
			case eventstore.StateCompensated:
				compensated.Add(1)
			case eventstore.StateCompensationFailed:
				compFailed.Add(1)
			default:
				return
			}
			<-slots
		}))
	if err != nil {
		return result{}, err
	}
	goRun("orchestrator", o.Run)
	var relay *duplicator.Relay
	if opts.duplicates > 0 {
		relay, err = duplicator.New(brokers, []string{
			topics.CommandTopic(names.Inventory), topics.CommandTopic(names.Payment),
			topics.CommandTopic(names.Shipping), topics.CallbackTopic(names.Domain),
		}, opts.duplicates)
		if err != nil {
			return result{}, err
		}
		goRun("duplicator", relay.Run)
	}
	select {
	case <-o.Running():
	case <-ctx.Done():
		return result{}, ctx.Err()
	}

	terminal := func() int { return int(completed.Load() + compensated.Load() + compFailed.Load()) }
	var stmts0 cassandra.Stats
	if cass != nil {
		stmts0 = cass.Stats()
	}
	mem := &memSampler{}
	start := time.Now()
	deadline := time.NewTimer(opts.timeout)
	defer deadline.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	sample := time.NewTicker(100 * time.Millisecond)
	defer sample.Stop()
	var startErr atomic.Value
	started := 0
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
					ord := placeorder.Order{OrderID: fmt.Sprintf("order-%d", i), CustomerID: "c-1", Item: "book", Quantity: 1, Amount: 1999, FailShipping: failsAt(i, opts.failRate)}
					if _, err := o.Start(runCtx, ord); err != nil {
						startErr.CompareAndSwap(nil, err)
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
		if e := startErr.Load(); e != nil {
			return result{}, fmt.Errorf("start saga: %w", e.(error))
		}
		if e := runErr.Load(); e != nil {
			return result{}, e.(error)
		}
	}
	elapsed := time.Since(start)
	if relay != nil && terminal() == opts.sagas {
		// Copies still on their way would run after the count: let the
		// relay and the workers go quiet first, so duplicate_executions
		// covers every copy delivered.
		settle(relay, workers)
	}
	report()
	res := result{
		sagas: opts.sagas, completed: int(completed.Load()), compensated: int(compensated.Load()),
		compensationFailed: int(compFailed.Load()), elapsed: elapsed,
	}
	res.stuck = opts.sagas - (res.completed + res.compensated + res.compensationFailed)
	res.duplicateExecutions = execs.duplicates()
	if cass != nil {
		res.hasStmts = true
		res.stmtsPerSaga = float64(cass.Stats().Sub(stmts0).RoundTrips()) / float64(opts.sagas)
	}
	if !opts.quiet {
		fmt.Fprintln(stderr, mem.String())
	}
	return res, nil
}

// memSampler keeps the heap in use at the largest number of sagas in
// flight seen, to report the orchestrator's memory per in-flight saga.
type memSampler struct {
	peak     int
	heapPeak uint64
}

func (m *memSampler) sample(inFlight int) {
	if inFlight < m.peak || inFlight == 0 {
		return
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.peak, m.heapPeak = inFlight, ms.HeapInuse
}

func (m *memSampler) String() string {
	if m.peak == 0 {
		return "memory: no sample"
	}
	return fmt.Sprintf("memory: in_flight_peak=%d heap_in_use=%.1fMiB per_in_flight_saga=%.1fKiB (whole process: store, broker, workers included)",
		m.peak, float64(m.heapPeak)/(1<<20), float64(m.heapPeak)/1024/float64(m.peak))
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

// settle waits until the relay copies nothing more and the workers process
// nothing more for 600ms (at most 15s).
func settle(relay *duplicator.Relay, workers []*worker.Worker) {
	progress := func() uint64 {
		n := uint64(relay.Copied())
		for _, w := range workers {
			n += w.Stats().Processed
		}
		return n
	}
	last, quiet := progress(), 0
	for deadline := time.Now().Add(15 * time.Second); quiet < 3 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		if n := progress(); n != last {
			last, quiet = n, 0
		} else {
			quiet++
		}
	}
}
