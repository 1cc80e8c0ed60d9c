package orchestrator_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// A saga-level deadline (WithSagaTimeout, or the configuration's
// deadline.domains.<name>.saga-timeout) fails a saga that has not finished
// its forward steps by then non-retryably, and compensates it: here a
// step whose reply comes after the deadline (its effect is compensated
// too), on a fake clock.
func TestSagaTimeoutCompensatesALateSaga(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.holdChargesAfter(0)
		t.Cleanup(r.releaseCharges)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		// The held charge must be ended by its reply, not by its step
		// timer (30 s of wall time by default: a loaded box can take that
		// between the charge's command and the release below).
		cfg := recoveryCfg(t)
		cfg.Retry.Default.StepTimeout = time.Hour
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg),
			orchestrator.WithSagaTimeout(10*time.Minute))
		ctx := context.Background()
		ids := startN(t, o, 2)
		waitFor(t, time.Minute, "the sagas at their charge", func() bool {
			return r.count(1, topics.KindProcess) == 2
		})
		clock.advance(10*time.Minute + time.Second)
		r.releaseCharges()
		expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompensated)
		for _, id := range ids {
			s, err := o.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(s.Error, "saga timed out") {
				t.Errorf("%s: error %q, want it to say the saga timed out", id, s.Error)
			}
			if n := r.runsOf(id, 2, topics.KindProcess); n != 0 {
				t.Errorf("%s: ship ran %d times after the deadline", id, n)
			}
			r.mu.Lock()
			got := slices.Clone(r.reverts[id])
			r.mu.Unlock()
			if want := []string{"charge", "reserve"}; !slices.Equal(got, want) {
				t.Errorf("%s: compensations %v, want %v (the late charge too)", id, got, want)
			}
		}
	})
}

// A saga parked in RETRY_PENDING past its deadline (configured in
// recovery.Config) is not re-driven: its re-drive fails it and
// compensates the steps that completed.
func TestSagaTimeoutStopsRetries(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.retryCharge.Store(true)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		cfg := recoveryCfg(t)
		cfg.Deadline.Domains = map[string]time.Duration{r.domain: 3 * time.Minute}
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
		ids := startN(t, o, 2)
		waitStates(t, o, time.Minute, ids, eventstore.StateRetryPending)
		expectAll(t, scanUntil(t, o, clock, time.Minute, ids), eventstore.StateCompensated)
		for _, id := range ids {
			s, err := o.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(s.Error, "saga timed out") {
				t.Errorf("%s: error %q, want it to say the saga timed out", id, s.Error)
			}
			// 1-minute windows: a retry a window or two apart, so at most
			// 3 attempts fit before the deadline.
			if n := r.runsOf(id, 1, topics.KindProcess); n < 1 || n > 3 {
				t.Errorf("%s: charge ran %d times, want 1..3 before the 3-minute deadline", id, n)
			}
			r.mu.Lock()
			got := slices.Clone(r.reverts[id])
			r.mu.Unlock()
			if want := []string{"reserve"}; !slices.Equal(got, want) {
				t.Errorf("%s: compensations %v, want %v", id, got, want)
			}
		}
	})
}

// A saga timeout is validated in New.
func TestSagaTimeoutValidated(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, time.Millisecond, recovery.MaxSagaTimeout + time.Hour} {
		_, err := orchestrator.New("orders", orchestrator.Domain[order]{Name: "o", OnNext: orchestrator.Sequence[order](orchestrator.Step{Service: "s", Endpoint: "e"})},
			orchestrator.WithBrokers("127.0.0.1:1"), orchestrator.WithSagaTimeout(d))
		if err == nil || !strings.Contains(err.Error(), "WithSagaTimeout") {
			t.Errorf("WithSagaTimeout(%v): %v, want an error naming the option", d, err)
		}
	}
}
