package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
// out", then a retry, and the attempt's late reply is stale (its attempt
// number is behind). No reply does not mean the step did not run: when
// the saga then compensates instead of retrying (the retries are
// exhausted, the saga's deadline passed, it was cancelled), a forward
// step failed by its timer is compensated too, as one whose outcome is
// unknown (timedOut). Timers do not outlive
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
		deadline := false
		if left, ok := o.untilDeadline(tx); ok && left > 0 && (d <= 0 || left < d) {
			// The saga's deadline comes first: the timer stops the saga
			// going forward then (timedOut). A step sent just before the
			// deadline whose timer is armed after it keeps its step
			// timeout: its reply decides, and the reply path fails the
			// saga then, compensating the step if it ran.
			d, deadline = left, true
		}
		if d > 0 {
			o.armStep(tx.TxID, tx.Version, d, deadline)
			if o.cfg.stepArmed != nil {
				o.cfg.stepArmed(tx.TxID, tx.Span, d, deadline)
			}
			return
		}
	}
	o.steps.disarm(tx.TxID)
}

// armStep arms the step timer of the saga txID at version, to fire after
// d; deadline says it is armed for the saga's deadline rather than for the
// step's own timeout.
func (o *Orchestrator[T]) armStep(txID string, version int64, d time.Duration, deadline bool) {
	o.steps.arm(txID, d, func() { o.stepTimedOut(txID, version, d, deadline) })
}

// stepTimedOut applies the timer of the attempt a saga waits for at
// version, if it still does (timedOut). The timer runs in the instance
// that armed it, which need not own the saga's callback partition: the
// owner may be applying the attempt's reply at this very moment, and two
// writes of one version would be merged cell by cell by the store. So an
// instance that does not own the partition does not write: it sends the
// timeout to the partition as a timer record (stepTimerHeader), which the
// owner applies in order with the saga's replies, one of the two finding
// the other's attempt moved on (applyTimerRecord).
func (o *Orchestrator[T]) stepTimedOut(txID string, version int64, d time.Duration, deadline bool) {
	if o.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), fastRetryTimeout)
	defer cancel()
	l := o.lock(txID)
	l.Lock()
	defer l.Unlock()
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if err != nil {
		o.logger().Warn("orchestrator: step timeout: could not read the saga; its restore watchdog finds it if it stalled", "tx", txID, "err", err)
		return
	}
	if !timerApplies(&tx, version) {
		return
	}
	if o.cfg.groupType == topics.GroupShare {
		// The attempt's reply claim, as its reply takes it (gate.go):
		// the saga re-read under it.
		held, release, err := o.claimAttempt(ctx, &tx, "step timeout")
		if err != nil {
			o.stepTimerHeld(txID, version, d, deadline, err)
			return
		}
		defer release()
		ctx = held
		if tx, err = o.store.LoadTransaction(ctx, o.scope, txID); err != nil || !timerApplies(&tx, version) {
			return
		}
	}
	msg := fmt.Sprintf("%s no reply within %v (step-timeout)", stepTimedOutPrefix, d)
	if deadline {
		msg = stepTimedOutPrefix + " no reply by the saga's deadline (saga-timeout)"
	}
	_, endpoint := parseQualified(tx.Endpoint)
	env := &topics.Envelope{
		Type: topics.TypeReply, Region: o.scope.Region, Cluster: o.scope.Cluster, Service: o.scope.Service,
		TxID: tx.TxID, Domain: tx.Domain, Endpoint: endpoint, Span: tx.Span,
		Kind: topics.Kind(tx.Kind), Attempt: tx.Attempt, Outcome: topics.OutcomeRetryable, Error: msg,
	}
	if o.cfg.groupType != topics.GroupShare && !o.cache.owns(txID) {
		if err := o.sendTimerRecord(ctx, env, version, deadline); err != nil {
			o.logger().Warn("orchestrator: step timeout: could not send it to the saga's callback partition; its restore watchdog finds the saga if it stalled", "tx", txID, "err", err)
		}
		return
	}
	if _, err := o.gate(ctx, &tx, pathStepTimer); err != nil {
		o.logger().Warn("orchestrator: step timeout not applied", "tx", txID, "err", err)
		return // left for an instance that has the version
	}
	// Not caused by a reply on this instance's callback partition: what
	// follows is persisted before anything is published.
	if err := o.timedOut(withPersistFirst(ctx), &tx, env, deadline); err != nil {
		o.logger().Warn("orchestrator: step timeout: could not move the saga on; its restore watchdog finds it", "tx", txID, "err", err)
	}
}

// stepTimerHeld handles a step timer the gate did not admit (err): a
// version not registered here leaves the saga alone; a reply claim held
// by another instance (applying the attempt's reply) is tried again once
// its lease has run out, when the saga has moved on or its claimer died.
func (o *Orchestrator[T]) stepTimerHeld(txID string, version int64, d time.Duration, deadline bool, err error) {
	if !errors.Is(err, errClaimBusy) {
		o.logger().Warn("orchestrator: step timeout: could not claim the attempt; its restore watchdog finds the saga if it stalled", "tx", txID, "err", err)
		return
	}
	o.logger().Info("orchestrator: step timeout: another instance is applying the attempt's reply; checked again after the claim's lease", "tx", txID, "err", err)
	o.steps.arm(txID, o.cfg.claimLease, func() { o.stepTimedOut(txID, version, d, deadline) })
}

// timerApplies reports whether tx still waits, at version, for the reply
// its step timer stands in for.
func timerApplies(tx *eventstore.Transaction, version int64) bool {
	switch tx.State {
	case eventstore.StateStarted, eventstore.StateInProgress, eventstore.StateCompensating, eventstore.StateCancelling:
		return tx.Version == version
	}
	return false
}

// stepTimerHeader marks a timer record on the callback topic: a step
// timeout sent by the instance whose timer fired to the owner of the
// saga's partition. Its value is the saga version the timer was armed at,
// with ";deadline" when it was armed for the saga's deadline; the record's
// value is the retryable reply the timeout stands for.
const stepTimerHeader = "stacksaga-step-timer"

// sendTimerRecord sends the timeout env of the timer armed at version to
// the saga's callback partition.
func (o *Orchestrator[T]) sendTimerRecord(ctx context.Context, env *topics.Envelope, version int64, deadline bool) error {
	b, err := topics.Encode(env)
	if err != nil {
		return err
	}
	v := strconv.FormatInt(version, 10)
	if deadline {
		v += ";deadline"
	}
	rec := &kgo.Record{Topic: o.cbTopic, Key: []byte(env.TxID), Value: b, Headers: []kgo.RecordHeader{{Key: stepTimerHeader, Value: []byte(v)}}}
	return o.prod.ProduceSync(ctx, rec).FirstErr()
}

// stepTimerOf returns the version and deadline flag of r's timer header;
// ok is false when r has none, and err says why a header is malformed.
func stepTimerOf(r *kgo.Record) (version int64, deadline, ok bool, err error) {
	for _, h := range r.Headers {
		if h.Key != stepTimerHeader {
			continue
		}
		v, flag, cut := strings.Cut(string(h.Value), ";")
		if cut && flag != "deadline" {
			return 0, false, true, fmt.Errorf("orchestrator: step timer header %q: unknown flag", h.Value)
		}
		version, err = strconv.ParseInt(v, 10, 64)
		if err != nil || version < 1 || version > eventstore.MaxVersion {
			return 0, false, true, fmt.Errorf("orchestrator: step timer header %q: not a saga version", h.Value)
		}
		return version, cut, true, nil
	}
	return 0, false, false, nil
}

// applyTimerRecord applies a timer record (env, of the timer armed at
// version) as stepTimedOut would have where it fired, if the saga still
// waits for that attempt: this instance owns the saga's partition, so the
// record comes in order with the saga's replies.
func (o *Orchestrator[T]) applyTimerRecord(ctx context.Context, env *topics.Envelope, version int64, deadline bool) error {
	l := o.lock(env.TxID)
	l.Lock()
	defer l.Unlock()
	tx, err := o.store.LoadTransaction(ctx, o.scope, env.TxID)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil // a timer of a saga this store does not hold: nothing to time out
	}
	if err != nil {
		return fmt.Errorf("orchestrator: load %s: %w", env.TxID, err)
	}
	if !timerApplies(&tx, version) || !expects(&tx, env) {
		o.countStale(&tx)
		return nil
	}
	if _, err := o.gate(ctx, &tx, pathTimerRecord); err != nil {
		return nil // left for an instance that has the version (gate.go)
	}
	return o.timedOut(ctx, &tx, env, deadline)
}

// stepTimedOutPrefix starts the error of an attempt failed by its timer
// (and so the saga's Error while it is parked after one).
const stepTimedOutPrefix = "step timed out:"

// unknownNote ends the history row of a step compensated because its
// attempt was failed by a timer (OutcomeUnknown).
const unknownNote = "outcome unknown: the worker may have run the step or may still run it, so it is compensated with the saga"

// timedOut applies the timer of tx's attempt, which got no reply: env is
// the retryable failure a step timeout stands for. A compensation's
// attempt is failed as by a retryable reply (retried, or
// COMPENSATION_FAILED). A forward step's outcome is unknown: the worker
// may have run it, late, or may still run it; so
//
//   - a saga CANCELLING (a Cancel, or its deadline) compensates it with the
//     steps before it;
//   - a saga whose deadline has passed stops going forward as a Cancel
//     would (CANCELLING, OutcomeSagaTimedOut) when the timer was armed for
//     the deadline and the step's own timeout has not passed: the step's
//     reply (or that timeout) decides; otherwise it fails and compensates
//     the step with the others;
//   - a step whose retries are exhausted fails the saga, which compensates
//     it with the others;
//   - otherwise the attempt is retried as after a retryable reply.
//
// A step compensated so has a history row OutcomeUnknown. Its revert is
// per span: it also stands for the span's earlier timed-out attempts,
// which a guarded worker then refuses if they come late (hanging
// protection) and does not undo if none ran (null compensation).
func (o *Orchestrator[T]) timedOut(ctx context.Context, tx *eventstore.Transaction, env *topics.Envelope, deadline bool) error {
	log := o.logger().With("tx", tx.TxID, "span", tx.Span, "kind", tx.Kind, "endpoint", tx.Endpoint, "attempt", tx.Attempt)
	if tx.Kind != string(topics.KindProcess) {
		o.stats.timedOut.Add(1)
		log.Warn("orchestrator: step timed out; failing the attempt retryably")
		return o.apply(ctx, tx, env)
	}
	now := o.cfg.now()
	if tx.State == eventstore.StateCancelling {
		o.stats.timedOut.Add(1)
		return o.compensateUnknown(ctx, tx, env)
	}
	if o.pastDeadline(tx, now) {
		if left := o.stepLeft(tx, now); deadline && left > 0 {
			return o.deadlineCancel(ctx, tx, left)
		}
		o.stats.timedOut.Add(1)
		tx.Error = o.timedOutReason(tx) + ": last attempt: " + env.Error
		return o.compensateUnknown(ctx, tx, env)
	}
	if deadline {
		// Armed for the deadline, which the saga's clock has not reached
		// yet: armed again.
		o.timeStep(tx)
		return nil
	}
	o.stats.timedOut.Add(1)
	if o.retryPolicy(tx).Exhausted(tx.Attempt) {
		o.stats.exhausted.Add(1)
		tx.Error = fmt.Sprintf("retries exhausted after %d attempts: %s", tx.Attempt, env.Error)
		return o.compensateUnknown(ctx, tx, env)
	}
	log.Warn("orchestrator: step timed out; failing the attempt retryably")
	return o.apply(ctx, tx, env)
}

// stepLeft returns how long tx's step in flight has left of its step
// timeout at now (0 or less: none left, or no timeout).
func (o *Orchestrator[T]) stepLeft(tx *eventstore.Transaction, now time.Time) time.Duration {
	d := o.stepTimeout(tx)
	if d <= 0 {
		return 0
	}
	return tx.UpdatedAt.Add(d).Sub(now)
}

// deadlineCancel stops tx, past its deadline with a forward step in flight
// that has left of its step timeout, going forward: it becomes CANCELLING
// as after a Cancel, and the step's reply, or its step timeout, starts the
// compensation (cancelledReply, timedOut).
func (o *Orchestrator[T]) deadlineCancel(ctx context.Context, tx *eventstore.Transaction, left time.Duration) error {
	from := tx.State
	tx.Error = o.timedOutReason(tx)
	tryout := &eventstore.Tryout{TxID: tx.TxID, Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, Attempt: tx.Attempt,
		Outcome: OutcomeSagaTimedOut, Error: tx.Error + "; waiting for the step in flight (its reply, or its step timeout)",
		Before: tx.Payload, StartedAt: tx.UpdatedAt, FinishedAt: o.cfg.now()}
	o.logger().Warn("orchestrator: saga timed out with a step in flight; waiting for it before compensating",
		"tx", tx.TxID, "span", tx.Span, "endpoint", tx.Endpoint, "saga_timeout", o.cfg.sagaTimeout, "step_left", left)
	if err := o.persist(ctx, tx, eventstore.StateCancelling, tryout, from, nil); err != nil {
		return err
	}
	// persist armed the step's whole timeout; it was sent before.
	o.keepStepTime(tx, left)
	return nil
}

// compensateUnknown fails tx (or, CANCELLING, starts its compensation)
// after its forward step's attempt was failed by a timer (env), and
// compensates that step with the steps before it: its outcome is unknown.
// tx.Error is set by the caller (unless CANCELLING).
func (o *Orchestrator[T]) compensateUnknown(ctx context.Context, tx *eventstore.Transaction, env *topics.Envelope) error {
	now := o.cfg.now()
	from := tx.State
	last, tryout := stepResult(tx, env, now)
	tryout.Outcome, tryout.Error = OutcomeUnknown, env.Error+"; "+unknownNote
	o.logger().Warn("orchestrator: step timed out and its saga compensates; its outcome is unknown, so it is compensated too",
		"tx", tx.TxID, "span", tx.Span, "endpoint", tx.Endpoint, "attempt", tx.Attempt, "state", from)
	markUnknown(tx)
	if from == eventstore.StateCancelling {
		return o.compensateWith(ctx, tx, tx.Span+1, last, tryout)
	}
	if err := o.persist(ctx, tx, eventstore.StateFailed, tryout, from, last); err != nil {
		return err
	}
	return o.compensate(ctx, tx, tx.Span+1, last)
}

// Tryout outcomes of the history rows a timer writes (eventstore.Tryout.Outcome).
const (
	// OutcomeUnknown is the row of a forward step's attempt failed by its
	// step timer (or the saga's deadline) whose saga then compensates:
	// the worker may have run the step, or may still run it, so it is
	// compensated as if it had (a guarded worker makes that a null
	// compensation if it never ran, and refuses it if it comes later).
	// Error says the step timed out and its outcome is unknown.
	OutcomeUnknown = "unknown"
	// OutcomeSagaTimedOut is the row of a saga whose deadline
	// (WithSagaTimeout) passed while a forward step was in flight: the
	// saga became CANCELLING and waits for that step's reply (or its step
	// timeout). Error says the saga timed out.
	OutcomeSagaTimedOut = "saga_timed_out"
)

// unknownHint is the revert hint (eventstore.Transaction.Hints) that holds
// the span of a step compensated with an unknown outcome: its compensation
// is sent without topics.Envelope.ActionDone. Workers and decision
// functions do not see it (userHints).
const unknownHint = "stacksaga.outcome-unknown-span"

// markUnknown puts tx's current forward step, failed by a timer, in
// Completed, to be compensated with an unknown outcome.
func markUnknown(tx *eventstore.Transaction) {
	tx.Completed = append(tx.Completed, eventstore.CompletedSpan{Span: tx.Span, Endpoint: tx.Endpoint, Compensable: !isQuery(tx.Endpoint)})
	h := make(map[string]string, len(tx.Hints)+1)
	for k, v := range tx.Hints {
		h[k] = v
	}
	h[unknownHint] = strconv.Itoa(tx.Span)
	tx.Hints = h
}

// userHints returns h without unknownHint.
func userHints(h map[string]string) map[string]string {
	if _, ok := h[unknownHint]; !ok {
		return h
	}
	if len(h) == 1 {
		return nil
	}
	u := make(map[string]string, len(h)-1)
	for k, v := range h {
		if k != unknownHint {
			u[k] = v
		}
	}
	return u
}
