package orchestrator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// The restore watchdog follows the saga: a saga whose step was lost with
// the process that sent it (no step timer left to fire) is restored once
// its step timeout plus recovery.RestoreMargin has passed since its last
// transition, within one window more, not K windows after its creation;
// a saga whose watchdog fires while it is moving is not restored but
// watched again where its current step is due, and restored there if it
// stalls. Default windows (1 minute) and restore delay (600 windows) on a
// fake clock; the step timeout is 5 minutes so that the orchestrator's
// own step timers (wall clock) stay out of the test.
func TestWatchdogFollowsTheSaga(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.guarded = true      // a restored step that ran already is answered from its marker
		r.holdChargesAfter(0) // every charge waits: the sagas stall at charge
		t.Cleanup(r.releaseCharges)
		clock := newFakeClock()
		ws := recovery.MustWindows(time.Minute)
		// t0 is a second into a window: the arithmetic below is exact.
		clock.advance(ws.At(clock.now()).End.Sub(clock.now()) + time.Second)
		t0 := clock.now()
		cfg := recovery.DefaultConfig()
		cfg.Retry.Default.StepTimeout = 5 * time.Minute // due 310s after a transition, with the margin
		if cfg.RestoreDelay(r.domain) != 600 || cfg.Interval != time.Minute {
			t.Fatalf("defaults changed: %+v", cfg)
		}
		var mu sync.Mutex
		var dead string // the saga whose orchestrator "died" after its create
		fault := func(p orchestrator.FaultPoint, txID string) bool {
			mu.Lock()
			defer mu.Unlock()
			if p == orchestrator.FaultAfterCreate && dead == "" {
				dead = txID
				return true
			}
			return false
		}
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg),
			orchestrator.WithRetryNode(), orchestrator.WithFaultInjection(fault))
		ctx := context.Background()
		ids := startN(t, o, 2)
		a, b := ids[0], ids[1]
		if a != dead {
			t.Fatalf("abandoned %q, want the first saga %q", dead, a)
		}
		scan := func(at time.Duration) recovery.Result {
			t.Helper()
			clock.advance(t0.Add(at).Sub(clock.now()))
			res, err := o.RecoveryEngine().Scan(ctx)
			if err != nil {
				t.Fatalf("scan at t0+%v: %v", at, err)
			}
			return res
		}
		// B moves at t0+300s: its first step, waiting for a worker until
		// then, completes and its charge is sent (and held).
		clock.advance(300 * time.Second)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		waitFor(t, time.Minute, "B at its charge", func() bool {
			tx, err := r.store.LoadTransaction(ctx, o.Scope(), b)
			return err == nil && tx.Span == 1 && tx.State == eventstore.StateInProgress
		})
		// A has had no transition for 300s < 310s: not due yet.
		if res := scan(300 * time.Second); res.Dispatched != 0 || o.Stats().Restored != 0 {
			t.Fatalf("t0+300s: %+v: a watchdog fired before its step timeout and margin", res)
		}
		// Both watchdogs were written for t0+310s: the first window sealed
		// after it ends at t0+359s. A is restored (stalled 360s, within
		// 310s plus one window); B moved 60s ago: its watchdog rolls
		// forward to its charge's due time (t0+610s: sealed at t0+659s).
		res := scan(360 * time.Second)
		if o.Stats().Restored != 1 {
			t.Fatalf("t0+360s: %+v, stats %+v: want A restored and B's watchdog handled without a restore", res, o.Stats())
		}
		if res.Rescheduled != 2 || res.Failed != 0 {
			t.Errorf("t0+360s: %d watchdogs registered again, want 2 (A re-armed, B rolled forward)", res.Rescheduled)
		}
		waitFor(t, time.Minute, "A restored to its charge", func() bool {
			tx, err := r.store.LoadTransaction(ctx, o.Scope(), a)
			return err == nil && tx.Span == 1 && tx.State == eventstore.StateInProgress
		})
		// B stalled at t0+300s is due at t0+610s: not restored at t0+600s.
		if scan(600 * time.Second); o.Stats().Restored != 1 {
			t.Fatalf("t0+600s: B restored before its charge's timeout and margin: %+v", o.Stats())
		}
		// Restored at t0+660s: within 310s plus one window of its stall.
		scan(660 * time.Second)
		if got := o.Stats().Restored; got != 2 {
			t.Fatalf("t0+660s: %d restored, want 2 (B's stalled charge)", got)
		}
		r.releaseCharges()
		expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
		for _, id := range ids {
			for span := range 3 {
				if n := r.runsOf(id, span, topics.KindProcess); n != 1 {
					t.Errorf("%s: span %d ran %d times", id, span, n)
				}
			}
		}
	})
}
