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
	// ErrRetryLater is matched by a Resume error that a later try of the
	// same resume may not meet: the store or Kafka failed (a timeout, a
	// node down). Nothing was claimed, or the pause is claimed for this
	// resume and a retry node continues the saga (a retried resume then
	// returns AlreadyResumed). ResumeHandler answers it 503 with
	// Retry-After.
	ErrRetryLater = errors.New("orchestrator: retry the resume later")
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
	// Early: the saga had not paused yet at the key's step (the step was
	// in flight: the resume came before the step's reply). The resume is
	// kept in the store (eventstore.EarlyResume; the first one's context
	// wins) and the step's pause, when it is applied, continues the saga
	// with it at once, as if the resume had come after it.
	Early bool
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
	// A resume that came while the step was in flight was kept for this
	// pause (Resume's Early): consume it now. One marker read per pause;
	// if it fails, a retry node's pass looks again (redrivePaused).
	switch rc, ok, err := o.earlyResume(ctx, tx); {
	case err != nil:
		o.logger().Warn("orchestrator: could not look for a resume kept for this pause; a retry node looks again", "tx", tx.TxID, "err", err)
	case ok:
		won, _, err := o.claim(ctx, tx, eventstore.ClaimResume, rc)
		if err != nil {
			o.logger().Warn("orchestrator: could not claim the pause for the resume kept for it; a retry node continues it", "tx", tx.TxID, "err", err)
		} else if won {
			return o.continueFrom(ctx, tx, rc)
		}
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
// lost the race with the pause's deadline returns ErrNotPaused.
//
// A resume that comes while the key's step is still in flight (the outside
// system answered before the worker's reply reached the orchestrator) is
// kept in the store and returns Early: the step's pause continues the saga
// with it when it is applied.
//
// Errors: a wrong key, or one of a step the saga has left, a
// *CorrelationError (ErrCorrelationKey); a saga not paused (ended, or whose
// deadline won) ErrNotPaused; an unknown saga ErrNotFound; an invalid
// resume context topics.ErrMalformed; a store or Kafka failure
// ErrRetryLater (the same resume may be tried again).
func (o *Orchestrator[T]) Resume(ctx context.Context, txID, correlationKey string, resumeContext map[string]string) (ResumeResult, error) {
	for k, v := range resumeContext {
		if err := topics.ValidResumeEntry(k, v); err != nil {
			return ResumeResult{}, fmt.Errorf("orchestrator: resume %s: %w", txID, err)
		}
	}
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if errors.Is(err, eventstore.ErrNotFound) {
		return ResumeResult{}, fmt.Errorf("orchestrator: resume %s: %w", txID, err)
	}
	if err != nil {
		return ResumeResult{}, retryLater(txID, err)
	}
	expected := topics.IdempotencyKey(txID, tx.Span, topics.Kind(tx.Kind))
	match := subtle.ConstantTimeCompare([]byte(expected), []byte(correlationKey)) == 1
	if tx.State != eventstore.StatePaused || !match {
		span, kind, ok := eventstore.ParseCorrelationKey(txID, correlationKey)
		if !ok {
			return ResumeResult{}, &CorrelationError{TxID: txID}
		}
		before, err := o.resumedBefore(ctx, txID, span, kind)
		if err != nil {
			return ResumeResult{}, retryLater(txID, err)
		}
		if before {
			return ResumeResult{AlreadyResumed: true}, nil
		}
		if tx.State == eventstore.StatePaused {
			return ResumeResult{}, &CorrelationError{TxID: txID, Stale: span < tx.Span || (span == tx.Span && kind != tx.Kind)}
		}
		if mayPauseAt(&tx, span, kind) {
			return o.resumeEarly(ctx, txID, span, kind, resumeContext)
		}
		return ResumeResult{}, fmt.Errorf("%w: %s is %s", ErrNotPaused, txID, tx.State)
	}
	return o.resumeClaimed(ctx, &tx, resumeContext)
}

// resumeClaimed claims the pause of tx (PAUSED, as just read) for a resume
// with rc and continues it.
func (o *Orchestrator[T]) resumeClaimed(ctx context.Context, tx *eventstore.Transaction, rc map[string]string) (ResumeResult, error) {
	won, existing, err := o.claim(ctx, tx, eventstore.ClaimResume, rc)
	if err != nil {
		return ResumeResult{}, retryLater(tx.TxID, err)
	}
	if !won {
		if existing.Owner == eventstore.ClaimResume {
			return ResumeResult{AlreadyResumed: true}, nil
		}
		return ResumeResult{}, fmt.Errorf("%w: %s: its deadline passed and claimed the pause first: the paused step is invoked again", ErrNotPaused, tx.TxID)
	}
	if err := o.continuePaused(ctx, tx.TxID, tx.Span, tx.Kind, tx.Attempt, rc); err != nil {
		// The claim is this resume's: a retry node's pass continues the
		// saga (the restore watchdog's, or sooner this retry's).
		if o.rec != nil {
			if _, rerr := o.rec.RegisterRetry(ctx, o.scope, tx.TxID, o.domain.Name, 1); rerr != nil {
				o.logger().Warn("orchestrator: resume claimed but not continued, and no retry registered; the restore watchdog continues it", "tx", tx.TxID, "err", rerr)
			}
		}
		return ResumeResult{}, retryLater(tx.TxID, err)
	}
	return ResumeResult{Continued: true}, nil
}

// resumeEarly keeps a resume of txID's span and kind that came while that
// step was in flight (eventstore.EarlyResume), for its pause to consume.
func (o *Orchestrator[T]) resumeEarly(ctx context.Context, txID string, span int, kind string, rc map[string]string) (ResumeResult, error) {
	m, err := eventstore.EarlyResume(o.scope, txID, span, kind, rc)
	if err != nil {
		return ResumeResult{}, fmt.Errorf("orchestrator: resume %s: %w", txID, err)
	}
	applied, existing, err := o.store.InsertMarker(ctx, m, eventstore.ResumeClaimTTL)
	if err != nil {
		return ResumeResult{}, retryLater(txID, err)
	}
	if !applied {
		m = existing // a repeated early resume: the first one's context is kept
	}
	// The pause may have been applied since the saga was read, and have
	// looked for an early resume before this one was written: read the
	// saga again, and continue it here if it is paused at that step.
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if err != nil {
		return ResumeResult{}, retryLater(txID, err)
	}
	if tx.State != eventstore.StatePaused || tx.Span != span || tx.Kind != kind {
		return ResumeResult{Early: true}, nil
	}
	kept, err := eventstore.DecodeResumeContext(m.Reply)
	if err != nil {
		return ResumeResult{}, fmt.Errorf("orchestrator: resume %s: the early resume kept: %w", txID, err)
	}
	res, err := o.resumeClaimed(ctx, &tx, kept)
	if res.AlreadyResumed {
		res = ResumeResult{Early: true} // the pause consumed it
	}
	return res, err
}

// mayPauseAt reports whether the saga tx, neither paused nor ended, may
// still pause at span and kind: forward (until it fails), the step in
// flight or the next one (a command is published before the saga row says
// so); a compensation, any span not above the saga's (compensations run
// in reverse).
func mayPauseAt(tx *eventstore.Transaction, span int, kind string) bool {
	switch {
	case tx.State.Terminal(), tx.State == eventstore.StateDisabled, tx.State == eventstore.StatePaused:
		return false
	case kind == string(topics.KindProcess):
		return tx.Kind == string(topics.KindProcess) && tx.State != eventstore.StateFailed && (span == tx.Span || span == tx.Span+1)
	default:
		return span <= tx.Span
	}
}

// retryLater wraps a failure of Resume that a retry may not meet.
func retryLater(txID string, err error) error {
	return fmt.Errorf("%w: resume %s: %w", ErrRetryLater, txID, err)
}

// resumedBefore reports whether a resume claimed a pause of txID's span and
// kind (one read of the saga's marker partition).
func (o *Orchestrator[T]) resumedBefore(ctx context.Context, txID string, span int, kind string) (bool, error) {
	ms, err := o.store.ListMarkers(ctx, o.scope, txID)
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.IsResumeOf(span, kind) {
			return true, nil
		}
	}
	return false, nil
}

// earlyResume returns the resume context of an early resume kept for tx's
// span and kind (ok false when there is none).
func (o *Orchestrator[T]) earlyResume(ctx context.Context, tx *eventstore.Transaction) (rc map[string]string, ok bool, err error) {
	m, err := o.store.GetMarker(ctx, eventstore.EarlyResumeKey(o.scope, tx.TxID, tx.Span, tx.Kind))
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("orchestrator: read the early resume of %s: %w", tx.TxID, err)
	}
	rc, err = eventstore.DecodeResumeContext(m.Reply)
	if err != nil {
		return nil, false, fmt.Errorf("orchestrator: the early resume of %s: %w", tx.TxID, err)
	}
	return rc, true, nil
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
	return o.continueFrom(ctx, &tx, rc)
}

// continueFrom continues tx, PAUSED as read or just persisted under the
// saga's lock, whose pause a resume with rc claimed.
func (o *Orchestrator[T]) continueFrom(ctx context.Context, tx *eventstore.Transaction, rc map[string]string) (err error) {
	txID := tx.TxID
	if _, err := o.gate(ctx, tx, pathResume); err != nil {
		return err
	}
	ctx, tspan := o.sagaSpan(ctx, "resume", tx)
	defer func() { endSpan(tspan, tx, err) }()
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
		return o.next(ctx, tx, o.onNext(tx), last, tryout, from)
	}
	return o.next(ctx, tx, o.onNextRevert(tx), last, tryout, from)
}

// redrivePaused handles a directory entry of a PAUSED saga: a resume
// claimed through the store alone (sagactl resume), or kept for the pause
// before it was applied (Resume's Early), is continued; a pause
// whose deadline passed re-invokes its step against the entity as it was
// before it (from the deadline's entry or from the saga's restore
// watchdog, which is then re-armed), and so does a pause whose deadline a
// node claimed without re-invoking the step (the saga is still PAUSED at the
// claimed attempt); otherwise the entry is registered again for later.
func (o *Orchestrator[T]) redrivePaused(ctx context.Context, tx eventstore.Transaction, restore bool) error {
	m, err := o.store.GetMarker(ctx, eventstore.ResumeClaimKey(o.scope, tx.TxID, tx.Span, tx.Kind, tx.Attempt))
	switch {
	case err == nil && isControlClaim(m.Owner):
		// A cancel or terminate claimed the pause: the owner of the saga's
		// replies applies it (its control record is retried until it has).
		return recovery.Later(0, "pause claimed by a "+m.Owner)
	case err == nil && m.Owner == eventstore.ClaimResume:
		rc, err := eventstore.DecodeResumeContext(m.Reply)
		if err != nil {
			return fmt.Errorf("orchestrator: the resume claim of %s: %w", tx.TxID, err)
		}
		if err := o.continuePaused(ctx, tx.TxID, tx.Span, tx.Kind, tx.Attempt, rc); err != nil {
			return err
		}
		if restore {
			return o.watchAgain(&tx, "resumed; watchdog re-armed")
		}
		return nil
	case err == nil:
		// The deadline's claim of the attempt the saga is still PAUSED
		// at: the node that claimed it failed (a read timed out, it
		// crashed) before the re-invocation was persisted. Re-invoke it
		// now; reinvoke checks the state again under the saga's lock, and
		// the fenced write lets one node only persist it.
		if err := o.reinvoke(ctx, tx.TxID, tx.Span, tx.Kind, tx.Attempt); err != nil {
			return err
		}
		if restore {
			return o.watchAgain(&tx, "claimed deadline re-invoked; watchdog re-armed")
		}
		return nil
	case !errors.Is(err, eventstore.ErrNotFound):
		return err
	}
	// A resume kept for this pause that the pause could not consume (its
	// read failed, or the resume was kept just after it looked and the
	// resuming process stopped before it looked again).
	rc, early, err := o.earlyResume(ctx, &tx)
	if err != nil {
		return err
	}
	if early {
		won, _, err := o.claim(ctx, &tx, eventstore.ClaimResume, rc)
		if err != nil {
			return err
		}
		if won {
			if err := o.continuePaused(ctx, tx.TxID, tx.Span, tx.Kind, tx.Attempt, rc); err != nil {
				return err
			}
		}
		if restore {
			return o.watchAgain(&tx, "resumed (early resume); watchdog re-armed")
		}
		return nil
	}
	now := o.cfg.now()
	if tx.PausedUntil.IsZero() || (restore && now.Before(tx.PausedUntil)) {
		return recovery.Later(0, "paused") // the watchdog keeps watching
	}
	if now.Before(tx.PausedUntil) {
		return recovery.Later(int(tx.PausedUntil.Sub(now)/o.win.Interval())+1, "pause deadline not reached")
	}
	// The deadline passed. The watchdog fires it too: the deadline's own
	// entry may never have been registered (pause logs that).
	won, _, err := o.claim(ctx, &tx, eventstore.ClaimDeadline, nil)
	if err == nil && won {
		err = o.reinvoke(ctx, tx.TxID, tx.Span, tx.Kind, tx.Attempt)
	} // else a resume (or another node) got there first
	if err == nil && restore {
		return o.watchAgain(&tx, "pause deadline passed; watchdog re-armed")
	}
	return err
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
