package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
)

// The saga-level deadline (WithSagaTimeout): a saga whose forward steps
// have not all completed sagaTimeout after its creation (its lifetime's
// start, which an admin restore resets) fails non-retryably and
// compensates. It is checked where a forward saga would go on: a reply
// applied after it (a success is compensated too; a retryable failure is
// not retried), a parked saga's re-drive (in-process, by a retry node or
// by hand), and the step timer, armed for the deadline when it comes
// before the step's timeout. That timer does not fail the step in flight,
// whose outcome is not known yet: the saga stops going forward as after a
// Cancel (CANCELLING) and the step's reply decides (a success is
// compensated, a failure is not); if its step timeout passes first, it is
// compensated anyway (steptimeout.go, timedOut). A parked step whose last
// attempt was failed by its step timer is compensated too. Compensations
// are not bounded by the deadline.

// untilDeadline returns how long tx, going forward, has until its saga
// deadline; false when it has none (no timeout, or compensating).
func (o *Orchestrator[T]) untilDeadline(tx *eventstore.Transaction) (time.Duration, bool) {
	if o.cfg.sagaTimeout <= 0 || tx.Kind != string(topics.KindProcess) {
		return 0, false
	}
	return tx.LifetimeFrom().Add(o.cfg.sagaTimeout).Sub(o.cfg.now()), true
}

// pastDeadline reports whether tx, going forward, is past its saga
// deadline at now.
func (o *Orchestrator[T]) pastDeadline(tx *eventstore.Transaction, now time.Time) bool {
	return o.cfg.sagaTimeout > 0 && tx.Kind == string(topics.KindProcess) &&
		!now.Before(tx.LifetimeFrom().Add(o.cfg.sagaTimeout))
}

// timedOutReason is the error of a saga failed by its deadline.
func (o *Orchestrator[T]) timedOutReason(tx *eventstore.Transaction) string {
	return fmt.Sprintf("saga timed out: not completed within %v (saga-timeout) of %s", o.cfg.sagaTimeout, tx.LifetimeFrom().Format(time.RFC3339))
}

// failLate applies a forward step's reply env (a success or a retryable
// failure) that came after the saga's deadline: the saga fails and
// compensates, the step included when it succeeded.
func (o *Orchestrator[T]) failLate(ctx context.Context, tx *eventstore.Transaction, env *topics.Envelope, tryout *eventstore.Tryout, from eventstore.State, last *StepResult) error {
	cursor := tx.Span
	tx.Error = o.timedOutReason(tx)
	if env.Outcome == topics.OutcomeOK {
		if len(env.Payload) > 0 {
			tx.Payload = env.Payload
		}
		tx.Completed = append(tx.Completed, eventstore.CompletedSpan{Span: tx.Span, Endpoint: tx.Endpoint, Compensable: !isQuery(tx.Endpoint)})
		cursor = tx.Span + 1
	} else if env.Error != "" {
		tx.Error += ": last attempt: " + env.Error
	}
	o.logger().Warn("orchestrator: saga timed out; compensating", "tx", tx.TxID, "span", tx.Span, "saga_timeout", o.cfg.sagaTimeout)
	if err := o.persist(ctx, tx, eventstore.StateFailed, tryout, from, last); err != nil {
		return err
	}
	return o.compensate(ctx, tx, cursor, last)
}

// failParked fails tx, parked in RETRY_PENDING past its deadline, instead
// of re-driving it, and starts its compensation; it returns an error
// wrapping ErrSagaTimedOut (or the failure to persist). The caller holds
// the saga's lock.
func (o *Orchestrator[T]) failParked(ctx context.Context, tx *eventstore.Transaction) error {
	from := tx.State
	last := tx.Error
	reason := o.timedOutReason(tx)
	if last != "" {
		reason += ": last attempt: " + last
	}
	// A step parked after an attempt failed by its step timer has an
	// unknown outcome (the worker may have run it, or may still run it):
	// it is compensated with the steps before it (see timedOut).
	cursor := tx.Span
	var tryout *eventstore.Tryout
	if parkedUnknown(tx) {
		tryout = &eventstore.Tryout{TxID: tx.TxID, Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, Attempt: tx.Attempt,
			Outcome: OutcomeUnknown, Error: last + "; " + unknownNote, Before: tx.Payload, StartedAt: tx.UpdatedAt, FinishedAt: o.cfg.now()}
		markUnknown(tx)
		cursor++
	}
	tx.Error = reason
	// Not caused by a reply on this instance's callback partition.
	ctx = withPersistFirst(ctx)
	o.logger().Warn("orchestrator: parked saga timed out; compensating instead of retrying", "tx", tx.TxID, "span", tx.Span, "saga_timeout", o.cfg.sagaTimeout, "step_outcome_unknown", tryout != nil)
	if err := o.persist(ctx, tx, eventstore.StateFailed, tryout, from, nil); err != nil {
		return fmt.Errorf("orchestrator: redrive %s: %w", tx.TxID, err)
	}
	if err := o.compensate(ctx, tx, cursor, nil); err != nil {
		return fmt.Errorf("orchestrator: redrive %s: %w: compensation: %w", tx.TxID, ErrSagaTimedOut, err)
	}
	return fmt.Errorf("%w: %s", ErrSagaTimedOut, tx.TxID)
}

// parkedUnknown reports whether tx, parked in RETRY_PENDING going forward,
// was parked after an attempt failed by its step timer: the step's outcome
// is unknown, and a saga that fails or is cancelled instead of retrying it
// compensates it too.
func parkedUnknown(tx *eventstore.Transaction) bool {
	return tx.Kind == string(topics.KindProcess) && strings.HasPrefix(tx.Error, stepTimedOutPrefix)
}
