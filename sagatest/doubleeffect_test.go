package sagatest_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/sagatest"
	"github.com/stacksaga-go/stacksaga/worker"
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
