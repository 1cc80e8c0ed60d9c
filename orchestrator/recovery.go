package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
)

// initRecovery validates the recovery configuration and makes the writer
// and, for a retry node, the engine.
func (o *Orchestrator[T]) initRecovery() error {
	if !o.cfg.recoveryOn && !o.cfg.retryNode {
		return nil
	}
	cfg := o.cfg.recovery
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("orchestrator: recovery: %w", err)
	}
	win, err := cfg.Windows()
	if err != nil {
		return fmt.Errorf("orchestrator: recovery: %w", err)
	}
	o.restoreDelay = win.Interval() * time.Duration(cfg.RestoreDelay(o.domain.Name))
	o.win = win
	w, err := recovery.NewWriter(o.store, cfg, recovery.WithClock(o.cfg.now), recovery.WithLogger(o.cfg.logger))
	if err != nil {
		return fmt.Errorf("orchestrator: recovery: %w", err)
	}
	if o.cfg.recoveryOn {
		o.rec = w
	}
	if o.cfg.retryNode {
		opts := append([]recovery.Option{recovery.WithLogger(o.cfg.logger)}, o.cfg.engineOpts...)
		opts = append(opts, recovery.WithClock(o.cfg.now), recovery.WithWriter(w))
		o.engine, err = recovery.NewEngine(o.store, o.scope, muxFor(o.scope), cfg, opts...)
		if err != nil {
			return fmt.Errorf("orchestrator: retry node: %w", err)
		}
	}
	return nil
}

// domainMux routes the directory entries of one scope (region, cluster,
// service: the directory is per scope, not per domain) to the orchestrator
// of the entry's domain in this process.
type domainMux struct {
	mu sync.RWMutex
	m  map[string]recovery.Redriver
}

// entryRedriver is an orchestrator's Redriver, by pointer so that the mux
// can compare it.
type entryRedriver struct {
	f func(context.Context, eventstore.RecoveryEntry) error
}

func (r *entryRedriver) Redrive(ctx context.Context, e eventstore.RecoveryEntry) error {
	return r.f(ctx, e)
}

var muxes sync.Map // eventstore.Scope -> *domainMux

func muxFor(scope eventstore.Scope) *domainMux {
	m, _ := muxes.LoadOrStore(scope, &domainMux{m: map[string]recovery.Redriver{}})
	return m.(*domainMux)
}

func (d *domainMux) register(domain string, r recovery.Redriver) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.m[domain] = r
}

func (d *domainMux) unregister(domain string, r recovery.Redriver) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.m[domain]; ok && cur == r {
		delete(d.m, domain)
	}
}

// Redrive hands e to its domain's orchestrator. An entry of a domain that
// has no orchestrator in this process fails, so its bucket is kept for a
// retry node that has one.
func (d *domainMux) Redrive(ctx context.Context, e eventstore.RecoveryEntry) error {
	d.mu.RLock()
	r, ok := d.m[e.Domain]
	d.mu.RUnlock()
	if !ok {
		return fmt.Errorf("orchestrator: no orchestrator of domain %q runs in this retry node", e.Domain)
	}
	return r.Redrive(ctx, e)
}

// RecoveryEngine returns the retry node's engine (nil unless
// WithRetryNode), e.g. to run a scan from a test or read its totals.
func (o *Orchestrator[T]) RecoveryEngine() *recovery.Engine { return o.engine }

// RecoveryWriter returns the writer of watchdogs and retries (nil with
// WithoutRecovery).
func (o *Orchestrator[T]) RecoveryWriter() *recovery.Writer { return o.rec }

// retryPolicy returns the retry policy of tx's current step.
func (o *Orchestrator[T]) retryPolicy(tx *eventstore.Transaction) recovery.RetryPolicy {
	service, endpoint := parseQualified(tx.Endpoint)
	return o.cfg.recovery.RetryPolicy(o.domain.Name, service+"/"+endpoint)
}

// registerRetry registers tx, about to be persisted in RETRY_PENDING (see
// park), for a re-drive after its retry policy's delay, and returns the
// delay of its in-process retry (recovery.RetryPolicy.Backoff; 0: none),
// which the caller arms once the saga is parked (armRetry). The window
// registration is the durable fallback: due a whole window after the
// in-process retry (recovery.RetryPolicy.FallbackWindows), it re-drives
// the saga only if this process died or its re-drive failed. A failure to
// register is logged: the in-process retry, or else the saga's restore
// watchdog, re-drives it anyway.
func (o *Orchestrator[T]) registerRetry(ctx context.Context, tx *eventstore.Transaction) time.Duration {
	p := o.retryPolicy(tx)
	attempt := max(tx.Attempt, 1)
	fast := p.Backoff(attempt)
	if o.rec == nil {
		return fast
	}
	delay := p.FallbackWindows(attempt, fast, o.win.Interval())
	if _, err := o.rec.RegisterRetry(ctx, o.scope, tx.TxID, o.domain.Name, delay); err != nil {
		o.logger().Warn("orchestrator: could not register a retry; the in-process retry or the restore watchdog will re-drive the saga", "tx", tx.TxID, "err", err)
	}
	return fast
}

// faultAt reports whether WithFaultInjection abandons txID at p.
func (o *Orchestrator[T]) faultAt(p FaultPoint, txID string) bool {
	if o.cfg.fault == nil || !o.cfg.fault(p, txID) {
		return false
	}
	o.stats.abandoned.Add(1)
	return true
}

// redriveEntry is the orchestrator's recovery.Redriver: it handles one
// directory entry found by the retry node. It is idempotent: an entry seen
// twice re-drives a saga at most once per RETRY_PENDING, and a re-sent step
// is deduplicated by the worker's guard.
func (o *Orchestrator[T]) redriveEntry(ctx context.Context, e eventstore.RecoveryEntry) error {
	tx, err := o.store.LoadTransaction(ctx, o.scope, e.TxID)
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		return nil
	case err != nil:
		return err
	case tx.State.Terminal(), tx.State == eventstore.StateDisabled:
		return nil
	}
	now := o.cfg.now()
	if o.cfg.recovery.Expired(tx.LifetimeFrom(), now) {
		return o.disable(ctx, tx.TxID)
	}
	switch {
	case tx.State == eventstore.StatePaused:
		return o.redrivePaused(ctx, tx, e.Restore())
	case tx.State == eventstore.StateRetryPending:
		if err := o.redriveParked(ctx, tx.TxID); err != nil {
			return err
		}
		if e.Restore() {
			return o.watchAgain(&tx, "re-driven from RETRY_PENDING; watchdog re-armed")
		}
		return nil
	case !e.Restore():
		return nil // a retry entry of a saga that moved on (re-driven already)
	case !awaitsReply(tx.State):
		return nil
	case now.Sub(tx.UpdatedAt) < o.restoreAfter(&tx):
		// It moved since its step could have timed out: still alive. The
		// watchdog rolls forward to when its current step is due.
		return recovery.Later(o.watchdogDelay(&tx, now), "in progress")
	}
	if err := o.Restore(ctx, tx.TxID); err != nil {
		if errors.Is(err, ErrNotInFlight) || errors.Is(err, ErrSagaTimedOut) {
			return nil
		}
		return err
	}
	o.logger().Info("orchestrator: restored a stalled saga: re-sent its step", "tx", tx.TxID, "span", tx.Span, "kind", tx.Kind, "state", tx.State)
	return o.watchAgain(&tx, "step re-sent; watchdog re-armed")
}

// The restore watchdog follows the saga, lazily: a saga's watchdog is
// written with its create, due when its first step's timeout plus
// recovery.RestoreMargin has passed (restoreAfter), rather than at the
// far window W+K; nothing is written at the saga's later transitions. A
// pickup that finds the saga moving (a transition more recent than its
// current step's restoreAfter) registers the watchdog again where that
// step is due, one write per pickup off the hot path; one that finds it
// stalled restores it and re-arms the watchdog as far again. A saga that
// ends before its watchdog is due deletes it as before. So a saga stalled
// by a crash (its step timer died with its process) is restored about its
// step timeout after its last transition: within restoreAfter plus one
// window plus a scan. A step without a timeout keeps the restore delay K.

// restoreAfter is how long tx may go without a transition before a
// restore pickup re-sends its step: its step timeout plus
// recovery.RestoreMargin, at most the restore delay (which a step without
// a timeout gets).
func (o *Orchestrator[T]) restoreAfter(tx *eventstore.Transaction) time.Duration {
	if d := o.stepTimeout(tx); d > 0 {
		return min(d+recovery.RestoreMargin, o.restoreDelay)
	}
	return o.restoreDelay
}

// watchdogDelay is the delay in windows, from now, of tx's watchdog: the
// first window sealed once restoreAfter has passed since tx's last
// transition.
func (o *Orchestrator[T]) watchdogDelay(tx *eventstore.Transaction, now time.Time) int {
	return o.win.DelayUntil(now, tx.UpdatedAt.Add(o.restoreAfter(tx)).Sub(now))
}

// watchAgain asks the engine to register the watchdog of tx, whose step
// was just sent again (or whose next step was: its timeout is taken as
// tx's), where that step is due.
func (o *Orchestrator[T]) watchAgain(tx *eventstore.Transaction, reason string) error {
	return recovery.Later(o.win.DelayUntil(o.cfg.now(), o.restoreAfter(tx)), reason)
}

// redriveParked re-drives a RETRY_PENDING saga; a saga that is no longer
// parked (another node re-drove it) is not an error. A re-drive whose
// publish fails parks the saga again with a new retry registration, which
// counts as handled.
func (o *Orchestrator[T]) redriveParked(ctx context.Context, txID string) (err error) {
	err = o.redriveParkedAt(ctx, txID, 0)
	switch {
	case errors.Is(err, ErrNotRetryPending), errors.Is(err, ErrSagaTimedOut):
		return nil
	case errors.Is(err, ErrUnknownVersion):
		// Left parked for an instance that has the version: this entry,
		// kept, tries again.
		return recovery.Later(o.win.DelayUntil(o.cfg.now(), redriveClaimLease), "definition version not registered here")
	case errors.Is(err, ErrRedriveHeld):
		// Another instance re-drives it; should it die before moving the
		// saga on, its claim runs out and this entry, kept, re-drives it.
		return recovery.Later(o.win.DelayUntil(o.cfg.now(), redriveClaimLease), "another instance is re-driving it")
	}
	return err
}

// redriveParkedAt is redriveParked of a saga parked at version (0: any);
// a saga not parked (at version) fails with ErrNotRetryPending.
func (o *Orchestrator[T]) redriveParkedAt(ctx context.Context, txID string, version int64) (err error) {
	tx, err := o.prepareRedriveAt(ctx, txID, version)
	if err != nil {
		return err
	}
	ctx, span := o.sagaSpan(ctx, "redrive", &tx)
	defer func() { endSpan(span, &tx, err) }()
	service, endpoint := parseQualified(tx.Endpoint)
	if err := o.publish(ctx, &tx, Step{Service: service, Endpoint: endpoint, Query: isQuery(tx.Endpoint)}); err != nil {
		perr := o.parkUnsent(ctx, &tx, err)
		o.logger().Warn("orchestrator: re-drive could not publish", "tx", txID, "err", perr)
		if cur, lerr := o.store.LoadTransaction(ctx, o.scope, txID); lerr == nil && cur.State == eventstore.StateRetryPending {
			return nil // parked again, with a new retry registration
		}
		return perr
	}
	return nil
}

// disable freezes a saga that outlived its transaction lifetime as
// DISABLED (not terminal: an admin can restore it).
func (o *Orchestrator[T]) disable(ctx context.Context, txID string) (err error) {
	l := o.lock(txID)
	l.Lock()
	defer l.Unlock()
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if err != nil {
		return err
	}
	if tx.State.Terminal() || tx.State == eventstore.StateDisabled {
		return nil
	}
	ctx, span := o.sagaSpan(ctx, "disable", &tx)
	defer func() { endSpan(span, &tx, err) }()
	from := tx.State
	reason := fmt.Sprintf("transaction lifetime of %v exceeded (since %s) while %s", o.cfg.recovery.TransactionLifetime, tx.LifetimeFrom().Format(time.RFC3339), from)
	if tx.Error != "" {
		reason += ": " + tx.Error
	}
	tx.State, tx.Error = eventstore.StateDisabled, reason
	// Away from the reply path: raise the fence, so that the late reply of
	// an owner that applies it to the state before the disable (at this
	// version or a later one) cannot overwrite it
	// (eventstore.Store.Transition).
	tx.Version++
	tx.Fence++
	tx.UpdatedAt = o.cfg.now()
	if err := o.store.Freeze(ctx, tx, reason); err != nil {
		return fmt.Errorf("orchestrator: freeze %s: %w", txID, err)
	}
	o.cache.drop(txID)
	if err := o.store.Transition(ctx, tx, nil); err != nil {
		return fmt.Errorf("orchestrator: disable %s: %w", txID, err)
	}
	o.steps.disarm(txID)
	o.stats.disabled.Add(1)
	o.logger().Warn("orchestrator: saga disabled: it outlived its transaction lifetime", "tx", txID, "from", from)
	o.emit(Event{TxID: txID, Domain: tx.Domain, Version: versionOf(&tx), From: from, To: tx.State, Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, Error: reason, At: tx.UpdatedAt})
	return nil
}
