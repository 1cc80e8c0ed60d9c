package orchestrator_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// newRetryRig is a rig whose charge fails each saga's first attempt
// retryably, with both workers running.
func newRetryRig(t *testing.T, kind string) *rig {
	t.Helper()
	r := newRig(t, kind)
	r.retryChargeOnce.Store(true)
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	return r
}

// waitStates waits (in real time) until every saga of ids is in want.
func waitStates(t *testing.T, o *orchestrator.Orchestrator[order], within time.Duration, ids []string, want eventstore.State) {
	t.Helper()
	waitFor(t, within, "every saga "+string(want), func() bool {
		for _, id := range ids {
			if s, err := o.Get(context.Background(), id); err != nil || s.State != want {
				return false
			}
		}
		return true
	})
}

// assertRetriedOnce checks that each saga's charge ran twice (a retryable
// failure at attempt 1, a success at attempt 2) and every other step once.
func assertRetriedOnce(t *testing.T, r *rig, o *orchestrator.Orchestrator[order], ids []string) {
	t.Helper()
	for _, id := range ids {
		if n := r.runsOf(id, 1, topics.KindProcess); n != 2 {
			t.Errorf("%s: charge ran %d times, want 2 (one retryable failure, one success)", id, n)
		}
		if a, b := r.runsOf(id, 0, topics.KindProcess), r.runsOf(id, 2, topics.KindProcess); a != 1 || b != 1 {
			t.Errorf("%s: reserve ran %d times, ship %d, want 1 and 1", id, a, b)
		}
		h, err := o.History(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) < 3 || h[1].Attempt != 1 || h[1].Outcome != string(topics.OutcomeRetryable) || h[2].Attempt != 2 || h[2].Outcome != string(topics.OutcomeOK) {
			t.Errorf("%s: history does not show one retry: %+v", id, h)
		}
	}
}

// With the default configuration (1-minute windows, no retry node at all)
// a retryable failure is retried by the orchestrator that parked the saga,
// from an in-process timer about a second later: every saga completes,
// although no window is ever scanned. The first retry's delay is logged.
func TestFastRetryWithDefaults(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRetryRig(t, kind)
		armed := make(chan time.Duration, 64)
		o, _ := r.startOrchestrator(orchestrator.WithRetryArmedHook(func(_ string, d time.Duration) {
			select {
			case armed <- d:
			default:
			}
		}))
		ids := startConcurrently(t, o, 10)
		// A window retry could not come before two minutes (1-minute
		// windows, sealed before they are scanned) and no retry node runs:
		// completion proves the in-process retry.
		waitStates(t, o, 90*time.Second, ids, eventstore.StateCompleted)
		assertRetriedOnce(t, r, o, ids)
		if st := o.Stats(); st.FastRetried != int64(len(ids)) || st.Retried != int64(len(ids)) {
			t.Errorf("FastRetried = %d, Retried = %d, want %d and %d", st.FastRetried, st.Retried, len(ids), len(ids))
		}
		d := <-armed
		p := recovery.DefaultConfig().RetryPolicy("any", "")
		if lo, hi := p.InitialInterval, time.Duration(float64(p.InitialInterval)*(1+p.Jitter)); d < lo || d > hi {
			t.Errorf("first retry armed after %v, want the default %v..%v", d, lo, hi)
		}
		for _, id := range ids {
			h, _ := o.History(context.Background(), id)
			t.Logf("%s: retry sent %v after the failed attempt finished", id, h[2].StartedAt.Sub(h[1].FinishedAt).Round(time.Millisecond))
			break
		}
		if n := o.Stats().RetryTimers; n != 0 {
			t.Errorf("%d retry timers still armed after every saga completed", n)
		}
	})
}

// The in-process retry and the window registration both fire for every
// parked saga: the timer re-drives it at once, the retry node's window scan
// finds it moved on later and does nothing. No step runs twice (the
// workers have no guard: a second command of an attempt would run).
func TestFastRetryAndWindowFallbackNeverBoth(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRetryRig(t, kind)
		clock := newFakeClock()
		cfg := recoveryCfg(t)
		cfg.Retry.Default.InitialInterval = 200 * time.Millisecond
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
		ids := startConcurrently(t, o, 10)
		waitStates(t, o, time.Minute, ids, eventstore.StateCompleted)
		// Now every window registration comes due: scan them all.
		for range 5 {
			advanceIdle(t, o, clock.advance, time.Minute)
			if _, err := o.RecoveryEngine().Scan(context.Background()); err != nil {
				t.Fatalf("scan: %v", err)
			}
		}
		assertRetriedOnce(t, r, o, ids)
		if st := o.Stats(); st.FastRetried != int64(len(ids)) || st.Retried != int64(len(ids)) {
			t.Errorf("FastRetried = %d, Retried = %d, want %d each (the window fallback re-drove nothing)", st.FastRetried, st.Retried, len(ids))
		}
		assertDirectoryDrained(t, r.store, o, clock)
	})
}

// An orchestrator that parked sagas dies before its in-process retries
// fire: nothing is lost, the window registrations it wrote first make a
// retry node re-drive every saga, once.
func TestFastRetryLostWithItsProcessWindowsRetry(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRetryRig(t, kind)
		clock := newFakeClock()
		cfg := recoveryCfg(t)
		cfg.Retry.Default.InitialInterval = time.Hour // never fires in this test
		cfg.Retry.Default.MaxInterval = time.Hour
		a, stopA := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg))
		ids := startConcurrently(t, a, 10)
		waitStates(t, a, time.Minute, ids, eventstore.StateRetryPending)
		if n := a.Stats().RetryTimers; n != int64(len(ids)) {
			t.Fatalf("%d retry timers armed, want %d", n, len(ids))
		}
		stopA() // the process dies with its timers
		b, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
		expectAll(t, scanUntil(t, b, clock, time.Minute, ids), eventstore.StateCompleted)
		assertRetriedOnce(t, r, b, ids)
		if st := b.Stats(); st.FastRetried != 0 || st.Retried != int64(len(ids)) {
			t.Errorf("retry node: FastRetried = %d, Retried = %d, want 0 and %d", st.FastRetried, st.Retried, len(ids))
		}
		if st := a.Stats(); st.FastRetried != 0 {
			t.Errorf("the dead orchestrator re-drove %d sagas after it stopped", st.FastRetried)
		}
	})
}

// parkGate holds the first load of a RETRY_PENDING saga made by a
// re-drive as it claims the park (prepareRedriveAt, the load whose state
// it moves on from) until release is closed, after closing held.
type parkGate struct {
	eventstore.Store
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func newParkGate(s eventstore.Store) *parkGate {
	return &parkGate{Store: s, held: make(chan struct{}), release: make(chan struct{})}
}

func (g *parkGate) LoadTransaction(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.Transaction, error) {
	tx, err := g.Store.LoadTransaction(ctx, scope, txID)
	if err == nil && tx.State == eventstore.StateRetryPending && calledFrom("prepareRedriveAt") {
		first := false
		g.once.Do(func() { first = true })
		if first {
			close(g.held)
			<-g.release
		}
	}
	return tx, err
}

// calledFrom reports whether a function whose name ends with name is on
// the caller's stack.
func calledFrom(name string) bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "."+name) {
			return true
		}
		if !more {
			return false
		}
	}
}

// The in-process retry of one instance and the window retry of another
// (a retry node) both read the same parked saga before either moves it:
// only one of them re-drives it. Before, both claimed the park (as the
// same claimant), both wrote the next attempt and both sent its command:
// the step ran twice (the workers have no guard), and a re-drive whose
// publish then failed parked the saga again at the version the reply of
// the other's command was written at, mixing the two rows (sagademo with
// --retry-nodes saw sagas end twice, with a step twice in Completed).
func TestFastRetryRacingAWindowRetryRedrivesOnce(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRetryRig(t, kind)
		clock := newFakeClock()
		cfg := recoveryCfg(t)
		cfg.Retry.Default.InitialInterval = 200 * time.Millisecond
		gateA, gateB := newParkGate(r.store), newParkGate(r.store)
		moved := make(chan struct{}, 1)
		a, _ := r.startOrchestrator(orchestrator.WithStore(gateA), orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg),
			orchestrator.WithListener(func(e orchestrator.Event) {
				if e.From == eventstore.StateRetryPending && e.To == eventstore.StateInProgress {
					select {
					case moved <- struct{}{}:
					default:
					}
				}
			}))
		ids := startConcurrently(t, a, 1)
		// (read past the gates: the first load of the parked saga must be
		// a re-drive's)
		waitFor(t, time.Minute, "the saga parked", func() bool {
			tx, err := r.store.LoadTransaction(context.Background(), a.Scope(), ids[0])
			return err == nil && tx.State == eventstore.StateRetryPending
		})
		select { // a's in-process retry has read the parked saga
		case <-gateA.held:
		case <-time.After(time.Minute):
			t.Fatal("the in-process retry never read the parked saga")
		}
		// The retry node starts once a (alone in the group) parked the
		// saga and armed its in-process retry.
		b, _ := r.startOrchestrator(orchestrator.WithStore(gateB), orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
		clock.advance(10 * time.Minute) // the window registration is due
		scanned := make(chan error, 1)
		go func() {
			_, err := b.RecoveryEngine().Scan(context.Background())
			scanned <- err
		}()
		select { // and so has b's window retry
		case <-gateB.held:
		case err := <-scanned:
			t.Fatalf("the retry node's scan ended (%v) without reading the parked saga", err)
		case <-time.After(2 * time.Minute):
			t.Fatal("the retry node's scan never read the parked saga")
		}
		close(gateA.release)
		select {
		case <-moved:
		case <-time.After(time.Minute):
			t.Fatal("the in-process retry did not re-drive the saga")
		}
		close(gateB.release)
		if err := <-scanned; err != nil {
			t.Fatalf("scan: %v", err)
		}
		waitStates(t, a, time.Minute, ids, eventstore.StateCompleted)
		assertRetriedOnce(t, r, a, ids)
		if st := b.Stats(); st.Retried != 0 {
			t.Errorf("the retry node re-drove %d sagas another instance had re-driven", st.Retried)
		}
		tx, err := r.store.LoadTransaction(context.Background(), a.Scope(), ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(tx.Completed) != 3 {
			t.Errorf("completed spans %+v, want 3", tx.Completed)
		}
	})
}
