package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Step timeouts (recovery.RetryPolicy.StepTimeout): the orchestrator that
// sends a step's command, or persists the saga as waiting for it, arms a
// timer for the saga at that version. The saga's next transition in this
// process re-arms or disarms it; one made elsewhere (another instance
// applied the reply) leaves it to fire and find the saga moved on (one
// read). A timer that finds the saga still waiting at its version fails
// the attempt retryably, as a retryable reply would: a tryout "step timed
// out", then a retry (or the policy's exhaustion), and the attempt's late
// reply is stale (its attempt number is behind). Timers do not outlive
// their process: a saga stalled by a crash is found by its restore
// watchdog, which follows the step timeouts (restoreAfter in recovery.go):
// a retry node restores it about its step timeout plus
// recovery.RestoreMargin after its last transition, within one window more.

// stepTimeout returns the step timeout of tx's current step (0: none).
// Resolved once per endpoint: the configuration does not change after New.
func (o *Orchestrator[T]) stepTimeout(tx *eventstore.Transaction) time.Duration {
	if d, ok := o.stepTimeouts.Load(tx.Endpoint); ok {
		return d.(time.Duration)
	}
	d := o.retryPolicy(tx).StepTimeout
	o.stepTimeouts.Store(tx.Endpoint, d)
	return d
}

// timeStep arms or disarms tx's step timer after a transition in this
// process: armed when the saga now waits for a step's reply.
func (o *Orchestrator[T]) timeStep(tx *eventstore.Transaction) {
	switch tx.State {
	case eventstore.StateStarted, eventstore.StateInProgress, eventstore.StateCompensating, eventstore.StateCancelling:
		d := o.stepTimeout(tx)
		if left, ok := o.untilDeadline(tx); ok && left > 0 && (d <= 0 || left < d) {
			// The saga's deadline comes first: its step is failed then,
			// which fails the saga (apply). A step sent just before the
			// deadline whose timer is armed after it keeps its step
			// timeout: its reply decides, and the reply path fails the
			// saga then, compensating the step if it ran.
			d = left
		}
		if d > 0 {
			txID, version := tx.TxID, tx.Version
			o.steps.arm(txID, d, func() { o.stepTimedOut(txID, version, d) })
			return
		}
	}
	o.steps.disarm(tx.TxID)
}

// stepTimedOut fails the attempt a saga waits for at version, if it still
// does, as a retryable reply would.
func (o *Orchestrator[T]) stepTimedOut(txID string, version int64, d time.Duration) {
	if o.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), fastRetryTimeout)
	defer cancel()
	// Not caused by a reply on this instance's callback partition: what
	// follows is persisted before anything is published.
	ctx = withPersistFirst(ctx)
	l := o.lock(txID)
	l.Lock()
	defer l.Unlock()
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if err != nil {
		o.logger().Warn("orchestrator: step timeout: could not read the saga; its restore watchdog finds it if it stalled", "tx", txID, "err", err)
		return
	}
	switch tx.State {
	case eventstore.StateStarted, eventstore.StateInProgress, eventstore.StateCompensating, eventstore.StateCancelling:
	default:
		return
	}
	if tx.Version != version {
		return
	}
	env := &topics.Envelope{
		Type: topics.TypeReply, TxID: tx.TxID, Domain: tx.Domain, Span: tx.Span,
		Kind: topics.Kind(tx.Kind), Attempt: tx.Attempt, Outcome: topics.OutcomeRetryable,
		Error: fmt.Sprintf("step timed out: no reply within %v (step-timeout)", d),
	}
	o.stats.timedOut.Add(1)
	o.logger().Warn("orchestrator: step timed out; failing the attempt retryably", "tx", txID, "span", tx.Span, "kind", tx.Kind, "endpoint", tx.Endpoint, "attempt", tx.Attempt, "timeout", d)
	if err := o.apply(ctx, &tx, env); err != nil {
		o.logger().Warn("orchestrator: step timeout: could not move the saga on; its restore watchdog finds it", "tx", txID, "err", err)
	}
}
