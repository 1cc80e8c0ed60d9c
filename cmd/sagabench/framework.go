package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// framework runs the place-order saga as the demo does: an orchestrator
// and three workers in this process.
type framework struct {
	spec    cellSpec
	brokers []string
	// kafkaOpts are the Kafka clients' TLS and SASL options.
	kafkaOpts []kgo.Opt
	store     eventstore.Store
	cass      *cassandra.Store // nil unless the cell's store is Cassandra
	names     placeorder.Names
	logger    *slog.Logger
	// tel, when set, instruments the orchestrator and the workers.
	tel *benchTelemetry
}

// run starts the services, runs warmup sagas, then measures n sagas.
func (f *framework) run(ctx context.Context, warmup, n int, timeout time.Duration) (measure, *roundTrips, error) {
	runCtx, stopAll := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr atomic.Value
	goRun := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(runCtx); err != nil {
				runErr.CompareAndSwap(nil, fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
	defer func() { stopAll(); wg.Wait() }()

	regs := map[string]func(*worker.Worker, placeorder.Observer) error{
		f.names.Inventory: placeorder.RegisterInventory,
		f.names.Payment:   placeorder.RegisterPayment,
		f.names.Shipping:  placeorder.RegisterShipping,
	}
	var produce produceClock
	for _, svc := range []string{f.names.Inventory, f.names.Payment, f.names.Shipping} {
		cfg := writeprotect.DefaultConfig()
		cfg.DefaultMode = writeprotect.RelaxedWithDedup
		if f.spec.Mode == "strict" {
			cfg.DefaultMode = writeprotect.Strict
		}
		g, err := writeprotect.New(f.store, cfg, writeprotect.WithLogger(f.logger), writeprotect.WithOwner(svc))
		if err != nil {
			return measure{}, nil, err
		}
		wopts := []worker.Option{worker.WithBrokers(f.brokers...), worker.WithLogger(f.logger),
			worker.WithConcurrency(f.spec.Concurrency), worker.WithGuard(g), worker.WithKafkaOpts(append([]kgo.Opt{produce.opt()}, f.kafkaOpts...)...)}
		if f.tel != nil {
			wopts = append(wopts, worker.WithTracerProvider(f.tel.tracerProvider()), worker.WithMeterProvider(f.tel.meterProvider()))
		}
		w, err := worker.New(svc, wopts...)
		if err != nil {
			return measure{}, nil, err
		}
		if err := regs[svc](w, nil); err != nil {
			return measure{}, nil, err
		}
		goRun(svc, w.Run)
		if err := waitReady(ctx, w.Running(), timeout, &runErr); err != nil {
			return measure{}, nil, fmt.Errorf("worker %s: %w", svc, err)
		}
	}
	lat := newLatencies()
	var ends terminalStates
	oopts := []orchestrator.Option{
		orchestrator.WithBrokers(f.brokers...), orchestrator.WithStore(f.store), orchestrator.WithLogger(f.logger),
		orchestrator.WithConcurrency(f.spec.Concurrency), orchestrator.WithKafkaOpts(append([]kgo.Opt{produce.opt()}, f.kafkaOpts...)...),
		orchestrator.WithListener(func(e orchestrator.Event) {
			switch e.To {
			case eventstore.StateCompleted, eventstore.StateCompensated, eventstore.StateCompensationFailed:
				lat.end(e.TxID, time.Now())
				ends.add(e.TxID, e.To)
			}
		}),
	}
	if f.tel != nil {
		oopts = append(oopts, orchestrator.WithTracerProvider(f.tel.tracerProvider()), orchestrator.WithMeterProvider(f.tel.meterProvider()))
	}
	o, err := orchestrator.New(f.names.Order, placeorder.SagaNamed(f.names), oopts...)
	if err != nil {
		return measure{}, nil, err
	}
	goRun("orchestrator", o.Run)
	if err := waitReady(ctx, o.Running(), timeout, &runErr); err != nil {
		return measure{}, nil, fmt.Errorf("orchestrator: %w", err)
	}

	start := func(i int) error {
		ord := placeorder.Order{OrderID: fmt.Sprintf("order-%d", i), CustomerID: "c-1", Item: "book", Quantity: 1, Amount: 1999}
		t0 := time.Now()
		txID, err := o.Start(runCtx, ord)
		if err != nil {
			return err
		}
		lat.begin(txID, t0)
		return nil
	}
	if warmup > 0 {
		if _, err := drive(ctx, warmup, f.spec.Concurrency, 0, start, lat, timeout, &runErr); err != nil {
			return measure{}, nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	var before cassandra.Stats
	if f.cass != nil {
		before = f.cass.Stats()
	}
	produce.reset()
	ends.reset()
	m, err := drive(ctx, n, f.spec.Concurrency, warmup, start, lat, timeout, &runErr)
	if err != nil {
		return measure{}, nil, err
	}
	m.NotCompleted = ends.notCompleted()
	m.ProduceMs = produce.meanMs()
	var rt *roundTrips
	if f.cass != nil {
		rt = roundTripsOf(f.cass.Stats().Sub(before), n)
	}
	return m, rt, nil
}

// waitReady waits for ready, a failed service, ctx or timeout.
func waitReady(ctx context.Context, ready <-chan struct{}, timeout time.Duration, runErr *atomic.Value) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ready:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return fmt.Errorf("not running after %v", timeout)
		case <-tick.C:
			if e := runErr.Load(); e != nil {
				return e.(error)
			}
		}
	}
}

// drive starts n sagas (numbered from first) with at most conc in flight,
// and waits until all are terminal. It measures the phase.
func drive(ctx context.Context, n, conc, first int, start func(i int) error, lat *latencies, timeout time.Duration, runErr *atomic.Value) (measure, error) {
	slots := make(chan struct{}, conc)
	lat.reset(n, func() { <-slots })
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	errc := make(chan error, 1)
	meter := startMeter()
	for i := range n {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return measure{}, ctx.Err()
		case <-deadline.C:
			return measure{}, fmt.Errorf("%d of %d sagas terminal after %v", lat.count(), n, timeout)
		case err := <-errc:
			return measure{}, fmt.Errorf("start saga: %w", err)
		}
		go func() {
			if err := start(first + i); err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		}()
		if e := runErr.Load(); e != nil {
			return measure{}, e.(error)
		}
	}
	select {
	case <-lat.done:
	case <-ctx.Done():
		return measure{}, ctx.Err()
	case <-deadline.C:
		return measure{}, fmt.Errorf("%d of %d sagas terminal after %v", lat.count(), n, timeout)
	case err := <-errc:
		return measure{}, fmt.Errorf("start saga: %w", err)
	}
	if e := runErr.Load(); e != nil {
		return measure{}, e.(error)
	}
	return meter.stop(lat.values()), nil
}

// terminalStates records the terminal state of each saga that ended since
// reset (a saga's first terminal event only).
type terminalStates struct {
	mu     sync.Mutex
	states map[string]eventstore.State
}

func (t *terminalStates) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.states = make(map[string]eventstore.State)
}

func (t *terminalStates) add(txID string, s eventstore.State) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.states == nil {
		return // the warm-up's: not counted
	}
	if _, dup := t.states[txID]; !dup {
		t.states[txID] = s
	}
}

// notCompleted counts the sagas that ended in another state than
// COMPLETED: the place-order saga fails no step, so each one is a step
// that timed out or failed on the infrastructure and was compensated.
func (t *terminalStates) notCompleted() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.states {
		if s != eventstore.StateCompleted {
			n++
		}
	}
	return n
}

// latencies pairs the start and end of each saga of a phase.
type latencies struct {
	mu     sync.Mutex
	starts map[string]time.Time
	ends   map[string]time.Time
	vals   []time.Duration
	want   int
	done   chan struct{}
	onEnd  func()
}

func newLatencies() *latencies { return &latencies{} }

// reset starts a phase of n sagas; onEnd runs (under the lock) when one
// of them has ended.
func (l *latencies) reset(n int, onEnd func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts, l.ends = make(map[string]time.Time, n), make(map[string]time.Time)
	l.vals, l.want, l.done, l.onEnd = make([]time.Duration, 0, n), n, make(chan struct{}), onEnd
}

// begin records that txID started at t0 (Start returns after the first
// command is out, so its end may already be recorded).
func (l *latencies) begin(txID string, t0 time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t1, ok := l.ends[txID]; ok {
		delete(l.ends, txID)
		l.addLocked(t1.Sub(t0))
		return
	}
	l.starts[txID] = t0
}

// end records that txID became terminal at t1; a second terminal event of
// the same saga is ignored.
func (l *latencies) end(txID string, t1 time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t0, ok := l.starts[txID]; ok {
		delete(l.starts, txID)
		l.addLocked(t1.Sub(t0))
		return
	}
	if l.ends != nil {
		if _, dup := l.ends[txID]; !dup {
			l.ends[txID] = t1
		}
	}
}

func (l *latencies) addLocked(d time.Duration) {
	if len(l.vals) >= l.want {
		return
	}
	l.vals = append(l.vals, d)
	if l.onEnd != nil {
		l.onEnd()
	}
	if len(l.vals) == l.want {
		close(l.done)
	}
}

func (l *latencies) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.vals)
}

func (l *latencies) values() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.vals...)
}
