// Package eventstore defines the persistence seam of StackSaga: saga rows,
// their step history (tryouts), frozen sagas, execution markers and the
// recovery directory. Implementations live in subpackages (memory,
// cassandra) so that importing this package pulls in no database driver.
// Every implementation runs the conformance suite in eventstore/storetest.
package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors callers branch on.
var (
	// ErrNotFound means the row does not exist.
	ErrNotFound = errors.New("eventstore: not found")
	// ErrExists means a conditional create found the row already there.
	ErrExists = errors.New("eventstore: already exists")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("eventstore: closed")
	// ErrInvalid means an argument cannot be stored: an empty key
	// component, a window outside 0..1439, a negative bucket, a tryout of
	// another saga. Every error wrapping ErrInvalid also matches
	// ErrPermanent.
	ErrInvalid error = &sentinel{"eventstore: invalid argument", ErrPermanent}
	// ErrPermanent means the call can never succeed as made: making it
	// again fails the same way, so a caller retrying it would retry for
	// ever (a consumer should dead-letter the record instead). It covers
	// ErrInvalid and, in the Cassandra store, what Cassandra refuses as
	// invalid (error 0x2200: a key that is not valid UTF-8 or over 64 KiB,
	// text that is not valid UTF-8, but also a table missing from the
	// schema), a syntax error (0x2000), an unauthorized request (0x2100), a
	// configuration error (0x2300), and a value the driver cannot marshal.
	// Some of these (a missing table or permission) refuse every call
	// until an operator acts, not only the one record.
	ErrPermanent = errors.New("eventstore: permanent failure")
	// ErrOutcomeUnknown means a conditional write (a Cassandra lightweight
	// transaction) may or may not have been applied: it timed out after the
	// replicas may have accepted it (a WriteTimeout of type CAS, a
	// CAS_WRITE_UNKNOWN), or found too few replicas alive in a phase that
	// may follow their acceptance (Unavailable), and every retry that would
	// have told (an LWT retried first completes any round in flight, then
	// finds its own effect) failed the same way. A caller must treat the
	// write as possibly landed: it may take effect later, when a quorum
	// completes the round. It is transient: calling again once the replicas
	// answer learns the outcome.
	ErrOutcomeUnknown = errors.New("eventstore: outcome unknown")
)

// sentinel is an error value that also matches parent with errors.Is.
type sentinel struct {
	msg    string
	parent error
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return s.parent }

// Scope is the partition-key prefix shared by every table: the region, the
// virtual cluster and the orchestrating service.
type Scope struct {
	Region  string
	Cluster string
	Service string
}

// Validate returns an error wrapping ErrInvalid if a component is empty.
func (s Scope) Validate() error {
	switch {
	case s.Region == "":
		return fmt.Errorf("%w: empty scope region", ErrInvalid)
	case s.Cluster == "":
		return fmt.Errorf("%w: empty scope cluster", ErrInvalid)
	case s.Service == "":
		return fmt.Errorf("%w: empty scope service", ErrInvalid)
	}
	return nil
}

// State is a saga's state.
type State string

// Saga states (docs/concepts.md and docs/design.md).
const (
	StateStarted            State = "STARTED"
	StateInProgress         State = "IN_PROGRESS"
	StateCompleted          State = "COMPLETED"
	StateFailed             State = "FAILED"
	StateCompensating       State = "COMPENSATING"
	StateCompensated        State = "COMPENSATED"
	StateCompensationFailed State = "COMPENSATION_FAILED"
	StatePaused             State = "PAUSED"
	// StateRetryPending parks a saga after a retryable error until the
	// recovery engine (or an explicit re-drive) sends the step again.
	StateRetryPending State = "RETRY_PENDING"
	// StateDisabled freezes a saga that outlived its transaction lifetime
	// before it ended: the recovery engine no longer re-drives it, and it
	// is copied to the frozen table with the reason. It is not terminal: an
	// admin can restore it (sagactl restore), which extends its lifetime
	// and re-drives it.
	StateDisabled State = "DISABLED"
	// StateCancelling marks a saga cancelled (orchestrator Cancel) while
	// one of its forward steps was in flight: it goes no further, and once
	// that step's reply arrives (or its step timeout passes) it
	// compensates the steps it completed, that one included if it
	// succeeded. A cancelled saga ends COMPENSATED (or
	// COMPENSATION_FAILED); its history holds a "cancelled" row naming who
	// cancelled it and why.
	StateCancelling State = "CANCELLING"
	// StateTerminated ends a saga stopped by an operator (orchestrator
	// Terminate): nothing more runs and nothing is compensated; its
	// history holds a "terminated" row naming who terminated it and why.
	// It is terminal.
	StateTerminated State = "TERMINATED"
)

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool {
	return s == StateCompleted || s == StateCompensated || s == StateCompensationFailed || s == StateTerminated
}

// LifetimeFrom returns when tx's transaction lifetime started counting:
// LifetimeStart, or CreatedAt when that is zero.
func (tx *Transaction) LifetimeFrom() time.Time {
	if !tx.LifetimeStart.IsZero() {
		return tx.LifetimeStart
	}
	return tx.CreatedAt
}

// Transaction is one saga: the row of es_transaction.
type Transaction struct {
	Scope
	TxID   string
	Domain string
	State  State
	// Version counts the transitions written; it starts at 1 on create.
	// It must lie in 0..MaxVersion.
	Version int64
	// Fence counts the writes made away from the reply path (a disable, an
	// admin's restore, a pause's deadline): such a writer increments it
	// with Version, every other writer keeps the Fence of the row it read.
	// A write of a higher Fence wins over every write of a lower one,
	// whatever their versions (see Store.Transition), so a reply applied to
	// a state read before such a write can never overwrite it, not even at
	// the same Version. LoadTransaction returns the Fence of the stored
	// row; it must lie in 0..MaxFence.
	Fence int64
	// Span is the index of the current step; Kind is "process" while going
	// forward and "revert" while compensating; Endpoint names the step.
	Span     int
	Kind     string
	Endpoint string
	Attempt  int
	// Payload is the serialised domain entity after the last applied step.
	Payload []byte
	// Completed lists the spans whose forward action succeeded, in order,
	// with the endpoint each ran (compensation walks it in reverse).
	Completed []CompletedSpan
	// Hints is the revert hint store.
	Hints map[string]string
	// Error is the last error message (non-retryable or retryable).
	Error string
	// RestorePath locates the restore watchdog row of the recovery
	// directory for this saga, if one was registered.
	RestorePath *RecoveryPath
	// PausedUntil is the deadline of a paused span (zero: no deadline).
	PausedUntil time.Time
	// PauseEvent names what a PAUSED saga waits for.
	PauseEvent string
	// TraceID is the W3C trace id (32 lowercase hex digits) of the saga's
	// trace, set at start when the orchestrator traces and the trace is
	// sampled; empty otherwise. The Trace Window links it to the tracing UI.
	TraceID string
	// TraceParent is the W3C traceparent of the span that started the saga
	// (empty when the orchestrator did not trace): the spans of re-drives,
	// restores, resumes and pause deadlines, which no message carries a
	// trace context to, continue the saga's trace from it.
	TraceParent string
	// Definition is the version of the domain's definition the saga was
	// started with (orchestrator.Definition): the saga is driven by that
	// version until it ends. 0 is a row written before definitions had
	// versions (or by a writer that does not set it); the orchestrator
	// reads it as version 1. It must lie in 0..MaxDefinition and is
	// written at create and kept by every later write.
	Definition int
	// LifetimeStart is when the saga's transaction lifetime started
	// counting: zero means CreatedAt; an admin's restore of a DISABLED
	// saga sets it to the time of the restore (see Lifetime).
	LifetimeStart time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// CompletedSpan is a forward step that succeeded.
type CompletedSpan struct {
	Span     int
	Endpoint string
	// Compensable is false for query steps, which have no compensation.
	Compensable bool
}

// Tryout is one step attempt: a row of es_transaction_tryout, clustered by
// Index ascending within the saga's partition.
type Tryout struct {
	TxID     string
	Index    int
	Span     int
	Kind     string
	Endpoint string
	// Query is set by orchestrator.History for a query step (one without
	// a compensation); stores do not keep it (they keep an internal suffix
	// on Endpoint, which History removes).
	Query   bool
	Attempt int
	// Outcome is "ok", "retryable", "non_retryable", "paused", "sent",
	// "resumed", "unsent" (the command could not be published; Error says
	// why), or "cancelled" and "terminated" (an operator's Cancel or
	// Terminate; Error then says who asked and why).
	Outcome string
	Error   string
	// Before is the domain entity before the step (the snapshot a paused or
	// retried step is re-invoked against); After the one it produced.
	Before        []byte
	After         []byte
	ResumeContext []byte
	StartedAt     time.Time
	FinishedAt    time.Time
}

// Store is the persistence seam. All methods are safe for concurrent use.
//
// Every implementation has the same semantics (eventstore/storetest checks
// them): times are kept in UTC at millisecond precision; empty byte slices,
// slices and maps read back as nil; values are copied in and out, so
// callers may reuse or modify what they pass and get; an empty Scope
// component or transaction id fails with ErrInvalid; a closed store fails
// with ErrClosed.
type Store interface {
	// CreateTransaction inserts a new saga row (and its first tryout, if
	// any). Transaction ids are unique by construction: the memory store
	// returns ErrExists for a taken id, the Cassandra store does not check
	// (it writes without a lightweight transaction) and a second create of
	// the same id then behaves as a Transition of the same version.
	CreateTransaction(ctx context.Context, tx Transaction, first *Tryout) error
	// LoadTransaction reads a saga row; ErrNotFound if absent.
	LoadTransaction(ctx context.Context, scope Scope, txID string) (Transaction, error)
	// Transition writes the saga row and, if non-nil, a tryout row in one
	// same-partition batch (one round trip). It is an upsert (it does not
	// check that the row exists; the caller increments Version) ordered by
	// the fence: writes of one saga are ordered by (Fence, Version), and a
	// write takes effect only as far as that order lets it, whatever order
	// the writes arrive in (WriteTime is the order as one number):
	//   - the row: a write replaces every field of the stored row if it is
	//     later, and is discarded without an error if it is earlier (a
	//     zombie writer cannot undo a newer state). Two writes of the same
	//     Fence and Version merge field by field, as Cassandra merges two
	//     cells of one write timestamp: of each field, the value whose
	//     stored bytes compare greater wins (text and blobs bytewise,
	//     integers and times as unsigned big-endian, an empty or zero value
	//     lowest, the completed list and the hints by their serialised
	//     form). Write each version once: a writer away from the reply path
	//     raises Fence so that it never shares a version with a reply.
	//   - the tryout slot of its Version (the tryout Index a write of that
	//     version carries, as the orchestrator writes them): a write with a
	//     tryout puts it at tryout.Index, a write without one deletes the
	//     tryout at Index tx.Version (a tryout of the same Fence and
	//     Version, or an older one, is removed); between two tryouts of one
	//     Index the later write wins whole, and tryouts of the same Fence
	//     and Version merge as rows do.
	//   - a write with Fence > 0 removes every tryout at an Index of at
	//     least tx.Version written with a lower Fence: the tryouts of
	//     writes that lost to the fence are discarded even when they arrive
	//     later.
	// So a write discarded by the fence leaves no tryout of its own when
	// its tryout's Index is its Version and the winning writes wrote that
	// version (the tryout is then discarded, or merged into the winner's
	// of the same version). A tryout with an empty TxID takes tx.TxID; a
	// tryout of another saga, a Version outside 0..MaxVersion or a Fence
	// outside 0..MaxFence fail with ErrInvalid.
	Transition(ctx context.Context, tx Transaction, tryout *Tryout) error
	// Tryouts returns a saga's step history ordered by Index.
	Tryouts(ctx context.Context, scope Scope, txID string) ([]Tryout, error)

	// Freeze copies a saga into es_frozen_transaction (it stays readable
	// with LoadTransaction). Unfreeze removes the copy of tx's saga. Both
	// are ordered as the saga's writes are (WriteTime of their tx, see
	// Transition), whatever order they arrive in: Unfreeze removes a copy
	// frozen at the same or an earlier (Fence, Version) than its tx, also
	// one that arrives after it (a late freeze cannot quarantine a saga
	// restored since), and a copy frozen at a later one stays or lands.
	// Between two copies the later wins (two of the same one merge as rows
	// do). Pass Unfreeze the row as written by the transition that
	// releases the saga. A frozen copy does not keep the Fence (it reads
	// back as 0).
	Freeze(ctx context.Context, tx Transaction, reason string) error
	Unfreeze(ctx context.Context, tx Transaction) error
	// ListFrozen lists frozen sagas of a scope ordered by TxID, at most
	// limit (<= 0: all).
	ListFrozen(ctx context.Context, scope Scope, limit int) ([]FrozenTransaction, error)
	// ListFrozenAfter is ListFrozen starting after afterTxID (paging).
	ListFrozenAfter(ctx context.Context, scope Scope, afterTxID string, limit int) ([]FrozenTransaction, error)
	// GetFrozen reads one frozen saga; ErrNotFound if it is not frozen.
	GetFrozen(ctx context.Context, scope Scope, txID string) (FrozenTransaction, error)

	Markers
	Directory

	// Close releases the store; it is safe to call twice.
	Close() error
}

// StateReader is an optional part of a Store: reading a saga's state
// alone, without its payload, completed list and hints. Both stores of this
// module implement it; callers check for it at run time and fall back to
// LoadTransaction. The conformance suite checks it on stores that have it.
type StateReader interface {
	// TransactionState returns the State of a saga row (what
	// LoadTransaction would return in Transaction.State); ErrNotFound if
	// absent. Arguments and a closed store fail as with LoadTransaction.
	TransactionState(ctx context.Context, scope Scope, txID string) (State, error)
}

// WatchedCreator is an optional part of a Store: creating a saga and
// writing its restore watchdog (the tier-5 row of the recovery directory
// that tx.RestorePath names) in one statement, where the store can.
// Without it a saga's start costs two round trips in a row: the watchdog
// first, so that no saga row is ever left without one, then the create.
// Both stores of this module implement it (the Cassandra store with one
// unlogged batch); the orchestrator uses it when the watchdog's bucket
// already has its tiers 1-4 keys (recovery.Writer.RegisterRestoreVia) and
// falls back to the two writes otherwise. The conformance suite checks it
// on stores that have it.
type WatchedCreator interface {
	// CreateTransactionWatched is CreateTransaction plus PutRecoveryEntry
	// of watchdog, written together. watchdog must be a restore row (odd
	// bucket) of tx.TxID at tx.RestorePath (ValidateWatched); otherwise
	// it fails with ErrInvalid. ErrInvalid, ErrExists (a store that
	// detects a taken id), ErrPermanent (a statement the database rejects
	// before applying any of it) and ErrClosed (a store closed before the
	// call, or before the write was sent) write nothing; on any other error,
	// a write cut off by Close included,
	// either write, or both, may have landed, and may still land later
	// (the orchestrator then marks the saga failed at the next version,
	// or failing that writes the watchdog again alone).
	CreateTransactionWatched(ctx context.Context, tx Transaction, first *Tryout, watchdog RecoveryEntry) error
}

// FrozenTransaction is a row of es_frozen_transaction.
type FrozenTransaction struct {
	Transaction
	Reason   string
	FrozenAt time.Time
}

// MaxDefinition bounds Transaction.Definition (a CQL int).
const MaxDefinition = 1<<31 - 1

// MaxVersion and MaxFence bound Transaction.Version and Transaction.Fence
// (see WriteTime).
const (
	MaxVersion = 1<<FenceShift - 1
	MaxFence   = 1<<24 - 1
)

// FenceShift is where Fence starts in a WriteTime.
const FenceShift = 24

// WriteTime is the order of tx's writes among those of its saga as one
// number: tx.CreatedAt in microseconds (truncated to the millisecond),
// plus Fence shifted by FenceShift, plus Version. The Cassandra store
// writes the saga row and its tryouts at this write timestamp, so that
// Cassandra itself applies the order of Store.Transition at no cost in
// round trips; the memory store compares the same numbers. With Fence 0
// it is the timestamp of releases before Fence existed.
func WriteTime(tx Transaction) int64 {
	return writeBase(tx.CreatedAt) + tx.Fence<<FenceShift + tx.Version
}

// FenceOf returns the Fence of a saga row of version created at createdAt
// whose write timestamp is ts: the inverse of WriteTime (0 when ts is below
// the row's base). A row whose timestamp WriteTime did not make (its low
// bits are not its version: a release before the fence wrote it at the
// server's time) gets the fence just above its timestamp, so that the next
// write of the saga lands over it instead of being discarded.
func FenceOf(createdAt time.Time, ts, version int64) int64 {
	d := max(0, ts-writeBase(createdAt))
	f := d >> FenceShift
	if d&(1<<FenceShift-1) != version {
		f++
	}
	return min(f, MaxFence)
}

// writeBase is createdAt in microseconds, truncated to the millisecond (0
// for the zero time).
func writeBase(createdAt time.Time) int64 {
	if createdAt.IsZero() {
		return 0
	}
	return StoredTime(createdAt).UnixMilli() * 1000
}

// StoredTime returns t as every store keeps a timestamp: UTC, truncated to
// the millisecond. The zero time stays zero.
func StoredTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Truncate(time.Millisecond).UTC()
}
