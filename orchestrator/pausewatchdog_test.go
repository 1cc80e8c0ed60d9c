package orchestrator_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// noRetryEntries is a store whose directory refuses retry entries (even
// buckets) while fail is set; restore watchdogs (odd buckets) are written.
type noRetryEntries struct {
	eventstore.Store
	fail    atomic.Bool
	refused atomic.Int64
}

var errNoRetryEntry = errors.New("test: retry entry refused")

func (s *noRetryEntries) refuse(e eventstore.RecoveryEntry) bool {
	if s.fail.Load() && !e.Restore() {
		s.refused.Add(1)
		return true
	}
	return false
}

func (s *noRetryEntries) RegisterRecovery(ctx context.Context, scope eventstore.Scope, e eventstore.RecoveryEntry) error {
	if s.refuse(e) {
		return errNoRetryEntry
	}
	return s.Store.RegisterRecovery(ctx, scope, e)
}

func (s *noRetryEntries) PutRecoveryEntry(ctx context.Context, scope eventstore.Scope, e eventstore.RecoveryEntry) error {
	if s.refuse(e) {
		return errNoRetryEntry
	}
	return s.Store.PutRecoveryEntry(ctx, scope, e)
}

// A pause whose deadline could not be registered (its retry entry failed)
// still ends at its deadline: the saga's restore watchdog, meeting it
// PAUSED past the deadline, re-invokes the paused step as the deadline
// would have, and keeps watching the saga (issue 35.3).
func TestPauseDeadlineUnregisteredFiredByWatchdog(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.pauseCharge.Store(true)
		r.pauseDeadline.Store(int64(10 * time.Minute))
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		store := &noRetryEntries{Store: r.store}
		store.fail.Store(true)
		clock := newFakeClock()
		o, _ := r.startOrchestrator(orchestrator.WithStore(store), orchestrator.WithClock(clock.now),
			orchestrator.WithRecovery(recoveryCfg(t)), orchestrator.WithRetryNode())
		ids := startConcurrently(t, o, 3)
		for _, id := range ids {
			waitState(t, o, id, eventstore.StatePaused)
		}
		// The deadline's entry is registered after the pause is persisted:
		// wait for its refusal, not for the state.
		waitFor(t, time.Minute, "every pause's deadline entry refused", func() bool {
			return store.refused.Load() >= int64(len(ids))
		})
		// The watchdog (5 windows) fires before the deadline: the sagas
		// stay paused.
		for range 6 {
			advanceIdle(t, o, clock.advance, time.Minute)
			if _, err := o.RecoveryEngine().Scan(context.Background()); err != nil {
				t.Logf("scan: %v", err)
			}
		}
		for _, id := range ids {
			if s, _ := o.Get(context.Background(), id); s.State != eventstore.StatePaused {
				t.Fatalf("%s is %s before its deadline", id, s.State)
			}
		}
		// Past the deadline, the watchdog alone re-invokes the step.
		expectAll(t, scanUntil(t, o, clock, time.Minute, ids), eventstore.StateCompleted)
		for _, id := range ids {
			r.mu.Lock()
			second := r.seen[id+"/1/process/2"]
			r.mu.Unlock()
			if len(second) == 0 {
				t.Errorf("%s: the paused step was not invoked again", id)
			}
			if n := r.runsOf(id, 2, topics.KindProcess); n != 1 {
				t.Errorf("%s: ship ran %d times, want 1", id, n)
			}
		}
	})
}
