package orchestrator

// Business keys (WithBusinessKey): how a keyed Start stays one saga per key
// across instances and crashes.
//
// The claim. Before anything else, Start inserts the key's row
// (eventstore.BusinessKeys; on Cassandra an LWT, INSERT ... IF NOT EXISTS)
// naming the new saga's id, its entity (encoded), its creation time, a
// unique owner and generation 0. The winner creates the saga as an
// unkeyed Start does. A loser reads the saga the row names: if it exists
// it returns its id (ErrExists). If it does not, the claimer is either on
// its way (between the claim and the create) or dead; the loser polls
// (50 ms doubling to 1 s) until the saga appears or the claim is older than
// the grace period (WithBusinessKeyGrace), and then takes the claim over:
// an LWT that replaces the row's owner (IF owner = the one it read AND not
// settled), with the next generation and its own claim time. If the saga
// still does not exist after the takeover, the taker creates it itself,
// with the first claim's id, entity and creation time (so the same saga)
// and with the generation as the saga's Fence: its create wins over a late
// create of the claimer it replaced, whatever order they land in (stores
// order a saga's writes by Fence first), and the replaced claimer's later
// writes of that saga are discarded.
//
// The slow claimer. A claimer that reaches its create more than half the
// grace period after its claim may have been taken over: before it sends
// its first command it confirms the claim (an LWT that marks the row
// settled, IF it still owns it). If it lost, it sends nothing and returns
// ErrExists: the taker drives the saga. A claimer faster than that cannot
// have been taken over, as long as the clocks of the instances differ by
// less than half the grace period, so the usual Start costs one LWT and no
// confirmation. A taker that finds the saga created after all (by the
// claimer it replaced, acknowledged before its read) leaves it to that
// claimer or, if that one died, to the saga's watchdog. On a store that
// detects taken ids (the memory store), a taker whose create fails because
// the replaced claimer created the saga between the taker's read and its
// create sends the saga's step itself (Restore): that claimer, past half
// the grace period, loses its confirmation and sends nothing.
//
// Releases. A first claimer whose saga was not created (the create was
// refused, the context ended before it, the create may have landed but was
// marked failed) deletes its claim (IF it still owns it, unsettled), so
// that the next Start with the key starts a saga of its own entity at once.
// A taker never releases: the replaced claimer's create may still land.
//
// The saga is found by a read of its row, so a duplicate costs one LWT and
// one read. Keys expire after the retention (WithBusinessKeyRetention,
// default the transaction lifetime): a Start with the key after that starts
// a new saga.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/wait"
	"github.com/stacksaga-go/stacksaga/recovery"
)

// Errors of keyed Starts.
var (
	// ErrExists means a Start's business key already names a saga: the
	// error is an *ExistsError carrying its id, which Start returns too.
	// It also matches eventstore.ErrExists.
	ErrExists = fmt.Errorf("orchestrator: business key already used: %w", eventstore.ErrExists)
	// ErrInvalidBusinessKey means a business key is empty, too long or has
	// characters outside printable ASCII (see ValidBusinessKey).
	ErrInvalidBusinessKey = errors.New("orchestrator: invalid business key")
	// ErrNoBusinessKeys means Start was given a business key and the event
	// store does not implement eventstore.BusinessKeys.
	ErrNoBusinessKeys = errors.New("orchestrator: the event store does not keep business keys")
)

// ExistsError is the error of a Start whose business key already names a
// saga. errors.Is(err, ErrExists) matches it; errors.As gets the id.
type ExistsError struct {
	// Key is the business key; TxID the saga it names.
	Key  string
	TxID string
	// TookOver reports that this Start created the saga itself, from the
	// entity of the Start that claimed the key first and died (or stalled)
	// before creating it.
	TookOver bool
}

func (e *ExistsError) Error() string {
	if e.TookOver {
		return fmt.Sprintf("orchestrator: business key %q names saga %s (started now in place of the Start that claimed the key and did not create it)", e.Key, e.TxID)
	}
	return fmt.Sprintf("orchestrator: business key %q already names saga %s", e.Key, e.TxID)
}

// Unwrap returns ErrExists.
func (e *ExistsError) Unwrap() error { return ErrExists }

// MaxBusinessKeyLen is the longest business key, in bytes.
const MaxBusinessKeyLen = 255

// DefaultBusinessKeyGrace is how long a claimed business key whose saga
// does not exist is left to the Start that claimed it (WithBusinessKeyGrace).
const DefaultBusinessKeyGrace = 10 * time.Second

// ValidBusinessKey checks a business key: 1 to MaxBusinessKeyLen bytes of
// printable ASCII without spaces (0x21-0x7E), which covers UUIDs, order
// numbers and the usual Idempotency-Key headers. Its error wraps
// ErrInvalidBusinessKey.
func ValidBusinessKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidBusinessKey)
	case len(key) > MaxBusinessKeyLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidBusinessKey, len(key), MaxBusinessKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: byte %#02x at %d (printable ASCII without spaces only)", ErrInvalidBusinessKey, c, i)
		}
	}
	return nil
}

// StartOption configures one Start call.
type StartOption interface{ applyStart(*startOptions) }

type startOptions struct {
	keyed bool
	key   string
}

type startOptFunc func(*startOptions)

func (f startOptFunc) applyStart(o *startOptions) { f(o) }

// WithBusinessKey makes Start idempotent per key within the orchestrator's
// scope and domain: the first Start with key starts the saga, every later
// one returns that saga's id and an *ExistsError (errors.Is(err,
// ErrExists)), on any instance and also after the first Start's process
// died mid-way (see Start). The key must pass ValidBusinessKey; the store
// must implement eventstore.BusinessKeys (both stores of this module do).
func WithBusinessKey(key string) StartOption {
	return startOptFunc(func(o *startOptions) { o.keyed, o.key = true, key })
}

// startOptionsOf applies opts and checks them.
func startOptionsOf(opts []StartOption) (startOptions, error) {
	var so startOptions
	for _, o := range opts {
		if o != nil {
			o.applyStart(&so)
		}
	}
	if so.keyed {
		if err := ValidBusinessKey(so.key); err != nil {
			return so, err
		}
	}
	return so, nil
}

// WithBusinessKeyGrace sets how long after a Start claimed a business key
// another Start waits for its saga to appear before taking the claim over
// and creating the saga itself (DefaultBusinessKeyGrace, 10s; at least
// 1s). A duplicate Start that finds the key claimed and its saga missing
// waits up to this long (within its context). A claimer that needs more
// than half of it between its claim and its create confirms its claim with
// one more LWT before sending its first command. The clocks of the
// instances must differ by less than half of it.
func WithBusinessKeyGrace(d time.Duration) Option {
	return optFunc(func(c *config) { c.keyGrace = d })
}

// WithBusinessKeyRetention sets how long a business key is kept after its
// claim (a TTL on its row; default the transaction lifetime of
// WithRecovery's configuration, 24h by default): a Start with the key after
// that starts a new saga. It must be at least twice the grace period.
func WithBusinessKeyRetention(d time.Duration) Option {
	return optFunc(func(c *config) { c.keyRetention = d })
}

// businessKeyDefaults fills in the business-key settings left at zero and
// returns what is wrong with them.
func (c *config) businessKeyDefaults() []error {
	var errs []error
	if c.keyGrace == 0 {
		c.keyGrace = DefaultBusinessKeyGrace
	}
	if c.keyGrace < time.Second {
		errs = append(errs, fmt.Errorf("orchestrator: WithBusinessKeyGrace(%v): want at least 1s", c.keyGrace))
	}
	if c.keyRetention == 0 {
		c.keyRetention = c.recovery.TransactionLifetime
		if c.keyRetention <= 0 {
			c.keyRetention = recovery.DefaultTransactionLifetime
		}
	}
	if c.keyRetention < 2*c.keyGrace {
		errs = append(errs, fmt.Errorf("orchestrator: WithBusinessKeyRetention(%v): want at least twice the grace period (%v)", c.keyRetention, c.keyGrace))
	}
	return errs
}

// Bounds of the polls of a Start that waits for the saga of a key claimed
// by another Start.
const (
	claimPollMin = 50 * time.Millisecond
	claimPollMax = time.Second
)

// startKeyed is Start with the business key key: it claims the key for the
// saga txID (payload, created now) and creates it, or finds the saga the
// key names, or takes over a claim whose saga was never created (see the
// top of this file).
func (o *Orchestrator[T]) startKeyed(ctx context.Context, entity T, span trace.Span, key, txID string, payload []byte, now time.Time) (string, error) {
	keys, ok := o.store.(eventstore.BusinessKeys)
	if !ok {
		return "", ErrNoBusinessKeys
	}
	claim := eventstore.BusinessKey{
		BusinessKeyID: eventstore.BusinessKeyID{Scope: o.scope, Domain: o.domain.Name, Key: key},
		TxID:          txID, Payload: payload, CreatedAt: now, Owner: uuid.NewString(), ClaimedAt: now,
	}
	for delay := claimPollMin; ; {
		applied, cur, err := keys.InsertBusinessKey(ctx, claim, o.cfg.keyRetention)
		if err != nil {
			return "", fmt.Errorf("orchestrator: claim business key %q: %w", key, err)
		}
		if applied {
			return o.launch(ctx, entity, span, eventstore.Transaction{TxID: txID, Payload: payload, CreatedAt: now}, &claim)
		}
		if cur.Settled {
			return cur.TxID, &ExistsError{Key: key, TxID: cur.TxID}
		}
		found, err := o.sagaExists(ctx, cur.TxID)
		if err != nil {
			return "", fmt.Errorf("orchestrator: read the saga of business key %q: %w", key, err)
		}
		if found {
			return cur.TxID, &ExistsError{Key: key, TxID: cur.TxID}
		}
		if o.cfg.now().Sub(cur.ClaimedAt) >= o.cfg.keyGrace {
			id, again, err := o.takeOver(ctx, span, keys, cur)
			if !again {
				return id, err
			}
			continue // the row changed under us: look again at once
		}
		if !wait.Sleep(ctx, delay) {
			return "", fmt.Errorf("orchestrator: start with business key %q: waiting for the saga %s of its claim: %w", key, cur.TxID, ctx.Err())
		}
		delay = min(2*delay, claimPollMax)
	}
}

// takeOver takes over cur, a claim older than the grace period whose saga
// did not exist, and creates that saga. again means the claim changed
// before the takeover (another Start took it over, or settled or released
// it): look again.
func (o *Orchestrator[T]) takeOver(ctx context.Context, span trace.Span, keys eventstore.BusinessKeys, cur eventstore.BusinessKey) (_ string, again bool, _ error) {
	taken := cur
	taken.Owner, taken.Generation, taken.ClaimedAt, taken.Settled = uuid.NewString(), cur.Generation+1, o.cfg.now(), false
	if taken.Generation > eventstore.MaxFence {
		return "", false, fmt.Errorf("orchestrator: business key %q taken over %d times", cur.Key, cur.Generation)
	}
	applied, _, err := keys.ReplaceBusinessKey(ctx, taken, cur.Owner, o.cfg.keyRetention)
	if err != nil {
		return "", false, fmt.Errorf("orchestrator: take over business key %q: %w", cur.Key, err)
	}
	if !applied {
		return "", true, nil
	}
	exists := &ExistsError{Key: cur.Key, TxID: cur.TxID}
	// A create acknowledged before the takeover is visible now.
	found, err := o.sagaExists(ctx, cur.TxID)
	if err != nil {
		return "", false, fmt.Errorf("orchestrator: read the saga of business key %q: %w", cur.Key, err)
	}
	if found {
		return cur.TxID, false, exists
	}
	var entity T
	if len(cur.Payload) > 0 {
		if err := msgpack.Unmarshal(cur.Payload, &entity); err != nil {
			return "", false, fmt.Errorf("orchestrator: business key %q: decode the entity of its first claim: %w", cur.Key, err)
		}
	}
	o.logger().Info("orchestrator: business key claimed by a Start that did not create its saga: creating it now",
		"key", cur.Key, "tx", cur.TxID, "claimed_at", cur.ClaimedAt, "generation", taken.Generation)
	base := eventstore.Transaction{TxID: cur.TxID, Payload: cur.Payload, CreatedAt: cur.CreatedAt, Fence: taken.Generation, LifetimeStart: taken.ClaimedAt}
	id, err := o.launch(ctx, entity, span, base, &taken)
	if err != nil {
		return id, false, err
	}
	exists.TookOver = true
	return id, false, exists
}

// confirmKey settles claim once its saga is created, if the claim is old
// enough to have been taken over (half the grace period): an error means
// the saga was created but its first command must not be sent by this
// Start (ErrExists: the claim was taken over and the taker drives the
// saga; another error: the store could not tell, and the saga's watchdog
// restores it if the claim held).
func (o *Orchestrator[T]) confirmKey(ctx context.Context, claim *eventstore.BusinessKey) error {
	if o.cfg.now().Sub(claim.ClaimedAt) < o.cfg.keyGrace/2 {
		return nil
	}
	settled := *claim
	settled.Settled = true
	applied, _, err := o.store.(eventstore.BusinessKeys).ReplaceBusinessKey(ctx, settled, claim.Owner, o.cfg.keyRetention)
	switch {
	case err != nil:
		return fmt.Errorf("orchestrator: saga %s created, but the claim of its business key %q could not be confirmed (its watchdog restores the saga if the claim held): %w", claim.TxID, claim.Key, err)
	case !applied:
		o.logger().Warn("orchestrator: business key taken over while its saga was being created: the taker drives the saga", "key", claim.Key, "tx", claim.TxID)
		return &ExistsError{Key: claim.Key, TxID: claim.TxID}
	}
	return nil
}

// keyedCreateFailed handles the failed create (err) of a saga started
// under claim: a first claim whose saga was not created, or will never
// run, is released; a taken id means the saga exists.
func (o *Orchestrator[T]) keyedCreateFailed(ctx context.Context, claim *eventstore.BusinessKey, err error) (string, error) {
	if errors.Is(err, eventstore.ErrExists) {
		// The store detects taken ids (the memory store): the claimer that
		// replaced this Start created the saga, or (claim is a takeover)
		// the claimer this Start replaced created it after this Start found
		// it missing. That one is past half the grace period, so it
		// confirms its claim, loses it and sends nothing: the step is sent
		// here.
		if claim.Generation > 0 {
			if rerr := o.Restore(ctx, claim.TxID); rerr != nil && !errors.Is(rerr, ErrNotInFlight) {
				o.logger().Warn("orchestrator: could not send the first step of a saga created by the Start whose business key this Start took over; its watchdog restores it",
					"key", claim.Key, "tx", claim.TxID, "err", rerr)
			}
		}
		return claim.TxID, &ExistsError{Key: claim.Key, TxID: claim.TxID}
	}
	var undone startUndone
	if !mayHaveLanded(err) || errors.As(err, &undone) {
		o.releaseKey(ctx, claim)
	}
	return "", err
}

// releaseKey deletes claim, if it is a first claim and still held by its
// owner, so that the next Start with its key starts at once. A taker never
// releases: the create of the claimer it replaced may still land. A
// release that fails leaves the claim to be taken over after the grace
// period.
func (o *Orchestrator[T]) releaseKey(ctx context.Context, claim *eventstore.BusinessKey) {
	if claim.Generation > 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, _, err := o.store.(eventstore.BusinessKeys).DeleteBusinessKey(rctx, claim.BusinessKeyID, claim.Owner); err != nil {
		o.logger().Warn("orchestrator: could not release the business key of a saga that did not start; a Start with the key creates the saga after the grace period",
			"key", claim.Key, "tx", claim.TxID, "err", err)
	}
}

// sagaExists reports whether the saga txID has a row.
func (o *Orchestrator[T]) sagaExists(ctx context.Context, txID string) (bool, error) {
	_, err := o.readState(ctx, txID)
	if errors.Is(err, eventstore.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// readState reads the state of the saga txID: alone where the store can
// (eventstore.StateReader), else with the whole row.
func (o *Orchestrator[T]) readState(ctx context.Context, txID string) (eventstore.State, error) {
	if sr, ok := o.store.(eventstore.StateReader); ok {
		return sr.TransactionState(ctx, o.scope, txID)
	}
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	return tx.State, err
}
