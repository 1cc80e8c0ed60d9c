package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// fakeClock is the orchestrator's (and so the recovery engine's) clock in
// the recovery tests: windows seal when the test advances it, not after
// real minutes.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now().UTC()} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// recoveryCfg is the default recovery configuration (1-minute windows)
// with a short restore delay, so that a test advances the clock by minutes.
func recoveryCfg(t *testing.T) recovery.Config {
	t.Helper()
	cfg := recovery.DefaultConfig()
	cfg.Restore.DefaultDelayWindows = 5
	// These tests drive the window path (the durable one) on a fake clock:
	// no in-process retries, which run on the wall clock (fastretry_test.go
	// tests those, and both together).
	cfg.Retry.Default.InitialInterval = 0
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// scanUntil advances the clock by step and runs the retry node's scan until
// every saga of ids is terminal (or in one of the extra states), or fails.
// Time passes only while no step is in flight (advanceIdle): on a loaded
// machine a step can take longer than the restore delay's few passes, and
// its watchdog would re-send it — right for a stalled step, not what a test
// of a slow one asserts.
func scanUntil(t *testing.T, o *orchestrator.Orchestrator[order], clock *fakeClock, step time.Duration, ids []string, extra ...eventstore.State) map[string]eventstore.State {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		advanceIdle(t, o, clock.advance, step)
		if _, err := o.RecoveryEngine().Scan(context.Background()); err != nil {
			t.Logf("scan: %v", err)
		}
		got := map[string]eventstore.State{}
		done := true
		// Replies to what the scan re-sent arrive asynchronously.
		for wait := time.Now().Add(3 * time.Second); time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
			done = true
			for _, id := range ids {
				s, err := o.Get(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				got[id] = s.State
				ok := s.State.Terminal()
				for _, e := range extra {
					ok = ok || s.State == e
				}
				done = done && ok
			}
			if done {
				return got
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sagas not settled after scans: %v", got)
		}
	}
}

// A step failing retryably parks its saga; the retry node re-drives it in
// the sealed retry window, and it completes. The retried step ran twice
// (the failed attempt and the good one), every other step once.
func TestRecoveryRetriesTransientFailures(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRetryRig(t, kind)
		clock := newFakeClock()
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)), orchestrator.WithRetryNode())
		ids := startConcurrently(t, o, 20)
		waitStates(t, o, time.Minute, ids, eventstore.StateRetryPending)
		expectAll(t, scanUntil(t, o, clock, time.Minute, ids), eventstore.StateCompleted)
		assertRetriedOnce(t, r, o, ids)
		waitStats(t, o, "the counters", func(st orchestrator.Stats) bool { return st.Retried >= int64(len(ids)) })
		if st := o.Stats(); st.Retried != int64(len(ids)) {
			t.Errorf("Retried = %d, want %d", st.Retried, len(ids))
		}
		assertDirectoryDrained(t, r.store, o, clock)
	})
}

// directoryRows lists the tier-5 rows left in the sealed windows of the
// orchestrator's scope (after a run, every watchdog of a finished saga is
// deleted and every fired bucket dropped). Windows not sealed yet may hold
// the watchdogs re-armed by restore pickups: they fire later and are
// dropped then.
func directoryRows(t *testing.T, store eventstore.Store, o *orchestrator.Orchestrator[order], clock *fakeClock) []string {
	t.Helper()
	var rows []string
	ctx := context.Background()
	now := clock.now()
	days, err := store.ListDays(ctx, o.Scope(), now.AddDate(0, 0, -3), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, day := range days {
		mins, err := store.ListWindows(ctx, o.Scope(), day)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mins {
			if !o.RecoveryEngine().Windows().FromSlot(day, m).Sealed(now) {
				continue
			}
			insts, err := store.ListInstances(ctx, o.Scope(), day, m, eventstore.FullRing)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range insts {
				buckets, err := store.ListBuckets(ctx, o.Scope(), day, m, in.ID)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range buckets {
					es, err := store.ListRecoveryEntries(ctx, o.Scope(), eventstore.RecoveryPath{Day: day, MinuteOfDay: m, InstanceID: in.ID, Bucket: b}, "", 0)
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range es {
						rows = append(rows, fmt.Sprintf("%s window %d bucket %d tx %s", day.Format("2006-01-02"), m, b, e.TxID))
					}
				}
			}
		}
	}
	return rows
}

// assertDirectoryDrained waits (the cleanup follows the terminal write)
// until no tier-5 row is left in a sealed window, or fails naming them.
func assertDirectoryDrained(t *testing.T, store eventstore.Store, o *orchestrator.Orchestrator[order], clock *fakeClock) {
	t.Helper()
	var rows []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if rows = directoryRows(t, store, o, clock); len(rows) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, r := range rows {
		t.Errorf("directory row left: %s", r)
	}
}

// Sagas abandoned by a dying orchestrator at each point (after the create,
// after a reply was persisted but before the next command was published,
// in the middle of compensation) are restored by their watchdog and end
// right, with no business step run twice.
func TestRecoveryRestoresAbandonedSagas(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.failShip.Store(true) // every saga compensates: the revert point is reached
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		// Every saga passes the points in order (create, then a forward
		// publish, then a revert publish); the first four at each point
		// that are still alive are abandoned there.
		var mu sync.Mutex
		abandoned := map[string]orchestrator.FaultPoint{}
		perPoint := map[orchestrator.FaultPoint]int{}
		fault := func(p orchestrator.FaultPoint, txID string) bool {
			mu.Lock()
			defer mu.Unlock()
			if _, done := abandoned[txID]; done || perPoint[p] == 4 || p == orchestrator.FaultLoseCommand {
				return false
			}
			perPoint[p]++
			abandoned[txID] = p
			return true
		}
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)),
			orchestrator.WithRetryNode(), orchestrator.WithFaultInjection(fault))
		all := startN(t, o, 12)
		// Let everything that was not abandoned finish first.
		waitFor(t, time.Minute, "the abandoned sagas to be the only unfinished ones", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(abandoned) == len(all)
		})
		expectAll(t, scanUntil(t, o, clock, 2*time.Minute, all), eventstore.StateCompensated)
		for _, tx := range all {
			for span := range 3 {
				if n := r.runsOf(tx, span, topics.KindProcess); n != 1 {
					t.Errorf("%s (%s): span %d ran %d times", tx, abandoned[tx], span, n)
				}
			}
			for span := range 2 {
				if n := r.runsOf(tx, span, topics.KindRevert); n != 1 {
					t.Errorf("%s (%s): revert %d ran %d times", tx, abandoned[tx], span, n)
				}
			}
		}
		waitStats(t, o, "the counters", func(st orchestrator.Stats) bool { return st.Restored >= int64(len(all)) })
		if st := o.Stats(); st.Abandoned != int64(len(all)) || st.Restored < int64(len(all)) {
			t.Errorf("stats %+v: want %d abandoned and restored", st, len(all))
		}
		assertDirectoryDrained(t, r.store, o, clock)
	})
}

// A completed saga's watchdog row is deleted at once; a watchdog that fires
// for a completed saga (here: registered again by hand) is dropped and
// re-drives nothing.
func TestRecoveryWatchdogOfCompletedSaga(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)), orchestrator.WithRetryNode())
		ids := startConcurrently(t, o, 5)
		expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
		ctx := context.Background()
		for _, id := range ids {
			s, err := r.store.LoadTransaction(ctx, o.Scope(), id)
			if err != nil {
				t.Fatal(err)
			}
			if s.RestorePath == nil {
				t.Fatalf("%s has no watchdog path", id)
			}
			// The watchdog is deleted just after the terminal state is
			// written: wait for that.
			waitFor(t, 30*time.Second, id+"'s watchdog deleted", func() bool {
				es, err := r.store.ListRecoveryEntries(ctx, o.Scope(), *s.RestorePath, "", 0)
				if err != nil {
					return false
				}
				for _, e := range es {
					if e.TxID == id {
						return false
					}
				}
				return true
			})
		}
		// A stale watchdog of a completed saga fires.
		if _, err := o.RecoveryWriter().RegisterRestore(ctx, o.Scope(), ids[0], r.domain); err != nil {
			t.Fatal(err)
		}
		before := o.Stats().Commands
		clock.advance(10 * time.Minute)
		if _, err := o.RecoveryEngine().Scan(ctx); err != nil {
			t.Fatal(err)
		}
		if st := o.Stats(); st.Commands != before || st.Restored != 0 {
			t.Errorf("the pickup of a completed saga re-drove something: %+v", st)
		}
		assertDirectoryDrained(t, r.store, o, clock)
	})
}

// A step that keeps failing retryably is retried up to its policy's
// attempts, then fails for good and the saga compensates.
func TestRecoveryExhaustedRetriesCompensate(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.retryCharge.Store(true)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		cfg := recoveryCfg(t)
		cfg.Retry.Default.MaxAttempts = 3
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
		ids := startConcurrently(t, o, 4)
		expectAll(t, scanUntil(t, o, clock, 3*time.Minute, ids), eventstore.StateCompensated)
		for _, id := range ids {
			if n := r.runsOf(id, 1, topics.KindProcess); n != 3 {
				t.Errorf("%s: charge tried %d times, want 3", id, n)
			}
			r.mu.Lock()
			got := r.reverts[id]
			r.mu.Unlock()
			if len(got) != 1 || got[0] != "reserve" {
				t.Errorf("%s: compensations %v, want [reserve]", id, got)
			}
			s, _ := o.Get(context.Background(), id)
			if !strings.Contains(s.Error, "retries exhausted after 3 attempts") {
				t.Errorf("%s: error %q", id, s.Error)
			}
		}
		waitStats(t, o, "the counters", func(st orchestrator.Stats) bool { return st.Exhausted >= int64(len(ids)) })
		if st := o.Stats(); st.Exhausted != int64(len(ids)) {
			t.Errorf("Exhausted = %d, want %d", st.Exhausted, len(ids))
		}
	})
}

// A saga still parked when its transaction lifetime ends is frozen as
// DISABLED, not re-driven.
func TestRecoveryLifetimeDisables(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.retryCharge.Store(true)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		cfg := recoveryCfg(t)
		cfg.TransactionLifetime = time.Hour
		cfg.Retry.Default.DelayWindows, cfg.Retry.Default.MaxDelayWindows, cfg.Retry.Default.Jitter = 30, 30, 0
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
		ids := startConcurrently(t, o, 3)
		got := scanUntil(t, o, clock, 20*time.Minute+time.Duration(rand.IntN(60))*time.Second, ids, eventstore.StateDisabled)
		expectAll(t, got, eventstore.StateDisabled)
		ctx := context.Background()
		for _, id := range ids {
			f, err := r.store.GetFrozen(ctx, o.Scope(), id)
			if err != nil {
				t.Fatalf("%s not in the frozen table: %v", id, err)
			}
			if !strings.Contains(f.Reason, "transaction lifetime") {
				t.Errorf("%s: reason %q", id, f.Reason)
			}
			// The owner's late reply, applied to the state it had before
			// the disable, writes the disable's version: it loses, with
			// its tryout, and the saga stays DISABLED (issue 35).
			d, err := r.store.LoadTransaction(ctx, o.Scope(), id)
			if err != nil {
				t.Fatal(err)
			}
			late := d
			late.State, late.Fence, late.Error = eventstore.StateInProgress, 0, ""
			if err := r.store.Transition(ctx, late, &eventstore.Tryout{Index: int(late.Version), Outcome: "ok"}); err != nil {
				t.Fatal(err)
			}
			got, err := r.store.LoadTransaction(ctx, o.Scope(), id)
			if err != nil {
				t.Fatal(err)
			}
			h, err := r.store.Tryouts(ctx, o.Scope(), id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != eventstore.StateDisabled || got.Error != d.Error || slices.ContainsFunc(h, func(tr eventstore.Tryout) bool { return tr.Index == int(d.Version) }) {
				t.Errorf("%s after a late reply of the disable's version (fence %d): %s %q, tryouts %+v", id, d.Fence, got.State, got.Error, h)
			}
		}
		waitStats(t, o, "the counters", func(st orchestrator.Stats) bool { return st.Disabled >= int64(len(ids)) })
		if st := o.Stats(); st.Disabled != int64(len(ids)) {
			t.Errorf("Disabled = %d, want %d", st.Disabled, len(ids))
		}
	})
}

// partialStore fails creates after writing them. With watched, every
// CreateTransactionWatched fails, having written the saga row alone (a
// batch whose coordinator died midway, leaving the saga without its
// watchdog) or, with landAll, both rows (a batch that timed out but
// landed). With plain, every CreateTransaction fails having written the
// row (the first saga of a bucket, whose watchdog went first). With
// markFails the orchestrator's follow-up write (the saga marked failed)
// fails too, for good; otherwise its first attempt fails transiently.
type partialStore struct {
	eventstore.Store
	partialMode

	advance     func(time.Duration) // the orchestrator's clock, for stall
	markRetried atomic.Bool         // the first mark failed (transiently)
	mu          sync.Mutex
	failed      []string // the sagas whose create failed
}

// partialMode says which creates a partialStore fails, and how. With
// stall the failing create takes 3 minutes of the orchestrator's clock:
// past half the tests' 5-minute restore delay, too late to mark the saga.
// With dogFails the orchestrator's fallback write of the failed saga's
// watchdog fails too.
type partialMode struct{ watched, landAll, plain, markFails, stall, dogFails bool }

func (s *partialStore) CreateTransactionWatched(ctx context.Context, tx eventstore.Transaction, first *eventstore.Tryout, dog eventstore.RecoveryEntry) error {
	wc := s.Store.(eventstore.WatchedCreator)
	if !s.watched {
		return wc.CreateTransactionWatched(ctx, tx, first, dog)
	}
	var err error
	if s.landAll {
		err = wc.CreateTransactionWatched(ctx, tx, first, dog)
	} else {
		err = s.Store.CreateTransaction(ctx, tx, first)
	}
	return s.fail(tx.TxID, err)
}

func (s *partialStore) CreateTransaction(ctx context.Context, tx eventstore.Transaction, first *eventstore.Tryout) error {
	err := s.Store.CreateTransaction(ctx, tx, first)
	if !s.plain {
		return err
	}
	return s.fail(tx.TxID, err)
}

func (s *partialStore) fail(txID string, err error) error {
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.failed = append(s.failed, txID)
	s.mu.Unlock()
	if s.stall {
		s.advance(3 * time.Minute)
	}
	return errors.New("coordinator lost mid-batch")
}

func (s *partialStore) Transition(ctx context.Context, tx eventstore.Transaction, tr *eventstore.Tryout) error {
	if tx.Version == 2 && tx.State == eventstore.StateCompensated && s.isFailed(tx.TxID) {
		switch {
		case s.markFails:
			// For good, so that the orchestrator does not retry the mark
			// for its whole budget.
			return fmt.Errorf("store still failing: %w", eventstore.ErrPermanent)
		case s.markRetried.CompareAndSwap(false, true):
			return errors.New("a timeout the mark is retried after")
		}
	}
	return s.Store.Transition(ctx, tx, tr)
}

func (s *partialStore) PutRecoveryEntry(ctx context.Context, scope eventstore.Scope, e eventstore.RecoveryEntry) error {
	if s.dogFails && s.isFailed(e.TxID) {
		return errors.New("watchdog write failed")
	}
	return s.Store.PutRecoveryEntry(ctx, scope, e)
}

func (s *partialStore) isFailed(txID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.failed, txID)
}

func (s *partialStore) failedOnce(t *testing.T) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failed) != 1 {
		t.Fatalf("failed creates %v, want one", s.failed)
	}
	return s.failed[0]
}

// A saga start writes the watchdog with the create in one statement (all
// but the first saga of a bucket, which writes its watchdog first). When
// the create fails, Start fails and the saga does not run, even if the
// create landed: the orchestrator marks it COMPENSATED at the next version
// and deletes its watchdog, and passes of the retry node well past the
// restore delay leave it alone. If the mark fails too, after a statement
// that wrote the saga row alone, the orchestrator writes the watchdog
// again by itself, so the saga is not left in flight without one: the
// retry node restores it (to the end, here) like any saga that stalled
// after its create. So it does, without trying the mark, when the create
// failed too late to mark the saga before a retry node could restore it.
func TestRecoveryPartlyWrittenCreate(t *testing.T) {
	cases := []struct {
		name string
		mode partialMode
	}{
		{"BatchLandedMarkedFailed", partialMode{watched: true, landAll: true}},
		{"FirstOfBucketLandedMarkedFailed", partialMode{plain: true}},
		{"BatchInPartStoreStillFailing", partialMode{watched: true, markFails: true}},
		{"BatchInPartTooLateToMark", partialMode{watched: true, stall: true}},
	}
	onEachStore(t, func(t *testing.T, kind string) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := newRig(t, kind)
				r.startWorker(r.svcStock)
				r.startWorker(r.svcPay)
				clock := newFakeClock()
				ps := &partialStore{Store: r.store, partialMode: c.mode, advance: clock.advance}
				o, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...), orchestrator.WithStore(ps),
					orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)), orchestrator.WithRetryNode())
				if err != nil {
					t.Fatal(err)
				}
				runOrch(t, o)
				// The first saga of the window's bucket writes its watchdog
				// first; the second goes through the batch.
				var ok []string
				for _, id := range []string{"first", "second"} {
					txID, err := o.Start(t.Context(), order{ID: id})
					switch {
					case err == nil:
						ok = append(ok, txID)
					case !strings.Contains(err.Error(), "coordinator lost mid-batch"):
						t.Fatalf("Start of the %s saga: %v", id, err)
					}
				}
				failed := ps.failedOnce(t)
				marked := !c.mode.markFails && !c.mode.stall
				wantUnmarked := int64(1)
				if marked {
					wantUnmarked = 0
				}
				if st := o.Stats(); st.FailedStarts != 1 || st.FailedStartsUnmarked != wantUnmarked || st.FailedStartsUnwatched != 0 {
					t.Fatalf("Stats %+v: want one failed start, %d unmarked, none unwatched", st, wantUnmarked)
				}
				tx, err := r.store.LoadTransaction(t.Context(), o.Scope(), failed)
				if err != nil || tx.RestorePath == nil {
					t.Fatalf("the saga whose create failed %+v, %v: want its row with a restore path", tx, err)
				}
				watchdogs := func() (ids []string) {
					t.Helper()
					rows, err := r.store.ListRecoveryEntries(t.Context(), tx.Scope, *tx.RestorePath, "", 0)
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range rows {
						ids = append(ids, e.TxID)
					}
					return ids
				}
				if marked {
					if ids := watchdogs(); slices.Contains(ids, failed) {
						t.Fatalf("watchdog bucket %+v still holds the saga marked failed: %v", *tx.RestorePath, ids)
					}
					if tx.State != eventstore.StateCompensated || tx.Version != 2 || !strings.Contains(tx.Error, "start failed: ") || tx.Endpoint != "" {
						t.Fatalf("the saga whose create failed %+v: want it COMPENSATED at version 2, its step unsent, the error kept", tx)
					}
					if !ps.markRetried.Load() {
						t.Fatal("the mark's first attempt was not made")
					}
					waitTerminal(t, o, ok, time.Minute)
					for range 6 { // 12 minutes of scans, past the 5-minute restore delay
						advanceIdle(t, o, clock.advance, 2*time.Minute)
						if _, err := o.RecoveryEngine().Scan(t.Context()); err != nil {
							t.Logf("scan: %v", err)
						}
					}
					if got, err := o.Get(t.Context(), failed); err != nil || got.State != eventstore.StateCompensated {
						t.Fatalf("after the scans the saga whose Start failed is %+v, %v; want it still COMPENSATED", got, err)
					}
					for span := range 3 {
						if n := r.runsOf(failed, span, topics.KindProcess); n != 0 {
							t.Errorf("span %d of the saga whose Start failed ran %d times", span, n)
						}
					}
					assertDirectoryDrained(t, r.store, o, clock)
					return
				}
				if c.mode.stall && ps.markRetried.Load() {
					t.Fatal("the saga was marked failed too late: a retry node could restore it meanwhile")
				}
				if ids := watchdogs(); !slices.Contains(ids, failed) {
					t.Fatalf("watchdog bucket %+v holds %v: the partly written saga has no watchdog", *tx.RestorePath, ids)
				}
				expectAll(t, scanUntil(t, o, clock, 2*time.Minute, append(ok, failed)), eventstore.StateCompleted)
				assertDirectoryDrained(t, r.store, o, clock)
			})
		}
	})
}
