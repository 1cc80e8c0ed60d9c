package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Default bounds of Wait's reads of a saga that this instance does not
// move: the first after waitPollMin, each next one twice as late, at most
// waitPollMax apart (config.waitPoll changes them in tests).
const (
	waitPollMin = 200 * time.Millisecond
	waitPollMax = 5 * time.Second
)

// Wait returns the saga txID once it is terminal (COMPLETED, COMPENSATED or
// COMPENSATION_FAILED), or ctx's error (wrapped) when ctx ends first.
//
// It reads the saga's state once at once. A saga that this orchestrator
// moves wakes it the moment its terminal transition is persisted (Wait
// listens to the transitions this instance emits, as WithListener does); for
// a saga moved by other instances (its replies applied elsewhere, a retry
// node's re-drive) it reads the state again after 200 ms, then at
// intervals doubling up to 5 s, so that a long Wait costs a read every 5 s,
// not a busy loop. A saga that does not exist fails at once with
// ErrNotFound. A PAUSED saga (waiting for its event or deadline) and a
// DISABLED one (frozen after its lifetime, until an admin restores it) are
// not terminal: Wait goes on waiting for them, so bound it with ctx. A
// store error that a retry cannot fix (eventstore.ErrInvalid,
// ErrPermanent, ErrClosed) ends the Wait; others (a timeout) are retried
// at the next read.
func (o *Orchestrator[T]) Wait(ctx context.Context, txID string) (*Saga[T], error) {
	w := o.waits.add(txID)
	defer o.waits.remove(txID, w)
	delay, most := o.cfg.waitPoll[0], o.cfg.waitPoll[1]
	for {
		state, err := o.readState(ctx, txID)
		switch {
		case err == nil && state.Terminal():
			return o.Get(ctx, txID)
		case err == nil:
		case ctx.Err() != nil:
			return nil, fmt.Errorf("orchestrator: wait %s: %w", txID, ctx.Err())
		case errors.Is(err, eventstore.ErrNotFound), errors.Is(err, eventstore.ErrInvalid),
			errors.Is(err, eventstore.ErrPermanent), errors.Is(err, eventstore.ErrClosed):
			return nil, fmt.Errorf("orchestrator: wait %s: %w", txID, err)
		default:
			o.logger().Debug("orchestrator: wait: reading the saga failed; trying again", "tx", txID, "err", err)
		}
		if err := w.sleep(ctx, delay); err != nil {
			return nil, fmt.Errorf("orchestrator: wait %s: %w", txID, err)
		}
		delay = min(2*delay, most)
	}
}

// waiters are the calls of Wait in progress, by transaction id; emit wakes
// those of a saga that reached a terminal state. n counts them, so that
// emit costs one atomic load while nobody waits.
type waiters struct {
	n  atomic.Int64
	mu sync.Mutex
	m  map[string]map[*waiter]struct{}
}

// waiter is one call of Wait: woken holds a signal once its saga reached a
// terminal state here.
type waiter struct{ woken chan struct{} }

// sleep waits d, or until the saga is woken (then it returns at once), or
// until ctx ends (its error).
func (w *waiter) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.woken:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (ws *waiters) add(txID string) *waiter {
	w := &waiter{woken: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m == nil {
		ws.m = make(map[string]map[*waiter]struct{})
	}
	set := ws.m[txID]
	if set == nil {
		set = make(map[*waiter]struct{})
		ws.m[txID] = set
	}
	set[w] = struct{}{}
	ws.n.Add(1)
	return w
}

func (ws *waiters) remove(txID string, w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	set := ws.m[txID]
	delete(set, w)
	if len(set) == 0 {
		delete(ws.m, txID)
	}
	ws.n.Add(-1)
}

// wake signals the waiters of txID if to is terminal: their saga ended on
// this instance.
func (ws *waiters) wake(txID string, to eventstore.State) {
	if !to.Terminal() {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.m[txID] {
		select {
		case w.woken <- struct{}{}:
		default:
		}
	}
}
