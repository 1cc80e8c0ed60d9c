package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// rig is a saga system on real Kafka: two worker services and an
// orchestrator, with unique topic names per test.
type rig struct {
	t        *testing.T
	brokers  []string
	kopts    []kgo.Opt // every Kafka client's extra options (newRigOn)
	domain   string
	svcStock string
	svcPay   string
	store    eventstore.Store

	// guarded gives the workers a guard on the store, in guardMode
	// (RELAXED_WITH_DEDUP when empty).
	guarded   bool
	guardMode writeprotect.Mode
	// lean gives the workers handlers that keep nothing (a memory check's):
	// the order whose ID ends in 0 fails at ship, the rest pass through.
	lean       bool
	failShip   atomic.Bool
	failRefund atomic.Bool
	slowPay    atomic.Int64 // handler delay in ms
	// slowChargeOnce delays charge's first attempt by this many ms.
	slowChargeOnce atomic.Int64
	// chargeGate, set by holdChargesAfter before the workers start, holds
	// every charge after the first chargesFree until releaseCharges (which
	// a worker's stop calls once it has cancelled the worker).
	chargeGate   chan struct{}
	chargesFree  int64
	chargesBegun atomic.Int64
	releaseOnce  sync.Once
	// retryChargeOnce fails every saga's first charge attempt retryably;
	// retryCharge fails every charge attempt retryably.
	retryChargeOnce atomic.Bool
	retryCharge     atomic.Bool
	// pauseCharge makes charge's first attempt pause the saga (deadline
	// pauseDeadline); pauseRefund makes charge's compensation pause.
	pauseCharge   atomic.Bool
	pauseRefund   atomic.Bool
	pauseDeadline atomic.Int64                 // ns
	seen          map[string][]order           // tx/span/kind/attempt → entity the handler got
	resumed       map[string]map[string]string // tx/span/kind → resume context the handler got

	mu      sync.Mutex
	reverts map[string][]string // tx → compensations in call order
	runs    map[string]int      // tx/span/kind → executions
}

// storeKinds are the event stores the engine's integration tests run on.
var storeKinds = []string{"memory", "cassandra"}

// newStore returns an event store of kind for the test.
func newStore(t *testing.T, kind string) eventstore.Store {
	t.Helper()
	if kind == "memory" {
		return memory.New()
	}
	hosts, keyspace := testenv.CassandraKeyspace(t)
	return cassandraStoreIn(t, hosts, keyspace, true)
}

// onEachStore runs f as a subtest per store kind.
func onEachStore(t *testing.T, f func(t *testing.T, kind string)) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) { f(t, kind) })
	}
}

func newRig(t *testing.T, storeKind string) *rig {
	t.Helper()
	return newRigOn(t, storeKind, testenv.KafkaBrokers(t))
}

// newRigOn is newRig on brokers, every Kafka client of the rig (its
// workers', its orchestrators', its own) made with kopts.
func newRigOn(t *testing.T, storeKind string, brokers []string, kopts ...kgo.Opt) *rig {
	t.Helper()
	u := testenv.UniqueName(t, "it")
	r := &rig{
		t: t, brokers: brokers, kopts: kopts,
		domain: "order-" + u, svcStock: "stock-" + u, svcPay: "pay-" + u,
		store: newStore(t, storeKind), reverts: map[string][]string{}, runs: map[string]int{},
		seen: map[string][]order{}, resumed: map[string]map[string]string{},
	}
	cl, err := r.client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := append(topics.WorkerTopics(r.svcStock), topics.WorkerTopics(r.svcPay)...)
	names = append(names, topics.OrchestratorTopics(r.domain)...)
	if err := topics.Ensure(ctx, kadm.NewClient(cl), names, topics.Provision{Partitions: 4, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	return r
}

// client is a Kafka client on the rig's brokers with its kopts and opts.
func (r *rig) client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(r.brokers...)}, r.kopts...), opts...)...)
}

func (r *rig) sagaDomain() orchestrator.Domain[order] {
	return orchestrator.Domain[order]{Name: r.domain, OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: r.svcStock, Endpoint: "reserve"},
		orchestrator.Step{Service: r.svcPay, Endpoint: "charge"},
		orchestrator.Step{Service: r.svcStock, Endpoint: "ship"},
	)}
}

// count returns how many sagas ran span's kind at least once.
func (r *rig) count(span int, kind topics.Kind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	suffix := fmt.Sprintf("/%d/%s", span, kind)
	for k := range r.runs {
		if strings.HasSuffix(k, suffix) {
			n++
		}
	}
	return n
}

// runsOf returns how often the handler of tx's span and kind ran.
func (r *rig) runsOf(tx string, span int, kind topics.Kind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[fmt.Sprintf("%s/%d/%s", tx, span, kind)]
}

func (r *rig) record(s *worker.Step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[fmt.Sprintf("%s/%d/%s", s.TxID, s.Span, s.Kind)]++
	if s.Kind == topics.KindRevert {
		r.reverts[s.TxID] = append(r.reverts[s.TxID], s.Endpoint)
	}
}

func (r *rig) handler(name string) func(context.Context, *worker.Step, order) (order, error) {
	if r.lean {
		return func(_ context.Context, s *worker.Step, in order) (order, error) {
			if name == "ship" && s.Kind == topics.KindProcess && strings.HasSuffix(in.ID, "0") {
				return in, worker.NonRetryable(errors.New("cannot ship"))
			}
			return in, nil
		}
	}
	return func(_ context.Context, s *worker.Step, in order) (order, error) {
		r.record(s)
		r.mu.Lock()
		r.seen[fmt.Sprintf("%s/%d/%s/%d", s.TxID, s.Span, s.Kind, s.Attempt)] = append(r.seen[fmt.Sprintf("%s/%d/%s/%d", s.TxID, s.Span, s.Kind, s.Attempt)], in)
		if rc := s.Resumed(); rc != nil {
			r.resumed[fmt.Sprintf("%s/%d/%s", s.TxID, s.Span, s.Kind)] = rc
		}
		r.mu.Unlock()
		if name == "charge" && s.Kind == topics.KindProcess && r.pauseCharge.Load() && s.Attempt == 1 {
			in.Steps = append(in.Steps, "process:charge-initiated")
			s.Pause("PAYMENT_AUTHORISATION", time.Duration(r.pauseDeadline.Load()))
			return in, nil
		}
		if name == "charge" && s.Kind == topics.KindRevert && r.pauseRefund.Load() {
			in.Steps = append(in.Steps, "revert:refund-initiated")
			s.Pause("REFUND_INITIATED", 0)
			return in, nil
		}
		if name == "charge" && r.chargeGate != nil && r.chargesBegun.Add(1) > r.chargesFree {
			<-r.chargeGate
		}
		if name == "charge" {
			if d := r.slowPay.Load(); d > 0 {
				time.Sleep(time.Duration(d) * time.Millisecond)
			}
			if d := r.slowChargeOnce.Load(); d > 0 && s.Kind == topics.KindProcess && s.Attempt == 1 {
				time.Sleep(time.Duration(d) * time.Millisecond)
			}
		}
		if name == "charge" && s.Kind == topics.KindProcess && (r.retryCharge.Load() || (r.retryChargeOnce.Load() && s.Attempt == 1)) {
			return in, worker.Retryable(errors.New("payment gateway timeout"))
		}
		if name == "ship" && s.Kind == topics.KindProcess && r.failShip.Load() {
			return in, worker.NonRetryable(errors.New("cannot ship"))
		}
		if name == "charge" && s.Kind == topics.KindRevert && r.failRefund.Load() {
			return in, worker.NonRetryable(errors.New("refund refused"))
		}
		in.Steps = append(in.Steps, string(s.Kind)+":"+name)
		return in, nil
	}
}

// startWorker runs a worker for service with its endpoints (and opts
// after the rig's); the returned stop waits for Run to return.
func (r *rig) startWorker(service string, opts ...worker.Option) (stop func()) {
	r.t.Helper()
	wopts := []worker.Option{worker.WithBrokers(r.brokers...), worker.WithKafkaOpts(r.kopts...)}
	if r.guarded {
		cfg := writeprotect.DefaultConfig()
		if r.guardMode != "" {
			cfg.DefaultMode = r.guardMode
		}
		g, err := writeprotect.New(r.store, cfg, writeprotect.WithOwner(service))
		if err != nil {
			r.t.Fatal(err)
		}
		wopts = append(wopts, worker.WithGuard(g))
	}
	w, err := worker.New(service, append(wopts, opts...)...)
	if err != nil {
		r.t.Fatal(err)
	}
	eps := []string{"charge"}
	if service == r.svcStock {
		eps = []string{"reserve", "ship"}
	}
	for _, ep := range eps {
		if err := worker.Register(w, worker.Endpoint[order]{Name: ep, Process: r.handler(ep), Revert: r.handler(ep)}); err != nil {
			r.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Running():
	case err := <-done:
		r.t.Fatalf("worker %s: %v", service, err)
	case <-time.After(time.Minute):
		r.t.Fatalf("worker %s did not start", service)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			r.releaseCharges() // the held ones finish as the worker drains
			if err := <-done; err != nil {
				r.t.Errorf("worker %s Run: %v", service, err)
			}
		})
	}
	r.t.Cleanup(stop)
	return stop
}

// holdChargesAfter makes the charges after the first n wait until
// releaseCharges: a restart test then stops a service while sagas are
// certainly unfinished, however fast or slow the machine. Call it before
// starting the workers.
func (r *rig) holdChargesAfter(n int64) {
	r.chargeGate, r.chargesFree = make(chan struct{}), n
}

// releaseCharges lets the held charges go (and every later one).
func (r *rig) releaseCharges() {
	if r.chargeGate != nil {
		r.releaseOnce.Do(func() { close(r.chargeGate) })
	}
}

func (r *rig) startOrchestrator(opts ...orchestrator.Option) (*orchestrator.Orchestrator[order], func()) {
	r.t.Helper()
	o, err := orchestrator.New("orders", r.sagaDomain(), append([]orchestrator.Option{orchestrator.WithBrokers(r.brokers...),
		orchestrator.WithKafkaOpts(r.kopts...), orchestrator.WithStore(r.store)}, opts...)...)
	if err != nil {
		r.t.Fatal(err)
	}
	return o, runOrch(r.t, o)
}

// startConcurrently starts n sagas from 32 goroutines.
func startConcurrently(t *testing.T, o *orchestrator.Orchestrator[order], n int) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	sem := make(chan struct{}, 32)
	for i := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			id, err := o.Start(context.Background(), order{ID: fmt.Sprint(i)})
			if err != nil {
				failed.Store(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	return ids
}

func expectAll(t *testing.T, got map[string]eventstore.State, want eventstore.State) {
	t.Helper()
	n := 0
	for id, st := range got {
		if st != want {
			n++
			if n < 5 {
				t.Errorf("%s: %s, want %s", id, st, want)
			}
		}
	}
	if n > 0 {
		t.Errorf("%d of %d sagas not %s", n, len(got), want)
	}
}

func TestKafka200ConcurrentSagasComplete(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		o, _ := r.startOrchestrator()
		ids := startConcurrently(t, o, 200)
		expectAll(t, waitTerminal(t, o, ids, 2*time.Minute), eventstore.StateCompleted)
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.runs) != 600 {
			t.Errorf("%d distinct executions, want 600", len(r.runs))
		}
	})
}

func TestKafkaFailingLastStepCompensatesInReverse(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.failShip.Store(true)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		o, _ := r.startOrchestrator()
		ids := startConcurrently(t, o, 100)
		expectAll(t, waitTerminal(t, o, ids, 2*time.Minute), eventstore.StateCompensated)
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, id := range ids {
			if want := []string{"charge", "reserve"}; !slices.Equal(r.reverts[id], want) {
				t.Fatalf("%s: compensations %v, want %v", id, r.reverts[id], want)
			}
		}
	})
}

func TestKafkaFailingCompensationTerminates(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.failShip.Store(true)
		r.failRefund.Store(true)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		o, _ := r.startOrchestrator()
		ids := startConcurrently(t, o, 20)
		expectAll(t, waitTerminal(t, o, ids, 2*time.Minute), eventstore.StateCompensationFailed)
		frozen, err := r.store.ListFrozen(context.Background(), o.Scope(), 100)
		if err != nil || len(frozen) != 20 {
			t.Fatalf("frozen: %d, %v", len(frozen), err)
		}
	})
}

func TestKafkaWorkerRestartLosesNoSaga(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.slowPay.Store(20)
		r.holdChargesAfter(50)
		r.startWorker(r.svcStock)
		stopPay := r.startWorker(r.svcPay)
		o, _ := r.startOrchestrator()
		ids := startConcurrently(t, o, 200)
		// 50 charges done and more held: the stop drains the held ones
		// (at most the worker's concurrency), the rest wait for the restart.
		waitFor(t, time.Minute, "a held charge", func() bool { return r.chargesBegun.Load() > 50 })
		stopPay()
		if n := o.Stats().Completed; n >= 200 {
			t.Fatalf("all sagas completed before the restart; the test proves nothing")
		}
		r.startWorker(r.svcPay)
		expectAll(t, waitTerminal(t, o, ids, 2*time.Minute), eventstore.StateCompleted)
	})
}

func TestKafkaOrchestratorRestartResumes(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.slowPay.Store(20)
		r.holdChargesAfter(50)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		o1, stop := r.startOrchestrator()
		ids := startConcurrently(t, o1, 200)
		// 50 charges done and more held until o1 has stopped: the rest of
		// the sagas are left to o2.
		waitFor(t, time.Minute, "a held charge", func() bool { return r.chargesBegun.Load() > 50 })
		stop()
		if n := o1.Stats().Completed; n >= 200 {
			t.Fatalf("all sagas completed before the restart; the test proves nothing")
		}
		r.releaseCharges()
		o2, _ := r.startOrchestrator()
		expectAll(t, waitTerminal(t, o2, ids, 2*time.Minute), eventstore.StateCompleted)
	})
}

func TestKafkaMalformedRecordsAreDeadLettered(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		o, _ := r.startOrchestrator()
		cl, err := r.client()
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		targets := []string{topics.CommandTopic(r.svcStock), topics.CommandTopic(r.svcPay), topics.CallbackTopic(r.domain)}
		for _, tp := range targets {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: tp, Key: []byte("bad"), Value: []byte{0xc1, 0x00, 0x01}}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		// Good sagas after the bad records are processed.
		ids := startConcurrently(t, o, 10)
		expectAll(t, waitTerminal(t, o, ids, 2*time.Minute), eventstore.StateCompleted)
		for _, tp := range targets {
			dlt := topics.DeadLetterTopic(tp)
			c, err := r.client(kgo.ConsumeTopics(dlt), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			fs := c.PollFetches(ctx)
			c.Close()
			if err := fs.Err(); err != nil {
				t.Fatalf("%s: %v", dlt, err)
			}
			recs := fs.Records()
			if len(recs) != 1 {
				t.Errorf("%s: %d dead letters, want 1", dlt, len(recs))
				continue
			}
			if recs[0].Value[0] != 0xc1 || topics.DeadLetterReason(recs[0]) == "" {
				t.Errorf("%s: value %x, reason %q", dlt, recs[0].Value, topics.DeadLetterReason(recs[0]))
			}
		}
	})
}
