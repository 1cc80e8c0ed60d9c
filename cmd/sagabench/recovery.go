package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/cassandraenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Recovery cells (--recovery): how long the framework takes to heal, on
// real Kafka and Cassandra with the default configuration (recovery.
// DefaultConfig: 1-minute windows, retries from 1s, 30s step timeouts, a
// 10s session), each checked against issue 37's target:
//
//   - transient: the payment step's first attempt fails retryably; from
//     that failure's reply applied to the retry's reply applied. Target
//     p99 <= 3s.
//   - stalled: the first command of each saga is lost on its way
//     (orchestrator.FaultLoseCommand; the orchestrator stays alive); from
//     the loss to that step's reply applied. Target: within the step
//     timeout + 10s.
//   - stalled-crash: each saga is abandoned after its create as if its
//     orchestrator died there (orchestrator.FaultAfterCreate: no command,
//     no step timer left); a retry node restores it from its watchdog;
//     from the abandonment to the step's reply applied. Target: within the
//     step timeout + 10s.
var recoveryCellNames = []string{"transient", "stalled", "stalled-crash", "crash"}

// recoveryResult is one recovery cell's figures.
type recoveryResult struct {
	Cell          string
	N             int
	P50, P99, Max time.Duration
	Target        time.Duration
	Err           string
}

// runRecovery runs the recovery cells named in cells (comma-separated,
// "all": every one) and prints their figures and verdicts to stdout.
func runRecovery(ctx context.Context, o options, cells string, stdout, stderr io.Writer) int {
	names := recoveryCellNames
	if cells != "all" {
		names = splitList(cells)
		for _, n := range names {
			if !containsString(recoveryCellNames, n) {
				fmt.Fprintf(stderr, "sagabench: --recovery: unknown cell %q (cells: %s)\n", n, strings.Join(recoveryCellNames, ", "))
				return 2
			}
		}
	}
	if o.kafka == "" || o.cassandra == "" {
		fmt.Fprintln(stderr, "sagabench: --recovery needs --kafka and --cassandra (or KAFKA_BROKERS and CASSANDRA_HOSTS): its cells run on the real servers")
		return 2
	}
	runID := randomID()
	o.keyspace += "_" + runID
	var err error
	if o.cassandraCfg, o.cassandraCluster, err = cassandraenv.Config("--cassandra", splitList(o.cassandra), o.keyspace, o.lookup); err != nil {
		fmt.Fprintln(stderr, "sagabench:", err)
		return 2
	}
	progress := func(format string, args ...any) {
		if !o.quiet {
			fmt.Fprintf(stderr, "sagabench: "+format+"\n", args...)
		}
	}
	progress("recovery cells %s in keyspace %s (dropped at the end), %d sagas each", strings.Join(names, ", "), o.keyspace, o.recoverySagas)
	store, err := openStore(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "sagabench:", err)
		return 1
	}
	defer func() {
		_ = store.Close()
		if err := dropKeyspace(o); err != nil {
			fmt.Fprintf(stderr, "sagabench: could not drop keyspace %s: %v\n", o.keyspace, err)
		}
	}()
	var results []recoveryResult
	for _, n := range names {
		suffix := "r" + runID + "-" + n
		rig := &recoveryRig{brokers: splitList(o.kafka), kopts: o.kafkaOpts, store: store,
			names: placeorder.DefaultNames().WithSuffix(suffix), suffix: suffix, logger: newLogger(stderr, o.verbose), progress: progress}
		progress("%s: running", n)
		var res recoveryResult
		var err error
		if n == "crash" {
			res, err = rig.runCrash(ctx, o, o.timeout)
		} else {
			res, err = rig.run(ctx, n, o.recoverySagas, o.timeout)
		}
		deleteTopics(rig.brokers, rig.kopts, frameworkTopics(rig.names))
		if err != nil {
			res.Err = err.Error()
		}
		progress("%s: done", n)
		results = append(results, res)
	}
	return writeRecovery(stdout, results)
}

// writeRecovery prints the results and the verdicts; it returns 1 if a
// cell failed to run (a missed target is a verdict, not a failure).
func writeRecovery(w io.Writer, results []recoveryResult) int {
	code := 0
	fmt.Fprintf(w, "%-22s %6s %10s %10s %10s  %s\n", "recovery cell", "sagas", "p50_ms", "p99_ms", "max_ms", "target (issue 37)")
	for _, r := range results {
		if r.Err != "" {
			code = 1
			fmt.Fprintf(w, "%-22s failed: %s\n", r.Cell, r.Err)
			continue
		}
		verdict := "MET"
		if r.P99 > r.Target {
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "%-22s %6d %10.0f %10.0f %10.0f  p99 <= %v: %s\n", r.Cell, r.N, ms(r.P50), ms(r.P99), ms(r.Max), r.Target, verdict)
	}
	return code
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// recoveryRig is the place-order saga on real Kafka and Cassandra with the
// default configuration: three workers (RELAXED_WITH_DEDUP) and an
// orchestrator in this process.
type recoveryRig struct {
	brokers []string
	kopts   []kgo.Opt
	store   *cassandra.Store
	names   placeorder.Names
	suffix  string // of names
	logger  *slog.Logger
	// progress reports on stderr (nil: nothing).
	progress func(format string, args ...any)
}

// marks pairs, per saga, when the measured interval began and ended.
type marks struct {
	mu         sync.Mutex
	begin, end map[string]time.Time
	done       chan struct{}
	want       int
}

func newMarks(want int) *marks {
	return &marks{begin: map[string]time.Time{}, end: map[string]time.Time{}, done: make(chan struct{}), want: want}
}

func (m *marks) setBegin(tx string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.begin[tx]; !ok {
		m.begin[tx] = t
	}
}

// setEnd records tx's end if its beginning is known and its end is not.
func (m *marks) setEnd(tx string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.begin[tx]; !ok {
		return
	}
	if _, ok := m.end[tx]; ok {
		return
	}
	m.end[tx] = t
	if len(m.end) == m.want {
		close(m.done)
	}
}

func (m *marks) durations() []time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ds []time.Duration
	for tx, e := range m.end {
		ds = append(ds, e.Sub(m.begin[tx]))
	}
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	return ds
}

// run runs cell with n sagas.
func (r *recoveryRig) run(ctx context.Context, cell string, n int, timeout time.Duration) (recoveryResult, error) {
	cfg := recovery.DefaultConfig()
	stepTimeout := cfg.Retry.Default.StepTimeout
	res := recoveryResult{Cell: "recovery-" + cell, Target: stepTimeout + 10*time.Second}
	m := newMarks(n)
	var opts []orchestrator.Option
	order := func(i int) placeorder.Order {
		return placeorder.Order{OrderID: fmt.Sprintf("order-%d", i), CustomerID: "c-1", Item: "book", Quantity: 1, Amount: 1999}
	}
	spread := time.Duration(0) // how long the starts are spread over
	switch cell {
	case "transient":
		res.Target = 3 * time.Second
		base := order
		order = func(i int) placeorder.Order { o := base(i); o.TransientOnce = 1 << 1; return o }
		opts = append(opts, orchestrator.WithListener(func(e orchestrator.Event) {
			switch {
			case e.To == eventstore.StateRetryPending && e.Span == 1:
				m.setBegin(e.TxID, time.Now())
			case e.Span == 1 && e.Kind == string(topics.KindProcess) && e.Outcome == string(topics.OutcomeOK):
				m.setEnd(e.TxID, time.Now())
			}
		}))
	case "stalled", "stalled-crash":
		point := orchestrator.FaultLoseCommand
		if cell == "stalled-crash" {
			point = orchestrator.FaultAfterCreate
			// The sagas stall at every phase of a window.
			spread = cfg.Interval
			opts = append(opts, orchestrator.WithRetryNode())
		}
		var mu sync.Mutex
		seen := map[string]bool{}
		opts = append(opts,
			orchestrator.WithFaultInjection(func(p orchestrator.FaultPoint, txID string) bool {
				if p != point {
					return false
				}
				mu.Lock()
				defer mu.Unlock()
				if seen[txID] {
					return false
				}
				seen[txID] = true
				m.setBegin(txID, time.Now())
				return true
			}),
			orchestrator.WithListener(func(e orchestrator.Event) {
				if e.Span == 0 && e.Kind == string(topics.KindProcess) && e.Outcome == string(topics.OutcomeOK) {
					m.setEnd(e.TxID, time.Now())
				}
			}))
	default:
		return res, fmt.Errorf("unknown cell %q", cell)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	var noErr atomic.Value // waitReady's: failures come on errc
	defer func() { stop(); wg.Wait() }()
	for svc, reg := range map[string]func(*worker.Worker, placeorder.Observer) error{
		r.names.Inventory: placeorder.RegisterInventory, r.names.Payment: placeorder.RegisterPayment, r.names.Shipping: placeorder.RegisterShipping,
	} {
		g, err := writeprotect.New(r.store, writeprotect.DefaultConfig(), writeprotect.WithLogger(r.logger), writeprotect.WithOwner(svc))
		if err != nil {
			return res, err
		}
		w, err := worker.New(svc, worker.WithBrokers(r.brokers...), worker.WithKafkaOpts(r.kopts...), worker.WithLogger(r.logger), worker.WithGuard(g))
		if err != nil {
			return res, err
		}
		if err := reg(w, nil); err != nil {
			return res, err
		}
		wg.Go(func() {
			if err := w.Run(runCtx); err != nil {
				errc <- fmt.Errorf("worker %s: %w", svc, err)
			}
		})
		if err := waitReady(ctx, w.Running(), timeout, &noErr); err != nil {
			return res, fmt.Errorf("worker %s: %w", svc, err)
		}
	}
	o, err := orchestrator.New(r.names.Order, placeorder.SagaNamed(r.names), append([]orchestrator.Option{
		orchestrator.WithBrokers(r.brokers...), orchestrator.WithKafkaOpts(r.kopts...), orchestrator.WithStore(r.store),
		orchestrator.WithLogger(r.logger), orchestrator.WithRecovery(cfg)}, opts...)...)
	if err != nil {
		return res, err
	}
	wg.Go(func() {
		if err := o.Run(runCtx); err != nil {
			errc <- fmt.Errorf("orchestrator: %w", err)
		}
	})
	if err := waitReady(ctx, o.Running(), timeout, &noErr); err != nil {
		return res, fmt.Errorf("orchestrator: %w", err)
	}
	sem := make(chan struct{}, 16)
	for i := range n {
		if spread > 0 && n > 1 {
			time.Sleep(spread / time.Duration(n))
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := o.Start(runCtx, order(i)); err != nil && runCtx.Err() == nil {
				errc <- fmt.Errorf("start: %w", err)
			}
		})
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-m.done:
	case err := <-errc:
		return res, err
	case <-t.C:
		m.mu.Lock()
		got := len(m.end)
		m.mu.Unlock()
		return res, fmt.Errorf("%d of %d sagas measured after %v", got, n, timeout)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	ds := m.durations()
	res.N, res.P50, res.P99, res.Max = len(ds), quantile(ds, 0.5), quantile(ds, 0.99), ds[len(ds)-1]
	return res, nil
}

// The crash cell (recovery-crash): the orchestrator and the three workers
// run in two child processes of this binary (--recovery-child), with
// static instance ids, while this process starts sagas (an orchestrator
// that only starts them) and follows each in the store. Each round
// SIGKILLs both children with sagas in flight and restarts them at once
// under the same ids; from the kill to each affected saga's next
// transition (its version moving past what it was when the children died).
// Target: p99 <= 15s.

// recoveryChild runs one child of the crash cell until it is killed: role
// "orchestrator" (the domain's orchestrator) or "workers" (its three
// workers), under instance id, on the names with suffix, in keyspace
// o.keyspace. It prints "ready" once consuming.
func recoveryChild(ctx context.Context, o options, role, suffix, id string, stdout, stderr io.Writer) int {
	var err error
	if o.cassandraCfg, o.cassandraCluster, err = cassandraenv.Config("--cassandra", splitList(o.cassandra), o.keyspace, o.lookup); err != nil {
		fmt.Fprintln(stderr, "sagabench child:", err)
		return 2
	}
	// The parent applied the schema: a restarted process opens the store
	// as a production one does (the schema applied once, by sagactl).
	o.cassandraCfg.CreateSchema = false
	store, err := openStore(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "sagabench child:", err)
		return 1
	}
	defer store.Close()
	names := placeorder.DefaultNames().WithSuffix(suffix)
	brokers, logger := splitList(o.kafka), newLogger(stderr, o.verbose)
	errc := make(chan error, 4)
	var ready []<-chan struct{}
	switch role {
	case "orchestrator":
		orc, err := orchestrator.New(names.Order, placeorder.SagaNamed(names), orchestrator.WithBrokers(brokers...),
			orchestrator.WithKafkaOpts(o.kafkaOpts...), orchestrator.WithStore(store), orchestrator.WithLogger(logger),
			orchestrator.WithInstanceID(id))
		if err != nil {
			fmt.Fprintln(stderr, "sagabench child:", err)
			return 1
		}
		go func() { errc <- orc.Run(ctx) }()
		ready = append(ready, orc.Running())
	case "workers":
		for svc, reg := range map[string]func(*worker.Worker, placeorder.Observer) error{
			names.Inventory: placeorder.RegisterInventory, names.Payment: placeorder.RegisterPayment, names.Shipping: placeorder.RegisterShipping,
		} {
			g, err := writeprotect.New(store, writeprotect.DefaultConfig(), writeprotect.WithLogger(logger), writeprotect.WithOwner(svc))
			if err != nil {
				fmt.Fprintln(stderr, "sagabench child:", err)
				return 1
			}
			w, err := worker.New(svc, worker.WithBrokers(brokers...), worker.WithKafkaOpts(o.kafkaOpts...), worker.WithLogger(logger),
				worker.WithGuard(g), worker.WithInstanceID(id+"-"+svc))
			if err == nil {
				err = reg(w, nil)
			}
			if err != nil {
				fmt.Fprintln(stderr, "sagabench child:", err)
				return 1
			}
			go func() { errc <- w.Run(ctx) }()
			ready = append(ready, w.Running())
		}
	default:
		fmt.Fprintf(stderr, "sagabench child: unknown role %q\n", role)
		return 2
	}
	for _, r := range ready {
		select {
		case <-r:
		case err := <-errc:
			fmt.Fprintln(stderr, "sagabench child:", err)
			return 1
		}
	}
	fmt.Fprintln(stdout, "ready")
	select {
	case err := <-errc:
		if err != nil {
			fmt.Fprintln(stderr, "sagabench child:", err)
			return 1
		}
	case <-ctx.Done():
	}
	return 0
}

// crashRounds is how many times the crash cell kills its children.
const crashRounds = 3

// child is a running child process of the crash cell.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startChild starts this binary as a crash-cell child and waits for its
// "ready".
func (r *recoveryRig) startChild(ctx context.Context, o options, role, id string, timeout time.Duration) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"--recovery-child", role, "--recovery-suffix", r.suffix, "--recovery-instance", id,
		"--keyspace", o.keyspace, "--kafka", o.kafka, "--cassandra", o.cassandra}
	if o.verbose {
		args = append(args, "-v")
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	readyc := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if sc.Text() == "ready" && !ok {
				ok = true
				readyc <- true
			}
		}
		if !ok {
			readyc <- false
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ok := <-readyc:
		if !ok {
			return nil, fmt.Errorf("child %s exited before it was ready", role)
		}
		return c, nil
	case <-t.C:
		c.kill()
		return nil, fmt.Errorf("child %s not ready after %v", role, timeout)
	}
}

// kill SIGKILLs the child and waits for it to be gone.
func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// runCrash is the crash cell.
func (r *recoveryRig) runCrash(ctx context.Context, o options, timeout time.Duration) (recoveryResult, error) {
	res := recoveryResult{Cell: "recovery-crash", Target: 15 * time.Second}
	ids := map[string]string{"orchestrator": "sagabench-orch-" + r.suffix, "workers": "sagabench-w-" + r.suffix}
	kids := map[string]*child{}
	defer func() {
		for _, c := range kids {
			c.kill()
		}
	}()
	start := func() error {
		for _, role := range []string{"workers", "orchestrator"} {
			c, err := r.startChild(ctx, o, role, ids[role], timeout)
			if err != nil {
				return err
			}
			kids[role] = c
		}
		return nil
	}
	if err := start(); err != nil {
		return res, err
	}
	starter, err := orchestrator.New(r.names.Order, placeorder.SagaNamed(r.names), orchestrator.WithBrokers(r.brokers...),
		orchestrator.WithKafkaOpts(r.kopts...), orchestrator.WithStore(r.store), orchestrator.WithLogger(r.logger))
	if err != nil {
		return res, err
	}
	defer starter.Close()
	scope := starter.Scope()
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopLoad(); wg.Wait() }()
	var inflight sync.Map // txID -> struct{}
	for slot := range 16 {
		wg.Go(func() {
			for i := 0; loadCtx.Err() == nil; i++ {
				ord := placeorder.Order{OrderID: fmt.Sprintf("order-%d-%d", slot, i), CustomerID: "c-1", Item: "book", Quantity: 1, Amount: 1999}
				id, err := starter.Start(loadCtx, ord)
				if err != nil {
					continue
				}
				inflight.Store(id, struct{}{})
				for loadCtx.Err() == nil {
					time.Sleep(100 * time.Millisecond)
					tx, err := r.store.LoadTransaction(loadCtx, scope, id)
					if err == nil && tx.State.Terminal() {
						break
					}
				}
				inflight.Delete(id)
			}
		})
	}
	var all []time.Duration
	for round := range crashRounds {
		time.Sleep(5 * time.Second)
		killed := time.Now()
		for _, c := range kids {
			c.kill()
		}
		// Nothing moves the sagas now: their versions are final.
		affected := map[string]int64{}
		inflight.Range(func(k, _ any) bool {
			tx, err := r.store.LoadTransaction(ctx, scope, k.(string))
			if err == nil && !tx.State.Terminal() {
				affected[k.(string)] = tx.Version
			}
			return true
		})
		if err := start(); err != nil {
			return res, fmt.Errorf("round %d: restart: %w", round+1, err)
		}
		restarted := time.Since(killed)
		n := len(affected)
		deadline := time.Now().Add(timeout)
		for len(affected) > 0 && time.Now().Before(deadline) {
			for id, v := range affected {
				tx, err := r.store.LoadTransaction(ctx, scope, id)
				if err == nil && tx.Version > v {
					all = append(all, time.Since(killed))
					delete(affected, id)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(affected) > 0 {
			return res, fmt.Errorf("round %d: %d sagas did not move within %v of the kill", round+1, len(affected), timeout)
		}
		r.progress("crash round %d: %d sagas in flight at the kill; children ready again %.1fs after it; last saga moved %.1fs after it",
			round+1, n, restarted.Seconds(), all[len(all)-1].Seconds())
	}
	if len(all) == 0 {
		return res, errors.New("no saga was in flight at the kills")
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	res.N, res.P50, res.P99, res.Max = len(all), quantile(all, 0.5), quantile(all, 0.99), all[len(all)-1]
	return res, nil
}
