package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Issue 40: Cancel and Terminate, on real Kafka, on each store.

// stepNames are the rig's steps by span.
var stepNames = []string{"reserve", "charge", "ship"}

// startGatedWorker is rig.startWorker whose handler of "endpoint/kind"
// waits, for each key of gates, until that channel is closed.
func startGatedWorker(r *rig, service string, gates map[string]chan struct{}) (stop func()) {
	r.t.Helper()
	w, err := worker.New(service, worker.WithBrokers(r.brokers...), worker.WithKafkaOpts(r.kopts...))
	if err != nil {
		r.t.Fatal(err)
	}
	eps := []string{"charge"}
	if service == r.svcStock {
		eps = []string{"reserve", "ship"}
	}
	for _, ep := range eps {
		h := r.handler(ep)
		gated := func(ctx context.Context, s *worker.Step, in order) (order, error) {
			if g := gates[ep+"/"+string(s.Kind)]; g != nil {
				select {
				case <-g:
				case <-ctx.Done():
					return in, worker.Retryable(ctx.Err())
				}
			}
			return h(ctx, s, in)
		}
		if err := worker.Register(w, worker.Endpoint[order]{Name: ep, Process: gated, Revert: gated}); err != nil {
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
			<-done
		})
	}
	r.t.Cleanup(stop)
	return stop
}

// waitAt waits until the saga is in state at span.
func waitAt(t *testing.T, o *orchestrator.Orchestrator[order], id string, want eventstore.State, span int) {
	t.Helper()
	waitFor(t, time.Minute, fmt.Sprintf("%s at span %d", want, span), func() bool {
		s, err := o.Get(context.Background(), id)
		return err == nil && s.State == want && s.Span == span
	})
}

// assertReverts checks the compensations the workers ran for id, in order,
// and that each forward step ran at most once and no step after the last
// in want's reverse ran forward.
func assertReverts(t *testing.T, r *rig, id string, want ...string) {
	t.Helper()
	r.mu.Lock()
	got := slices.Clone(r.reverts[id])
	r.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("%s: compensations %v, want %v", id, got, want)
	}
}

// assertHistoryRow checks that id's history holds exactly one row of
// outcome whose Error names actor and reason, and returns it.
func assertHistoryRow(t *testing.T, o *orchestrator.Orchestrator[order], id, outcome, actor, reason string) eventstore.Tryout {
	t.Helper()
	h, err := o.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var rows []eventstore.Tryout
	for _, tr := range h {
		if tr.Outcome == outcome {
			rows = append(rows, tr)
		}
	}
	if len(rows) != 1 {
		t.Fatalf("%s: %d %q rows in the history, want 1: %+v", id, len(rows), outcome, h)
	}
	if want := outcome + " by " + actor + ": " + reason; rows[0].Error != want {
		t.Errorf("%s: %s row says %q, want %q", id, outcome, rows[0].Error, want)
	}
	if rows[0].StartedAt.IsZero() || rows[0].FinishedAt.Before(rows[0].StartedAt) {
		t.Errorf("%s: %s row asked at %v, applied at %v", id, outcome, rows[0].StartedAt, rows[0].FinishedAt)
	}
	return rows[0]
}

// Cancel while the first step is in flight (STARTED): the saga waits
// CANCELLING for that step's reply, then compensates it; nothing after it
// runs. A second Cancel of the ended saga is refused with ErrEnded.
func TestCancelStartedSaga(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		o, _ := r.startOrchestrator()
		id, err := o.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		ctx := orchestrator.WithActor(context.Background(), "alice")
		if err := o.Cancel(ctx, id, "customer changed their mind"); err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id, eventstore.StateCancelling, 0)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		s := waitState(t, o, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "reserve")
		if n := r.runsOf(id, 1, topics.KindProcess); n != 0 {
			t.Errorf("charge ran %d times after the cancel", n)
		}
		if !strings.HasPrefix(s.Error, "cancelled by alice: customer changed their mind") {
			t.Errorf("saga error %q", s.Error)
		}
		assertHistoryRow(t, o, id, orchestrator.OutcomeCancelled, "alice", "customer changed their mind")
		if err := o.Cancel(ctx, id, "again"); !errors.Is(err, orchestrator.ErrEnded) {
			t.Errorf("cancel of a COMPENSATED saga: %v, want ErrEnded", err)
		}
		if err := o.Cancel(ctx, id, ""); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("cancel without a reason: %v, want ErrInvalid", err)
		}
		if err := o.Cancel(ctx, "nope", "x"); !errors.Is(err, orchestrator.ErrNotFound) {
			t.Errorf("cancel of an unknown saga: %v, want ErrNotFound", err)
		}
		waitStats(t, o, "one cancel applied", func(st orchestrator.Stats) bool { return st.Cancelled == 1 })
	})
}

// Cancel while a later step is in flight (IN_PROGRESS at charge): once
// charge's reply arrives, charge and reserve are compensated, in reverse,
// once each; ship never runs.
func TestCancelStepInFlight(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.startWorker(r.svcStock)
		o, _ := r.startOrchestrator()
		id, err := o.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id, eventstore.StateInProgress, 1)
		if err := o.Cancel(orchestrator.WithActor(context.Background(), "ops"), id, "fraud suspected"); err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id, eventstore.StateCancelling, 1)
		r.startWorker(r.svcPay)
		waitState(t, o, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "charge", "reserve")
		if n := r.runsOf(id, 2, topics.KindProcess); n != 0 {
			t.Errorf("ship ran %d times after the cancel", n)
		}
		assertHistoryRow(t, o, id, orchestrator.OutcomeCancelled, "ops", "fraud suspected")
	})
}

// Cancel of a PAUSED saga compensates at once, without its resume; the
// resume that comes later is refused.
func TestCancelPausedSaga(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.pauseCharge.Store(true)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		o, _ := r.startOrchestrator()
		id, err := o.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id, eventstore.StatePaused, 1)
		if err := o.Cancel(orchestrator.WithActor(context.Background(), "bob"), id, "payment never authorised"); err != nil {
			t.Fatal(err)
		}
		waitState(t, o, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "charge", "reserve")
		if _, err := o.Resume(context.Background(), id, topics.IdempotencyKey(id, 1, topics.KindProcess), nil); !errors.Is(err, orchestrator.ErrNotPaused) {
			t.Errorf("resume after the cancel: %v, want ErrNotPaused", err)
		}
		if n := r.runsOf(id, 2, topics.KindProcess); n != 0 {
			t.Errorf("ship ran %d times", n)
		}
		assertHistoryRow(t, o, id, orchestrator.OutcomeCancelled, "bob", "payment never authorised")
	})
}

// Cancel of a RETRY_PENDING saga compensates the steps before the parked
// one at once; the parked step is not re-driven (a Redrive after it is
// refused) and not compensated.
func TestCancelRetryPendingSaga(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.retryCharge.Store(true)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		cfg := recoveryCfg(t) // no in-process retry, no retry node: it stays parked
		o, _ := r.startOrchestrator(orchestrator.WithRecovery(cfg))
		id, err := o.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id, eventstore.StateRetryPending, 1)
		if err := o.Cancel(orchestrator.WithActor(context.Background(), "carol"), id, "gateway down for the day"); err != nil {
			t.Fatal(err)
		}
		waitState(t, o, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "reserve")
		if err := o.Redrive(context.Background(), id); !errors.Is(err, orchestrator.ErrNotRetryPending) {
			t.Errorf("redrive after the cancel: %v, want ErrNotRetryPending", err)
		}
		if n := r.runsOf(id, 1, topics.KindProcess); n != 1 {
			t.Errorf("charge ran %d times, want 1 (the parked attempt only)", n)
		}
		assertHistoryRow(t, o, id, orchestrator.OutcomeCancelled, "carol", "gateway down for the day")
	})
}

// Cancel of a saga already compensating changes nothing: its compensation
// goes on and undoes each completed step once.
func TestCancelCompensatingSaga(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.failShip.Store(true)
		refund := make(chan struct{})
		r.startWorker(r.svcStock)
		startGatedWorker(r, r.svcPay, map[string]chan struct{}{"charge/revert": refund})
		o, _ := r.startOrchestrator()
		id, err := o.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id, eventstore.StateCompensating, 1)
		if err := o.Cancel(context.Background(), id, "stop it"); err != nil {
			t.Fatal(err)
		}
		waitStats(t, o, "the cancel found the saga compensating", func(st orchestrator.Stats) bool { return st.ControlsIgnored == 1 })
		close(refund)
		waitState(t, o, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "charge", "reserve")
		if st := o.Stats(); st.Cancelled != 0 {
			t.Errorf("Cancelled = %d, want 0", st.Cancelled)
		}
	})
}

// Two instances of the domain each cancel the same sagas at once: one
// cancel applies per saga, the other finds it cancelled; each completed
// step is compensated once.
func TestCancelTwiceOnTwoInstancesOneOutcome(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.startWorker(r.svcStock)
		o1, _ := r.startOrchestrator()
		o2, _ := r.startOrchestrator()
		ids := startConcurrently(t, o1, 4)
		for _, id := range ids {
			waitAt(t, o1, id, eventstore.StateInProgress, 1)
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			for i, o := range []*orchestrator.Orchestrator[order]{o1, o2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := o.Cancel(orchestrator.WithActor(context.Background(), fmt.Sprint("op", i)), id, "duplicate order"); err != nil {
						t.Error(err)
					}
				}()
			}
		}
		wg.Wait()
		total := func(f func(orchestrator.Stats) int64) int64 { return f(o1.Stats()) + f(o2.Stats()) }
		waitFor(t, time.Minute, "every cancel applied or ignored", func() bool {
			return total(func(s orchestrator.Stats) int64 { return s.Cancelled + s.ControlsIgnored }) == int64(2*len(ids))
		})
		r.startWorker(r.svcPay)
		expectAll(t, waitTerminal(t, o1, ids, time.Minute), eventstore.StateCompensated)
		for _, id := range ids {
			assertReverts(t, r, id, "charge", "reserve")
			h, _ := o1.History(context.Background(), id)
			n := 0
			for _, tr := range h {
				if tr.Outcome == orchestrator.OutcomeCancelled {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s: %d cancelled rows, want 1", id, n)
			}
		}
		if c := total(func(s orchestrator.Stats) int64 { return s.Cancelled }); c != int64(len(ids)) {
			t.Errorf("Cancelled = %d over both instances, want %d", c, len(ids))
		}
	})
}

// Sagas cancelled at random moments, many of them as their last reply
// comes: each ends once, COMPLETED with nothing compensated (the last
// reply came first; the cancel was then refused or ignored) or COMPENSATED
// with exactly the steps that ran undone once, in reverse.
func TestCancelRacingTheLastReply(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		o, _ := r.startOrchestrator()
		const n = 24
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range ids {
			id, err := o.Start(context.Background(), order{ID: fmt.Sprint(i)})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = id
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Wait until the saga is at its last step (or later), then a little more.
				for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
					s, err := o.Get(context.Background(), id)
					if err == nil && (s.Span >= 2 || s.State.Terminal()) {
						break
					}
				}
				time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond)
				if err := o.Cancel(context.Background(), id, "race"); err != nil && !errors.Is(err, orchestrator.ErrEnded) {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		got := waitTerminal(t, o, ids, 2*time.Minute)
		completed, cancelled := 0, 0
		for _, id := range ids {
			var want []string
			for span := 2; span >= 0; span-- {
				if runs := r.runsOf(id, span, topics.KindProcess); runs > 1 {
					t.Errorf("%s: %s ran %d times", id, stepNames[span], runs)
				} else if runs == 1 {
					want = append(want, stepNames[span])
				}
			}
			switch got[id] {
			case eventstore.StateCompleted:
				completed++
				assertReverts(t, r, id)
			case eventstore.StateCompensated:
				cancelled++
				assertReverts(t, r, id, want...)
			default:
				t.Errorf("%s ended %s", id, got[id])
			}
		}
		t.Logf("%d completed (the last reply first), %d cancelled", completed, cancelled)
	})
}

// Terminate stops a saga with a step in flight: TERMINATED at once, the
// step's late reply is ignored and counted, nothing more runs and nothing
// is compensated. A PAUSED saga is terminated too, and its resume then
// refused; a terminal one is refused with ErrEnded.
func TestTerminate(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.startWorker(r.svcStock)
		o, _ := r.startOrchestrator()
		id, err := o.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id, eventstore.StateInProgress, 1)
		ctx := orchestrator.WithActor(context.Background(), "oncall")
		if err := o.Terminate(ctx, id, "doing damage"); err != nil {
			t.Fatal(err)
		}
		waitState(t, o, id, eventstore.StateTerminated)
		r.startWorker(r.svcPay) // the charge already sent runs, and its reply is ignored
		waitStats(t, o, "the late reply ignored", func(st orchestrator.Stats) bool { return st.RepliesAfterTerminate == 1 })
		if s, _ := o.Get(context.Background(), id); s.State != eventstore.StateTerminated {
			t.Errorf("after the late reply: %s", s.State)
		}
		assertReverts(t, r, id)
		if n := r.runsOf(id, 2, topics.KindProcess); n != 0 {
			t.Errorf("ship ran %d times after the terminate", n)
		}
		assertHistoryRow(t, o, id, orchestrator.OutcomeTerminated, "oncall", "doing damage")
		if err := o.Terminate(ctx, id, "again"); !errors.Is(err, orchestrator.ErrEnded) {
			t.Errorf("terminate of a TERMINATED saga: %v, want ErrEnded", err)
		}
		if err := o.Cancel(ctx, id, "late"); !errors.Is(err, orchestrator.ErrEnded) {
			t.Errorf("cancel of a TERMINATED saga: %v, want ErrEnded", err)
		}
		if st := o.Stats(); st.Terminated != 1 {
			t.Errorf("Terminated = %d, want 1", st.Terminated)
		}

		// A paused saga.
		r.pauseCharge.Store(true)
		id2, err := o.Start(context.Background(), order{ID: "2"})
		if err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id2, eventstore.StatePaused, 1)
		if err := o.Terminate(ctx, id2, "abandoned"); err != nil {
			t.Fatal(err)
		}
		waitState(t, o, id2, eventstore.StateTerminated)
		if _, err := o.Resume(context.Background(), id2, topics.IdempotencyKey(id2, 1, topics.KindProcess), nil); !errors.Is(err, orchestrator.ErrNotPaused) {
			t.Errorf("resume after the terminate: %v, want ErrNotPaused", err)
		}
		assertReverts(t, r, id2)
		assertHistoryRow(t, o, id2, orchestrator.OutcomeTerminated, "oncall", "abandoned")
	})
}

// A saga cancelled while its step is in flight, whose reply never comes,
// compensates once that step's timeout passes: the step's outcome is
// unknown (the worker may have run it, or may still), so it is
// compensated too. Here the payment worker is down until the charge's
// compensation is on its way: it then runs the charge, late (once: STRICT
// guard), and its compensation.
func TestCancelStepInFlightTimesOut(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.guarded, r.guardMode = true, writeprotect.Strict
		r.startWorker(r.svcStock) // no payment worker yet: charge does not reply
		cfg := chargeTimeoutCfg(t, r, recovery.DefaultConfig(), 2*time.Second, 0)
		o, _ := r.startOrchestrator(orchestrator.WithRecovery(cfg))
		id, err := o.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id, eventstore.StateInProgress, 1)
		if err := o.Cancel(orchestrator.WithActor(context.Background(), "dave"), id, "taking too long"); err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id, eventstore.StateCompensating, 1)
		r.startWorker(r.svcPay)
		waitState(t, o, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "charge", "reserve")
		if n := r.runsOf(id, 1, topics.KindProcess); n != 1 {
			t.Errorf("charge ran %d times, want once (late, before its compensation)", n)
		}
		if st := o.Stats(); st.TimedOut < 1 || st.Cancelled != 1 {
			t.Errorf("TimedOut = %d, Cancelled = %d; want at least 1 and 1", st.TimedOut, st.Cancelled)
		}
		h, err := o.History(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		var outcomes []string
		for _, tr := range h {
			if tr.Span == 1 && tr.Kind == string(topics.KindProcess) {
				outcomes = append(outcomes, tr.Outcome)
			}
		}
		if len(outcomes) == 0 || outcomes[len(outcomes)-1] != orchestrator.OutcomeUnknown || !slices.Contains(outcomes, orchestrator.OutcomeCancelled) {
			t.Errorf("charge's history rows %v, want the cancel and the timeout (outcome unknown) last", outcomes)
		}
		assertUnknownRow(t, o, id)
	})
}

// With a share group, where any instance may take any record of a saga,
// two cancels of each saga on two instances still give one outcome: the
// request is applied under the reply claim of the step in flight, and the
// step's reply, applied after it, compensates.
func TestCancelShareGroupOneOutcome(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.startWorker(r.svcStock)
		share := []orchestrator.Option{orchestrator.WithGroupType(topics.GroupShare)}
		o1, _ := r.startOrchestrator(share...)
		o2, _ := r.startOrchestrator(share...)
		ids := startConcurrently(t, o1, 3)
		for _, id := range ids {
			waitAt(t, o1, id, eventstore.StateInProgress, 1)
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			for _, o := range []*orchestrator.Orchestrator[order]{o1, o2} {
				wg.Go(func() {
					if err := o.Cancel(context.Background(), id, "duplicate order"); err != nil {
						t.Error(err)
					}
				})
			}
		}
		wg.Wait()
		waitFor(t, time.Minute, "every cancel applied or ignored", func() bool {
			s1, s2 := o1.Stats(), o2.Stats()
			return s1.Cancelled+s2.Cancelled+s1.ControlsIgnored+s2.ControlsIgnored == int64(2*len(ids))
		})
		r.startWorker(r.svcPay)
		expectAll(t, waitTerminal(t, o1, ids, time.Minute), eventstore.StateCompensated)
		for _, id := range ids {
			assertReverts(t, r, id, "charge", "reserve")
			assertHistoryRow(t, o1, id, orchestrator.OutcomeCancelled, orchestrator.DefaultActor, "duplicate order")
		}
	})
}
