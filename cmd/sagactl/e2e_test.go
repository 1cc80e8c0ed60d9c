package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// e2eOrder is the saga entity of the end-to-end test.
type e2eOrder struct{ ID string }

// e2eClock is the orchestrator's clock and sagactl's: windows seal when
// the test advances it.
type e2eClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *e2eClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *e2eClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRestoreEndToEnd runs the whole loop on real Kafka and Cassandra: a
// saga parked by retryable failures outlives its lifetime and is disabled
// by the retry node, another one's compensation fails for good; sagactl
// lists and restores both; the retry node re-drives them, and they finish
// (COMPLETED, COMPENSATED) with no step run twice successfully.
func TestRestoreEndToEnd(t *testing.T) {
	r := newAdminRig(t)
	brokers := testenv.KafkaBrokers(t)
	u := testenv.UniqueName(t, "e2e")
	domain, svcStock, svcPay, service := "order-"+u, "stock-"+u, "pay-"+u, "orders-"+u
	r.scope = eventstore.Scope{Region: orchestrator.DefaultRegion, Cluster: "default", Service: service}
	r.flags = []string{"--hosts", r.hosts, "--keyspace", r.ks, "--service", service}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	names := append(topics.WorkerTopics(svcStock), topics.WorkerTopics(svcPay)...)
	names = append(names, topics.OrchestratorTopics(domain)...)
	err = topics.Ensure(ctx, kadm.NewClient(cl), names, topics.Provision{Partitions: 2, ReplicationFactor: 1})
	cancel()
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}

	var retryCharge, failShip, failRefund atomic.Bool
	var mu sync.Mutex
	ok := map[string]int{} // tx/span/kind → successful executions
	runs := map[string]int{}
	handler := func(name string) func(context.Context, *worker.Step, e2eOrder) (e2eOrder, error) {
		return func(_ context.Context, s *worker.Step, in e2eOrder) (e2eOrder, error) {
			key := fmt.Sprintf("%s/%d/%s", s.TxID, s.Span, s.Kind)
			mu.Lock()
			runs[key]++
			mu.Unlock()
			switch {
			case name == "charge" && s.Kind == topics.KindProcess && retryCharge.Load():
				return in, worker.Retryable(errors.New("payment gateway timeout"))
			case name == "ship" && s.Kind == topics.KindProcess && failShip.Load():
				return in, worker.NonRetryable(errors.New("cannot ship"))
			case name == "charge" && s.Kind == topics.KindRevert && failRefund.Load():
				return in, worker.NonRetryable(errors.New("refund refused"))
			}
			mu.Lock()
			ok[key]++
			mu.Unlock()
			return in, nil
		}
	}
	for svc, eps := range map[string][]string{svcStock: {"reserve", "ship"}, svcPay: {"charge"}} {
		w, err := worker.New(svc, worker.WithBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range eps {
			if err := worker.Register(w, worker.Endpoint[e2eOrder]{Name: ep, Process: handler(ep), Revert: handler(ep)}); err != nil {
				t.Fatal(err)
			}
		}
		runInBackground(t, "worker "+svc, w.Run, w.Running())
	}

	clock := &e2eClock{t: time.Now().UTC()}
	cfg := recovery.DefaultConfig()
	cfg.TransactionLifetime = time.Hour
	cfg.Restore.DefaultDelayWindows = 5
	cfg.Retry.Default.DelayWindows, cfg.Retry.Default.MaxDelayWindows, cfg.Retry.Default.Jitter = 30, 30, 0
	o, err := orchestrator.New(service, orchestrator.Domain[e2eOrder]{Name: domain, OnNext: orchestrator.Sequence[e2eOrder](
		orchestrator.Step{Service: svcStock, Endpoint: "reserve"},
		orchestrator.Step{Service: svcPay, Endpoint: "charge"},
		orchestrator.Step{Service: svcStock, Endpoint: "ship"},
	)}, orchestrator.WithBrokers(brokers...), orchestrator.WithStore(r.store), orchestrator.WithClock(clock.now),
		orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, "orchestrator", o.Run, o.Running())
	if o.Scope() != r.scope {
		t.Fatalf("orchestrator scope %+v, sagactl's %+v", o.Scope(), r.scope)
	}
	state := func(id string) eventstore.State {
		s, err := o.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return s.State
	}
	// settle advances the clock by step and scans until every saga of want
	// is in its state. Time passes only while no step is in flight: a step
	// slower than the restore delay's few passes would be re-sent by its
	// watchdog (at least once: these workers have no guard).
	settle := func(step time.Duration, want map[string]eventstore.State) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			advanceIdle(t, o.Stats, clock.advance, step)
			if _, err := o.RecoveryEngine().Scan(context.Background()); err != nil {
				t.Logf("scan: %v", err)
			}
			for wait := time.Now().Add(3 * time.Second); time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
				done := true
				for id, st := range want {
					done = done && state(id) == st
				}
				if done {
					return
				}
			}
			if time.Now().After(deadline) {
				got := map[string]eventstore.State{}
				for id := range want {
					got[id] = state(id)
				}
				t.Fatalf("sagas %v, want %v", got, want)
			}
		}
	}

	// B: ship fails, then the refund fails for good → COMPENSATION_FAILED.
	failShip.Store(true)
	failRefund.Store(true)
	b, err := o.Start(context.Background(), e2eOrder{ID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	settle(0, map[string]eventstore.State{b: eventstore.StateCompensationFailed})
	// A: every charge fails retryably until its lifetime (1h) is over.
	failShip.Store(false)
	retryCharge.Store(true)
	a, err := o.Start(context.Background(), e2eOrder{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	settle(20*time.Minute, map[string]eventstore.State{a: eventstore.StateDisabled})

	// The admin's view, at the orchestrator's time.
	old := now
	now = clock.now
	t.Cleanup(func() { now = old })
	if d := r.list("disabled"); len(d.Sagas) != 1 || d.Sagas[0].TxID != a || d.Sagas[0].AgeSeconds < 3600 {
		t.Fatalf("list disabled: %+v", d.Sagas)
	}
	if d := r.list("compensation-failed"); len(d.Sagas) != 1 || d.Sagas[0].TxID != b || d.Sagas[0].Reason == "" {
		t.Fatalf("list compensation-failed: %+v", d.Sagas)
	}

	// The faults are fixed; restore both.
	retryCharge.Store(false)
	failRefund.Store(false)
	mu.Lock()
	chargesBefore := runs[a+"/1/process"]
	mu.Unlock()
	r.ok("restore", "--all-disabled")
	r.ok("restore", b)
	if st := state(a); st != eventstore.StateRetryPending {
		t.Fatalf("A after restore: %s", st)
	}
	settle(time.Minute, map[string]eventstore.State{a: eventstore.StateCompleted, b: eventstore.StateCompensated})

	mu.Lock()
	defer mu.Unlock()
	if runs[a+"/1/process"] <= chargesBefore {
		t.Errorf("A's charge was not sent again after the restore (%d runs)", runs[a+"/1/process"])
	}
	for _, key := range []string{a + "/0/process", a + "/1/process", a + "/2/process", b + "/0/process", b + "/1/process", b + "/1/revert", b + "/0/revert"} {
		if ok[key] != 1 {
			t.Errorf("%s succeeded %d times, want once", key, ok[key])
		}
	}
	if runs[b+"/1/revert"] != 2 {
		t.Errorf("B's refund ran %d times, want 2 (refused, then retried after the restore)", runs[b+"/1/revert"])
	}
	if r.frozen(a) || r.frozen(b) {
		t.Error("a restored saga is still frozen")
	}
}

// advanceIdle waits until every command the orchestrator published has had
// its reply (Stats.Awaiting), then advances the test's clock by d.
func advanceIdle(t *testing.T, stats func() orchestrator.Stats, advance func(time.Duration), d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); stats().Awaiting() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: a command's reply did not come in 30s", stats())
		}
	}
	advance(d)
}

// runInBackground runs run until the test ends, after ready is closed.
func runInBackground(t *testing.T, what string, run func(context.Context) error, ready <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("%s: %v", what, err)
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("%s did not start", what)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s Run: %v", what, err)
		}
	})
}
