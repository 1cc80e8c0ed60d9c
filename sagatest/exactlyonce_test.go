package sagatest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/sagatest"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Tests of what AssertExactlyOnce accepts and refuses (issue 42).

// retryOnce is a guard that runs attempt 1 of span 1 and replies
// retryable (the step ran, then failed transiently); a later attempt it
// runs, or with skipRetry answers ok without running (a guard that lies).
type retryOnce struct{ skipRetry bool }

func (g retryOnce) Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	switch {
	case cmd.Span != 1:
		return run(ctx), nil
	case cmd.Attempt == 1:
		r := run(ctx)
		r.Outcome, r.Error, r.Payload = topics.OutcomeRetryable, "transient", nil
		return r, nil
	case g.skipRetry:
		r := *cmd
		r.Outcome = topics.OutcomeOK
		return &r, nil
	}
	return run(ctx), nil
}

// retried starts one saga whose span 1 (charge) the payment service's
// guard g answers retryable on attempt 1, re-drives it once it is parked
// in RETRY_PENDING and waits for its end.
func retried(t *testing.T, env *sagatest.Env) (*orchestrator.Orchestrator[Order], string) {
	t.Helper()
	o := start(env, fixed)
	id, err := o.Start(t.Context(), Order{ID: "retried"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the saga parked in RETRY_PENDING", func() bool {
		s, err := o.Get(t.Context(), id)
		return err == nil && s.State == eventstore.StateRetryPending
	})
	if err := o.Redrive(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if s := env.WaitTerminal(o, id)[id]; s != eventstore.StateCompleted {
		t.Fatalf("saga ended %s", s)
	}
	return o, id
}

// 42.1: a retried step's deciding attempt (2) was answered ok without
// running; attempt 1 ran, which must not excuse it.
func TestAssertExactlyOnceRetriedStepNeverRan(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	env := sagatest.New(ft, sagatest.WithGuard(func(svc string) worker.Guard {
		if svc == fixed.payment {
			return retryOnce{skipRetry: true}
		}
		return nil
	}))
	o, id := retried(t, env)
	if s, err := o.Get(t.Context(), id); err != nil || s.Entity.Charged {
		t.Fatalf("saga %+v, %v: want it completed without a charge", s, err)
	}
	if env.AssertExactlyOnce() {
		t.Fatal("AssertExactlyOnce passed although the attempt that completed the charge never ran")
	}
	want := id + "/1/process attempt 2 replied ok, but its handler never ran (1 deliveries)"
	if len(ft.errors) != 1 || !strings.Contains(ft.errors[0], "1 steps did not run exactly once") || !strings.Contains(ft.errors[0], want) {
		t.Errorf("errors = %q, want one naming %q", ft.errors, want)
	}
}

// 42.1: a step retried after a retryable failure runs once per attempt;
// that is exactly once, not a duplicate.
func TestAssertExactlyOnceRetriedStepRanTwice(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	env := sagatest.New(ft, sagatest.WithGuard(func(svc string) worker.Guard {
		if svc == fixed.payment {
			return retryOnce{}
		}
		return nil
	}))
	_, id := retried(t, env)
	if !env.AssertExactlyOnce() || len(ft.errors) != 0 {
		t.Errorf("AssertExactlyOnce failed a step that ran once per attempt: %q", ft.errors)
	}
	if n := env.Executions(id, 1, topics.KindProcess); n != 2 {
		t.Errorf("Executions(span 1) = %d, want 2 (one per attempt)", n)
	}
	if st := env.Stats(); st.DuplicateExecutions != 0 || env.DuplicateExecutions() != 0 {
		t.Errorf("stats %+v: a retry counted as a duplicate execution", st)
	}
}

// skipShipRevert is a guard that answers the compensation of span 2 ok
// without running it.
type skipShipRevert struct{}

func (skipShipRevert) Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	if cmd.Span != 2 || cmd.Kind != topics.KindRevert {
		return run(ctx), nil
	}
	r := *cmd
	r.Outcome = topics.OutcomeOK
	return &r, nil
}

// 42.2: ship runs but its reply is too large to produce, so the worker
// replies non-retryable with ActionDone and the orchestrator compensates
// ship too; a guard that answers that compensation ok without running it
// skipped undoing a step that ran: not a null compensation.
func TestAssertExactlyOnceSkippedCompensationOfActionDone(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	env := sagatest.New(ft, sagatest.WithGuard(func(svc string) worker.Guard {
		if svc == fixed.shipping {
			return skipShipRevert{}
		}
		return nil
	}))
	step := func(name string, do func(*Order)) worker.Endpoint[Order] {
		return worker.Endpoint[Order]{
			Name: name,
			Process: func(_ context.Context, _ *worker.Step, o Order) (Order, error) {
				do(&o)
				return o, nil
			},
			Revert: func(_ context.Context, _ *worker.Step, o Order) (Order, error) { return o, nil },
		}
	}
	sagatest.Worker(env, fixed.inventory, func(w *worker.Worker) error {
		return worker.Register(w, step("reserve", func(o *Order) { o.Reserved = true }))
	})
	sagatest.Worker(env, fixed.payment, func(w *worker.Worker) error {
		return worker.Register(w, step("charge", func(o *Order) { o.Charged = true }))
	})
	sagatest.Worker(env, fixed.shipping, func(w *worker.Worker) error {
		return worker.Register(w, step("ship", func(o *Order) { o.Shipped, o.ID = true, strings.Repeat("x", 16<<10) }))
	}, worker.WithKafkaOpts(kgo.ProducerBatchMaxBytes(4<<10))) // the ship reply is too large
	o := sagatest.Orchestrator(env, fixed.order, fixed.saga())
	id, err := o.Start(t.Context(), Order{ID: "fat"})
	if err != nil {
		t.Fatal(err)
	}
	if s := env.WaitTerminal(o, id)[id]; s != eventstore.StateCompensated {
		t.Fatalf("saga ended %s, want COMPENSATED", s)
	}
	h, err := o.History(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	reverted := false
	for _, tr := range h {
		reverted = reverted || (tr.Span == 2 && tr.Kind == string(topics.KindRevert) && tr.Outcome == string(topics.OutcomeOK))
	}
	if !reverted || env.Executions(id, 2, topics.KindProcess) != 1 {
		t.Fatalf("history %+v: want ship run once and its compensation replied ok", h)
	}
	if env.AssertExactlyOnce() {
		t.Fatal("AssertExactlyOnce passed although the compensation of a step that ran never ran")
	}
	want := id + "/2/revert attempt 1 replied ok, but its handler never ran (1 deliveries)"
	if len(ft.errors) != 1 || !strings.Contains(ft.errors[0], "1 steps did not run exactly once") || !strings.Contains(ft.errors[0], want) {
		t.Errorf("errors = %q, want one naming %q", ft.errors, want)
	}
}

// The failure message counts every offending step, not the ten it lists.
func TestAssertExactlyOnceCountsAll(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	env := sagatest.New(ft, sagatest.WithGuard(func(string) worker.Guard { return liar{} }))
	o := start(env, fixed)
	ids, _ := run(t, o, 12, 0)
	env.WaitTerminal(o, ids...)
	if env.AssertExactlyOnce() {
		t.Fatal("AssertExactlyOnce passed with steps that never ran")
	}
	if len(ft.errors) != 1 || !strings.Contains(ft.errors[0], "12 steps did not run exactly once") ||
		!strings.Contains(ft.errors[0], "... and 2 more") {
		t.Errorf("errors = %q, want 12 steps counted and 2 left out of the list", ft.errors)
	}
}

// WaitTerminal returns a DISABLED saga (frozen: nothing moves it unless an
// admin restores it) at once instead of waiting out its timeout.
func TestWaitTerminalDisabled(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	env := sagatest.New(ft, sagatest.WithTimeout(5*time.Second))
	// Only the first step's worker runs: the saga stops at span 1.
	sagatest.Worker(env, fixed.inventory, func(w *worker.Worker) error {
		return worker.Register(w, worker.Endpoint[Order]{Name: "reserve", Process: func(_ context.Context, _ *worker.Step, o Order) (Order, error) { return o, nil }})
	})
	o := sagatest.Orchestrator(env, fixed.order, fixed.saga())
	id, err := o.Start(t.Context(), Order{ID: "frozen"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the saga at span 1", func() bool {
		s, err := o.Get(t.Context(), id)
		return err == nil && s.Span == 1
	})
	// What the orchestrator does to a saga that outlived its lifetime.
	tx, err := o.Store().LoadTransaction(t.Context(), o.Scope(), id)
	if err != nil {
		t.Fatal(err)
	}
	tx.State, tx.Version, tx.UpdatedAt = eventstore.StateDisabled, tx.Version+1, time.Now()
	if err := o.Store().Transition(t.Context(), tx, nil); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var got map[string]eventstore.State
	func() {
		defer func() { _ = recover() }() // fakeT's Fatalf
		got = env.WaitTerminal(o, id)
	}()
	if ft.fatal != "" || got[id] != eventstore.StateDisabled {
		t.Errorf("WaitTerminal = %v after %v, fatal %q: want DISABLED at once", got, time.Since(began).Round(time.Millisecond), ft.fatal)
	}
}
