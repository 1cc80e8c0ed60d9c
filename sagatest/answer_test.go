package sagatest_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/sagatest"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Item 8 of issue 47: attempt 1 of charge succeeds after its step timeout,
// attempt 2 runs again on an unguarded worker: the card is charged twice,
// and AssertExactlyOnce must say so although each attempt ran once.
func TestAssertExactlyOnceRefusesARunAfterAnEarlierAttemptsOK(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	env := sagatest.New(ft)
	release := make(chan struct{})
	var charges atomic.Int32
	step := func(name string, slowFirst bool) worker.Endpoint[Order] {
		return worker.Endpoint[Order]{Name: name,
			Process: func(ctx context.Context, _ *worker.Step, o Order) (Order, error) {
				if slowFirst && charges.Add(1) == 1 {
					select { // attempt 1 returns ok once the step timed out
					case <-release:
					case <-ctx.Done():
						return o, ctx.Err()
					}
				}
				return o, nil
			},
			Revert: func(_ context.Context, _ *worker.Step, o Order) (Order, error) { return o, nil },
		}
	}
	sagatest.Worker(env, fixed.inventory, func(w *worker.Worker) error { return worker.Register(w, step("reserve", false)) })
	sagatest.Worker(env, fixed.payment, func(w *worker.Worker) error { return worker.Register(w, step("charge", true)) })
	sagatest.Worker(env, fixed.shipping, func(w *worker.Worker) error { return worker.Register(w, step("ship", false)) })
	cfg := recovery.DefaultConfig()
	timeout := 300 * time.Millisecond
	cfg.Retry.DefaultEndpoints = map[string]recovery.RetryOverride{fixed.payment + "/charge": {StepTimeout: &timeout}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	o := sagatest.Orchestrator(env, fixed.order, fixed.saga(), orchestrator.WithRecovery(cfg))
	id, err := o.Start(t.Context(), Order{ID: "twice"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "charge's step timeout", func() bool { return o.Stats().TimedOut >= 1 })
	close(release)
	if s := env.WaitTerminal(o, id)[id]; s != eventstore.StateCompleted {
		t.Fatalf("saga ended %s", s)
	}
	if n := charges.Load(); n < 2 {
		t.Fatalf("charge ran %d times, want the second attempt to run too", n)
	}
	if env.AssertExactlyOnce() {
		t.Fatal("AssertExactlyOnce passed although charge's attempt 2 ran after attempt 1 returned ok")
	}
	want := id + "/1/process attempt 2 ran after attempt 1 replied ok (a double effect)"
	if len(ft.errors) != 1 || !strings.Contains(ft.errors[0], want) {
		t.Errorf("errors = %q, want one naming %q", ft.errors, want)
	}
}

// Item 5 of issue 47 through the write-protection guard, end to end: a
// saga whose ship step is rejected compensates charge, whose refund fails
// for good once (COMPENSATION_FAILED); after `sagactl restore`
// (recovery.Restore) and the re-drive, the refund's attempt 2 runs (the
// guard does not answer it with attempt 1's recorded failure), once, and
// the saga ends COMPENSATED. Both modes, on the memory store (in-process
// Kafka) and on real Cassandra (real Kafka).
func TestRestoredCompensationRunsUnderWriteProtection(t *testing.T) {
	for _, mode := range []writeprotect.Mode{writeprotect.Strict, writeprotect.RelaxedWithDedup} {
		t.Run(string(mode)+"/memory", func(t *testing.T) { restoredCompensation(t, fixed, sagatest.WithWriteProtection(mode)) })
		t.Run(string(mode)+"/cassandra", func(t *testing.T) {
			hosts, keyspace := testenv.CassandraKeyspace(t)
			restoredCompensation(t, uniqueNames(t), sagatest.WithWriteProtection(mode),
				sagatest.WithKafka(testenv.KafkaBrokers(t)...), sagatest.WithCassandra(hosts, keyspace))
		})
	}
}

func restoredCompensation(t *testing.T, n names, opts ...sagatest.Option) {
	env := sagatest.New(t, opts...)
	var refunds atomic.Int32
	step := func(name string, revert func(o Order) (Order, error)) worker.Endpoint[Order] {
		return worker.Endpoint[Order]{Name: name,
			Process: func(_ context.Context, _ *worker.Step, o Order) (Order, error) {
				if name == "ship" && o.Reject {
					return o, worker.NonRetryable(errRejected)
				}
				return o, nil
			},
			Revert: func(_ context.Context, _ *worker.Step, o Order) (Order, error) { return revert(o) },
		}
	}
	plain := func(o Order) (Order, error) { return o, nil }
	sagatest.Worker(env, n.inventory, func(w *worker.Worker) error { return worker.Register(w, step("reserve", plain)) })
	sagatest.Worker(env, n.payment, func(w *worker.Worker) error {
		return worker.Register(w, step("charge", func(o Order) (Order, error) {
			if refunds.Add(1) == 1 {
				return o, worker.NonRetryable(errors.New("refund refused"))
			}
			o.Charged = false
			return o, nil
		}))
	})
	sagatest.Worker(env, n.shipping, func(w *worker.Worker) error { return worker.Register(w, step("ship", plain)) })
	o := sagatest.Orchestrator(env, n.order, n.saga())
	ctx := t.Context()
	id, err := o.Start(ctx, Order{ID: "restored", Reject: true, Charged: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := env.WaitTerminal(o, id)[id]; s != eventstore.StateCompensationFailed {
		t.Fatalf("saga ended %s, want COMPENSATION_FAILED", s)
	}
	w, err := recovery.NewWriter(o.Store(), recovery.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recovery.Restore(ctx, o.Store(), w, o.Scope(), id, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := o.Redrive(ctx, id); err != nil {
		t.Fatal(err)
	}
	if s := env.WaitTerminal(o, id)[id]; s != eventstore.StateCompensated {
		t.Fatalf("restored saga ended %s, want COMPENSATED", s)
	}
	if a1, a2 := env.AttemptExecutions(id, 1, topics.KindRevert, 1), env.AttemptExecutions(id, 1, topics.KindRevert, 2); a1 != 1 || a2 != 1 {
		t.Fatalf("refund ran %d times at attempt 1, %d at attempt 2; want once each", a1, a2)
	}
	env.AssertExactlyOnce()
}

// pauseClock is the orchestrator's clock of the pause test, moved by hand.
type pauseClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *pauseClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *pauseClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Item 8 of issue 47, the exception: a step that paused its saga is
// invoked again, with the next attempt, after the pause's deadline (a
// re-invocation the framework documents): attempt 2 running after attempt
// 1 replied ok with a pause is not a double effect.
func TestAssertExactlyOnceAcceptsTheReinvocationAfterAPauseDeadline(t *testing.T) {
	env := sagatest.New(t)
	var charges atomic.Int32
	step := func(name string) worker.Endpoint[Order] {
		return worker.Endpoint[Order]{Name: name,
			Process: func(_ context.Context, s *worker.Step, o Order) (Order, error) {
				if name == "charge" && charges.Add(1) == 1 {
					s.Pause("PAYMENT_AUTHORISATION", time.Minute)
				}
				return o, nil
			},
			Revert: func(_ context.Context, _ *worker.Step, o Order) (Order, error) { return o, nil },
		}
	}
	for svc, ep := range map[string]string{fixed.inventory: "reserve", fixed.payment: "charge", fixed.shipping: "ship"} {
		sagatest.Worker(env, svc, func(w *worker.Worker) error { return worker.Register(w, step(ep)) })
	}
	cfg := recovery.DefaultConfig()
	cfg.Retry.Default.InitialInterval = 0 // the window path, on the fake clock
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	clock := &pauseClock{t: time.Now().UTC()}
	o := sagatest.Orchestrator(env, fixed.order, fixed.saga(), orchestrator.WithClock(clock.now),
		orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
	id, err := o.Start(t.Context(), Order{ID: "paused"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the saga paused", func() bool {
		s, err := o.Get(t.Context(), id)
		return err == nil && s.State == eventstore.StatePaused
	})
	waitFor(t, "the deadline re-invoking charge", func() bool {
		clock.advance(time.Minute)
		if _, err := o.RecoveryEngine().Scan(t.Context()); err != nil {
			t.Logf("scan: %v", err)
		}
		return charges.Load() >= 2
	})
	if s := env.WaitTerminal(o, id)[id]; s != eventstore.StateCompleted {
		t.Fatalf("saga ended %s", s)
	}
	if a1, a2 := env.AttemptExecutions(id, 1, topics.KindProcess, 1), env.AttemptExecutions(id, 1, topics.KindProcess, 2); a1 != 1 || a2 != 1 {
		t.Fatalf("charge ran %d times at attempt 1, %d at attempt 2; want once each", a1, a2)
	}
	if !env.AssertExactlyOnce() {
		t.Fatal("AssertExactlyOnce refused the re-invocation after the pause's deadline")
	}
}
