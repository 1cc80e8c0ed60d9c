package writeprotect

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	randv2 "math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/stacksaga-go/stacksaga/answer"
	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/stack"
	"github.com/stacksaga-go/stacksaga/internal/wait"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Store is the part of eventstore.Store a Guard uses; eventstore.Store
// satisfies it. The markers live in the orchestrating service's partition
// of es_execution_markers; LoadTransaction reads the saga's row for the
// terminal fence. A Store that also implements eventstore.StateReader (the
// memory and Cassandra stores do) has the fence read the saga's state alone
// instead of the whole row.
type Store interface {
	InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (applied bool, existing eventstore.Marker, err error)
	PutMarker(ctx context.Context, m eventstore.Marker) error
	CommitMarker(ctx context.Context, m eventstore.Marker) (applied bool, existing eventstore.Marker, err error)
	GetMarker(ctx context.Context, key eventstore.MarkerKey) (eventstore.Marker, error)
	DeleteMarker(ctx context.Context, key eventstore.MarkerKey) error
	DeleteMarkerIf(ctx context.Context, key eventstore.MarkerKey, state eventstore.MarkerState, owner string) (applied bool, existing eventstore.Marker, err error)
	LoadTransaction(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.Transaction, error)
}

// Errors.
var (
	// ErrLeaseHeld is returned by Execute when another execution's lease
	// on the step outlived the wait (the lease plus a second, at most
	// WithMaxLeaseWait); the worker tries the command again later.
	ErrLeaseHeld = errors.New("writeprotect: lease held by another execution")
	// ErrLeaseExpired is returned by Execute when a STRICT lease was taken
	// too late to run the step within it (the store's retries of the
	// conditional insert, or the fence read, outlasted the handler's
	// deadline): the lease is released without running the step, and the
	// worker tries the command again later.
	ErrLeaseExpired = errors.New("writeprotect: lease expired before the step could run")
	// ErrHanging is the error text of the non-retryable reply to an action
	// refused because its compensation was already recorded.
	ErrHanging = errors.New("writeprotect: hanging action refused: the step was already compensated before its action ran")
	// ErrNoScope is the error text of the non-retryable reply to a command
	// that names no orchestrating region, cluster and service, or no
	// transaction, kind or endpoint: its marker has no key, and it is not
	// run unprotected.
	ErrNoScope = errors.New("writeprotect: command does not name its saga's scope, transaction, kind and endpoint")
	// ErrMarker means a marker in an unknown state was found.
	ErrMarker = errors.New("writeprotect: unexpected marker")
)

// SitePrefix starts the Site of every marker a Guard writes; the endpoint
// name follows.
const SitePrefix = "worker:"

// MarkerKeyFor returns the key of cmd's marker: the orchestrating
// service's scope (cmd.Region, Cluster, Service), the transaction, span and
// kind, and the site SitePrefix+endpoint.
func MarkerKeyFor(cmd *topics.Envelope) eventstore.MarkerKey {
	return markerKey(cmd, cmd.Kind)
}

func markerKey(cmd *topics.Envelope, kind topics.Kind) eventstore.MarkerKey {
	return eventstore.MarkerKey{
		Scope: eventstore.Scope{Region: cmd.Region, Cluster: cmd.Cluster, Service: cmd.Service},
		TxID:  cmd.TxID, Span: cmd.Span, Kind: string(kind), Site: SitePrefix + cmd.Endpoint,
	}
}

// Guard is the write-protection layer of a worker: it implements
// worker.Guard (pass it with worker.WithGuard). See the package
// documentation for what it does. A Guard is safe for concurrent use; make
// one per worker instance with New.
type Guard struct {
	store Store
	// states is store's eventstore.StateReader, if it has one (the fence
	// then reads the saga's state alone).
	states eventstore.StateReader
	cfg    Config
	opts   options
	log    *slog.Logger
	seq    atomic.Uint64
	stats  counters
	// domains notes the first command of each domain (see policy).
	domains domainNotes
}

// New makes a Guard over store with cfg (validated; zero fields take the
// defaults).
func New(store Store, cfg Config, opts ...Option) (*Guard, error) {
	o := options{
		now:            time.Now,
		log:            slog.Default(),
		backoffInitial: DefaultBackoffInitial,
		backoffMax:     DefaultBackoffMax,
		commitTimeout:  DefaultCommitTimeout,
		clockSkew:      DefaultClockSkew,
		maxLeaseWait:   DefaultMaxLeaseWait,
		fence:          false,
	}
	for _, opt := range opts {
		opt.apply(&o)
	}
	var errs []error
	if store == nil {
		errs = append(errs, errors.New("writeprotect: nil store"))
	}
	if o.clockSkew < 0 || o.clockSkew >= MaxLease {
		errs = append(errs, fmt.Errorf("writeprotect: clock skew must be in [0, %v), got %v", MaxLease, o.clockSkew))
	} else {
		// The retention's end is checked on the guard's clock (see
		// Config.MarkerRetention).
		now := time.Now()
		if o.now != nil {
			now = o.now()
		}
		if err := cfg.validate(o.clockSkew, now); err != nil {
			errs = append(errs, err)
		}
	}
	if o.maxLeaseWait <= 0 {
		errs = append(errs, fmt.Errorf("writeprotect: max lease wait must be positive, got %v", o.maxLeaseWait))
	}
	if o.now == nil {
		errs = append(errs, errors.New("writeprotect: nil clock"))
	}
	if o.log == nil {
		errs = append(errs, errors.New("writeprotect: nil logger"))
	}
	if o.backoffInitial <= 0 || o.backoffMax < o.backoffInitial {
		errs = append(errs, fmt.Errorf("writeprotect: backoff must satisfy 0 < initial <= max, got %v and %v", o.backoffInitial, o.backoffMax))
	}
	if o.commitTimeout <= 0 {
		errs = append(errs, fmt.Errorf("writeprotect: commit timeout must be positive, got %v", o.commitTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.owner == "" {
		o.owner = defaultOwner()
	}
	states, _ := store.(eventstore.StateReader)
	return &Guard{store: store, states: states, cfg: cfg.withDefaults(), opts: o, log: o.log.With("component", "writeprotect")}, nil
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// retention is the TTL of the records written now: the configured
// retention, cut short so that it ends by eventstore.MaxMarkerExpiry (less
// the clock-skew margin, for the server's clock): New refused a retention
// ending later from its start, but a guard that runs for long would
// otherwise have every record refused by the store.
func (g *Guard) retention() time.Duration {
	r := g.cfg.retention()
	if r == 0 {
		return 0
	}
	if left := eventstore.MaxMarkerExpiry.Sub(g.opts.now()) - g.opts.clockSkew - time.Second; r > left {
		r = max(left, time.Second)
	}
	return r
}

// Stats returns the guard's counters.
func (g *Guard) Stats() Stats { return g.stats.snapshot() }

// Config returns the guard's configuration, defaults filled.
func (g *Guard) Config() Config { return g.cfg }

// Execute runs cmd through run at most once per (transaction, span, kind)
// across every guard sharing the store, and returns the reply to send; it
// implements worker.Guard. It returns (nil, nil) when there is nothing to
// send (a late duplicate of a finished saga), and an error meaning "not
// now" (a lease held elsewhere, a lease taken too late to run within it,
// the store unreachable). A panic in run propagates without committing: a
// STRICT lease is left to expire, as after a crash.
func (g *Guard) Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	x := &execution{g: g, cmd: cmd, run: run, policy: g.policy(cmd.Domain)}
	return x.execute(ctx)
}

// ExecuteOverlapped is Execute with the recording of a run's outcome
// overlapped with the sending of its reply (the worker uses it when its
// Guard has it, in a consumer group). It returns as soon as the step ran,
// while the marker write (RELAXED) or the lease's commit (STRICT) is still
// in flight, and wait, which returns once that write is done (or failed:
// logged and counted as by Execute). The caller sends the reply, then calls
// wait (whatever the outcome) before it commits the command: the worker's
// offset never moves past a command whose outcome's write is in flight.
//
// What a crash can do, and the one thing that changes (a reply may reach
// the orchestrator before its record exists), are in the package
// documentation, "The record and the reply, side by side". With the
// terminal fence (WithTerminalFence) the write is not overlapped.
func (g *Guard) ExecuteOverlapped(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, func(), error) {
	x := &execution{g: g, cmd: cmd, run: run, policy: g.policy(cmd.Domain), overlap: !g.opts.fence}
	reply, err := x.execute(ctx)
	if x.written == nil {
		return reply, func() {}, err
	}
	return reply, func() { <-x.written }, err
}

func (x *execution) execute(ctx context.Context) (*topics.Envelope, error) {
	g, cmd := x.g, x.cmd
	if (eventstore.Scope{Region: cmd.Region, Cluster: cmd.Cluster, Service: cmd.Service}).Validate() != nil ||
		cmd.TxID == "" || cmd.Endpoint == "" || (cmd.Kind != topics.KindProcess && cmd.Kind != topics.KindRevert) {
		g.log.ErrorContext(ctx, "writeprotect: refusing a command without scope", "tx", cmd.TxID, "span", cmd.Span, "kind", cmd.Kind,
			"endpoint", cmd.Endpoint, "region", cmd.Region, "cluster", cmd.Cluster, "service", cmd.Service)
		return x.unchanged(topics.OutcomeNonRetryable, ErrNoScope.Error()), nil
	}
	if cmd.Kind == topics.KindRevert {
		reply, done, err := x.barrier(ctx)
		if done || err != nil {
			return reply, err
		}
	}
	if x.policy.Mode == Strict {
		return x.strict(ctx)
	}
	return x.relaxed(ctx)
}

// execution is one Execute call.
type execution struct {
	g      *Guard
	cmd    *topics.Envelope
	run    func(context.Context) *topics.Envelope
	policy DomainConfig
	// overlap: settle records the outcome in the background (see
	// ExecuteOverlapped) and closes written when it is done.
	overlap bool
	written chan struct{}
}

func (x *execution) owner() string {
	return x.g.opts.owner + "/" + strconv.FormatUint(x.g.seq.Add(1), 10)
}

func (x *execution) logArgs(args ...any) []any {
	return append([]any{"tx", x.cmd.TxID, "span", x.cmd.Span, "kind", x.cmd.Kind, "endpoint", x.cmd.Endpoint, "attempt", x.cmd.Attempt}, args...)
}

func (x *execution) fail(what string, err error) error {
	return fmt.Errorf("writeprotect: %s of %s span %d %s: %w", what, x.cmd.TxID, x.cmd.Span, x.cmd.Kind, err)
}

// barrier is the sub-transaction barrier of a compensation: it looks at the
// marker of the action it compensates. A committed action lets the
// compensation run (done=false). A running action (a live lease) is waited
// for.
//
// No marker: if the command says the action ran (topics.Envelope
// ActionDone: the orchestrator holds its ok reply), the action's marker was
// lost (its commit failed) and the compensation runs. Otherwise the action
// may never have run: COMPENSATED_EMPTY is recorded with a conditional
// insert on the action's key, the same key a STRICT action inserts its
// lease on, so exactly one of them wins; the compensation then replies ok
// with the entity unchanged without running (null compensation).
func (x *execution) barrier(ctx context.Context) (reply *topics.Envelope, done bool, err error) {
	pk := markerKey(x.cmd, topics.KindProcess)
	w := x.g.newWaiter(x, x.policy.Lease)
	for {
		m, err := x.g.store.GetMarker(ctx, pk)
		if errors.Is(err, eventstore.ErrNotFound) {
			if answer.Compensates(x.cmd, answer.Process{}) {
				x.g.stats.missingActions.Add(1)
				x.g.log.WarnContext(ctx, "writeprotect: the action ran (its ok reply is known) but has no marker (its commit failed, or has not landed yet): compensating it",
					x.logArgs()...)
				return nil, false, nil
			}
			// Recorded for the retention, as a commit is: it must outlive
			// the saga (a hanging action may arrive late), not stay forever.
			empty := eventstore.Marker{MarkerKey: pk, State: eventstore.MarkerCompensatedEmpty, Owner: x.owner()}
			applied, existing, err := x.g.store.InsertMarker(ctx, empty, x.g.retention())
			if err != nil {
				return nil, true, x.fail("record null compensation", err)
			}
			if applied {
				if fenced, err := x.fence(ctx, &empty); fenced || err != nil {
					return nil, true, err
				}
				x.g.stats.nullComps.Add(1)
				x.g.log.DebugContext(ctx, "writeprotect: null compensation: the action never ran", x.logArgs()...)
				return x.unchanged(topics.OutcomeOK, ""), true, nil
			}
			m = existing
		} else if err != nil {
			return nil, true, x.fail("read action marker", err)
		}
		switch m.State {
		case eventstore.MarkerCommitted:
			if answer.Compensates(x.cmd, answer.Process{Found: true, Recorded: recordedOf(m)}) {
				return nil, false, nil
			}
			// The action's last attempt failed: it left no effect, and the
			// record is for its duplicates only. As if there were no
			// marker (the command does not say the action ran), the
			// compensation is null: the record is removed, unless an
			// attempt of the action replaced it meanwhile, and
			// COMPENSATED_EMPTY inserted in its place.
			if _, _, err := x.g.store.DeleteMarkerIf(ctx, pk, m.State, m.Owner); err != nil {
				return nil, true, x.fail("remove the failed record of the action", err)
			}
		case eventstore.MarkerCompensatedEmpty:
			if answer.Compensates(x.cmd, answer.Process{Found: true, Voided: true}) {
				// An earlier compensation of this span, sent before the
				// action's ok reply was known, took it for a null one; the
				// action ran all the same (before that record: a refused
				// action does not reply ok).
				x.g.stats.missingActions.Add(1)
				x.g.log.WarnContext(ctx, "writeprotect: the action ran (its ok reply is known) but was recorded as compensated empty: compensating it",
					x.logArgs()...)
				return nil, false, nil
			}
			x.g.stats.duplicates.Add(1)
			x.g.log.DebugContext(ctx, "writeprotect: duplicate null compensation", x.logArgs()...)
			return x.unchanged(topics.OutcomeOK, ""), true, nil
		case eventstore.MarkerLeased:
			if err := w.wait(ctx, m); err != nil {
				return nil, true, err
			}
		default:
			return nil, true, x.fail("check action", fmt.Errorf("%w: state %q", ErrMarker, m.State))
		}
	}
}

// strict runs the step under an exclusive lease: INSERT ... IF NOT EXISTS
// USING TTL lease, run, then commit the lease (retention TTL) with the
// reply, on condition that it is still the execution's own (see commit).
func (x *execution) strict(ctx context.Context) (*topics.Envelope, error) {
	key := markerKey(x.cmd, x.cmd.Kind)
	owner := x.owner()
	w := x.g.newWaiter(x, x.policy.Lease)
	var start, realStart time.Time
	for {
		// Measured before the insert: the lease starts later, when the
		// store applies it, so deadlines derived from these are early.
		start, realStart = x.g.opts.now(), time.Now()
		applied, existing, err := x.g.store.InsertMarker(ctx, eventstore.Marker{
			MarkerKey: key, State: eventstore.MarkerLeased, Owner: owner,
		}, x.policy.Lease)
		if err != nil {
			return nil, x.fail("take lease", err)
		}
		if applied {
			break
		}
		// While another execution's lease lives, poll with plain reads:
		// an LWT per try would contend (Paxos) on the partition the
		// lease holder is about to commit to. The insert is tried again
		// once the marker is gone.
		for m := existing; ; {
			reply, next, err := x.existing(ctx, m, w)
			if next == done || err != nil {
				return reply, err
			}
			if next == takeOver {
				break // removed: try the insert again
			}
			m, err = x.g.store.GetMarker(ctx, key)
			if errors.Is(err, eventstore.ErrNotFound) {
				break
			}
			if err != nil {
				return nil, x.fail("read marker", err)
			}
		}
	}
	if fenced, err := x.fence(ctx, &eventstore.Marker{MarkerKey: key, State: eventstore.MarkerLeased, Owner: owner}); fenced || err != nil {
		return nil, err
	}
	lease := ceilSeconds(x.policy.Lease)
	// The lease is certain to live for exclusive from before its insert:
	// the store may lose up to a second of it (Cassandra counts a TTL
	// from the insert's time truncated to whole seconds) and clocks may
	// disagree by the skew margin. The handler's context ends the commit
	// reserve earlier, leaving time to record the outcome: a handler that
	// honours its context never runs past its exclusivity.
	exclusive, runFor := leaseBudget(lease, x.g.opts.clockSkew)
	rctx, cancel := context.WithDeadline(ctx, realStart.Add(runFor))
	defer cancel()
	if took := x.g.opts.now().Sub(start); rctx.Err() != nil || took >= runFor {
		// Taking the lease (the store retries an LWT whose outcome is
		// unknown) and the fence outlasted the run's deadline: running
		// now would run with a dead context, or past the lease.
		took = max(took, time.Since(realStart))
		x.release(ctx, key, owner)
		if err := ctx.Err(); err != nil {
			return nil, x.fail("run", err)
		}
		x.g.stats.lateLeases.Add(1)
		x.g.log.WarnContext(ctx, "writeprotect: lease taken too late to run the step within it; released, the command is retried",
			x.logArgs("took", took, "lease", lease)...)
		return nil, x.fail("run", fmt.Errorf("%w (%v of the %v lease spent taking it)", ErrLeaseExpired, took, lease))
	}
	x.g.stats.executions.Add(1)
	reply := x.run(rctx)
	took := x.g.opts.now().Sub(start)
	if took >= exclusive {
		x.g.stats.overruns.Add(1)
		x.g.log.WarnContext(ctx, "writeprotect: step ran longer than its lease is certain to last; another instance may have run it too (raise the lease-duration)",
			x.logArgs("took", took, "lease", lease, "exclusive", exclusive)...)
	}
	return x.settle(ctx, key, owner, reply, true), nil
}

// release deletes the lease this execution holds, on condition that it is
// still that lease (one that expired may have been taken over by another
// execution), in one conditional delete. It returns the marker found
// instead, if any (State "" otherwise, and when the delete failed: the
// lease then expires by itself).
func (x *execution) release(ctx context.Context, key eventstore.MarkerKey, owner string) eventstore.Marker {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.g.opts.commitTimeout)
	defer cancel()
	applied, got, err := x.g.store.DeleteMarkerIf(cctx, key, eventstore.MarkerLeased, owner)
	switch {
	case err != nil:
		x.g.log.WarnContext(ctx, "writeprotect: could not delete a lease (it expires by itself)", x.logArgs("err", err)...)
		return eventstore.Marker{}
	case applied:
		return eventstore.Marker{}
	}
	return got
}

// relaxed reads the step's marker, skips a committed step, and otherwise
// runs it and records the reply with one plain write.
func (x *execution) relaxed(ctx context.Context) (*topics.Envelope, error) {
	key := markerKey(x.cmd, x.cmd.Kind)
	w := x.g.newWaiter(x, x.policy.Lease)
	for {
		m, err := x.g.store.GetMarker(ctx, key)
		if errors.Is(err, eventstore.ErrNotFound) {
			break
		}
		if err != nil {
			return nil, x.fail("read marker", err)
		}
		reply, next, err := x.existing(ctx, m, w)
		if next == done || err != nil {
			return reply, err
		}
		if next == takeOver {
			break // the run's record replaces the superseded one
		}
	}
	if fenced, err := x.fence(ctx, nil); fenced || err != nil {
		return nil, err
	}
	x.g.stats.executions.Add(1)
	reply := x.run(ctx)
	return x.settle(ctx, key, x.owner(), reply, false), nil
}

// next says what follows a marker found on the step's own key.
type next int

const (
	// done: the reply (or error) returned is final.
	done next = iota
	// again: read the marker again (after a wait for a live lease).
	again
	// takeOver: the marker is the recorded outcome of an earlier attempt
	// that this attempt supersedes; a STRICT guard removed it and takes
	// the lease, a RELAXED one runs the step and writes over it.
	takeOver
)

// existing handles a marker found on the step's own key: done with the
// reply to send, again after waiting for a live lease, or takeOver.
func (x *execution) existing(ctx context.Context, m eventstore.Marker, w *waiter) (*topics.Envelope, next, error) {
	switch {
	case m.State == eventstore.MarkerCommitted:
		rec := recordedOf(m)
		switch answer.ForAttempt(x.cmd, rec) {
		case answer.Unreadable:
			_, err := topics.Decode(m.Reply)
			return x.unreadable(ctx, err), done, nil
		case answer.Replay:
			return x.recorded(ctx, rec.Reply), done, nil
		}
		// The recorded attempt failed or paused its saga, and this is a
		// later attempt (the saga re-driven or restored, or the step
		// invoked again after the pause's deadline): it must run, not
		// replay the record. RELAXED writes over it. STRICT removes it, on
		// condition that it is still that record: of two deliveries of
		// this attempt only one removes it, the other then finds its lease.
		if x.policy.Mode != Strict {
			x.g.stats.superseded.Add(1)
			return nil, takeOver, nil
		}
		applied, _, err := x.g.store.DeleteMarkerIf(ctx, m.MarkerKey, m.State, m.Owner)
		if err != nil {
			return nil, done, x.fail("remove the record of an earlier attempt", err)
		}
		if !applied {
			return nil, again, nil
		}
		x.g.stats.superseded.Add(1)
		return nil, takeOver, nil
	case m.State == eventstore.MarkerCompensatedEmpty && x.cmd.Kind == topics.KindProcess:
		x.g.stats.hanging.Add(1)
		x.g.log.WarnContext(ctx, "writeprotect: hanging action refused: its compensation already ran", x.logArgs()...)
		return x.unchanged(topics.OutcomeNonRetryable, ErrHanging.Error()), done, nil
	case m.State == eventstore.MarkerLeased:
		// In RELAXED mode this is the lease of a STRICT instance (the
		// domain's mode differs between instances): wait for it too.
		if err := w.wait(ctx, m); err != nil {
			return nil, done, err
		}
		return nil, again, nil
	default:
		return nil, done, x.fail("check marker", fmt.Errorf("%w: state %q", ErrMarker, m.State))
	}
}

// fence reports, with WithTerminalFence, whether the saga is terminal, in
// which case the command is a late duplicate: an orchestrator with
// WithMarkerCleanup deleted the saga's markers when it ended, so the
// marker was not found. own, if set, is the marker this
// execution just created; it is deleted when fenced (and when the fence
// cannot be read, so that the retry does not wait for it).
func (x *execution) fence(ctx context.Context, own *eventstore.Marker) (bool, error) {
	if !x.g.opts.fence {
		return false, nil
	}
	scope := eventstore.Scope{Region: x.cmd.Region, Cluster: x.cmd.Cluster, Service: x.cmd.Service}
	var state eventstore.State
	var err error
	if x.g.states != nil {
		state, err = x.g.states.TransactionState(ctx, scope, x.cmd.TxID)
	} else {
		var tx eventstore.Transaction
		tx, err = x.g.store.LoadTransaction(ctx, scope, x.cmd.TxID)
		state = tx.State
	}
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		// Not in this store (or not yet written): nothing to fence on.
		return false, nil
	case err != nil:
		x.drop(ctx, own)
		return false, x.fail("read saga for the terminal fence", err)
	case !state.Terminal():
		return false, nil
	}
	x.drop(ctx, own)
	x.g.stats.fenced.Add(1)
	x.g.log.WarnContext(ctx, "writeprotect: late duplicate of a finished saga dropped", x.logArgs("state", state)...)
	return true, nil
}

// drop deletes the marker this execution created, if any, on condition
// that it is still that marker (its state and owner): a plain delete,
// which the driver may send again with a fresh timestamp after its answer
// was lost, would remove a marker another execution wrote meanwhile.
func (x *execution) drop(ctx context.Context, own *eventstore.Marker) {
	if own == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.g.opts.commitTimeout)
	defer cancel()
	if _, _, err := x.g.store.DeleteMarkerIf(cctx, own.MarkerKey, own.State, own.Owner); err != nil {
		x.g.log.WarnContext(ctx, "writeprotect: could not delete a marker (a lease expires by itself)", x.logArgs("err", err)...)
	}
}

// settle records the outcome of a run with the encoded reply, for the
// retention (Config.MarkerRetention): duplicates of the same attempt get
// it instead of running. A retryable outcome is recorded too; the next
// attempt of the step supersedes it (see existing). No reply records
// nothing (a STRICT lease is deleted). A STRICT execution commits its
// lease with one conditional LWT (see commit); RELAXED writes the marker.
// The writes are not bound by ctx: the step ran, its outcome must be
// recorded.
func (x *execution) settle(ctx context.Context, key eventstore.MarkerKey, owner string, reply *topics.Envelope, leased bool) *topics.Envelope {
	if reply == nil {
		x.g.stats.released.Add(1)
		if leased {
			x.unlease(ctx, key, owner)
		}
		return reply
	}
	// Encoded now, before the caller may change reply (a traced worker
	// sets its Trace) while the write is in flight.
	rec, err := encodeReply(x.cmd, reply)
	if err != nil {
		x.g.stats.commitFailures.Add(1)
		x.g.log.ErrorContext(ctx, "writeprotect: cannot encode the reply to record it", x.logArgs("err", err)...)
		if leased {
			x.unlease(ctx, key, owner)
		}
		return reply
	}
	m := eventstore.Marker{MarkerKey: key, State: eventstore.MarkerCommitted, Owner: owner, Reply: rec, TTL: x.g.retention()}
	retryable := reply.Outcome == topics.OutcomeRetryable
	if !x.overlap {
		x.record(ctx, m, leased, retryable)
		return reply
	}
	x.written = make(chan struct{})
	go func() {
		defer close(x.written)
		stack.Grow() // a fresh goroutine, about to go through the driver
		x.record(ctx, m, leased, retryable)
	}()
	return reply
}

// record writes m, the outcome of a run: commits the execution's lease
// (leased, STRICT) or puts the marker (RELAXED).
func (x *execution) record(ctx context.Context, m eventstore.Marker, leased, retryable bool) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.g.opts.commitTimeout)
	defer cancel()
	var err error
	if leased {
		err = x.commit(ctx, cctx, m)
	} else {
		err = x.put(cctx, m)
	}
	switch {
	case errors.Is(err, errLost):
	case err != nil:
		x.g.stats.commitFailures.Add(1)
		x.g.log.ErrorContext(ctx, "writeprotect: step ran but its marker could not be committed; a redelivery may run it again",
			x.logArgs("err", err)...)
	case retryable:
		x.g.stats.retryables.Add(1)
	}
}

// unlease releases the lease of a run that records nothing; a lease taken
// over by another execution meanwhile is counted as lost.
func (x *execution) unlease(ctx context.Context, key eventstore.MarkerKey, owner string) {
	if m := x.release(ctx, key, owner); m.State != "" {
		x.lost(ctx, m)
	}
}

// put writes m, trying three times (bounded by cctx).
func (x *execution) put(cctx context.Context, m eventstore.Marker) error {
	delay := x.g.opts.backoffInitial
	for attempt := 1; ; attempt++ {
		err := x.g.store.PutMarker(cctx, m)
		if err == nil || attempt == 3 || cctx.Err() != nil {
			return err
		}
		if !wait.Sleep(cctx, delay) {
			return err
		}
		delay = min(2*delay, x.g.opts.backoffMax)
	}
}

// errLost: the outcome was not recorded because the lease was lost (logged
// and counted in Stats.LostLeases, not a commit failure).
var errLost = errors.New("writeprotect: lease lost")

// commit replaces the execution's lease with m in one conditional LWT
// (eventstore.Markers.CommitMarker: IF owner = ? AND state = 'LEASED'),
// trying three times (bounded by cctx). Being an LWT it first finishes any
// unfinished Paxos round of the saga's marker partition, so a re-proposed
// lease cannot hide it afterwards (see "The commit is conditional" in the
// package documentation). Refused:
//   - the marker is the commit itself (a try whose answer was lost): done;
//   - no marker (the lease expired, nobody took the step over): m is
//     inserted with IF NOT EXISTS, which loses to any execution that takes
//     the step meanwhile;
//   - another execution's lease or commit, or the compensation recorded
//     empty: the step ran past its lease and lost it; nothing is written
//     over that marker (errLost, Stats.LostLeases, logged as an error).
func (x *execution) commit(ctx, cctx context.Context, m eventstore.Marker) error {
	delay := x.g.opts.backoffInitial
	for attempt := 1; ; attempt++ {
		applied, got, err := x.g.store.CommitMarker(cctx, m)
		if err == nil && !applied && got.State == "" {
			applied, got, err = x.g.store.InsertMarker(cctx, m, m.TTL)
		}
		if err == nil {
			switch {
			case applied, got.State == m.State && got.Owner == m.Owner:
				return nil
			case got.State != eventstore.MarkerLeased || got.Owner != m.Owner:
				x.lost(ctx, got)
				return errLost
			}
			// Its own lease, which the condition should have matched:
			// try again.
			err = fmt.Errorf("commit refused by the execution's own lease")
		}
		if attempt == 3 || cctx.Err() != nil {
			return err
		}
		if !wait.Sleep(cctx, delay) {
			return err
		}
		delay = min(2*delay, x.g.opts.backoffMax)
	}
}

// lost logs and counts a STRICT execution whose lease was taken over
// before its outcome could be recorded (it ran past its lease).
func (x *execution) lost(ctx context.Context, m eventstore.Marker) {
	x.g.stats.lostLeases.Add(1)
	msg := "writeprotect: step ran past its lease and another execution took the step over; its outcome is not recorded"
	if m.State == eventstore.MarkerCompensatedEmpty {
		msg = "writeprotect: step ran past its lease and its compensation was meanwhile recorded empty: its effect is NOT compensated"
	}
	x.g.log.ErrorContext(ctx, msg, x.logArgs("marker", m.State, "owner", m.Owner)...)
}

// recordedOf is the outcome a committed marker records, for the answer
// gate (Reply nil when it cannot be decoded).
func recordedOf(m eventstore.Marker) answer.Recorded {
	rep, err := topics.Decode(m.Reply)
	if err != nil {
		return answer.Recorded{}
	}
	return answer.Recorded{Attempt: rep.Attempt, Reply: rep}
}

// recorded returns rep, the reply recorded in a committed marker,
// addressed to cmd (its attempt and trace: a re-driven command gets a
// reply the orchestrator accepts).
func (x *execution) recorded(ctx context.Context, rep *topics.Envelope) *topics.Envelope {
	x.g.stats.duplicates.Add(1)
	x.g.log.DebugContext(ctx, "writeprotect: duplicate skipped, recorded reply re-sent", x.logArgs("outcome", rep.Outcome)...)
	address(rep, x.cmd)
	return rep
}

// unreadable is the reply to a duplicate whose recorded reply cannot be
// decoded: the step ran but what it replied is lost. It fails the step so
// that the saga compensates instead of hanging; an action's failure says
// that the action ran (ActionDone): its effect is in place, so the
// orchestrator compensates it too, not only the steps before it.
func (x *execution) unreadable(ctx context.Context, err error) *topics.Envelope {
	x.g.log.ErrorContext(ctx, "writeprotect: unreadable recorded reply", x.logArgs("err", err)...)
	x.g.stats.duplicates.Add(1)
	rep := x.unchanged(topics.OutcomeNonRetryable, fmt.Sprintf("writeprotect: the step already ran but its recorded reply is unreadable: %v", err))
	rep.ActionDone = x.cmd.Kind == topics.KindProcess
	return rep
}

// unchanged is a reply that leaves the entity and hints as they were.
func (x *execution) unchanged(outcome topics.Outcome, msg string) *topics.Envelope {
	rep := &topics.Envelope{Outcome: outcome, Error: msg, Payload: x.cmd.Payload, Hints: x.cmd.Hints}
	address(rep, x.cmd)
	return rep
}

// address sets the routing fields of a reply to cmd.
func address(rep, cmd *topics.Envelope) {
	rep.Type = topics.TypeReply
	rep.Region, rep.Cluster, rep.Service = cmd.Region, cmd.Cluster, cmd.Service
	rep.Domain, rep.TxID, rep.Span, rep.Kind, rep.Endpoint = cmd.Domain, cmd.TxID, cmd.Span, cmd.Kind, cmd.Endpoint
	rep.IdempotencyKey, rep.Attempt, rep.Trace = cmd.IdempotencyKey, cmd.Attempt, cmd.Trace
	rep.ReplyTo, rep.SentAt, rep.SentMs = "", time.Time{}, 0
}

// encodeReply encodes a copy of reply, addressed to cmd, for a marker.
func encodeReply(cmd, reply *topics.Envelope) ([]byte, error) {
	c := *reply
	address(&c, cmd)
	return topics.Encode(&c)
}

// ceilSeconds rounds d up to whole seconds, as the store does with leases.
func ceilSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}

// waiter paces the tries of an execution waiting for another one's lease.
type waiter struct {
	x       *execution
	lease   time.Duration
	started bool
	// deadline (guard clock) is the lease seen first plus a second; giveUp
	// (real time) is the start of the wait plus the max lease wait.
	deadline, giveUp time.Time
	began            time.Time
	delay            time.Duration
}

func (g *Guard) newWaiter(x *execution, lease time.Duration) *waiter {
	return &waiter{x: x, lease: lease, delay: g.opts.backoffInitial}
}

// wait pauses before the next try, or returns ErrLeaseHeld once the lease
// seen first (or the domain's lease, if longer) plus a second has passed on
// the guard's clock without the step being committed or freed, or once
// the guard's max lease wait has passed in real time: the wait blocks the
// worker's poll loop (and the group's rebalances), so it is bounded
// whatever the lease.
func (w *waiter) wait(ctx context.Context, m eventstore.Marker) error {
	g := w.x.g
	now, wall := g.opts.now(), time.Now()
	if !w.started {
		w.started = true
		g.stats.leaseWaits.Add(1)
		w.deadline = now.Add(max(m.TTL, ceilSeconds(w.lease)) + time.Second)
		w.began, w.giveUp = wall, wall.Add(g.opts.maxLeaseWait)
	} else if now.After(w.deadline) || !wall.Before(w.giveUp) {
		g.stats.leaseHeld.Add(1)
		return w.x.fail("wait for lease", fmt.Errorf("%w (owner %s, %v left; waited %v, at most %v)",
			ErrLeaseHeld, m.Owner, m.TTL, wall.Sub(w.began).Round(time.Millisecond), g.opts.maxLeaseWait))
	}
	d := w.delay/2 + randv2.N(w.delay/2+1)
	w.delay = min(2*w.delay, g.opts.backoffMax)
	// Wake at the max wait at the latest, to read the marker once more
	// before giving up.
	if !wait.Sleep(ctx, min(d, w.giveUp.Sub(wall))) {
		return w.x.fail("wait for lease", ctx.Err())
	}
	return nil
}
