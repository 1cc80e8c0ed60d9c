package orchestrator_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// tryoutsFailStore fails the first read of the history of saga failTx
// once armed: the read timeout of the node that has just claimed the
// pause's deadline and reads the snapshot to re-invoke the step against.
type tryoutsFailStore struct {
	eventstore.Store
	failTx string
	armed  atomic.Bool
	failed atomic.Int32
}

func (s *tryoutsFailStore) Tryouts(ctx context.Context, scope eventstore.Scope, txID string) ([]eventstore.Tryout, error) {
	if txID == s.failTx && s.armed.CompareAndSwap(true, false) {
		s.failed.Add(1)
		return nil, errors.New("injected: read timeout")
	}
	return s.Store.Tryouts(ctx, scope, txID)
}

// A pause deadline that a retry node claimed but could not re-invoke (a
// read failed between the claim and the re-invocation) is re-invoked by a
// later pass: the saga does not stay PAUSED under its deadline's claim
// (issue 35.2).
func TestPauseDeadlineClaimedThenFailedIsReinvokedLater(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.pauseCharge.Store(true)
		r.pauseDeadline.Store(int64(10 * time.Minute))
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		store := &tryoutsFailStore{Store: r.store}
		clock := newFakeClock()
		o, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...),
			orchestrator.WithStore(store), orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)), orchestrator.WithRetryNode())
		if err != nil {
			t.Fatal(err)
		}
		runOrch(t, o)
		ids := startConcurrently(t, o, 2)
		ctx := context.Background()
		for _, id := range ids {
			waitState(t, o, id, eventstore.StatePaused)
		}
		stranded := ids[0]
		store.failTx = stranded
		store.armed.Store(true)
		advanceIdle(t, o, clock.advance, 15*time.Minute)
		if _, err := o.RecoveryEngine().Scan(ctx); err != nil {
			t.Logf("scan: %v", err)
		}
		if store.failed.Load() != 1 {
			t.Fatalf("the pass past the deadline did not read %s's history (injected failures: %d)", stranded, store.failed.Load())
		}
		m, err := r.store.GetMarker(ctx, eventstore.ResumeClaimKey(o.Scope(), stranded, 1, string(topics.KindProcess), 1))
		if err != nil || m.Owner != eventstore.ClaimDeadline {
			t.Fatalf("the deadline's claim of %s: %+v %v", stranded, m, err)
		}
		// Later passes (retry entries kept, restore watchdogs) must
		// re-invoke it; bounded, so that a stranded saga fails fast.
		for pass := 0; pass < 20; pass++ {
			if s, err := o.Get(ctx, stranded); err == nil && s.State != eventstore.StatePaused {
				break
			}
			advanceIdle(t, o, clock.advance, time.Minute)
			if _, err := o.RecoveryEngine().Scan(ctx); err != nil {
				t.Logf("scan: %v", err)
			}
		}
		if s, err := o.Get(ctx, stranded); err != nil || s.State == eventstore.StatePaused {
			_, rerr := o.Resume(ctx, stranded, topics.IdempotencyKey(stranded, 1, topics.KindProcess), nil)
			t.Fatalf("%s still PAUSED after 20 passes past its claimed deadline (%v); Resume says: %v", stranded, err, rerr)
		}
		expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
		for _, id := range ids {
			r.mu.Lock()
			first, second := r.seen[id+"/1/process/1"], r.seen[id+"/1/process/2"]
			r.mu.Unlock()
			if len(first) != 1 || len(second) != 1 {
				t.Fatalf("%s: charge attempt 1 ran %d times, attempt 2 %d times, want once each", id, len(first), len(second))
			}
			if slices.Contains(second[0].Steps, "process:charge-initiated") || !slices.Equal(second[0].Steps, first[0].Steps) {
				t.Errorf("%s: the re-invoked step got %v, want the snapshot before the step %v", id, second[0].Steps, first[0].Steps)
			}
			if n := r.runsOf(id, 2, topics.KindProcess); n != 1 {
				t.Errorf("%s: ship ran %d times", id, n)
			}
		}
	})
}
