package orchestrator

import (
	"context"
	"errors"
	"sync"
	"time"
)

// maxRetryTimers bounds the in-process retries one orchestrator keeps
// armed; beyond it a parked saga waits for its window registration.
const maxRetryTimers = 100_000

// fastRetryTimeout bounds one in-process re-drive (a load, a transition
// and a publish).
const fastRetryTimeout = 30 * time.Second

// fastRetryParallelism bounds the in-process re-drives running at once.
const fastRetryParallelism = 64

// sagaTimers are per-saga in-process timers, keyed by transaction id
// (arming one replaces the saga's previous one), each checking when it
// fires that the saga is still at the version it was armed for. Two sets
// use them: the in-process retries of sagas parked in RETRY_PENDING
// (recovery.RetryPolicy.Backoff; the window registration written before
// the park is the durable fallback, and whichever moves the saga out of
// RETRY_PENDING first wins) and the step timeouts (steptimeout.go).
type sagaTimers struct {
	mu      sync.Mutex
	m       map[string]*time.Timer
	closed  bool
	full    bool // the cap was hit (logged once until it clears)
	running sync.WaitGroup
	sem     chan struct{}
}

// arm schedules f after d for txID, replacing a timer armed before for
// it. It reports false when the timers are stopped or at their cap.
func (r *sagaTimers) arm(txID string, d time.Duration, f func()) (ok, capHit bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false, false
	}
	if r.m == nil {
		r.m = map[string]*time.Timer{}
		r.sem = make(chan struct{}, fastRetryParallelism)
	}
	if old, ok := r.m[txID]; ok {
		old.Stop()
		delete(r.m, txID)
	}
	if len(r.m) >= maxRetryTimers {
		first := !r.full
		r.full = true
		return false, first
	}
	r.full = false
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		r.mu.Lock()
		if r.m[txID] == t {
			delete(r.m, txID)
		}
		if r.closed {
			r.mu.Unlock()
			return
		}
		r.running.Add(1)
		r.mu.Unlock()
		defer r.running.Done()
		r.sem <- struct{}{}
		defer func() { <-r.sem }()
		f()
	})
	r.m[txID] = t
	return true, false
}

// disarm cancels txID's timer, if any.
func (r *sagaTimers) disarm(txID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.m[txID]; ok {
		t.Stop()
		delete(r.m, txID)
	}
}

// armed reports how many timers are armed.
func (r *sagaTimers) armed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// stop cancels every armed timer and waits for the re-drives already
// running; no timer fires after it returns.
func (r *sagaTimers) stop() {
	r.mu.Lock()
	r.closed = true
	for id, t := range r.m {
		t.Stop()
		delete(r.m, id)
	}
	r.mu.Unlock()
	r.running.Wait()
}

// armRetry arms the in-process retry of a saga just parked in
// RETRY_PENDING at version, due after d (0: none).
func (o *Orchestrator[T]) armRetry(txID string, version int64, d time.Duration) {
	if d <= 0 {
		return
	}
	ok, capHit := o.retries.arm(txID, d, func() { o.fastRetry(txID, version) })
	if capHit {
		o.logger().Warn("orchestrator: too many in-process retries armed; parked sagas wait for their window registration", "cap", maxRetryTimers)
	}
	if ok && o.cfg.retryArmed != nil {
		o.cfg.retryArmed(txID, d)
	}
}

// fastRetry is an in-process retry firing: it re-drives the saga if it is
// still parked at version. Anything else (moved on, re-driven by a retry
// node, a store error) leaves it to the window registration.
func (o *Orchestrator[T]) fastRetry(txID string, version int64) {
	if o.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), fastRetryTimeout)
	defer cancel()
	err := o.redriveParkedAt(ctx, txID, version)
	switch {
	case err == nil:
		o.stats.fastRetried.Add(1)
	case errors.Is(err, ErrNotRetryPending), errors.Is(err, ErrSagaTimedOut), errors.Is(err, ErrRedriveHeld):
	default:
		o.logger().Warn("orchestrator: in-process retry failed; the saga's window registration re-drives it", "tx", txID, "err", err)
	}
}
