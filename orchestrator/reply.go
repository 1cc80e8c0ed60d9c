package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/wait"
	"github.com/stacksaga-go/stacksaga/topics"
)

// handleRecord applies one reply from the callback topic. Replies of one saga
// arrive in order (they are keyed by transaction id and kafkaloop keeps key
// order), which is what makes "publish, then persist" safe: a crash between
// the two redelivers the same reply, which then finds the saga unchanged and
// publishes the same command again (the worker's guard drops the duplicate).
func (o *Orchestrator[T]) handleRecord(ctx context.Context, r *kgo.Record) error {
	if controlAction(r) != "" {
		return o.handleControl(ctx, r) // a cancel or terminate (cancel.go)
	}
	env, err := o.decodeReply(ctx, r, o.deadLetter)
	if env == nil {
		return err
	}
	if version, deadline, ok, err := stepTimerOf(r); err != nil {
		return o.deadLetter(ctx, r, dlUndecodable, err.Error())
	} else if ok {
		return o.applyTimerRecord(ctx, env, version, deadline) // steptimeout.go
	}
	l := o.lock(env.TxID)
	l.Lock()
	defer l.Unlock()
	// The state this orchestrator last persisted saves reading the row;
	// a reply it does not expect is checked against the store, and so is
	// a saga past its lifetime, which a retry node may have disabled.
	tx, ok := o.cache.get(env.TxID, r.Partition)
	if !ok || !expects(&tx, env) || o.cfg.recovery.Expired(tx.LifetimeFrom(), o.cfg.now()) {
		var err error
		tx, err = o.store.LoadTransaction(ctx, o.scope, env.TxID)
		if errors.Is(err, eventstore.ErrNotFound) {
			return o.deadLetter(ctx, r, dlUnknownTx, "orchestrator: unknown transaction "+env.TxID)
		}
		if err != nil {
			return fmt.Errorf("orchestrator: load %s: %w", env.TxID, err)
		}
		if !expects(&tx, env) {
			o.countStale(&tx)
			return nil
		}
	}
	return o.applyReply(ctx, r, &tx, env, pathReply)
}

// decodeReply decodes r and checks that it is a reply of this deployment's
// domain. It returns nil and what to return for r when it is not: nil for
// another deployment's reply (its own group handles it), or the result of
// reject (dead-lettering r with a reason code and a reason).
func (o *Orchestrator[T]) decodeReply(ctx context.Context, r *kgo.Record, reject func(ctx context.Context, r *kgo.Record, code, reason string) error) (*topics.Envelope, error) {
	env, err := topics.Decode(r.Value)
	if err != nil {
		return nil, reject(ctx, r, dlUndecodable, err.Error())
	}
	switch {
	case env.Type != topics.TypeReply:
		return nil, reject(ctx, r, dlNotReply, "orchestrator: not a reply: "+string(env.Type))
	case env.Domain != o.domain.Name:
		return nil, reject(ctx, r, dlWrongDomain, fmt.Sprintf("orchestrator: reply for domain %q on the callback topic of %q", env.Domain, o.domain.Name))
	case env.Region != o.scope.Region || env.Cluster != o.scope.Cluster || env.Service != o.scope.Service:
		// Another deployment of the domain (region, virtual cluster or
		// service) shares the callback topic; its own group handles it.
		o.stats.foreign.Add(1)
		return nil, nil
	}
	return env, nil
}

// applyReply applies the reply env, read from r, to tx, which expects it,
// timed and traced when telemetry is on.
//
// The reply is counted (Stats.Replies) once it is applied, after the
// command it leads to is published: Stats.Awaiting never reads 0 while a
// reply is being applied. Its step's latency is recorded then too, once:
// a reply retried after a failure is not observed per try.
func (o *Orchestrator[T]) applyReply(ctx context.Context, r *kgo.Record, tx *eventstore.Transaction, env *topics.Envelope, path writePath) error {
	if _, err := o.gate(ctx, tx, path); err != nil {
		return nil // left for an instance that has the version (gate.go)
	}
	var step stepKey
	var sent time.Time
	if o.tel.stepDur != nil {
		// Applying the reply moves tx on: keep what names the step.
		step, sent = stepKey{tx.Endpoint, tx.Kind, string(env.Outcome)}, tx.UpdatedAt
	}
	var err error
	if o.tel.tracer == nil {
		err = o.apply(ctx, tx, env)
	} else {
		ref := refOf(tx, env)
		sctx, span := o.replySpan(ctx, env, tx)
		err = o.apply(sctx, tx, env)
		endReply(span, r.Topic, ref, tx, err)
	}
	if err == nil {
		o.stats.replies.Add(1)
		if o.tel.stepDur != nil {
			o.recordStep(ctx, step, sent, o.cfg.now())
		}
	}
	return err
}

// expects reports whether tx waits for the reply env.
func expects(tx *eventstore.Transaction, env *topics.Envelope) bool {
	return awaitsReply(tx.State) && tx.Span == env.Span && tx.Kind == string(env.Kind) && tx.Attempt == env.Attempt
}

// awaitsReply reports whether a saga in state s has a command in flight.
// FAILED is included: a crash after persisting FAILED and before starting
// compensation redelivers the failing reply, which then resumes there.
func awaitsReply(s eventstore.State) bool {
	switch s {
	case eventstore.StateStarted, eventstore.StateInProgress, eventstore.StateCompensating, eventstore.StateFailed, eventstore.StateCancelling:
		return true
	}
	return false
}

// Reason codes of the orchestrator's dead letters, the
// telemetry.AttrDeadLetterReason of the dead-letter counter.
const (
	dlUndecodable = "undecodable"
	dlNotReply    = "not-a-reply"
	dlWrongDomain = "wrong-domain"
	dlUnknownTx   = "unknown-transaction"
	dlGivenUp     = "given-up"
)

// deadLetter sends r to the callback topic's dead-letter topic with reason,
// and counts it under code.
func (o *Orchestrator[T]) deadLetter(ctx context.Context, r *kgo.Record, code, reason string) error {
	reason, err := topics.ProduceDeadLetter(ctx, o.prod, r, topics.DeadLetterCause{By: topics.DeadLetterByOrchestrator, Code: code, Detail: reason})
	if err != nil {
		return fmt.Errorf("orchestrator: dead-letter: %w", err)
	}
	o.stats.deadLettered.Add(1)
	o.countDeadLetter(ctx, r, code)
	o.logger().WarnContext(ctx, "orchestrator: dead-lettered a record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
	return nil
}

// stepResult returns what the reply env to tx's current step, applied at
// now, shows the decision functions and records in the history.
func stepResult(tx *eventstore.Transaction, env *topics.Envelope, now time.Time) (*StepResult, *eventstore.Tryout) {
	service, endpoint := parseQualified(tx.Endpoint)
	last := &StepResult{
		Span: tx.Span, Step: Step{Service: service, Endpoint: endpoint, Query: isQuery(tx.Endpoint)},
		Kind: tx.Kind, Attempt: tx.Attempt, Outcome: string(env.Outcome), Error: env.Error, Finished: now,
	}
	tryout := &eventstore.Tryout{
		TxID: tx.TxID, Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, Attempt: tx.Attempt,
		Outcome: string(env.Outcome), Error: env.Error, Before: tx.Payload, After: env.Payload,
		StartedAt: tx.UpdatedAt, FinishedAt: now,
	}
	return last, tryout
}

// apply moves tx on by the reply env (which matches its span, kind and
// attempt).
func (o *Orchestrator[T]) apply(ctx context.Context, tx *eventstore.Transaction, env *topics.Envelope) error {
	now := o.cfg.now()
	from := tx.State
	last, tryout := stepResult(tx, env, now)
	if from == eventstore.StateFailed {
		// The failure was persisted, compensation not yet started.
		return o.compensate(ctx, tx, compensationCursor(tx, env), last)
	}
	if from == eventstore.StateCancelling {
		return o.cancelledReply(ctx, tx, env, tryout, last) // cancel.go
	}
	forward := tx.Kind == string(topics.KindProcess)
	if forward && env.Outcome != topics.OutcomeNonRetryable && o.pastDeadline(tx, now) {
		return o.failLate(ctx, tx, env, tryout, from, last)
	}
	switch env.Outcome {
	case topics.OutcomeOK:
		if len(env.Payload) > 0 {
			tx.Payload = env.Payload
		}
		if !forward {
			if env.Hints != nil {
				tx.Hints = env.Hints
			}
			if p := env.Pause; p != nil {
				return o.pause(ctx, tx, p.Event, time.Duration(p.DeadlineMs)*time.Millisecond, tryout, from, last)
			}
			return o.next(ctx, tx, o.onNextRevert(tx), last, tryout, from)
		}
		tx.Completed = append(tx.Completed, eventstore.CompletedSpan{Span: tx.Span, Endpoint: tx.Endpoint, Compensable: !isQuery(tx.Endpoint)})
		if p := env.Pause; p != nil {
			return o.pause(ctx, tx, p.Event, time.Duration(p.DeadlineMs)*time.Millisecond, tryout, from, last)
		}
		return o.next(ctx, tx, o.onNext(tx), last, tryout, from)
	case topics.OutcomeRetryable:
		tx.Error = env.Error
		if pol := o.retryPolicy(tx); pol.Exhausted(tx.Attempt) {
			// The retry policy's last attempt failed: a forward step
			// fails for good and compensates; a compensation ends
			// COMPENSATION_FAILED.
			o.stats.exhausted.Add(1)
			tx.Error = fmt.Sprintf("retries exhausted after %d attempts: %s", tx.Attempt, env.Error)
			if !forward {
				return o.terminate(ctx, tx, tryout, from, last)
			}
			if err := o.persist(ctx, tx, eventstore.StateFailed, tryout, from, last); err != nil {
				return err
			}
			return o.compensate(ctx, tx, tx.Span, last)
		}
		return o.park(ctx, tx, tryout, from, last)
	default: // non-retryable
		tx.Error = env.Error
		if !forward {
			return o.terminate(ctx, tx, tryout, from, last)
		}
		cursor := tx.Span
		if env.ActionDone {
			// The step ran (its effect is in place) but its result could
			// not be reported: it is compensated too, against the entity
			// it was given.
			tx.Completed = append(tx.Completed, eventstore.CompletedSpan{Span: tx.Span, Endpoint: tx.Endpoint, Compensable: !isQuery(tx.Endpoint)})
			cursor = tx.Span + 1
		}
		if err := o.persist(ctx, tx, eventstore.StateFailed, tryout, from, last); err != nil {
			return err
		}
		return o.compensate(ctx, tx, cursor, last)
	}
}

// compensationCursor is the span below which completed steps are
// compensated: the failed span itself failed (nothing to undo there) unless
// it had completed and the event manager failed the saga afterwards, or its
// failure says the step ran (ActionDone), or the saga was failed with it in
// Completed (a step timed out with an unknown outcome, timedOut).
func compensationCursor(tx *eventstore.Transaction, env *topics.Envelope) int {
	if env.Outcome == topics.OutcomeOK || (env.ActionDone && env.Kind == topics.KindProcess) {
		return tx.Span + 1
	}
	if n := len(tx.Completed); n > 0 && tx.Completed[n-1].Span == tx.Span && tx.Kind == string(topics.KindProcess) {
		return tx.Span + 1
	}
	return tx.Span
}

// next asks f (OnNext going forward, OnNextRevert while compensating) what
// follows the step that just succeeded, and does it.
func (o *Orchestrator[T]) next(ctx context.Context, tx *eventstore.Transaction, f func(context.Context, *Saga[T]) Decision, last *StepResult, tryout *eventstore.Tryout, from eventstore.State) error {
	forward := tx.Kind == string(topics.KindProcess)
	s, err := o.view(tx, last)
	if err != nil {
		return o.failDecode(ctx, tx, err, tryout, from, last)
	}
	s.Resume = resumeFrom(ctx)
	d := o.decide(ctx, f, s)
	switch d.kind {
	case decidePause:
		return o.pause(ctx, tx, d.reason, d.deadline, tryout, from, last)
	case decideSend:
		if forward {
			tx.Span++
			tx.Kind, tx.Endpoint, tx.Attempt = string(topics.KindProcess), qualify(d.step), 1
			return o.sendAndPersist(ctx, tx, d.step, eventstore.StateInProgress, tryout, from, last)
		}
		return o.sendRevert(ctx, tx, d, tryout, from, last)
	case decideComplete:
		if forward {
			return o.persist(ctx, tx, eventstore.StateCompleted, tryout, from, last)
		}
		return o.persist(ctx, tx, eventstore.StateCompensated, tryout, from, last)
	default:
		tx.Error = d.reason
		if !forward {
			return o.terminate(ctx, tx, tryout, from, last)
		}
		if err := o.persist(ctx, tx, eventstore.StateFailed, tryout, from, last); err != nil {
			return err
		}
		return o.compensate(ctx, tx, tx.Span+1, last)
	}
}

// compensate starts compensation of a FAILED saga: completed steps below
// cursor are undone by OnNextRevert.
func (o *Orchestrator[T]) compensate(ctx context.Context, tx *eventstore.Transaction, cursor int, last *StepResult) error {
	// The failure itself was persisted (with its tryout) as FAILED.
	return o.compensateWith(ctx, tx, cursor, last, nil)
}

// compensateWith is compensate persisting tryout with its first transition
// (a cancel's, or the reply of a cancelled saga's step).
func (o *Orchestrator[T]) compensateWith(ctx context.Context, tx *eventstore.Transaction, cursor int, last *StepResult, tryout *eventstore.Tryout) error {
	from := tx.State
	tx.Span = cursor
	s, err := o.view(tx, last)
	if err != nil {
		return o.failDecode(ctx, tx, err, tryout, from, last)
	}
	s.State = eventstore.StateCompensating
	d := o.decide(ctx, o.onNextRevert(tx), s)
	if d.kind == decidePause {
		d = Fail("OnNextRevert paused before any compensation ran: a pause follows a step that succeeded")
	}
	switch d.kind {
	case decideSend:
		return o.sendRevert(ctx, tx, d, tryout, from, last)
	case decideComplete:
		return o.persist(ctx, tx, eventstore.StateCompensated, tryout, from, last)
	default:
		tx.Error = d.reason
		return o.terminate(ctx, tx, tryout, from, last)
	}
}

// sendRevert publishes the compensation decided by d.
func (o *Orchestrator[T]) sendRevert(ctx context.Context, tx *eventstore.Transaction, d Decision, tryout *eventstore.Tryout, from eventstore.State, last *StepResult) error {
	span, ok := d.span, d.hasSpan
	if ok && !compensable(tx, span, qualify(d.step)) {
		// Compensations go strictly downwards: anything else would undo a
		// step twice or loop for ever.
		tx.Error = fmt.Sprintf("orchestrator: OnNextRevert chose span %d (%s), which is not a completed step below span %d", span, qualify(d.step), tx.Span)
		return o.terminate(ctx, tx, tryout, from, last)
	}
	if !ok {
		// A plain Send from OnNextRevert compensates the latest completed
		// span of that step below the cursor.
		for i := len(tx.Completed) - 1; i >= 0; i-- {
			if c := tx.Completed[i]; c.Span < tx.Span && c.Endpoint == qualify(d.step) {
				span, ok = c.Span, true
				break
			}
		}
		if !ok {
			tx.Error = fmt.Sprintf("orchestrator: OnNextRevert chose %s, which has not completed", qualify(d.step))
			return o.terminate(ctx, tx, tryout, from, last)
		}
	}
	tx.Span, tx.Kind, tx.Endpoint, tx.Attempt = span, string(topics.KindRevert), qualify(d.step), 1
	return o.sendAndPersist(ctx, tx, d.step, eventstore.StateCompensating, tryout, from, last)
}

// compensable reports whether span is a completed, compensable step of tx
// below its compensation cursor (tx.Span), run by endpoint.
func compensable(tx *eventstore.Transaction, span int, endpoint string) bool {
	if span >= tx.Span {
		return false
	}
	for _, c := range tx.Completed {
		if c.Span == span {
			return c.Compensable && c.Endpoint == endpoint
		}
	}
	return false
}

// sendAndPersist publishes the command for tx's (new) span, then persists
// the transition to state. See handleRecord for why this order is safe.
func (o *Orchestrator[T]) sendAndPersist(ctx context.Context, tx *eventstore.Transaction, step Step, state eventstore.State, tryout *eventstore.Tryout, from eventstore.State, last *StepResult) error {
	tx.UpdatedAt = o.cfg.now()
	point := FaultBeforePublish
	if state == eventstore.StateCompensating {
		point = FaultBeforePublishRevert
	}
	if o.faultAt(point, tx.TxID) {
		// As if the process died after persisting and before publishing
		// (the reply is consumed; only the watchdog can bring it back,
		// not a step timer of the dead process).
		err := o.persist(ctx, tx, state, tryout, from, last)
		o.steps.disarm(tx.TxID)
		return err
	}
	if persistFirst(ctx) {
		// The transition was not caused by a reply on this instance's
		// callback partition (a resume, a deadline, maybe on another
		// instance): the reply to this command may reach another
		// instance, which must find the new state already there. A
		// command that cannot be published then leaves the saga in
		// flight for its watchdog (or Restore) to send again.
		if err := o.persist(ctx, tx, state, tryout, from, last); err != nil {
			return err
		}
		if err := o.publish(ctx, tx, step); err != nil {
			return fmt.Errorf("%w (the saga is persisted as %s: its watchdog or Restore sends the step again)", err, state)
		}
		return nil
	}
	if err := o.publish(ctx, tx, step); err != nil {
		if !topics.PermanentProduceError(err) {
			return err // retried with the reply
		}
		// The command can never be published (no such topic, too large,
		// not authorised): park the saga where an admin or the recovery
		// engine can see and re-drive it, instead of retrying for ever and
		// stalling every saga behind it.
		tx.Error = err.Error()
		return o.park(ctx, tx, tryout, from, last)
	}
	return o.persist(ctx, tx, state, tryout, from, last)
}

// park parks tx in RETRY_PENDING: its retry registration is written first,
// then the state. A process that dies between the two leaves the saga as
// it was, so its reply, redelivered, parks it again (a retry entry that
// finds the saga not parked is dropped); the other order would leave a
// parked saga that only its restore watchdog finds, since the redelivered
// reply is then stale.
func (o *Orchestrator[T]) park(ctx context.Context, tx *eventstore.Transaction, tryout *eventstore.Tryout, from eventstore.State, last *StepResult) error {
	fast := o.registerRetry(ctx, tx)
	if o.faultAt(FaultParkRetry, tx.TxID) {
		return nil
	}
	if err := o.persist(ctx, tx, eventstore.StateRetryPending, tryout, from, last); err != nil {
		return err
	}
	o.armRetry(tx.TxID, tx.Version, fast)
	return nil
}

// terminate ends a saga whose compensation failed: COMPENSATION_FAILED, and
// a copy in the frozen table for admins.
func (o *Orchestrator[T]) terminate(ctx context.Context, tx *eventstore.Transaction, tryout *eventstore.Tryout, from eventstore.State, last *StepResult) error {
	frozen := *tx
	frozen.State = eventstore.StateCompensationFailed // the copy shows the state it ends in
	if err := o.store.Freeze(ctx, frozen, tx.Error); err != nil {
		return fmt.Errorf("orchestrator: freeze %s: %w", tx.TxID, err)
	}
	return o.persist(ctx, tx, eventstore.StateCompensationFailed, tryout, from, last)
}

// failDecode handles an entity that no longer decodes: compensation cannot
// be decided either, so the saga is terminated.
func (o *Orchestrator[T]) failDecode(ctx context.Context, tx *eventstore.Transaction, err error, tryout *eventstore.Tryout, from eventstore.State, last *StepResult) error {
	tx.Error = err.Error()
	return o.terminate(ctx, tx, tryout, from, last)
}

// persist writes tx in state with the tryout row (one batch) and tells the
// listeners.
func (o *Orchestrator[T]) persist(ctx context.Context, tx *eventstore.Transaction, state eventstore.State, tryout *eventstore.Tryout, from eventstore.State, last *StepResult) error {
	tx.State = state
	tx.Version++
	tx.UpdatedAt = o.cfg.now()
	if tryout != nil {
		tryout.Index = int(tx.Version)
	}
	if err := o.store.Transition(ctx, *tx, tryout); err != nil {
		o.cache.drop(tx.TxID)
		return fmt.Errorf("orchestrator: persist %s: %w", tx.TxID, err)
	}
	o.cache.put(tx)
	o.timeStep(tx)
	ev := Event{TxID: tx.TxID, Domain: tx.Domain, Version: versionOf(tx), From: from, To: state, Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, At: tx.UpdatedAt}
	if last != nil {
		ev.Span, ev.Kind, ev.Endpoint = last.Span, last.Kind, qualify(last.Step)
		ev.Outcome, ev.Error = last.Outcome, last.Error
	}
	// Counters and listeners first: what a caller waiting on the store
	// sees should show in Stats as soon as possible (cleanup takes round
	// trips).
	o.countTerminal(state)
	o.emit(ev)
	if state.Terminal() {
		o.cleanUp(ctx, tx)
	}
	return nil
}

// cleanUp runs once a saga is terminal: it removes the saga's restore
// watchdog and, with WithMarkerCleanup, concurrently its execution markers
// with one partition delete (by default they expire by their retention TTL,
// so that a late duplicate still finds them). A failure is logged, not returned: the saga's state is already
// durable, and retrying the reply would find it stale (a watchdog left
// behind is dropped by its pickup, which finds the saga terminal).
func (o *Orchestrator[T]) cleanUp(ctx context.Context, tx *eventstore.Transaction) {
	// The saga's end is durable: finish the cleanup even if shutdown has
	// begun, within bounds.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	if p := tx.RestorePath; p != nil {
		path, txID := *p, tx.TxID
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.bounded(ctx, "delete the restore watchdog of", txID, func() error {
				return o.store.DeleteRecoveryEntry(ctx, o.scope, path, txID)
			})
		}()
	}
	if o.cfg.markerCleanup {
		o.bounded(ctx, "delete the execution markers of", tx.TxID, func() error {
			return o.store.DeleteMarkers(ctx, o.scope, tx.TxID)
		})
	}
	wg.Wait()
}

// bounded tries f up to four times with backoff within ctx, and logs the
// last error.
func (o *Orchestrator[T]) bounded(ctx context.Context, what, txID string, f func() error) {
	var err error
	for i := range 4 {
		if err = f(); err == nil {
			return
		}
		if !wait.Sleep(ctx, time.Duration(50<<i)*time.Millisecond) {
			break
		}
	}
	o.logger().Warn("orchestrator: could not "+what+" a finished saga", "tx", txID, "err", err)
}
