package orchestrator_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// A step failed by the orchestrator's own timer (its step timeout, or the
// saga's deadline) has an unknown outcome: the worker may have run it, or
// may still run it. These tests check that such a step is compensated
// when its saga fails, and that a guarded worker turns the compensation of
// a step that never ran into a null compensation and refuses the step's
// late command.

// chargeTimeoutCfg is cfg with the charge step's step timeout and, if
// attempts > 0, its attempts.
func chargeTimeoutCfg(t *testing.T, r *rig, cfg recovery.Config, timeout time.Duration, attempts int) recovery.Config {
	t.Helper()
	ov := recovery.RetryOverride{StepTimeout: &timeout}
	if attempts > 0 {
		ov.MaxAttempts = &attempts
	}
	cfg.Retry.DefaultEndpoints = map[string]recovery.RetryOverride{r.svcPay + "/charge": ov}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// loseSecondCommand is a fault injection that loses each saga's second
// command (its charge) once.
func loseSecondCommand() func(orchestrator.FaultPoint, string) bool {
	var mu sync.Mutex
	seen, lost := map[string]bool{}, map[string]bool{}
	return func(p orchestrator.FaultPoint, txID string) bool {
		if p != orchestrator.FaultLoseCommand {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if seen[txID] && !lost[txID] {
			lost[txID] = true
			return true
		}
		seen[txID] = true
		return false
	}
}

// unknownRows returns id's history rows of span 1 (charge) going forward
// whose outcome is outcome.
func historyRows(t *testing.T, o *orchestrator.Orchestrator[order], id, outcome string) []eventstore.Tryout {
	t.Helper()
	h, err := o.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var rows []eventstore.Tryout
	for _, tr := range h {
		if tr.Span == 1 && tr.Kind == string(topics.KindProcess) && tr.Outcome == outcome {
			rows = append(rows, tr)
		}
	}
	return rows
}

// assertUnknownRow checks that id's history says charge was compensated
// because its timed-out attempt's outcome is unknown.
func assertUnknownRow(t *testing.T, o *orchestrator.Orchestrator[order], id string) {
	t.Helper()
	rows := historyRows(t, o, id, orchestrator.OutcomeUnknown)
	if len(rows) != 1 || !strings.Contains(rows[0].Error, "step timed out") || !strings.Contains(rows[0].Error, "outcome unknown") {
		t.Errorf("%s: charge's %q rows %+v, want one saying the step timed out and its outcome is unknown", id, orchestrator.OutcomeUnknown, rows)
	}
}

// The last attempt of a step is failed by its step timer (its retries are
// exhausted), and the worker runs it late: the saga fails and compensates
// that step too (before, only the steps before it were undone, and the
// late run's effect stayed). With a STRICT guard, the step runs once
// (its second attempt, queued behind the first, gets its recorded reply)
// and its compensation, which waits for it, undoes it.
func TestTimedOutLastAttemptIsCompensated(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.guarded, r.guardMode = true, writeprotect.Strict
		r.holdChargesAfter(0) // the charges run once the saga compensates
		t.Cleanup(r.releaseCharges)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		cfg := chargeTimeoutCfg(t, r, recovery.DefaultConfig(), 4*time.Second, 2)
		o, _ := r.startOrchestrator(orchestrator.WithRecovery(cfg))
		id, err := o.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitAt(t, o, id, eventstore.StateCompensating, 1)
		r.releaseCharges()
		s := waitState(t, o, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "charge", "reserve")
		if n := r.runsOf(id, 1, topics.KindProcess); n != 1 {
			t.Errorf("charge ran %d times, want once (late)", n)
		}
		if n := r.runsOf(id, 2, topics.KindProcess); n != 0 {
			t.Errorf("ship ran %d times", n)
		}
		if !strings.Contains(s.Error, "retries exhausted") || !strings.Contains(s.Error, "step timed out") {
			t.Errorf("error %q", s.Error)
		}
		assertUnknownRow(t, o, id)
		if rows := historyRows(t, o, id, "retryable"); len(rows) != 1 || !strings.Contains(rows[0].Error, "step timed out") {
			t.Errorf("charge's retryable rows %+v, want the first attempt's timeout", rows)
		}
	})
}

// The same with a STRICT guard, and a charge whose command was lost: its
// compensation is a null compensation (the refund's handler never runs),
// and the charge's command arriving after it is refused (hanging
// protection): the handler never runs the charge.
func TestTimedOutStepNeverRunIsNullCompensated(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.guarded, r.guardMode = true, writeprotect.Strict
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		// One attempt; the timeout is the refund's too (same endpoint),
		// and a null compensation on a loaded Cassandra took over 1 s.
		cfg := chargeTimeoutCfg(t, r, recovery.DefaultConfig(), 8*time.Second, 1)
		o, _ := r.startOrchestrator(orchestrator.WithRecovery(cfg), orchestrator.WithFaultInjection(loseSecondCommand()))
		id, err := o.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, o, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "reserve") // charge's revert: a null compensation
		assertUnknownRow(t, o, id)
		// The lost charge command arrives now, late.
		tx, err := r.store.LoadTransaction(context.Background(), o.Scope(), id)
		if err != nil {
			t.Fatal(err)
		}
		stale := o.Stats().StaleReplies
		env := topics.Envelope{Type: topics.TypeCommand, Region: o.Scope().Region, Cluster: o.Scope().Cluster, Service: o.Service(),
			Domain: r.domain, TxID: id, Span: 1, Kind: topics.KindProcess, Endpoint: "charge",
			IdempotencyKey: topics.IdempotencyKey(id, 1, topics.KindProcess), Attempt: 1,
			ReplyTo: topics.CallbackTopic(r.domain), Payload: tx.Payload, SentAt: time.Now()}
		b, err := topics.Encode(&env)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := r.client()
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topics.CommandTopic(r.svcPay), Key: []byte(id), Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		waitStats(t, o, "the late charge's reply", func(st orchestrator.Stats) bool { return st.StaleReplies > stale })
		if n := r.runsOf(id, 1, topics.KindProcess); n != 0 {
			t.Errorf("charge ran %d times after its compensation, want 0 (hanging protection)", n)
		}
		if n := r.runsOf(id, 1, topics.KindRevert); n != 0 {
			t.Errorf("refund ran %d times for a charge that never ran, want 0 (null compensation)", n)
		}
	})
}

// deadlineArmed is a step-timer hook (WithStepArmedHook) and a test of
// whether the charge's timer was armed for the saga's deadline.
func deadlineArmed() (orchestrator.Option, func() bool) {
	var armed atomic.Bool
	return orchestrator.WithStepArmedHook(func(_ string, span int, _ time.Duration, deadline bool) {
		if span == 1 && deadline {
			armed.Store(true)
		}
	}), armed.Load
}

// deadlineAtCharge starts a saga whose deadline (10 minutes, on clock)
// comes 2 s after its charge is sent: the reserve step waits for its
// worker until the clock is 2 s short of the deadline. It returns the
// saga's id once its charge's timer is armed for the deadline.
func deadlineAtCharge(t *testing.T, r *rig, o *orchestrator.Orchestrator[order], clock *fakeClock, armed func() bool) string {
	t.Helper()
	id, err := o.Start(context.Background(), order{ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	waitAt(t, o, id, eventstore.StateStarted, 0)
	clock.advance(10*time.Minute - 2*time.Second)
	r.startWorker(r.svcStock)
	waitAt(t, o, id, eventstore.StateInProgress, 1)
	// Not before: the clock is read when the timer is armed, after the
	// state is persisted.
	waitFor(t, time.Minute, "the charge's timer armed for the deadline", armed)
	return id
}

// The saga's deadline passes while a forward step is in flight: as a
// Cancel would, the saga stops going forward (CANCELLING) and waits for
// that step's reply; the step succeeds, and is compensated with the
// others. Nothing after it runs.
func TestSagaTimeoutWaitsForTheStepInFlight(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.holdChargesAfter(0)
		t.Cleanup(r.releaseCharges)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		hook, armed := deadlineArmed()
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)),
			orchestrator.WithSagaTimeout(10*time.Minute), hook)
		id := deadlineAtCharge(t, r, o, clock, armed)
		waitFor(t, time.Minute, "the charge held in its handler", func() bool { return r.runsOf(id, 1, topics.KindProcess) == 1 })
		clock.advance(3 * time.Second) // past the deadline; the charge's timer fires
		waitAt(t, o, id, eventstore.StateCancelling, 1)
		r.releaseCharges()
		s := waitState(t, o, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "charge", "reserve")
		if n := r.runsOf(id, 2, topics.KindProcess); n != 0 {
			t.Errorf("ship ran %d times after the deadline", n)
		}
		if !strings.Contains(s.Error, "saga timed out") {
			t.Errorf("error %q, want it to say the saga timed out", s.Error)
		}
		if rows := historyRows(t, o, id, orchestrator.OutcomeSagaTimedOut); len(rows) != 1 || !strings.Contains(rows[0].Error, "saga timed out") {
			t.Errorf("charge's %q rows %+v, want one", orchestrator.OutcomeSagaTimedOut, rows)
		}
		if rows := historyRows(t, o, id, orchestrator.OutcomeUnknown); len(rows) != 0 {
			t.Errorf("%q rows %+v: the step's reply came", orchestrator.OutcomeUnknown, rows)
		}
	})
}

// The saga's deadline passes while a forward step is in flight whose
// command was lost: the saga waits CANCELLING until the step's own
// timeout, then compensates it anyway (outcome unknown); the STRICT guard
// makes that a null compensation.
func TestSagaTimeoutCompensatesAStepThatNeverReplies(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.guarded, r.guardMode = true, writeprotect.Strict
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		cfg := chargeTimeoutCfg(t, r, recoveryCfg(t), 8*time.Second, 0)
		hook, armed := deadlineArmed()
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg),
			orchestrator.WithSagaTimeout(10*time.Minute), orchestrator.WithFaultInjection(loseSecondCommand()), hook)
		id := deadlineAtCharge(t, r, o, clock, armed)
		clock.advance(3 * time.Second)
		waitAt(t, o, id, eventstore.StateCancelling, 1)
		s := waitState(t, o, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "reserve")
		if n := r.runsOf(id, 1, topics.KindProcess); n != 0 {
			t.Errorf("charge ran %d times (its command was lost)", n)
		}
		if !strings.Contains(s.Error, "saga timed out") {
			t.Errorf("error %q, want it to say the saga timed out", s.Error)
		}
		if rows := historyRows(t, o, id, orchestrator.OutcomeSagaTimedOut); len(rows) != 1 {
			t.Errorf("charge's %q rows %+v, want one", orchestrator.OutcomeSagaTimedOut, rows)
		}
		assertUnknownRow(t, o, id)
	})
}
