// Package sqlbarrier gives saga steps that write to the service's own SQL
// database (PostgreSQL) exactly-once effects over Kafka's at-least-once
// delivery: a local-transaction barrier, like dtm's sub-transaction barrier,
// for the steps of a worker.
//
// A step registered with Register gets a *sql.Tx that the barrier opened.
// In that transaction the barrier first inserts the step's barrier row
// (transaction id, span, kind process/revert, attempt), then runs the
// handler, then records the reply in the row and commits: the business
// writes and the barrier row are committed together or not at all, and the
// reply is produced only after the commit. So:
//
//   - a duplicate of a committed step (a redelivery after a crash between
//     the commit and the reply, a twin worker, the orchestrator's re-send)
//     is answered with the recorded reply without running the handler; one
//     arriving while the first run is in flight waits on the row's unique
//     key and then gets the recorded reply (or runs, if the first rolled
//     back);
//   - a revert that arrives before its process (or without one) inserts the
//     process's row as "voided" and replies ok without running the revert
//     handler (null compensation); the process arriving later finds the
//     voided row and runs nothing (hanging protection). A revert of a
//     process that failed, and so committed nothing, runs nothing either;
//     a revert of a process that committed runs, even when the process's
//     recorded reply cannot be read (a row of a newer build).
//     A revert that finds no process row but says the orchestrator holds
//     the process's ok reply (topics.Envelope.ActionDone, which this
//     project's orchestrator sets on every revert: it compensates completed
//     steps only) compensates: the row was deleted by a retention shorter
//     than the saga, or the process ran before the step used the barrier;
//   - a retryable error rolls everything back and records nothing, so the
//     re-driven step runs again; a non-retryable one rolls the business
//     writes back and records the failure reply, which answers the
//     duplicates of that attempt: a later attempt (a saga restored after
//     COMPENSATION_FAILED) runs again, as does a later attempt of a step
//     that paused its saga. Which recorded outcome answers an attempt is
//     the answer package's rule (answer.ForAttempt, answer.Compensates),
//     shared with writeprotect and sagatest.
//
// The guarantee covers the writes made through the *sql.Tx only: calls to
// other systems from inside the handler (HTTP, another database) are not
// rolled back and may run more than once.
//
// Wiring: the Barrier is the worker's Guard (worker.WithGuard); commands of
// endpoints registered with worker.Register go to the guard given with
// WithInner (by default they run as they are).
//
//	db, _ := sql.Open("pgx", dsn)
//	_, _ = sqlbarrier.CreateSchema(ctx, db, "")
//	b, _ := sqlbarrier.New(db)
//	w, _ := worker.New("payment", worker.WithGuard(b))
//	_ = sqlbarrier.Register(w, b, sqlbarrier.Endpoint[Order]{Name: "charge", Process: charge, Revert: refund})
//	go b.RunCleanup(ctx, time.Hour)
//	_ = w.Run(ctx)
package sqlbarrier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stacksaga-go/stacksaga/answer"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Defaults of the options.
const (
	// DefaultRetention is how long barrier rows are kept (WithRetention).
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultCleanupBatch is the rows one cleanup statement deletes.
	DefaultCleanupBatch = 1000
)

// Sentinel errors.
var (
	// ErrNoBarrier is the (non-retryable) error of a step registered with
	// Register whose worker does not run its commands through the Barrier
	// (worker.WithGuard(b) is missing).
	ErrNoBarrier = errors.New("sqlbarrier: the step has no barrier transaction (is the Barrier the worker's guard?)")
	// ErrHanging is the error of the reply to a process command that
	// arrives after its revert: the step was compensated before it ran,
	// so it does not run.
	ErrHanging = errors.New("sqlbarrier: the step was compensated before it ran (hanging command); not run")
)

// Row states.
const (
	stateRunning = "running" // inserted by an execution not yet committed
	stateDone    = "done"    // reply recorded
	stateVoided  = "voided"  // a process row inserted by a revert that came first
)

// Option configures a Barrier.
type Option func(*Barrier)

// WithTable names the barrier table (default DefaultTable); see ValidTable.
func WithTable(name string) Option { return func(b *Barrier) { b.table = name } }

// WithInner sets the guard for the commands of endpoints that were not
// registered with Register (say, a writeprotect.Guard); the default runs
// them as they are.
func WithInner(g worker.Guard) Option { return func(b *Barrier) { b.inner = g } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(b *Barrier) { b.log = l } }

// WithClock sets the clock that stamps barrier rows and ages them for
// Cleanup (default time.Now).
func WithClock(now func() time.Time) Option { return func(b *Barrier) { b.now = now } }

// WithRetention sets how long a barrier row is kept after it was written
// (default DefaultRetention). It must be longer than any saga lives
// (retries, pauses, the restore watchdog): a revert arriving after its
// process's row was deleted is taken as a null compensation.
func WithRetention(d time.Duration) Option { return func(b *Barrier) { b.retention = d } }

// WithCleanupBatch sets the rows one cleanup statement deletes (default
// DefaultCleanupBatch).
func WithCleanupBatch(n int) Option { return func(b *Barrier) { b.batch = n } }

// Stats counts what a Barrier did.
type Stats struct {
	// Ran counts the handler runs whose outcome was committed (ok or
	// non-retryable).
	Ran uint64
	// Duplicates counts commands answered with a recorded reply.
	Duplicates uint64
	// NullCompensations counts reverts answered without running the
	// handler because their process never committed.
	NullCompensations uint64
	// Hanging counts process commands that arrived after their revert.
	Hanging uint64
	// RolledBack counts runs rolled back on a retryable outcome.
	RolledBack uint64
}

// Barrier is a worker.Guard that runs the steps registered with Register in
// a local transaction with their barrier row. Make one with New.
type Barrier struct {
	db        *sql.DB
	table     string
	inner     worker.Guard
	log       *slog.Logger
	now       func() time.Time
	retention time.Duration
	batch     int

	mu        sync.RWMutex
	endpoints map[string]bool

	ran, dups, nulls, hanging, rolledBack atomic.Uint64

	// crash, when set (tests), is called at the named points of an
	// execution: "handled" (the handler returned, nothing committed) and
	// "committed" (committed, the reply not yet produced).
	crash func(point string)

	sqlInsert, sqlSelect, sqlUpdate, sqlRecord, sqlDelete string
}

// New makes a Barrier over db, whose barrier table must exist (CreateSchema).
func New(db *sql.DB, opts ...Option) (*Barrier, error) {
	b := &Barrier{
		db: db, table: DefaultTable, inner: passThrough{}, log: slog.Default(), now: time.Now,
		retention: DefaultRetention, batch: DefaultCleanupBatch, endpoints: map[string]bool{},
	}
	for _, o := range opts {
		if o != nil {
			o(b)
		}
	}
	var errs []error
	if db == nil {
		errs = append(errs, errors.New("sqlbarrier: nil db"))
	}
	if err := ValidTable(b.table); err != nil {
		errs = append(errs, err)
	}
	if b.inner == nil {
		errs = append(errs, errors.New("sqlbarrier: nil inner guard"))
	}
	if b.log == nil {
		errs = append(errs, errors.New("sqlbarrier: nil logger"))
	}
	if b.now == nil {
		errs = append(errs, errors.New("sqlbarrier: nil clock"))
	}
	if b.retention <= 0 {
		errs = append(errs, fmt.Errorf("sqlbarrier: retention %v <= 0", b.retention))
	}
	if b.batch < 1 {
		errs = append(errs, fmt.Errorf("sqlbarrier: cleanup batch %d < 1", b.batch))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t := b.table
	b.sqlInsert = `INSERT INTO ` + t + ` (tx_id, span, kind, attempt, state, recorded_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tx_id, span, kind) DO NOTHING`
	b.sqlSelect = `SELECT attempt, state, paused, reply FROM ` + t + ` WHERE tx_id = $1 AND span = $2 AND kind = $3 FOR UPDATE`
	b.sqlUpdate = `UPDATE ` + t + ` SET attempt = $4, state = 'done', paused = $5, reply = $6, recorded_at = $7 WHERE tx_id = $1 AND span = $2 AND kind = $3`
	// A failure is recorded after the rollback of the business writes, in
	// a transaction of its own (see recordFailure).
	b.sqlRecord = `INSERT INTO ` + t + ` (tx_id, span, kind, attempt, state, paused, reply, recorded_at) VALUES ($1, $2, $3, $4, 'done', false, $5, $6) ON CONFLICT (tx_id, span, kind) DO NOTHING`
	b.sqlDelete = `DELETE FROM ` + t + ` WHERE (tx_id, span, kind) IN (SELECT tx_id, span, kind FROM ` + t + ` WHERE recorded_at < $1 LIMIT $2)`
	return b, nil
}

// Stats returns the barrier's counters.
func (b *Barrier) Stats() Stats {
	return Stats{Ran: b.ran.Load(), Duplicates: b.dups.Load(), NullCompensations: b.nulls.Load(),
		Hanging: b.hanging.Load(), RolledBack: b.rolledBack.Load()}
}

// Table returns the barrier table's name.
func (b *Barrier) Table() string { return b.table }

func (b *Barrier) add(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.endpoints[name] {
		return false
	}
	b.endpoints[name] = true
	return true
}

func (b *Barrier) has(name string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.endpoints[name]
}

type passThrough struct{}

func (passThrough) Execute(ctx context.Context, _ *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	return run(ctx), nil
}

// txKey carries the barrier's transaction to the handler.
type txKey struct{}

// Execute implements worker.Guard: the command of an endpoint registered
// with Register runs in a transaction with its barrier row (see the package
// documentation); any other goes to the inner guard. An error (the database
// unreachable, the commit's outcome unknown) makes the worker call Execute
// again later.
func (b *Barrier) Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	if !b.has(cmd.Endpoint) {
		return b.inner.Execute(ctx, cmd, run)
	}
	switch cmd.Kind {
	case topics.KindProcess, topics.KindRevert:
	default:
		return unchanged(cmd, topics.OutcomeNonRetryable, fmt.Sprintf("sqlbarrier: unknown command kind %q", cmd.Kind)), nil
	}
	for try := 1; ; try++ {
		rep, again, err := b.execute(ctx, cmd, run)
		if !again {
			return rep, err
		}
		if try == 3 {
			// Three reads found the row gone, deleted by the cleanup each
			// time (a database error is returned as it is, above).
			return nil, fmt.Errorf("sqlbarrier: the barrier row of %s span %d %s keeps changing", cmd.TxID, cmd.Span, cmd.Kind)
		}
	}
}

// execute is one try of Execute; again asks for another (a row seen by the
// insert vanished before it could be read: the cleanup deleted it).
func (b *Barrier) execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (_ *topics.Envelope, again bool, err error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, fmt.Errorf("sqlbarrier: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	now := b.now()
	kind := string(cmd.Kind)
	runHandler := true
	if cmd.Kind == topics.KindRevert {
		// Void the process unless it ran: a process arriving later finds
		// the voided row and runs nothing. The insert waits for a process
		// in flight to commit or roll back.
		res, err := tx.ExecContext(ctx, b.sqlInsert, cmd.TxID, cmd.Span, string(topics.KindProcess), 0, stateVoided, now)
		if err != nil {
			return nil, false, fmt.Errorf("sqlbarrier: void process: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			// No process row. A revert saying that the orchestrator holds
			// the process's ok reply (ActionDone) compensates anyway: the
			// process ran, its row is gone (a retention shorter than the
			// saga) or it ran before the step used the barrier. The voided
			// row still makes a late process a no-op.
			runHandler = cmd.ActionDone
			if runHandler {
				b.log.WarnContext(ctx, "sqlbarrier: revert of a process without a barrier row, whose ok reply the orchestrator holds: compensating (is the retention shorter than the saga?)", logArgs(cmd)...)
			}
		} else {
			r, found, err := b.read(ctx, tx, cmd.TxID, cmd.Span, topics.KindProcess)
			if err != nil || !found {
				return nil, err == nil, err
			}
			// A process that failed or was voided committed nothing; one
			// whose recorded reply is unreadable committed its effect.
			runHandler = answer.Compensates(cmd, answer.Process{Found: true, Voided: r.state == stateVoided, Recorded: r.recorded()})
		}
	}
	res, err := tx.ExecContext(ctx, b.sqlInsert, cmd.TxID, cmd.Span, kind, cmd.Attempt, stateRunning, now)
	if err != nil {
		return nil, false, fmt.Errorf("sqlbarrier: insert barrier row: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		// Its row exists, committed (the insert waited for one in flight).
		r, found, err := b.read(ctx, tx, cmd.TxID, cmd.Span, cmd.Kind)
		if err != nil || !found {
			return nil, err == nil, err
		}
		if r.state == stateVoided {
			b.hanging.Add(1)
			b.log.InfoContext(ctx, "sqlbarrier: process after its revert: not run", logArgs(cmd)...)
			return unchanged(cmd, topics.OutcomeNonRetryable, ErrHanging.Error()), false, nil
		}
		switch answer.ForAttempt(cmd, r.recorded()) {
		case answer.Unreadable:
			b.dups.Add(1)
			return unreadable(cmd, r.err), false, nil
		case answer.Replay:
			b.dups.Add(1)
			b.log.DebugContext(ctx, "sqlbarrier: duplicate, recorded reply re-sent", logArgs(cmd)...)
			address(r.reply, cmd)
			return r.reply, false, nil
		}
		// A later attempt of a step that failed or paused: it runs again,
		// over the row it holds locked.
	}
	var rep *topics.Envelope
	if runHandler {
		rep = run(context.WithValue(ctx, txKey{}, tx))
	} else {
		b.nulls.Add(1)
		b.log.InfoContext(ctx, "sqlbarrier: revert of a process that never committed: null compensation", logArgs(cmd)...)
		rep = unchanged(cmd, topics.OutcomeOK, "")
	}
	if b.crash != nil {
		b.crash("handled")
	}
	switch rep.Outcome {
	case topics.OutcomeRetryable:
		b.rolledBack.Add(1)
		return rep, false, nil // the deferred rollback records nothing
	case topics.OutcomeOK:
	default:
		// Roll the business writes back; record the failure alone.
		done = true
		_ = tx.Rollback()
		return b.recordFailure(ctx, cmd, rep)
	}
	enc, err := encodeReply(cmd, rep)
	if err != nil {
		return nil, false, err
	}
	if _, err := tx.ExecContext(ctx, b.sqlUpdate, cmd.TxID, cmd.Span, kind, cmd.Attempt, rep.Pause != nil, enc, now); err != nil {
		return nil, false, fmt.Errorf("sqlbarrier: record reply: %w", err)
	}
	done = true
	if err := tx.Commit(); err != nil {
		// Committed or not: the next try finds out.
		return nil, false, fmt.Errorf("sqlbarrier: commit: %w", err)
	}
	if runHandler {
		b.ran.Add(1)
	}
	if b.crash != nil {
		b.crash("committed")
	}
	return rep, false, nil
}

// recordFailure records rep, a non-retryable reply whose business writes
// were rolled back, in a transaction of its own: as the step's row, or
// over the row of an earlier attempt that this one supersedes
// (answer.ForAttempt). If another execution recorded a reply meanwhile (a
// twin, a revert voiding the process), again asks the caller to answer as
// it decided.
func (b *Barrier) recordFailure(ctx context.Context, cmd, rep *topics.Envelope) (_ *topics.Envelope, again bool, err error) {
	enc, err := encodeReply(cmd, rep)
	if err != nil {
		return nil, false, err
	}
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, fmt.Errorf("sqlbarrier: record failure: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	now, kind := b.now(), string(cmd.Kind)
	r, found, err := b.read(ctx, tx, cmd.TxID, cmd.Span, cmd.Kind)
	var res sql.Result
	switch {
	case err != nil:
		return nil, false, err
	case !found:
		res, err = tx.ExecContext(ctx, b.sqlRecord, cmd.TxID, cmd.Span, kind, cmd.Attempt, enc, now)
	case r.state == stateDone && answer.ForAttempt(cmd, r.recorded()) == answer.Run:
		res, err = tx.ExecContext(ctx, b.sqlUpdate, cmd.TxID, cmd.Span, kind, cmd.Attempt, false, enc, now)
	default:
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("sqlbarrier: record failure: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return nil, true, nil
	}
	if err := tx.Commit(); err != nil {
		return nil, false, fmt.Errorf("sqlbarrier: record failure: commit: %w", err)
	}
	b.ran.Add(1)
	return rep, false, nil
}

type row struct {
	attempt int
	state   string
	paused  bool
	reply   *topics.Envelope
	err     error // decoding the reply
}

func (b *Barrier) read(ctx context.Context, tx *sql.Tx, txID string, span int, kind topics.Kind) (row, bool, error) {
	var r row
	var raw []byte
	err := tx.QueryRowContext(ctx, b.sqlSelect, txID, span, string(kind)).Scan(&r.attempt, &r.state, &r.paused, &raw)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return r, false, nil
	case err != nil:
		return r, false, fmt.Errorf("sqlbarrier: read barrier row: %w", err)
	}
	if raw != nil {
		r.reply, r.err = topics.Decode(raw)
		if r.err != nil {
			r.reply = nil
		}
	} else if r.state == stateDone {
		r.err = errors.New("no reply recorded")
	}
	return r, true, nil
}

// recorded is the row's outcome for the answer gate.
func (r row) recorded() answer.Recorded {
	return answer.Recorded{Attempt: r.attempt, Reply: r.reply}
}

func logArgs(cmd *topics.Envelope) []any {
	return []any{"tx", cmd.TxID, "span", cmd.Span, "kind", cmd.Kind, "endpoint", cmd.Endpoint, "attempt", cmd.Attempt}
}

// unreadable is the reply to a duplicate whose recorded reply cannot be
// read: the step committed but what it replied is lost. It fails the step;
// a process says that its effect is in place (ActionDone), so that the
// orchestrator compensates it too.
func unreadable(cmd *topics.Envelope, err error) *topics.Envelope {
	rep := unchanged(cmd, topics.OutcomeNonRetryable, fmt.Sprintf("sqlbarrier: the step committed but its recorded reply is unreadable: %v", err))
	rep.ActionDone = cmd.Kind == topics.KindProcess
	return rep
}

// unchanged is a reply that leaves the entity and hints as they were.
func unchanged(cmd *topics.Envelope, outcome topics.Outcome, msg string) *topics.Envelope {
	rep := &topics.Envelope{Outcome: outcome, Error: msg, Payload: cmd.Payload, Hints: cmd.Hints}
	address(rep, cmd)
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

// encodeReply encodes a copy of reply, addressed to cmd, for the row.
func encodeReply(cmd, reply *topics.Envelope) ([]byte, error) {
	c := *reply
	address(&c, cmd)
	b, err := topics.Encode(&c)
	if err != nil {
		return nil, fmt.Errorf("sqlbarrier: encode reply: %w", err)
	}
	return b, nil
}
