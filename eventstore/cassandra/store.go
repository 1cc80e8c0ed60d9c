// Package cassandra is the Cassandra eventstore.Store: the product's event
// store (seed 000: the design document of the event store this project
// implements; docs/design.md says what each seed covers). It owns the CQL
// schema (schema.cql, embedded), its
// configuration (the stacksaga.cassandra YAML keys), and a statement
// counter for tests and benchmarks.
//
//	cfg, err := cassandra.LoadConfigFile("stacksaga.yaml")
//	store, err := cassandra.New(ctx, cfg)
//	defer store.Close()
//
// Every statement names a full partition key. Reads and writes use the
// configured consistency (LOCAL_QUORUM by default), lightweight
// transactions LOCAL_SERIAL. A saga transition writes its row and its
// tryout in one single-partition batch.
package cassandra

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/wait"
)

// Option configures New.
type Option interface{ apply(*options) }

type options struct {
	logger      *slog.Logger
	now         func() time.Time
	lwtAttempts int
	cluster     func(*gocql.ClusterConfig) // tests: adjusts the driver configuration
}

type optFunc func(*options)

func (f optFunc) apply(o *options) { f(o) }

// WithLogger sets the logger of the store and of the driver. Default
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optFunc(func(o *options) {
		if l != nil {
			o.logger = l
		}
	})
}

// WithClock sets the clock for FrozenAt, marker UpdatedAt defaults and
// lease ends. Default time.Now. (TTL expiry runs on Cassandra's clock.)
func WithClock(now func() time.Time) Option {
	return optFunc(func(o *options) {
		if now != nil {
			o.now = now
		}
	})
}

// WithLWTAttempts sets how many times a lightweight transaction is sent
// when Cassandra answers with an unknown outcome (a CAS timeout under
// contention). Default 5.
func WithLWTAttempts(n int) Option {
	return optFunc(func(o *options) {
		if n > 0 {
			o.lwtAttempts = n
		}
	})
}

// Store is the Cassandra event store. All methods are safe for concurrent
// use.
type Store struct {
	session  *gocql.Session
	st       statements
	obs      *observer
	log      *slog.Logger
	now      func() time.Time
	lwtTries int
	readCL   gocql.Consistency
	writeCL  gocql.Consistency
	serialCL gocql.Consistency
	closed   atomic.Bool
	once     sync.Once
	deletes  entryDeletes // DeleteRecoveryEntry's group commit
}

var (
	_ eventstore.Store             = (*Store)(nil)
	_ eventstore.StateReader       = (*Store)(nil)
	_ eventstore.WatchedCreator    = (*Store)(nil)
	_ eventstore.Auditor           = (*Store)(nil)
	_ eventstore.BusinessKeys      = (*Store)(nil)
	_ eventstore.BusinessKeyReader = (*Store)(nil)
)

// New validates cfg (after filling defaults), applies the schema when
// cfg.CreateSchema is set, and opens a session on cfg.Keyspace. An invalid
// configuration fails with an error wrapping ErrInvalidConfig that names
// each bad key, and so does one whose consistency levels the keyspace's
// replication cannot meet on the cluster's nodes (Config.CheckTopology,
// whose warnings New logs).
func New(ctx context.Context, cfg Config, opts ...Option) (*Store, error) {
	o := options{logger: slog.Default(), now: time.Now, lwtAttempts: 5}
	for _, opt := range opts {
		opt.apply(&o)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.tlsConfig() // once for the schema's session and the store's
	if err != nil {
		return nil, err
	}
	if cfg.CreateSchema {
		if err := applySchemaWith(ctx, cfg, tlsCfg); err != nil {
			return nil, err
		}
	}
	obs := newObserver()
	cl := cfg.clusterWith(tlsCfg, obs, obs)
	cl.Logger = slogLogger{o.logger}
	if o.cluster != nil {
		o.cluster(cl)
	}
	session, err := createSession(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("cassandra: connect to %v keyspace %s: %w", cfg.ContactPoints, cfg.Keyspace, err)
	}
	if err := checkTopology(ctx, session, cfg, o.logger); err != nil {
		session.Close()
		return nil, err
	}
	s := &Store{
		session:  session,
		st:       newStatements(cfg.Keyspace),
		obs:      obs,
		log:      o.logger,
		now:      o.now,
		lwtTries: o.lwtAttempts,
		readCL:   cfg.ReadConsistency.gocql(),
		writeCL:  cfg.WriteConsistency.gocql(),
		serialCL: cfg.SerialConsistency.gocql(),
	}
	s.deletes.s = s
	return s, nil
}

// createSession connects, giving up (and closing the late session) when
// ctx ends first.
func createSession(ctx context.Context, cl *gocql.ClusterConfig) (*gocql.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type result struct {
		s   *gocql.Session
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := cl.CreateSession()
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		return r.s, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.s != nil {
				r.s.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// Close closes the session; it is safe to call twice.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		s.session.Close()
	})
	return nil
}

// Stats returns a snapshot of the statements sent so far (since the last
// ResetStats).
func (s *Store) Stats() Stats { return s.obs.snapshot() }

// ResetStats sets every statement counter to zero.
func (s *Store) ResetStats() { s.obs.reset() }

// check runs before a request: it reports a closed store, an ended
// context, or else the first non-nil error of invalid (the eventstore
// argument checks, in argument order).
func (s *Store) check(ctx context.Context, invalid ...error) error {
	if s.closed.Load() {
		return fmt.Errorf("cassandra: %w", eventstore.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cassandra: %w", err)
	}
	if err := cmp.Or(invalid...); err != nil {
		return fmt.Errorf("cassandra: %w", err)
	}
	return nil
}

// fail wraps a driver error (%w), saying what it means for the caller:
//   - a request that can never succeed matches eventstore.ErrPermanent
//     (see permanent), whenever it fails, also while Close runs;
//   - the driver's ErrSessionClosed (its session was closed before the
//     request was sent) matches eventstore.ErrClosed, and once Close has
//     begun so does ErrNoConnections: the driver found no open connection
//     to send the request on (Close empties its pools first). Neither was
//     sent, so nothing was written;
//   - anything else stays as the driver reported it, also during Close: a
//     timeout, an unavailable or overloaded replica, an ended context, and
//     what a request in flight gets when Close closes its connection
//     (ErrConnectionClosed, io.EOF, a closed network connection, or
//     context.Canceled for a statement being prepared). Such a request may
//     have been applied, which ErrClosed would deny (see
//     eventstore.WatchedCreator); a caller that retries it gets ErrClosed
//     from check before anything is sent. The store's own retries of a
//     marker LWT (retryCAS) report an unknown outcome, not ErrClosed, when
//     Close stops them after a try that may have been applied.
func (s *Store) fail(op string, err error) error {
	if sentinel := permanent(err); sentinel != nil {
		return fmt.Errorf("cassandra: %s: %w: %w", op, sentinel, err)
	}
	if errors.Is(err, gocql.ErrSessionClosed) || s.closed.Load() && errors.Is(err, gocql.ErrNoConnections) {
		return fmt.Errorf("cassandra: %s: %w (%w)", op, eventstore.ErrClosed, err)
	}
	return fmt.Errorf("cassandra: %s: %w", op, err)
}

// permanent classifies a driver error that sending the same request again
// cannot fix: a value the driver cannot marshal (eventstore.ErrInvalid);
// an invalid request, for instance a key or text that is not valid UTF-8
// or a partition key over 64 KiB (error 0x2200), a syntax error (0x2000),
// an unauthorized request (0x2100) or a configuration error (0x2300)
// (eventstore.ErrPermanent). Timeouts, unavailable or overloaded replicas,
// server and protocol errors stay transient (nil).
func permanent(err error) error {
	var (
		marshal      gocql.MarshalError
		invalid      *gocql.RequestErrInvalid
		syntax       *gocql.RequestErrSyntax
		unauthorized *gocql.RequestErrUnauthorized
		config       *gocql.RequestErrConfig
	)
	switch {
	case errors.As(err, &marshal):
		return eventstore.ErrInvalid
	case errors.As(err, &invalid), errors.As(err, &syntax), errors.As(err, &unauthorized), errors.As(err, &config):
		return eventstore.ErrPermanent
	}
	return nil
}

func (s *Store) read(stmt string, args ...any) *gocql.Query {
	return s.session.Query(stmt, args...).Consistency(s.readCL).Idempotent(true)
}

func (s *Store) write(stmt string, args ...any) *gocql.Query {
	return s.session.Query(stmt, args...).Consistency(s.writeCL).Idempotent(true)
}

// exec sends one idempotent write (see write), wrapping its error as op.
func (s *Store) exec(ctx context.Context, op, stmt string, args ...any) error {
	if err := s.write(stmt, args...).ExecContext(ctx); err != nil {
		return s.fail(op, err)
	}
	return nil
}

func (s *Store) lwt(stmt string, args ...any) *gocql.Query {
	return s.session.Query(stmt, args...).Consistency(s.writeCL).SerialConsistency(s.serialCL)
}

func (s *Store) batch(typ gocql.BatchType) *gocql.Batch {
	return s.session.Batch(typ).Consistency(s.writeCL)
}

func addIdempotent(b *gocql.Batch, stmt string, args ...any) {
	b.Entries = append(b.Entries, gocql.BatchEntry{Stmt: stmt, Args: args, Idempotent: true})
}

// lwtRetryable reports an unknown LWT outcome worth sending again: a
// timeout, or an unavailable coordinator (before the proposal, or in the
// commit phase after a quorum accepted it).
func lwtRetryable(err error) bool {
	var wt *gocql.RequestErrWriteTimeout
	var rt *gocql.RequestErrReadTimeout
	var cu *gocql.RequestErrCASWriteUnknown
	var un *gocql.RequestErrUnavailable
	return errors.As(err, &wt) || errors.As(err, &rt) || errors.As(err, &cu) || errors.As(err, &un) ||
		errors.Is(err, gocql.ErrTimeoutNoResponse)
}

// backoff sleeps before LWT attempt n+1 (jittered, growing), or returns
// ctx's error.
func backoff(ctx context.Context, n int) error {
	d := time.Duration(10<<min(n, 5)) * time.Millisecond
	if !wait.Sleep(ctx, d/2+rand.N(d)) {
		return ctx.Err()
	}
	return nil
}

// --- value conversion -----------------------------------------------------

// completedTuple is a tuple<int, text, boolean> of es_transaction.completed.
type completedTuple struct {
	Span        int
	Endpoint    string
	Compensable bool
}

// blob never binds null (see schema.cql): nil becomes an empty blob.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func txValues(tx eventstore.Transaction) []any {
	completed := make([]completedTuple, len(tx.Completed))
	for i, c := range tx.Completed {
		completed[i] = completedTuple{c.Span, c.Endpoint, c.Compensable}
	}
	hints := tx.Hints
	if hints == nil {
		hints = map[string]string{}
	}
	var rDate any = gocql.UnsetValue
	rWindow, rInstance, rBucket := 0, "", 0
	if p := tx.RestorePath; p != nil {
		rDate, rWindow, rInstance, rBucket = eventstore.DayOf(p.Day), p.MinuteOfDay, p.InstanceID, p.Bucket
	}
	return []any{
		tx.Region, tx.Cluster, tx.Service, tx.TxID,
		tx.Domain, string(tx.State), tx.Version, tx.Span, tx.Kind, tx.Endpoint, tx.Attempt,
		blob(tx.Payload), completed, hints, tx.Error,
		rDate, rWindow, rInstance, rBucket,
		eventstore.StoredTime(tx.PausedUntil), eventstore.StoredTime(tx.LifetimeStart), tx.PauseEvent, tx.TraceID, tx.TraceParent, tx.Definition, eventstore.StoredTime(tx.CreatedAt), eventstore.StoredTime(tx.UpdatedAt),
	}
}

// txScan scans the non-key columns of a saga row (cqlSelectTx's order).
type txScan struct {
	tx        eventstore.Transaction
	state     string
	completed []completedTuple
	rDate     time.Time
	rWindow   int
	rInstance string
	rBucket   int
}

func (x *txScan) dest() []any {
	t := &x.tx
	return []any{
		&t.Domain, &x.state, &t.Version, &t.Span, &t.Kind, &t.Endpoint, &t.Attempt,
		&t.Payload, &x.completed, &t.Hints, &t.Error,
		&x.rDate, &x.rWindow, &x.rInstance, &x.rBucket,
		&t.PausedUntil, &t.LifetimeStart, &t.PauseEvent, &t.TraceID, &t.TraceParent, &t.Definition, &t.CreatedAt, &t.UpdatedAt,
	}
}

func (x *txScan) result(scope eventstore.Scope, txID string) eventstore.Transaction {
	t := x.tx
	t.Scope, t.TxID, t.State = scope, txID, eventstore.State(x.state)
	t.Payload = nilIfEmpty(t.Payload)
	if len(x.completed) > 0 {
		t.Completed = make([]eventstore.CompletedSpan, len(x.completed))
		for i, c := range x.completed {
			t.Completed[i] = eventstore.CompletedSpan{Span: c.Span, Endpoint: c.Endpoint, Compensable: c.Compensable}
		}
	}
	if len(t.Hints) == 0 {
		t.Hints = nil
	}
	if x.rInstance != "" {
		t.RestorePath = &eventstore.RecoveryPath{Day: eventstore.DayOf(x.rDate), MinuteOfDay: x.rWindow, InstanceID: x.rInstance, Bucket: x.rBucket}
	}
	return t
}

func tryoutValues(scope eventstore.Scope, txID string, t eventstore.Tryout) []any {
	return []any{
		scope.Region, scope.Cluster, scope.Service, txID, t.Index,
		t.Span, t.Kind, t.Endpoint, t.Attempt, t.Outcome, t.Error,
		blob(t.Before), blob(t.After), blob(t.ResumeContext), eventstore.StoredTime(t.StartedAt), eventstore.StoredTime(t.FinishedAt),
	}
}

// --- transactions ---------------------------------------------------------

// CreateTransaction writes a new saga row and its first tryout, if any, in
// one statement, at the row's write timestamp (eventstore.WriteTime) and
// without a lightweight transaction: it does not detect a taken id (a
// second create of the same id behaves as a Transition of that version;
// ids are unique by construction).
func (s *Store) CreateTransaction(ctx context.Context, tx eventstore.Transaction, first *eventstore.Tryout) error {
	if err := s.check(ctx, tx.Validate(), first.ValidateFor(tx.TxID)); err != nil {
		return err
	}
	// No lightweight transaction: transaction ids are unique by
	// construction (orchestrator.NewTxID), and the row is written at its
	// write timestamp like every transition (see addTx).
	return s.writeTx(ctx, "create transaction", tx, first, false)
}

// writeTx writes the saga row of tx and what addTx adds with it: one
// statement, or one same-partition batch.
func (s *Store) writeTx(ctx context.Context, op string, tx eventstore.Transaction, tryout *eventstore.Tryout, transition bool) error {
	if tryout == nil && !transition && tx.Fence == 0 {
		return s.exec(ctx, op, s.st.upsertTx, append(txValues(tx), eventstore.WriteTime(tx))...)
	}
	b := s.batch(gocql.UnloggedBatch)
	s.addTx(b, tx, tryout, transition)
	if err := b.ExecContext(ctx); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// CreateTransactionWatched creates tx (and its first tryout) and writes
// its restore watchdog's tier-5 row in one unlogged batch
// (eventstore.WatchedCreator): one round trip instead of two. The batch
// spans two partitions (the saga's and the watchdog's bucket), so it is
// atomic per partition only: when it fails (a coordinator lost midway, a
// replica of one partition unavailable or timing out), the saga row may
// have landed without the watchdog. The caller gets the error; the
// orchestrator then marks the saga failed at the next version, or failing
// that writes the watchdog alone. A logged batch would close the gap at
// the price of a batch-log write and delete on every saga start; the
// follow-up costs statements on failure only. The saga row comes first:
// the driver routes a batch by its first statement, so creates spread over
// the ring by transaction id instead of all going to the replicas of one
// watchdog bucket.
func (s *Store) CreateTransactionWatched(ctx context.Context, tx eventstore.Transaction, first *eventstore.Tryout, watchdog eventstore.RecoveryEntry) error {
	if err := s.check(ctx, eventstore.ValidateWatched(tx, watchdog), first.ValidateFor(tx.TxID)); err != nil {
		return err
	}
	b := s.batch(gocql.UnloggedBatch)
	s.addTx(b, tx, first, false)
	addIdempotent(b, s.st.upsertEntry, s.entryValues(tx.Scope, watchdog)...)
	if err := b.ExecContext(ctx); err != nil {
		return s.fail("create watched transaction", err)
	}
	return nil
}

// addTx adds to b, all at tx's write timestamp (eventstore.WriteTime), the
// saga row of tx and its tryout: if not nil, the tryout; else, for a
// transition, a delete of the tryout at Index tx.Version (the slot of its
// version: a late same-version write's tryout there is shadowed, deletes
// winning ties). With Fence > 0 it adds a range delete of the tryouts at
// Index tx.Version and above written with a lower Fence (a timestamp just
// below the Fence's first). Every order of Store.Transition is Cassandra's
// own order of write timestamps, so the fence costs no round trip and no
// read: a write of an older Fence or version that arrives late (a zombie
// orchestrator evicted mid-batch, a late reply racing a disable on another
// node) is shadowed cell by cell, and its tryout by these deletes.
func (s *Store) addTx(b *gocql.Batch, tx eventstore.Transaction, tryout *eventstore.Tryout, transition bool) {
	ts := eventstore.WriteTime(tx)
	addIdempotent(b, s.st.upsertTx, append(txValues(tx), ts)...)
	switch {
	case tryout != nil:
		addIdempotent(b, s.st.insertTryout, append(tryoutValues(tx.Scope, tx.TxID, *tryout), ts)...)
	case transition:
		addIdempotent(b, s.st.deleteTryout, ts, tx.Region, tx.Cluster, tx.Service, tx.TxID, int(tx.Version))
	}
	if tx.Fence > 0 {
		floor := eventstore.WriteTime(eventstore.Transaction{CreatedAt: tx.CreatedAt, Fence: tx.Fence}) - 1
		addIdempotent(b, s.st.deleteTryouts, floor, tx.Region, tx.Cluster, tx.Service, tx.TxID, int(tx.Version))
	}
}

// LoadTransaction reads a saga row.
func (s *Store) LoadTransaction(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.Transaction, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return eventstore.Transaction{}, err
	}
	var x txScan
	var written int64
	err := s.read(s.st.selectTxFenced, scope.Region, scope.Cluster, scope.Service, txID).ScanContext(ctx, append(x.dest(), &written)...)
	if errors.Is(err, gocql.ErrNotFound) {
		return eventstore.Transaction{}, fmt.Errorf("cassandra: transaction %q: %w", txID, eventstore.ErrNotFound)
	}
	if err != nil {
		return eventstore.Transaction{}, s.fail("load transaction", err)
	}
	tx := x.result(scope, txID)
	// The Fence is not a column: it is the part of the row's write
	// timestamp above its creation time and version (eventstore.WriteTime).
	tx.Fence = eventstore.FenceOf(tx.CreatedAt, written, tx.Version)
	return tx, nil
}

// TransactionState reads a saga's state alone (eventstore.StateReader):
// one read of the running_status column of the saga's row.
func (s *Store) TransactionState(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.State, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return "", err
	}
	var state string
	err := s.read(s.st.selectTxState, scope.Region, scope.Cluster, scope.Service, txID).ScanContext(ctx, &state)
	if errors.Is(err, gocql.ErrNotFound) {
		return "", fmt.Errorf("cassandra: transaction %q: %w", txID, eventstore.ErrNotFound)
	}
	if err != nil {
		return "", s.fail("read transaction state", err)
	}
	return eventstore.State(state), nil
}

// Transition overwrites the saga row and writes its tryout, or deletes the
// tryout of its version, in one unlogged batch (see addTx). The statements
// have the same partition key in the same keyspace, so Cassandra applies
// them as one mutation (atomic and isolated on each replica) in one round
// trip, without the batch log.
func (s *Store) Transition(ctx context.Context, tx eventstore.Transaction, tryout *eventstore.Tryout) error {
	if err := s.check(ctx, tx.Validate(), tryout.ValidateFor(tx.TxID)); err != nil {
		return err
	}
	return s.writeTx(ctx, "transition", tx, tryout, true)
}

// Tryouts returns a saga's step history ordered by Index.
func (s *Store) Tryouts(ctx context.Context, scope eventstore.Scope, txID string) ([]eventstore.Tryout, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return nil, err
	}
	iter := s.read(s.st.selectTryouts, scope.Region, scope.Cluster, scope.Service, txID).IterContext(ctx)
	var out []eventstore.Tryout
	var t eventstore.Tryout
	for iter.Scan(&t.Index, &t.Span, &t.Kind, &t.Endpoint, &t.Attempt, &t.Outcome, &t.Error,
		&t.Before, &t.After, &t.ResumeContext, &t.StartedAt, &t.FinishedAt) {
		t.TxID = txID
		t.Before, t.After, t.ResumeContext = nilIfEmpty(t.Before), nilIfEmpty(t.After), nilIfEmpty(t.ResumeContext)
		out = append(out, t)
		t = eventstore.Tryout{}
	}
	if err := iter.Close(); err != nil {
		return nil, s.fail("tryouts", err)
	}
	return out, nil
}

// --- frozen ---------------------------------------------------------------

// frozenEpoch is added to the write timestamps of es_frozen_transaction:
// releases before the fence froze sagas at the server's time, which is
// later than any saga's write timestamp (its creation time plus little);
// from this far-future base (2^56 microseconds, about the year 4253) every
// Freeze and Unfreeze is later than those copies, whatever their order
// among themselves.
const frozenEpoch = 1 << 56

// Freeze copies tx into es_frozen_transaction at tx's write timestamp
// (eventstore.WriteTime, plus frozenEpoch), so that Cassandra orders it
// with Unfreeze as the saga's writes are ordered.
func (s *Store) Freeze(ctx context.Context, tx eventstore.Transaction, reason string) error {
	if err := s.check(ctx, tx.Validate()); err != nil {
		return err
	}
	vals := append(txValues(tx), reason, eventstore.StoredTime(s.now()), frozenEpoch+eventstore.WriteTime(tx))
	return s.exec(ctx, "freeze", s.st.insertFrozen, vals...)
}

// Unfreeze deletes the frozen copy of tx's saga at tx's write timestamp
// (plus frozenEpoch): a copy frozen at an earlier one is shadowed, also
// one that arrives later, and so is a copy an older release froze.
func (s *Store) Unfreeze(ctx context.Context, tx eventstore.Transaction) error {
	if err := s.check(ctx, tx.Validate()); err != nil {
		return err
	}
	return s.exec(ctx, "unfreeze", s.st.deleteFrozen, frozenEpoch+eventstore.WriteTime(tx), tx.Region, tx.Cluster, tx.Service, tx.TxID)
}

// ListFrozen lists frozen sagas ordered by TxID, at most limit (<= 0: all).
func (s *Store) ListFrozen(ctx context.Context, scope eventstore.Scope, limit int) ([]eventstore.FrozenTransaction, error) {
	return s.ListFrozenAfter(ctx, scope, "", limit)
}

// ListFrozenAfter lists frozen sagas with TxID > afterTxID ordered by TxID,
// at most limit (<= 0: all).
func (s *Store) ListFrozenAfter(ctx context.Context, scope eventstore.Scope, afterTxID string, limit int) ([]eventstore.FrozenTransaction, error) {
	if err := s.check(ctx, scope.Validate()); err != nil {
		return nil, err
	}
	iter := s.read(s.st.selectFrozenAfter, scope.Region, scope.Cluster, scope.Service, afterTxID, cqlLimit(limit)).IterContext(ctx)
	var out []eventstore.FrozenTransaction
	for {
		var x txScan
		var id, reason string
		var frozenAt time.Time
		if !iter.Scan(append(append([]any{&id}, x.dest()...), &reason, &frozenAt)...) {
			break
		}
		out = append(out, eventstore.FrozenTransaction{Transaction: x.result(scope, id), Reason: reason, FrozenAt: frozenAt})
	}
	if err := iter.Close(); err != nil {
		return nil, s.fail("list frozen", err)
	}
	return out, nil
}

// GetFrozen reads one frozen saga.
func (s *Store) GetFrozen(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.FrozenTransaction, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return eventstore.FrozenTransaction{}, err
	}
	var x txScan
	var id, reason string
	var frozenAt time.Time
	err := s.read(s.st.selectFrozenOne, scope.Region, scope.Cluster, scope.Service, txID).
		ScanContext(ctx, append(append([]any{&id}, x.dest()...), &reason, &frozenAt)...)
	if errors.Is(err, gocql.ErrNotFound) {
		return eventstore.FrozenTransaction{}, fmt.Errorf("cassandra: frozen transaction %q: %w", txID, eventstore.ErrNotFound)
	}
	if err != nil {
		return eventstore.FrozenTransaction{}, s.fail("get frozen", err)
	}
	return eventstore.FrozenTransaction{Transaction: x.result(scope, id), Reason: reason, FrozenAt: frozenAt}, nil
}

// cqlLimit binds "no limit" as the largest CQL LIMIT.
func cqlLimit(limit int) int {
	if limit <= 0 || limit > math.MaxInt32 {
		return math.MaxInt32
	}
	return limit
}

// slogLogger adapts slog to the driver's logger.
type slogLogger struct{ l *slog.Logger }

func (a slogLogger) attrs(fields []gocql.LogField) []any {
	out := make([]any, 0, len(fields)+1)
	out = append(out, slog.String("component", "gocql"))
	for _, f := range fields {
		out = append(out, slog.Any(f.Name, f.Value.Any()))
	}
	return out
}

func (a slogLogger) Error(msg string, fields ...gocql.LogField) { a.l.Error(msg, a.attrs(fields)...) }
func (a slogLogger) Warning(msg string, fields ...gocql.LogField) {
	a.l.Warn(msg, a.attrs(fields)...)
}

// Info is logged at debug level: the driver's info lines (sessions, pool
// changes) are routine.
func (a slogLogger) Info(msg string, fields ...gocql.LogField)  { a.l.Debug(msg, a.attrs(fields)...) }
func (a slogLogger) Debug(msg string, fields ...gocql.LogField) { a.l.Debug(msg, a.attrs(fields)...) }
