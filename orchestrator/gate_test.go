package orchestrator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Issue 47, rule 1: every write to a saga passes one gate (gate.go). These
// tests are the regressions of its four defects, on real Kafka.

// versionedDomain is the rig's domain registering versions, each the rig's
// three steps.
func (r *rig) versionedDomain(versions ...int) orchestrator.Domain[order] {
	d := orchestrator.Domain[order]{Name: r.domain}
	for _, v := range versions {
		d.Versions = append(d.Versions, orchestrator.Definition[order]{Version: v, OnNext: r.sagaDomain().OnNext})
	}
	return d
}

// newIdle is an orchestrator of the rig with domain d that is not run: it
// starts, re-drives or cancels sagas, and arms their step timers, but
// consumes no reply.
func (r *rig) newIdle(d orchestrator.Domain[order], opts ...orchestrator.Option) *orchestrator.Orchestrator[order] {
	r.t.Helper()
	o, err := orchestrator.New("orders", d, append([]orchestrator.Option{orchestrator.WithBrokers(r.brokers...),
		orchestrator.WithKafkaOpts(r.kopts...), orchestrator.WithStore(r.store)}, opts...)...)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = o.Close() })
	return o
}

// Item 2: a step-timer record (a timeout sent by the instance whose timer
// fired to the saga's partition owner) that reaches an instance without
// the saga's definition version leaves the saga as it is, as a reply
// does (docs/versions.md). Before, the owner applied it with the missing
// version's decisions (the saga parked, or froze COMPENSATION_FAILED
// "definition version 2 is not registered").
func TestTimerRecordOfAnUnknownVersionLeavesTheSagaAlone(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		cfg := recovery.DefaultConfig()
		timeout := time.Second
		cfg.Retry.DefaultEndpoints = map[string]recovery.RetryOverride{r.svcStock + "/reserve": {StepTimeout: &timeout}}
		cfg.Retry.Default.InitialInterval = time.Hour // no in-process retry
		cfg.Retry.Default.MaxInterval = time.Hour
		old := r.newIdle(r.versionedDomain(1), orchestrator.WithRecovery(cfg))
		runOrch(t, old) // the owner of every callback partition
		// The newer instance only starts sagas: its timer, not owning the
		// partition, sends a timer record to old.
		newer := r.newIdle(r.versionedDomain(1, 2), orchestrator.WithRecovery(cfg))
		ctx := context.Background()
		id, err := newer.Start(ctx, order{ID: "1"}) // no worker: no reply, only the timer
		if err != nil {
			t.Fatal(err)
		}
		before, err := r.store.LoadTransaction(ctx, old.Scope(), id)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the timer record to reach the owner", func() bool {
			tx, err := r.store.LoadTransaction(ctx, old.Scope(), id)
			return old.Stats().UnknownVersion >= 1 || (err == nil && tx.Version != before.Version)
		})
		tx, err := r.store.LoadTransaction(ctx, old.Scope(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tx.State != eventstore.StateStarted || tx.Span != 0 || tx.Attempt != before.Attempt || tx.Version != before.Version || tx.Definition != 2 {
			t.Errorf("saga after a timer record reached an instance without its version: %s span %d attempt %d version %d (definition %d) error %q; want it left STARTED at span 0, attempt %d, version %d",
				tx.State, tx.Span, tx.Attempt, tx.Version, tx.Definition, tx.Error, before.Attempt, before.Version)
		}
		if st := old.Stats(); st.UnknownVersion != 1 || st.TimedOut != 0 {
			t.Errorf("owner without the version: UnknownVersion %d, TimedOut %d; want 1 and 0", st.UnknownVersion, st.TimedOut)
		}
	})
}

// Item 3: a re-drive of a parked saga past its deadline, from an instance
// without the saga's definition version, leaves it parked and fails with
// ErrUnknownVersion. Before, failParked compensated it with the missing
// version's revert decision: frozen COMPENSATION_FAILED, its completed
// step never compensated.
func TestRedrivePastTheDeadlineOfAnUnknownVersionLeavesTheSagaAlone(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.retryChargeOnce.Store(true) // the charge's first attempt fails retryably: parked
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		opts := []orchestrator.Option{orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)), orchestrator.WithSagaTimeout(time.Hour)}
		newer := r.newIdle(r.versionedDomain(1, 2), opts...)
		runOrch(t, newer)
		ctx := context.Background()
		id, err := newer.Start(ctx, order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitAt(t, newer, id, eventstore.StateRetryPending, 1)
		old := r.newIdle(r.versionedDomain(1), opts...)
		clock.advance(2 * time.Hour) // past the saga's deadline
		if err := old.Redrive(ctx, id); !errors.Is(err, orchestrator.ErrUnknownVersion) {
			t.Errorf("Redrive past the deadline from an instance without the version: %v, want ErrUnknownVersion", err)
		}
		tx, err := r.store.LoadTransaction(ctx, old.Scope(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tx.State != eventstore.StateRetryPending || tx.Span != 1 || tx.Definition != 2 {
			t.Errorf("saga after the re-drive: %s span %d (definition %d) error %q; want it left RETRY_PENDING at span 1", tx.State, tx.Span, tx.Definition, tx.Error)
		}
		if st := old.Stats(); st.UnknownVersion != 1 {
			t.Errorf("UnknownVersion = %d, want 1", st.UnknownVersion)
		}
		// An instance with the version compensates it (the deadline passed),
		// reserve included.
		if err := newer.Redrive(ctx, id); !errors.Is(err, orchestrator.ErrSagaTimedOut) {
			t.Errorf("Redrive past the deadline by an instance with the version: %v, want ErrSagaTimedOut", err)
		}
		waitState(t, newer, id, eventstore.StateCompensated)
		assertReverts(t, r, id, "reserve")
	})
}

// Item 4: a cancel keeps the remaining time of the step in flight. Here
// the charge (step timeout 10 minutes) hangs; it is cancelled 2 s before
// its timeout: the saga compensates about 2 s later. Before, the cancel
// re-armed the whole step timeout: CANCELLING for 10 minutes more.
func TestCancelKeepsTheStepsRemainingTime(t *testing.T) {
	r := newRig(t, "memory")
	r.startWorker(r.svcStock) // no payment worker: the charge hangs
	clock := newFakeClock()
	cfg := chargeTimeoutCfg(t, r, recoveryCfg(t), 10*time.Minute, 0)
	o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg))
	ctx := context.Background()
	id, err := o.Start(ctx, order{ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	waitAt(t, o, id, eventstore.StateInProgress, 1)
	clock.advance(10*time.Minute - 2*time.Second)
	if err := o.Cancel(ctx, id, "taking too long"); err != nil {
		t.Fatal(err)
	}
	waitAt(t, o, id, eventstore.StateCancelling, 1)
	waitFor(t, time.Minute, "the cancelled saga to compensate once its step's remaining 2s passed", func() bool {
		s, err := o.Get(ctx, id)
		return err == nil && s.State == eventstore.StateCompensating
	})
	if st := o.Stats(); st.TimedOut != 1 {
		t.Errorf("TimedOut = %d, want 1 (the charge's timer, at its remaining time)", st.TimedOut)
	}
}

// Item 1: in a share group, the step timer of one instance (a) fires just
// as another (b) applies the step's reply under the attempt's reply claim:
// both read the saga at the same version. The timer must take the same
// claim, so that one of the two writes the saga whole. Before, the timer
// wrote without it and the store merged the two rows (RETRY_PENDING at
// span 1 with span 0's endpoint: the re-drive sent "reserve" as span 1).
func TestShareGroupStepTimerTakesTheReplyClaim(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		cfg := recovery.DefaultConfig()
		timeout := 2 * time.Second
		cfg.Retry.DefaultEndpoints = map[string]recovery.RetryOverride{r.svcStock + "/reserve": {StepTimeout: &timeout}}
		cfg.Retry.Default.InitialInterval = time.Hour // no in-process retry in this test
		cfg.Retry.Default.MaxInterval = time.Hour
		share := orchestrator.WithGroupType(topics.GroupShare)
		gateA := newLoadGate(r.store, "stepTimedOut", eventstore.StateStarted)
		gateB := newLoadGate(r.store, "handleShared", eventstore.StateStarted)
		b, _ := r.startOrchestrator(orchestrator.WithStore(gateB), orchestrator.WithRecovery(cfg), share)
		a := r.newIdle(r.sagaDomain(), orchestrator.WithStore(gateA), orchestrator.WithRecovery(cfg), share)
		id, err := a.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitClosed(t, gateA.held, time.Minute, "a's step timer to read the saga")
		r.startWorker(r.svcStock) // the reply now comes, to b, which claims it
		waitClosed(t, gateB.held, 2*time.Minute, "b's reply path to read the saga under its claim")
		close(gateA.release)
		time.Sleep(time.Second) // a's write, if it writes (a runs no listener)
		close(gateB.release)
		waitFor(t, time.Minute, "b to apply the reply", func() bool {
			tx, err := r.store.LoadTransaction(context.Background(), b.Scope(), id)
			return err == nil && tx.Version >= 2
		})
		time.Sleep(time.Second)
		tx, err := r.store.LoadTransaction(context.Background(), b.Scope(), id)
		if err != nil {
			t.Fatal(err)
		}
		parked := tx.State == eventstore.StateRetryPending && tx.Span == 0 && tx.Endpoint == r.svcStock+"/reserve" && len(tx.Completed) == 0
		moved := tx.State == eventstore.StateInProgress && tx.Span == 1 && tx.Endpoint == r.svcPay+"/charge" && len(tx.Completed) == 1
		if !parked && !moved {
			t.Errorf("the saga's row mixes the timer's park and the reply's move: %s span %d endpoint %s attempt %d completed %+v error %q",
				tx.State, tx.Span, tx.Endpoint, tx.Attempt, tx.Completed, tx.Error)
		}
		if st := a.Stats(); st.TimedOut != 0 {
			t.Errorf("a's timer applied itself (TimedOut %d) while b held the attempt's reply claim", st.TimedOut)
		}
	})
}
