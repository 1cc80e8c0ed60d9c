package orchestrator

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Errors of Resume.
var (
	// ErrNotPaused means the saga is not paused (any more): it was never
	// paused, its pause's deadline re-invoked the step first, or it ended.
	ErrNotPaused = errors.New("orchestrator: saga is not paused")
	// ErrCorrelationKey is matched by a *CorrelationError: the key is not
	// the one the paused step was given.
	ErrCorrelationKey = errors.New("orchestrator: wrong correlation key")
)

// CorrelationError is Resume's refusal of a correlation key.
type CorrelationError struct {
	TxID string
	// Stale is true for the key of an earlier step of the saga.
	Stale bool
}

func (e *CorrelationError) Error() string {
	if e.Stale {
		return fmt.Sprintf("orchestrator: stale correlation key for %s: an earlier step's", e.TxID)
	}
	return fmt.Sprintf("orchestrator: wrong correlation key for %s", e.TxID)
}

// Is matches ErrCorrelationKey.
func (e *CorrelationError) Is(target error) bool { return target == ErrCorrelationKey }

// ResumeResult says what Resume did.
type ResumeResult struct {
	// AlreadyResumed: a resume with this key went through before; nothing
	// was done (a webhook retried by its sender is not an error).
	AlreadyResumed bool
	// Continued: this call continued the saga.
	Continued bool
}

type resumeKey struct{}

type persistFirstKey struct{}

// withPersistFirst makes sendAndPersist persist before it publishes.
func withPersistFirst(ctx context.Context) context.Context {
	return context.WithValue(ctx, persistFirstKey{}, true)
}

func persistFirst(ctx context.Context) bool {
	v, _ := ctx.Value(persistFirstKey{}).(bool)
	return v
}

// withResume carries a resume context to publish and next.
func withResume(ctx context.Context, rc map[string]string) context.Context {
	if rc == nil {
		rc = map[string]string{}
	}
	return context.WithValue(ctx, resumeKey{}, rc)
}

func resumeFrom(ctx context.Context) map[string]string {
	rc, _ := ctx.Value(resumeKey{}).(map[string]string)
	return rc
}

// pause persists tx PAUSED after its current step succeeded: the saga
// holds no goroutine, timer or consumer slot while it waits; a deadline is
// a retry entry of the recovery directory.
func (o *Orchestrator[T]) pause(ctx context.Context, tx *eventstore.Transaction, event string, deadline time.Duration, tryout *eventstore.Tryout, from eventstore.State, last *StepResult) error {
	forward := tx.Kind == string(topics.KindProcess)
	now := o.cfg.now()
	tx.PausedUntil = time.Time{}
	if deadline > 0 {
		tx.PausedUntil = now.Add(deadline)
		if end := tx.LifetimeFrom().Add(o.cfg.recovery.TransactionLifetime); tx.PausedUntil.After(end) {
			tx.Error = fmt.Sprintf("orchestrator: pause %q with a deadline of %v ends after the transaction lifetime (%v, until %s)",
				event, deadline, o.cfg.recovery.TransactionLifetime, end.Format(time.RFC3339))
			tx.PausedUntil = time.Time{}
			if !forward {
				return o.terminate(ctx, tx, tryout, from, last)
			}
			if err := o.persist(ctx, tx, eventstore.StateFailed, tryout, from, last); err != nil {
				return err
			}
			return o.compensate(ctx, tx, tx.Span+1, last)
		}
	}
	tx.PauseEvent = event
	if err := o.persist(ctx, tx, eventstore.StatePaused, tryout, from, last); err != nil {
		return err
	}
	if deadline > 0 && o.rec != nil {
		delay := int((deadline+o.win.Interval()-1)/o.win.Interval()) + 1
		if _, err := o.rec.RegisterRetry(ctx, o.scope, tx.TxID, o.domain.Name, delay); err != nil {
			o.logger().Warn("orchestrator: could not register a pause's deadline; the restore watchdog checks it later", "tx", tx.TxID, "err", err)
		}
	}
	return nil
}

// claim inserts the claim of tx's pause (eventstore.ResumeClaimKey) for
// owner; exactly one claim of a pause applies (a lightweight transaction on
// Cassandra).
func (o *Orchestrator[T]) claim(ctx context.Context, tx *eventstore.Transaction, owner string, rc map[string]string) (bool, eventstore.Marker, error) {
	m, err := eventstore.ResumeClaim(o.scope, tx.TxID, tx.Span, tx.Kind, tx.Attempt, owner, rc)
	if err != nil {
		return false, eventstore.Marker{}, fmt.Errorf("orchestrator: claim the pause of %s: %w", tx.TxID, err)
	}
	applied, existing, err := o.store.InsertMarker(ctx, m, eventstore.ResumeClaimTTL)
	if err != nil {
		return false, eventstore.Marker{}, fmt.Errorf("orchestrator: claim the pause of %s: %w", tx.TxID, err)
	}
	return applied, existing, nil
}

// Resume continues the paused saga txID: correlationKey must be the
// idempotency key of the step that paused it (worker.Step.IdempotencyKey),
// and resumeContext is stored on the saga's history and handed to the
// step that runs next (worker.Step.Resumed), and to the decision function
// (Saga.Resume). Any orchestrator instance of the domain can resume any of
// its sagas. Exactly one continuation happens per pause: a second Resume
// with the same key returns AlreadyResumed (not an error); a resume that
// lost the race with the pause's deadline returns ErrNotPaused. A wrong or
// an earlier step's key returns a *CorrelationError (ErrCorrelationKey); an
// unknown saga ErrNotFound.
func (o *Orchestrator[T]) Resume(ctx context.Context, txID, correlationKey string, resumeContext map[string]string) (ResumeResult, error) {
	for k, v := range resumeContext {
		if err := topics.ValidResumeEntry(k, v); err != nil {
			return ResumeResult{}, fmt.Errorf("orchestrator: resume %s: %w", txID, err)
		}
	}
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if err != nil {
		return ResumeResult{}, fmt.Errorf("orchestrator: resume %s: %w", txID, err)
	}
	expected := topics.IdempotencyKey(txID, tx.Span, topics.Kind(tx.Kind))
	match := subtle.ConstantTimeCompare([]byte(expected), []byte(correlationKey)) == 1
	if tx.State != eventstore.StatePaused || !match {
		span, kind, ok := eventstore.ParseCorrelationKey(txID, correlationKey)
		if !ok {
			return ResumeResult{}, &CorrelationError{TxID: txID}
		}
		if o.resumedBefore(ctx, txID, span, kind) {
			return ResumeResult{AlreadyResumed: true}, nil
		}
		if tx.State == eventstore.StatePaused {
			return ResumeResult{}, &CorrelationError{TxID: txID, Stale: span < tx.Span || (span == tx.Span && kind != tx.Kind)}
		}
		return ResumeResult{}, fmt.Errorf("%w: %s is %s", ErrNotPaused, txID, tx.State)
	}
	won, existing, err := o.claim(ctx, &tx, eventstore.ClaimResume, resumeContext)
	if err != nil {
		return ResumeResult{}, err
	}
	if !won {
		if existing.Owner == eventstore.ClaimResume {
			return ResumeResult{AlreadyResumed: true}, nil
		}
		return ResumeResult{}, fmt.Errorf("%w: %s: its deadline re-invoked the paused step first", ErrNotPaused, txID)
	}
	if err := o.continuePaused(ctx, txID, tx.Span, tx.Kind, tx.Attempt, resumeContext); err != nil {
		return ResumeResult{}, err
	}
	return ResumeResult{Continued: true}, nil
}

// resumedBefore reports whether a resume claimed a pause of txID's span and
// kind (one read of the saga's marker partition).
func (o *Orchestrator[T]) resumedBefore(ctx context.Context, txID string, span int, kind string) bool {
	ms, err := o.store.ListMarkers(ctx, o.scope, txID)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.IsResumeOf(span, kind) {
			return true
		}
	}
	return false
}

// continuePaused continues a pause that a resume claimed: forward, OnNext
// decides the next step; in compensation, OnNextRevert the next
// compensation. It does nothing if the saga has moved on.
func (o *Orchestrator[T]) continuePaused(ctx context.Context, txID string, span int, kind string, attempt int, rc map[string]string) (err error) {
	l := o.lock(txID)
	l.Lock()
	defer l.Unlock()
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if err != nil {
		return fmt.Errorf("orchestrator: resume %s: %w", txID, err)
	}
	if tx.State != eventstore.StatePaused || tx.Span != span || tx.Kind != kind || tx.Attempt != attempt {
		return nil // continued already
	}
	ctx, tspan := o.sagaSpan(ctx, "resume", &tx)
	defer func() { endSpan(tspan, &tx, err) }()
	b, err := eventstore.EncodeResumeContext(rc)
	if err != nil {
		return fmt.Errorf("orchestrator: resume %s: %w", txID, err)
	}
	now := o.cfg.now()
	service, endpoint := parseQualified(tx.Endpoint)
	last := &StepResult{Span: tx.Span, Step: Step{Service: service, Endpoint: endpoint, Query: isQuery(tx.Endpoint)},
		Kind: tx.Kind, Attempt: tx.Attempt, Outcome: string(topics.OutcomeOK), Finished: now}
	tryout := &eventstore.Tryout{TxID: txID, Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, Attempt: tx.Attempt,
		Outcome: "resumed", Error: tx.PauseEvent, Before: tx.Payload, ResumeContext: b, StartedAt: tx.UpdatedAt, FinishedAt: now}
	from := tx.State
	tx.PausedUntil, tx.PauseEvent = time.Time{}, ""
	ctx = withPersistFirst(withResume(ctx, rc))
	if tx.Kind == string(topics.KindProcess) {
		return o.next(ctx, &tx, o.domain.OnNext, last, tryout, from)
	}
	return o.next(ctx, &tx, o.domain.OnNextRevert, last, tryout, from)
}

// redrivePaused handles a directory entry of a PAUSED saga: a resume
// claimed through the store alone (sagactl resume) is continued; a pause
// whose deadline passed re-invokes its step against the entity as it was
// before it; otherwise the entry is registered again for later.
func (o *Orchestrator[T]) redrivePaused(ctx context.Context, tx eventstore.Transaction, restore bool) error {
	m, err := o.store.GetMarker(ctx, eventstore.ResumeClaimKey(o.scope, tx.TxID, tx.Span, tx.Kind, tx.Attempt))
	switch {
	case err == nil && m.Owner == eventstore.ClaimResume:
		rc, err := eventstore.DecodeResumeContext(m.Reply)
		if err != nil {
			return fmt.Errorf("orchestrator: the resume claim of %s: %w", tx.TxID, err)
		}
		if err := o.continuePaused(ctx, tx.TxID, tx.Span, tx.Kind, tx.Attempt, rc); err != nil {
			return err
		}
		if restore {
			return recovery.Later(0, "resumed; watchdog re-armed")
		}
		return nil
	case err == nil:
		return nil // a deadline claim: re-invoked already
	case !errors.Is(err, eventstore.ErrNotFound):
		return err
	}
	now := o.cfg.now()
	if tx.PausedUntil.IsZero() || restore {
		return recovery.Later(0, "paused") // the watchdog keeps watching
	}
	if now.Before(tx.PausedUntil) {
		return recovery.Later(int(tx.PausedUntil.Sub(now)/o.win.Interval())+1, "pause deadline not reached")
	}
	won, _, err := o.claim(ctx, &tx, eventstore.ClaimDeadline, nil)
	if err != nil || !won {
		return err // a resume (or another node) got there first
	}
	return o.reinvoke(ctx, tx.TxID, tx.Span, tx.Kind, tx.Attempt)
}

// reinvoke sends the paused step again, with the next attempt, against the
// entity snapshot taken before it: whatever the paused attempt changed is
// discarded.
func (o *Orchestrator[T]) reinvoke(ctx context.Context, txID string, span int, kind string, attempt int) (err error) {
	l := o.lock(txID)
	l.Lock()
	defer l.Unlock()
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if err != nil {
		return err
	}
	if tx.State != eventstore.StatePaused || tx.Span != span || tx.Kind != kind || tx.Attempt != attempt {
		return nil
	}
	ctx, tspan := o.sagaSpan(ctx, "deadline", &tx)
	defer func() { endSpan(tspan, &tx, err) }()
	history, err := o.store.Tryouts(ctx, o.scope, txID)
	if err != nil {
		return err
	}
	for i := len(history) - 1; i >= 0; i-- {
		if h := history[i]; h.Span == span && h.Kind == kind && h.Attempt == attempt && h.Outcome == string(topics.OutcomeOK) {
			tx.Payload = h.Before
			break
		}
	}
	if kind == string(topics.KindProcess) {
		kept := tx.Completed[:0:0]
		for _, c := range tx.Completed {
			if c.Span != span {
				kept = append(kept, c)
			}
		}
		tx.Completed = kept
	}
	from := tx.State
	tx.Error = fmt.Sprintf("pause %q: deadline passed at %s; step invoked again", tx.PauseEvent, tx.PausedUntil.Format(time.RFC3339))
	tx.PausedUntil, tx.PauseEvent = time.Time{}, ""
	tx.Attempt++
	tx.Fence++ // away from the reply path: no reply's write can share its version (eventstore.Store.Transition)
	state := eventstore.StateInProgress
	if kind == string(topics.KindRevert) {
		state = eventstore.StateCompensating
	}
	service, endpoint := parseQualified(tx.Endpoint)
	o.logger().Info("orchestrator: pause deadline passed: invoking the paused step again", "tx", txID, "span", span, "kind", kind, "attempt", tx.Attempt)
	return o.sendAndPersist(withPersistFirst(ctx), &tx, Step{Service: service, Endpoint: endpoint, Query: isQuery(tx.Endpoint)}, state, nil, from, nil)
}
