package orchestrator

// Cancel and Terminate: stopping a saga from outside (issue 40).
//
// A saga's replies reach the one instance that owns its callback
// partition, in order; that instance alone applies them, and publishes the
// next command before it persists the step's result. A cancel written to
// the saga row from elsewhere could therefore race with a reply being
// applied: the reply's next command would be on its way although the row
// says cancelled, and that step would run and never be compensated. So a
// cancel (or a terminate) is not written by the caller: it is a control
// record on the domain's callback topic, keyed by the transaction id like
// the replies, and the owner applies it in order with them, under the
// saga's lock. Whatever comes first on the partition, the last reply or
// the cancel, decides the one outcome; a second cancel finds the first one
// applied. The writers of a saga that do not go through the callback topic
// are fenced off by claims: a PAUSED saga's pause is claimed for the
// cancel as a resume or its deadline claims it (eventstore.ResumeClaimKey),
// and a RETRY_PENDING saga's park is claimed as every re-drive of it
// claims it (redriveClaimKey), so that exactly one of them continues it.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Errors of Cancel and Terminate.
var (
	// ErrEnded means the saga is terminal: there is nothing to cancel or
	// terminate.
	ErrEnded = errors.New("orchestrator: saga has already ended")
	// ErrNotCancellable means Cancel was called on a DISABLED saga: it
	// outlived its transaction lifetime and waits for an admin. Restore it
	// first (it then runs, and can be cancelled), or Terminate it.
	ErrNotCancellable = errors.New("orchestrator: saga cannot be cancelled in its state")
)

// Tryout outcomes of the history rows that Cancel and Terminate write
// (eventstore.Tryout.Outcome); their Error reads "cancelled by <actor>:
// <reason>" or "terminated by <actor>: <reason>", and their FinishedAt is
// when the owner applied the request (StartedAt when it was made).
const (
	OutcomeCancelled  = "cancelled"
	OutcomeTerminated = "terminated"
)

// Bounds of a control request's text, in bytes.
const (
	MaxActorBytes  = eventstore.MaxAuditActorBytes
	MaxReasonBytes = 1024
)

// ControlHeader is the Kafka record header that marks a control record on a
// callback topic (its value is the action, "cancel" or "terminate"). Such
// a record is not an envelope: an orchestrator of an earlier release
// dead-letters it as undecodable.
const ControlHeader = "stacksaga-control"

// Control actions (the value of ControlHeader).
const (
	ControlCancel    = "cancel"
	ControlTerminate = "terminate"
)

// DefaultActor is who a Cancel or Terminate is recorded as when its
// context names no one (WithActor).
const DefaultActor = "unnamed caller of the orchestrator API"

type actorKey struct{}

// WithActor returns ctx naming actor as who asks for the Cancel or
// Terminate called with it (recorded in the saga's history). An admin
// tool passes the identity it authenticated ("sagactl:<user>@<host>",
// the Trace Window's actor).
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the actor WithActor put in ctx, or DefaultActor.
func ActorFrom(ctx context.Context) string {
	if a, _ := ctx.Value(actorKey{}).(string); a != "" {
		return a
	}
	return DefaultActor
}

// ControlRequest is a request to cancel or terminate a saga, as it travels
// on the callback topic.
type ControlRequest struct {
	// Scope and Domain are the saga's orchestrating deployment.
	eventstore.Scope
	Domain string
	TxID   string
	// Action is ControlCancel or ControlTerminate.
	Action string
	// Actor names who asks (at most MaxActorBytes), Reason why (required,
	// at most MaxReasonBytes); both valid UTF-8.
	Actor  string
	Reason string
	// At is when it was asked (zero: now).
	At time.Time
}

// controlWire is a ControlRequest's msgpack form.
type controlWire struct {
	V       int    `msgpack:"v"`
	Action  string `msgpack:"action"`
	Region  string `msgpack:"region"`
	Cluster string `msgpack:"cluster"`
	Service string `msgpack:"service"`
	Domain  string `msgpack:"domain"`
	TxID    string `msgpack:"tx"`
	Actor   string `msgpack:"actor"`
	Reason  string `msgpack:"reason"`
	AtMs    int64  `msgpack:"at_ms"`
}

// Validate checks every field of req; the error wraps eventstore.ErrInvalid.
func (req *ControlRequest) Validate() error {
	if err := eventstore.ValidateKey(req.Scope, req.TxID); err != nil {
		return err
	}
	switch {
	case req.Action != ControlCancel && req.Action != ControlTerminate:
		return fmt.Errorf("%w: control action %.32q (want %s or %s)", eventstore.ErrInvalid, req.Action, ControlCancel, ControlTerminate)
	case topics.ValidName(req.Domain) != nil:
		return fmt.Errorf("%w: control request domain %.64q", eventstore.ErrInvalid, req.Domain)
	case req.Actor == "" || len(req.Actor) > MaxActorBytes || !utf8.ValidString(req.Actor):
		return fmt.Errorf("%w: actor: empty, over %d bytes or not valid UTF-8", eventstore.ErrInvalid, MaxActorBytes)
	case strings.TrimSpace(req.Reason) == "" || len(req.Reason) > MaxReasonBytes || !utf8.ValidString(req.Reason):
		return fmt.Errorf("%w: reason: empty, over %d bytes or not valid UTF-8 (a %s says why)", eventstore.ErrInvalid, MaxReasonBytes, req.Action)
	case len(req.TxID) > topics.MaxIDBytes:
		return fmt.Errorf("%w: transaction id over %d bytes", eventstore.ErrInvalid, topics.MaxIDBytes)
	}
	return nil
}

// detail is the history row's Error: "cancelled by <actor>: <reason>".
func (req *ControlRequest) detail() string {
	past := OutcomeCancelled
	if req.Action == ControlTerminate {
		past = OutcomeTerminated
	}
	return past + " by " + req.Actor + ": " + req.Reason
}

// RequestControl sends req (a cancel or a terminate) to the saga's owner:
// it reads the saga from store, refuses a terminal one (ErrEnded), a
// cancel of a DISABLED one (ErrNotCancellable) and an unknown one
// (eventstore.ErrNotFound), and produces the request on the domain's
// callback topic with prod, keyed by the transaction id. The orchestrator
// instance that owns the saga's callback partition applies it in order
// with the saga's replies (see Orchestrator.Cancel); RequestControl
// returns once the broker has it. Admin tools without an orchestrator
// (sagactl, the Trace Window) call it with a producer of their own.
func RequestControl(ctx context.Context, prod *kgo.Client, store eventstore.Store, req ControlRequest) error {
	if req.At.IsZero() {
		req.At = time.Now()
	}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("orchestrator: %s %s: %w", req.Action, req.TxID, err)
	}
	tx, err := store.LoadTransaction(ctx, req.Scope, req.TxID)
	if err != nil {
		return fmt.Errorf("orchestrator: %s %s: %w", req.Action, req.TxID, err)
	}
	switch {
	case tx.Domain != "" && tx.Domain != req.Domain:
		return fmt.Errorf("orchestrator: %s %s: %w: the saga is of domain %q, not %q", req.Action, req.TxID, eventstore.ErrInvalid, tx.Domain, req.Domain)
	case tx.State.Terminal():
		return fmt.Errorf("%w: %s %s: it is %s", ErrEnded, req.Action, req.TxID, tx.State)
	case req.Action == ControlCancel && tx.State == eventstore.StateDisabled:
		return fmt.Errorf("%w: cancel %s: it is DISABLED (restore it first, or terminate it)", ErrNotCancellable, req.TxID)
	}
	b, err := msgpack.Marshal(&controlWire{V: 1, Action: req.Action, Region: req.Region, Cluster: req.Cluster, Service: req.Service,
		Domain: req.Domain, TxID: req.TxID, Actor: req.Actor, Reason: req.Reason, AtMs: req.At.UnixMilli()})
	if err != nil {
		return fmt.Errorf("orchestrator: %s %s: encode: %w", req.Action, req.TxID, err)
	}
	rec := &kgo.Record{Topic: topics.CallbackTopic(req.Domain), Key: []byte(req.TxID), Value: b,
		Headers: []kgo.RecordHeader{{Key: ControlHeader, Value: []byte(req.Action)}}}
	if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("orchestrator: %s %s: publish: %w", req.Action, req.TxID, err)
	}
	return nil
}

// Cancel asks for the saga txID to be cancelled, for reason (required),
// on behalf of the actor ctx names (WithActor; DefaultActor otherwise).
// It returns once the request is on the domain's callback topic; the
// instance that owns the saga's replies applies it in order with them:
//
//   - a saga with a forward step in flight (STARTED, IN_PROGRESS) becomes
//     CANCELLING: it sends no further step, and once that step's reply
//     arrives (or its step timeout passes) it compensates the steps it
//     completed in reverse, that step included if it succeeded, as a
//     non-retryable failure would;
//   - a PAUSED saga is cancelled without waiting for its resume (a resume
//     or the pause's deadline that comes later finds it claimed): paused
//     going forward, it compensates at once; paused in compensation, its
//     compensation goes on;
//   - a RETRY_PENDING saga going forward compensates at once, its parked
//     step not re-driven (a re-drive racing with it finds the park
//     claimed);
//   - a saga already compensating (or cancelled before) goes on as it is.
//
// A cancelled saga ends COMPENSATED (COMPENSATION_FAILED if a
// compensation fails), and its history (History) holds a row with
// Outcome OutcomeCancelled whose Error is "cancelled by <actor>:
// <reason>"; the saga's Error starts so too. Wait returns its end.
//
// Cancel of a terminal saga fails with ErrEnded, of a DISABLED one with
// ErrNotCancellable, of an unknown one with ErrNotFound. A cancel that
// reaches the owner after the saga's last reply finds it ended and is
// ignored (logged; Stats.ControlsIgnored): of a cancel and the last
// reply, or of two cancels (on any instances), exactly one outcome
// applies.
func (o *Orchestrator[T]) Cancel(ctx context.Context, txID, reason string) error {
	return o.control(ctx, ControlCancel, txID, reason)
}

// Terminate asks for the saga txID to be stopped at once, for reason
// (required), on behalf of the actor ctx names (WithActor): it ends
// TERMINATED, no further step or compensation is sent, and what it
// completed is not compensated. Like Cancel it returns once the request
// is on the callback topic, and the owner applies it in order with the
// saga's replies; a PAUSED or RETRY_PENDING saga's pause or park is
// claimed first, so that no resume, deadline or re-drive continues it. A
// reply that arrives for a TERMINATED saga is ignored and counted
// (Stats.RepliesAfterTerminate). The history holds a row with Outcome
// OutcomeTerminated whose Error is "terminated by <actor>: <reason>".
// Terminate refuses nothing but a terminal saga (ErrEnded) and an
// unknown one (ErrNotFound); a DISABLED saga is terminated and leaves the
// frozen table.
func (o *Orchestrator[T]) Terminate(ctx context.Context, txID, reason string) error {
	return o.control(ctx, ControlTerminate, txID, reason)
}

func (o *Orchestrator[T]) control(ctx context.Context, action, txID, reason string) error {
	if o.isClosed() {
		return ErrClosed
	}
	if err := o.ensureTopics(ctx); err != nil {
		return err
	}
	return RequestControl(ctx, o.prod, o.store, ControlRequest{Scope: o.scope, Domain: o.domain.Name, TxID: txID,
		Action: action, Actor: ActorFrom(ctx), Reason: reason, At: o.cfg.now()})
}

// controlAction returns the ControlHeader of r ("" if it has none).
func controlAction(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == ControlHeader {
			return string(h.Value)
		}
	}
	return ""
}

// decodeControl decodes a control record; nil and what to return for r
// when it is not one of this deployment's (see decodeReply).
func (o *Orchestrator[T]) decodeControl(ctx context.Context, r *kgo.Record, reject func(ctx context.Context, r *kgo.Record, code, reason string) error) (*ControlRequest, error) {
	var w controlWire
	if err := msgpack.Unmarshal(r.Value, &w); err != nil || w.V < 1 {
		return nil, reject(ctx, r, dlUndecodable, fmt.Sprintf("orchestrator: undecodable control record: %v", err))
	}
	req := &ControlRequest{Scope: eventstore.Scope{Region: w.Region, Cluster: w.Cluster, Service: w.Service},
		Domain: w.Domain, TxID: w.TxID, Action: w.Action, Actor: w.Actor, Reason: w.Reason, At: time.UnixMilli(w.AtMs).UTC()}
	if err := req.Validate(); err != nil {
		return nil, reject(ctx, r, dlUndecodable, "orchestrator: invalid control record: "+err.Error())
	}
	switch {
	case req.Action != controlAction(r):
		return nil, reject(ctx, r, dlUndecodable, "orchestrator: control record's header and body disagree")
	case req.Domain != o.domain.Name:
		return nil, reject(ctx, r, dlWrongDomain, fmt.Sprintf("orchestrator: control record for domain %q on the callback topic of %q", req.Domain, o.domain.Name))
	case req.Scope != o.scope:
		o.stats.foreign.Add(1)
		return nil, nil
	}
	return req, nil
}

// handleControl applies a control record read by the consumer group, in
// order with the saga's replies (see handleRecord).
func (o *Orchestrator[T]) handleControl(ctx context.Context, r *kgo.Record) error {
	req, err := o.decodeControl(ctx, r, o.deadLetter)
	if req == nil {
		return err
	}
	l := o.lock(req.TxID)
	l.Lock()
	defer l.Unlock()
	tx, done, err := o.loadControlled(ctx, r, req, o.deadLetter)
	if done {
		return err
	}
	return o.applyControl(ctx, &tx, req)
}

// loadControlled reads the saga of the control record r (request req),
// under its lock. done is set when there is nothing to apply: the saga is
// unknown (r is rejected with a reason) or could not be read (err).
func (o *Orchestrator[T]) loadControlled(ctx context.Context, r *kgo.Record, req *ControlRequest, reject func(ctx context.Context, r *kgo.Record, code, reason string) error) (tx eventstore.Transaction, done bool, err error) {
	tx, err = o.store.LoadTransaction(ctx, o.scope, req.TxID)
	if errors.Is(err, eventstore.ErrNotFound) {
		return tx, true, reject(ctx, r, dlUnknownTx, "orchestrator: control record for unknown transaction "+req.TxID)
	}
	if err != nil {
		return tx, true, fmt.Errorf("orchestrator: load %s: %w", req.TxID, err)
	}
	return tx, false, nil
}

// errControlWait is applyControl's error when a resume, a pause's deadline
// or a re-drive claimed the saga first and has not moved it on yet: the
// record is tried again (kafkaloop's backoff), and then finds the saga
// where that continuation left it.
var errControlWait = errors.New("orchestrator: the saga is being continued; the cancel or terminate is applied once it has moved on")

// applyControl applies req to tx, as read under the saga's lock by the
// owner of its replies.
func (o *Orchestrator[T]) applyControl(ctx context.Context, tx *eventstore.Transaction, req *ControlRequest) error {
	log := o.logger().With("tx", tx.TxID, "action", req.Action, "actor", req.Actor, "state", tx.State)
	if tx.State.Terminal() {
		o.stats.controlsIgnored.Add(1)
		log.Info("orchestrator: control request ignored: the saga had ended before it was applied")
		return nil
	}
	path := pathCancel
	if req.Action == ControlTerminate {
		path = pathTerminate
	}
	// Compensating needs the saga's own OnNextRevert (a terminate runs
	// nothing and needs no definition); in a share group the attempt's
	// reply claim is held (handleControlShared).
	adm, err := o.gate(ctx, tx, path)
	if errors.Is(err, ErrUnknownVersion) {
		return nil // dropped: sent again once every instance has the version
	}
	if err != nil {
		return err
	}
	now := o.cfg.now()
	outcome := OutcomeCancelled
	if req.Action == ControlTerminate {
		outcome = OutcomeTerminated
	}
	tryout := &eventstore.Tryout{TxID: tx.TxID, Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, Attempt: tx.Attempt,
		Outcome: outcome, Error: req.detail(), Before: tx.Payload, StartedAt: req.At, FinishedAt: now}
	from := tx.State
	forward := tx.Kind == string(topics.KindProcess) || tx.Kind == ""
	// What follows is not caused by a reply: persist before publishing.
	ctx = withPersistFirst(ctx)
	if req.Action == ControlTerminate {
		switch tx.State {
		case eventstore.StatePaused:
			if err := o.claimFor(ctx, tx, req.Action); err != nil {
				return err
			}
		case eventstore.StateRetryPending:
			if err := o.claimPark(ctx, tx, req.Action, eventstore.ResumeClaimTTL); err != nil {
				return err
			}
		}
		tx.Error = req.detail()
		tx.PausedUntil, tx.PauseEvent = time.Time{}, ""
		if err := o.persist(ctx, tx, eventstore.StateTerminated, tryout, from, nil); err != nil {
			return err
		}
		if from == eventstore.StateDisabled {
			o.stats.terminatedDisabled.Add(1)
			if err := o.store.Unfreeze(ctx, *tx); err != nil {
				log.Warn("orchestrator: terminated a DISABLED saga but could not remove its frozen copy", "err", err)
			}
		}
		o.stats.terminated.Add(1)
		log.Info("orchestrator: saga terminated", "reason", req.Reason)
		return nil
	}
	switch tx.State {
	case eventstore.StateStarted, eventstore.StateInProgress:
		// A forward step is in flight: its reply (or its timeout) starts
		// the compensation (cancelledReply).
		tx.Error = req.detail()
		if err := o.persist(ctx, tx, eventstore.StateCancelling, tryout, from, nil); err != nil {
			return err
		}
		// The step was sent before: it keeps its remaining time.
		o.keepStepTime(tx, adm.left)
	case eventstore.StatePaused:
		if err := o.claimFor(ctx, tx, req.Action); err != nil {
			return err
		}
		tx.PausedUntil, tx.PauseEvent = time.Time{}, ""
		if !forward {
			// Paused in compensation: the compensation goes on now.
			tx.Error = req.detail()
			return o.next(ctx, tx, o.onNextRevert(tx), nil, tryout, from)
		}
		// The paused step succeeded (it is in Completed): it is undone too.
		tx.Error = req.detail()
		if err := o.compensateWith(ctx, tx, tx.Span+1, nil, tryout); err != nil {
			return err
		}
	case eventstore.StateRetryPending:
		if !forward {
			o.stats.controlsIgnored.Add(1)
			log.Info("orchestrator: cancel of a saga whose compensation waits for a retry: its compensation goes on")
			return nil
		}
		if err := o.claimPark(ctx, tx, req.Action, eventstore.ResumeClaimTTL); err != nil {
			return err
		}
		// The parked step did not complete: the steps before it are
		// undone; it too if its last attempt was failed by its step
		// timer (its outcome is unknown).
		cursor := tx.Span
		if parkedUnknown(tx) {
			tryout.Error += "; " + tx.Error + "; " + unknownNote
			markUnknown(tx)
			cursor++
		}
		tx.Error = req.detail()
		if err := o.compensateWith(ctx, tx, cursor, nil, tryout); err != nil {
			return err
		}
	default: // CANCELLING, FAILED, COMPENSATING: compensating already; DISABLED
		o.stats.controlsIgnored.Add(1)
		log.Info("orchestrator: cancel ignored: the saga is already compensating or cancelled")
		return nil
	}
	o.stats.cancelled.Add(1)
	log.Info("orchestrator: saga cancelled", "reason", req.Reason)
	return nil
}

// claimFor claims the pause of tx (PAUSED) for action. A claim of the same
// action is taken as its own (a retried record whose first try failed
// after claiming); one of a resume or a deadline wins (errControlWait).
func (o *Orchestrator[T]) claimFor(ctx context.Context, tx *eventstore.Transaction, action string) error {
	won, existing, err := o.claim(ctx, tx, action, nil)
	if err != nil {
		return err
	}
	if !won && existing.Owner != action {
		return fmt.Errorf("%w (%s: its pause was claimed by %s)", errControlWait, tx.TxID, existing.Owner)
	}
	return nil
}

// Owner of a re-drive's claim of a park (redriveClaimKey), followed by
// ":" and the re-driving instance (redriveOwner).
const claimRedrive = "redrive"

// redriveOwner is the owner of this instance's re-drive claims: one
// instance re-drives a park, others (the in-process retry of the instance
// that parked it, a retry node's window scan) find it held
// (ErrRedriveHeld); the same instance may claim it again (a re-drive it
// retries after a failure).
func (o *Orchestrator[T]) redriveOwner() string { return claimRedrive + ":" + o.instance }

// isRedriveClaim reports whether owner claimed a park for a re-drive
// (of any instance, or of a release before re-drive claims named theirs).
func isRedriveClaim(owner string) bool {
	return owner == claimRedrive || strings.HasPrefix(owner, claimRedrive+":")
}

// ErrRedriveHeld is returned by Redrive when another instance's re-drive
// claimed the saga's park first: it has moved the saga on, or is doing so,
// or its claim's lease (30s) runs out, after which the saga may be
// re-driven again.
var ErrRedriveHeld = errors.New("orchestrator: another instance is re-driving the saga")

// redriveClaimLease is how long a re-drive's claim of a park lasts: a
// re-drive that failed before moving the saga on leaves it claimed that
// long, after which a cancel, or another instance's re-drive, can claim it.
const redriveClaimLease = 30 * time.Second

// redriveClaimKey is the marker that decides who continues the park of tx
// (RETRY_PENDING at its version): one re-drive, a cancel or a terminate.
func redriveClaimKey(scope eventstore.Scope, tx *eventstore.Transaction) eventstore.MarkerKey {
	return eventstore.MarkerKey{Scope: scope, TxID: tx.TxID, Span: tx.Span, Kind: "park:" + tx.Kind, Site: "version:" + strconv.FormatInt(tx.Version, 10)}
}

// claimPark claims the park of tx (RETRY_PENDING) for owner, for lease.
// Whoever claims holds it alone: of two re-drives that read the same park
// (the in-process retry of one instance, the window retry of another),
// one moves the saga on and the other gets ErrRedriveHeld, so the step's
// next attempt is written and sent once. An owner may claim again what it
// holds.
func (o *Orchestrator[T]) claimPark(ctx context.Context, tx *eventstore.Transaction, owner string, lease time.Duration) error {
	m := eventstore.Marker{MarkerKey: redriveClaimKey(o.scope, tx), State: eventstore.MarkerCommitted, Owner: owner}
	won, existing, err := o.store.InsertMarker(ctx, m, lease)
	if err != nil {
		return fmt.Errorf("orchestrator: claim the park of %s: %w", tx.TxID, err)
	}
	switch {
	case won, existing.Owner == owner:
		return nil
	case isRedriveClaim(owner) && isRedriveClaim(existing.Owner):
		return fmt.Errorf("%w: %s (claimed by %s)", ErrRedriveHeld, tx.TxID, existing.Owner)
	case isRedriveClaim(owner):
		return fmt.Errorf("%w: %s: an operator's %s claimed it", ErrNotRetryPending, tx.TxID, existing.Owner)
	default:
		return fmt.Errorf("%w (%s: a re-drive claimed its park)", errControlWait, tx.TxID)
	}
}

// cancelledReply applies the reply env (or a step timeout's) to tx,
// CANCELLING: the step goes into Completed if it succeeded (or ran:
// ActionDone), and compensation starts below the cursor as it would after
// a non-retryable failure.
func (o *Orchestrator[T]) cancelledReply(ctx context.Context, tx *eventstore.Transaction, env *topics.Envelope, tryout *eventstore.Tryout, last *StepResult) error {
	cursor := tx.Span
	if env.Outcome == topics.OutcomeOK || (env.Outcome == topics.OutcomeNonRetryable && env.ActionDone) {
		if env.Outcome == topics.OutcomeOK && len(env.Payload) > 0 {
			tx.Payload = env.Payload
		}
		tx.Completed = append(tx.Completed, eventstore.CompletedSpan{Span: tx.Span, Endpoint: tx.Endpoint, Compensable: !isQuery(tx.Endpoint)})
		cursor = tx.Span + 1
	}
	return o.compensateWith(ctx, tx, cursor, last, tryout)
}

// countStale counts a reply that tx does not expect (Stats.StaleReplies,
// and RepliesAfterTerminate for a TERMINATED saga).
func (o *Orchestrator[T]) countStale(tx *eventstore.Transaction) {
	o.stats.stale.Add(1)
	if tx.State == eventstore.StateTerminated {
		o.stats.afterTerminate.Add(1)
	}
}

// handleControlShared applies a control record read by a share group, where
// a saga's records may be handled by several instances at once: a saga
// with a step in flight is held by the reply claim of that step's attempt
// (ReplyClaimKey) while the request is applied, as a reply of that attempt
// would hold it, and the claim is released after, so that the reply (the
// attempt is unchanged by a cancel) is applied at once.
func (o *Orchestrator[T]) handleControlShared(ctx context.Context, r *kgo.Record) error {
	req, err := o.decodeControl(ctx, r, o.rejectRecord)
	if req == nil {
		return err
	}
	l := o.lock(req.TxID)
	l.Lock()
	defer l.Unlock()
	tx, done, err := o.loadControlled(ctx, r, req, o.rejectRecord)
	if done {
		return err
	}
	if !awaitsReply(tx.State) {
		return o.applyControl(ctx, &tx, req)
	}
	ctx, release, err := o.claimAttempt(ctx, &tx, req.Action) // gate.go
	if err != nil {
		return err
	}
	defer release()
	// Under the claim, the store has the saga's state.
	cur, err := o.store.LoadTransaction(ctx, o.scope, req.TxID)
	if err != nil {
		return fmt.Errorf("orchestrator: load %s: %w", req.TxID, err)
	}
	if awaitsReply(cur.State) && (cur.Span != tx.Span || cur.Kind != tx.Kind || cur.Attempt != tx.Attempt) {
		return fmt.Errorf("%w (%s moved on to another step while claimed)", errControlWait, tx.TxID)
	}
	return o.applyControl(ctx, &cur, req)
}

// isControlClaim reports whether a pause's or park's claim owner is a
// cancel or a terminate.
func isControlClaim(owner string) bool {
	return owner == ControlCancel || owner == ControlTerminate
}
