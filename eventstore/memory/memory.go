// Package memory is the in-memory eventstore.Store: the embedded default of
// StackSaga and the fast twin of the Cassandra store, with the same
// semantics (conditional inserts, TTL expiry on an injectable clock,
// partition deletes, clustering order), checked by eventstore/storetest.
// TTLs expire as Cassandra's do: a marker inserted at t with a TTL expires
// at t truncated to whole seconds plus the TTL, up to a second earlier than
// t plus the TTL.
//
// A saga's writes are ordered as the Cassandra store's write timestamps
// order them (eventstore.WriteTime): the later write wins, cell by cell,
// with the tryout and frozen-copy deletes Cassandra would keep, and two
// writes of one timestamp merge column by column as Cassandra merges them
// (merge.go).
//
// State is sharded by transaction id so that concurrent sagas do not
// contend; every value is copied on the way in and out.
package memory

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// shardCount is the number of transaction shards (a power of two).
const shardCount = 64

// Option configures a Store.
type Option interface{ apply(*Store) }

type optFunc func(*Store)

func (f optFunc) apply(s *Store) { f(s) }

// WithClock sets the clock used for marker TTLs, FrozenAt and marker
// UpdatedAt defaults. Default: time.Now.
func WithClock(now func() time.Time) Option {
	return optFunc(func(s *Store) {
		if now != nil {
			s.now = now
		}
	})
}

// Store is the in-memory event store. The zero value is not usable; call
// New. All methods are safe for concurrent use.
type Store struct {
	now    func() time.Time
	seed   maphash.Seed
	closed atomic.Bool
	shards [shardCount]shard

	frozenMu sync.RWMutex
	frozen   map[eventstore.Scope]map[string]frozenRec

	dir directory

	keys keyTable
}

var (
	_ eventstore.Store             = (*Store)(nil)
	_ eventstore.StateReader       = (*Store)(nil)
	_ eventstore.WatchedCreator    = (*Store)(nil)
	_ eventstore.Auditor           = (*Store)(nil)
	_ eventstore.BusinessKeys      = (*Store)(nil)
	_ eventstore.BusinessKeyReader = (*Store)(nil)
)

// New returns an empty in-memory store.
func New(opts ...Option) *Store {
	s := &Store{
		now:    time.Now,
		seed:   maphash.MakeSeed(),
		frozen: make(map[eventstore.Scope]map[string]frozenRec),
	}
	for _, o := range opts {
		o.apply(s)
	}
	for i := range s.shards {
		s.shards[i].txs = make(map[txKey]*txRec)
		s.shards[i].markers = make(map[txKey]map[markerCK]markerRec)
		s.shards[i].audits = make(map[txKey][]eventstore.AuditRecord)
	}
	s.dir.init()
	s.keys.rows = make(map[eventstore.BusinessKeyID]keyRec)
	return s
}

// Close marks the store closed; later calls fail with eventstore.ErrClosed.
// It is safe to call twice.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

type txKey struct {
	scope eventstore.Scope
	txID  string
}

// txRec is a saga row with its tryouts, each with its write time
// (eventstore.WriteTime), and the range deletes of raised fences: what
// Cassandra keeps of the same writes, so that the order of Transition is
// applied the same way (see write).
type txRec struct {
	tx      eventstore.Transaction
	ts      int64
	tryouts []tryoutRec // ordered by Index
	fences  []rangeDelete
}

// tryoutRec is a tryout slot: the tryout, or its delete (deleted), written
// at ts.
type tryoutRec struct {
	t       eventstore.Tryout
	ts      int64
	deleted bool
}

// rangeDelete removes the tryouts at Index from and above written at or
// before ts.
type rangeDelete struct {
	from int
	ts   int64
}

// frozenRec is a frozen copy, or its delete (deleted), written at ts.
type frozenRec struct {
	f       eventstore.FrozenTransaction
	ts      int64
	deleted bool
}

type markerCK struct {
	span int
	kind string
	site string
}

type markerRec struct {
	m       eventstore.Marker
	expires time.Time // zero: permanent
}

type shard struct {
	mu      sync.RWMutex
	txs     map[txKey]*txRec
	markers map[txKey]map[markerCK]markerRec
	audits  map[txKey][]eventstore.AuditRecord // ordered by At, ties in append order
}

func (s *Store) shard(txID string) *shard {
	return &s.shards[maphash.String(s.seed, txID)&(shardCount-1)]
}

// check runs before every call: it reports a cancelled context, a closed
// store, or else the first non-nil error of invalid (the eventstore
// argument checks, in argument order).
func (s *Store) check(ctx context.Context, invalid ...error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	if s.closed.Load() {
		return fmt.Errorf("memory: %w", eventstore.ErrClosed)
	}
	if err := cmp.Or(invalid...); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	return nil
}

// CreateTransaction inserts a new saga row and its first tryout, if any; it
// fails with eventstore.ErrExists if the id is taken.
func (s *Store) CreateTransaction(ctx context.Context, tx eventstore.Transaction, first *eventstore.Tryout) error {
	if err := s.check(ctx, tx.Validate(), first.ValidateFor(tx.TxID)); err != nil {
		return err
	}
	return s.create(tx, first, nil)
}

// CreateTransactionWatched creates tx and writes its restore watchdog
// (eventstore.WatchedCreator) at once: the saga is never visible without
// the watchdog. A taken id fails with ErrExists and writes neither.
func (s *Store) CreateTransactionWatched(ctx context.Context, tx eventstore.Transaction, first *eventstore.Tryout, watchdog eventstore.RecoveryEntry) error {
	if err := s.check(ctx, eventstore.ValidateWatched(tx, watchdog), first.ValidateFor(tx.TxID)); err != nil {
		return err
	}
	return s.create(tx, first, &watchdog)
}

// create inserts the saga row of tx, with its first tryout and watchdog
// when not nil (the watchdog before the row becomes visible).
func (s *Store) create(tx eventstore.Transaction, first *eventstore.Tryout, watchdog *eventstore.RecoveryEntry) error {
	k := txKey{tx.Scope, tx.TxID}
	sh := s.shard(tx.TxID)
	c := cloneTx(tx)
	var tr *eventstore.Tryout
	if first != nil {
		t := tryoutOf(tx.TxID, *first)
		tr = &t
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.txs[k]; ok {
		return fmt.Errorf("memory: transaction %q: %w", tx.TxID, eventstore.ErrExists)
	}
	if watchdog != nil {
		s.dir.putEntry(tx.Scope, *watchdog)
	}
	rec := &txRec{}
	sh.txs[k] = rec
	rec.write(c, tr, false, true)
	return nil
}

// LoadTransaction reads a saga row.
func (s *Store) LoadTransaction(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.Transaction, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return eventstore.Transaction{}, err
	}
	sh := s.shard(txID)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	rec, ok := sh.txs[txKey{scope, txID}]
	if !ok {
		return eventstore.Transaction{}, fmt.Errorf("memory: transaction %q: %w", txID, eventstore.ErrNotFound)
	}
	return cloneTx(rec.tx), nil
}

// TransactionState reads a saga's state alone (eventstore.StateReader).
func (s *Store) TransactionState(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.State, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return "", err
	}
	sh := s.shard(txID)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	rec, ok := sh.txs[txKey{scope, txID}]
	if !ok {
		return "", fmt.Errorf("memory: transaction %q: %w", txID, eventstore.ErrNotFound)
	}
	return rec.tx.State, nil
}

// Transition writes the saga row and its tryout, if non-nil, atomically,
// ordered as Cassandra orders them (see txRec.write).
func (s *Store) Transition(ctx context.Context, tx eventstore.Transaction, tryout *eventstore.Tryout) error {
	if err := s.check(ctx, tx.Validate(), tryout.ValidateFor(tx.TxID)); err != nil {
		return err
	}
	var tr *eventstore.Tryout
	if tryout != nil {
		t := tryoutOf(tx.TxID, *tryout)
		tr = &t
	}
	c := cloneTx(tx)
	k := txKey{tx.Scope, tx.TxID}
	sh := s.shard(tx.TxID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rec, ok := sh.txs[k]
	if !ok {
		rec = &txRec{}
		sh.txs[k] = rec
	}
	rec.write(c, tr, true, !ok)
	return nil
}

// write applies one write of tx (and tr, or for a transition without one
// the delete of the tryout at Index tx.Version) to rec as Cassandra
// applies the Cassandra store's statements, all at the write time
// eventstore.WriteTime(tx): the later write wins, cell by cell; of two
// cells of one write time a delete wins, else the greater stored value
// (mergeTx, mergeTryout); a Fence above 0 adds a range delete of the
// tryouts at Index tx.Version and above written with a lower Fence. rec is
// new when created is set.
func (rec *txRec) write(tx eventstore.Transaction, tr *eventstore.Tryout, transition, created bool) {
	ts := eventstore.WriteTime(tx)
	switch {
	case created || ts > rec.ts:
		rec.tx, rec.ts = tx, ts
	case ts == rec.ts:
		rec.tx = mergeTx(rec.tx, tx)
	}
	if tx.Fence > 0 {
		d := rangeDelete{from: int(tx.Version), ts: eventstore.WriteTime(eventstore.Transaction{CreatedAt: tx.CreatedAt, Fence: tx.Fence}) - 1}
		if !slices.ContainsFunc(rec.fences, func(o rangeDelete) bool { return o.from <= d.from && o.ts >= d.ts }) {
			rec.fences = append(rec.fences, d) // not one an earlier delete covers
		}
		rec.tryouts = slices.DeleteFunc(rec.tryouts, func(r tryoutRec) bool { return r.t.Index >= d.from && r.ts <= d.ts })
	}
	switch {
	case tr != nil:
		rec.putTryout(tryoutRec{t: *tr, ts: ts})
	case transition:
		rec.putTryout(tryoutRec{t: eventstore.Tryout{TxID: tx.TxID, Index: int(tx.Version)}, ts: ts, deleted: true})
	}
}

// putTryout writes r into its slot unless a range delete or a later write
// of the slot shadows it.
func (rec *txRec) putTryout(r tryoutRec) {
	for _, d := range rec.fences {
		if r.t.Index >= d.from && r.ts <= d.ts {
			return
		}
	}
	list := rec.tryouts
	i, found := slices.BinarySearchFunc(list, r.t.Index, func(e tryoutRec, idx int) int { return cmp.Compare(e.t.Index, idx) })
	if !found {
		rec.tryouts = slices.Insert(list, i, r)
		return
	}
	old := list[i]
	switch {
	case r.ts > old.ts:
		list[i] = r
	case r.ts < old.ts, old.deleted:
	case r.deleted:
		list[i] = r
	default:
		list[i].t = mergeTryout(old.t, r.t)
	}
}

// tryoutOf returns a copy of t stored under txID (eventstore.Store: a
// tryout with an empty TxID takes the saga's).
func tryoutOf(txID string, t eventstore.Tryout) eventstore.Tryout {
	t = cloneTryout(t)
	t.TxID = txID
	return t
}

// Tryouts returns a saga's step history ordered by Index (empty if none).
func (s *Store) Tryouts(ctx context.Context, scope eventstore.Scope, txID string) ([]eventstore.Tryout, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return nil, err
	}
	sh := s.shard(txID)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	rec, ok := sh.txs[txKey{scope, txID}]
	if !ok {
		return nil, nil
	}
	var out []eventstore.Tryout
	for _, r := range rec.tryouts {
		if !r.deleted {
			out = append(out, cloneTryout(r.t))
		}
	}
	return out, nil
}

// Freeze copies tx into the frozen table at tx's write time, ordered with
// Unfreeze as the Cassandra store orders them (eventstore.Store.Freeze).
func (s *Store) Freeze(ctx context.Context, tx eventstore.Transaction, reason string) error {
	if err := s.check(ctx, tx.Validate()); err != nil {
		return err
	}
	ts := eventstore.WriteTime(tx)
	c := cloneTx(tx)
	c.Fence = 0 // not kept with a frozen copy
	f := eventstore.FrozenTransaction{Transaction: c, Reason: reason, FrozenAt: eventstore.StoredTime(s.now())}
	s.frozenMu.Lock()
	defer s.frozenMu.Unlock()
	m := s.frozen[tx.Scope]
	if m == nil {
		m = make(map[string]frozenRec)
		s.frozen[tx.Scope] = m
	}
	old, ok := m[tx.TxID]
	switch {
	case !ok || ts > old.ts:
		m[tx.TxID] = frozenRec{f: f, ts: ts}
	case ts < old.ts || old.deleted:
		// An earlier copy, or one an Unfreeze of its write time or later
		// removed: shadowed.
	default: // the same write time: Cassandra merges the cells
		f.Transaction = mergeTx(old.f.Transaction, f.Transaction)
		f.Reason, f.FrozenAt = max(old.f.Reason, f.Reason), maxTime(old.f.FrozenAt, f.FrozenAt)
		m[tx.TxID] = frozenRec{f: f, ts: ts}
	}
	return nil
}

// Unfreeze removes the frozen copy of tx's saga written at or before tx's
// write time, now or when it arrives (it keeps the delete, as Cassandra
// keeps a tombstone).
func (s *Store) Unfreeze(ctx context.Context, tx eventstore.Transaction) error {
	if err := s.check(ctx, tx.Validate()); err != nil {
		return err
	}
	ts := eventstore.WriteTime(tx)
	s.frozenMu.Lock()
	defer s.frozenMu.Unlock()
	m := s.frozen[tx.Scope]
	if m == nil {
		m = make(map[string]frozenRec)
		s.frozen[tx.Scope] = m
	}
	if old, ok := m[tx.TxID]; !ok || old.ts <= ts {
		m[tx.TxID] = frozenRec{ts: ts, deleted: true}
	}
	return nil
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
	s.frozenMu.RLock()
	defer s.frozenMu.RUnlock()
	m := s.frozen[scope]
	ids := make([]string, 0, len(m))
	for id, r := range m {
		if id > afterTxID && !r.deleted {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]eventstore.FrozenTransaction, len(ids))
	for i, id := range ids {
		f := m[id].f
		f.Transaction = cloneTx(f.Transaction)
		out[i] = f
	}
	return out, nil
}

// GetFrozen reads one frozen saga.
func (s *Store) GetFrozen(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.FrozenTransaction, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return eventstore.FrozenTransaction{}, err
	}
	s.frozenMu.RLock()
	defer s.frozenMu.RUnlock()
	r, ok := s.frozen[scope][txID]
	f := r.f
	if !ok || r.deleted {
		return eventstore.FrozenTransaction{}, fmt.Errorf("memory: frozen transaction %q: %w", txID, eventstore.ErrNotFound)
	}
	f.Transaction = cloneTx(f.Transaction)
	return f, nil
}

func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return slices.Clone(b)
}

func cloneTx(tx eventstore.Transaction) eventstore.Transaction {
	tx.Payload = cloneBytes(tx.Payload)
	if len(tx.Completed) == 0 {
		tx.Completed = nil
	} else {
		tx.Completed = slices.Clone(tx.Completed)
	}
	if len(tx.Hints) == 0 {
		tx.Hints = nil
	} else {
		tx.Hints = maps.Clone(tx.Hints)
	}
	if tx.RestorePath != nil {
		p := *tx.RestorePath
		p.Day = eventstore.DayOf(p.Day)
		tx.RestorePath = &p
	}
	tx.PausedUntil = eventstore.StoredTime(tx.PausedUntil)
	tx.LifetimeStart = eventstore.StoredTime(tx.LifetimeStart)
	tx.CreatedAt = eventstore.StoredTime(tx.CreatedAt)
	tx.UpdatedAt = eventstore.StoredTime(tx.UpdatedAt)
	return tx
}

func cloneTryout(t eventstore.Tryout) eventstore.Tryout {
	t.Before = cloneBytes(t.Before)
	t.After = cloneBytes(t.After)
	t.ResumeContext = cloneBytes(t.ResumeContext)
	t.StartedAt = eventstore.StoredTime(t.StartedAt)
	t.FinishedAt = eventstore.StoredTime(t.FinishedAt)
	return t
}
