// Package memory is the in-memory eventstore.Store: the embedded default of
// StackSaga and the fast twin of the Cassandra store, with the same
// semantics (conditional inserts, TTL expiry on an injectable clock,
// partition deletes, clustering order), checked by eventstore/storetest.
// TTLs expire as Cassandra's do: a marker inserted at t with a TTL expires
// at t truncated to whole seconds plus the TTL, up to a second earlier than
// t plus the TTL.
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
	frozen   map[eventstore.Scope]map[string]eventstore.FrozenTransaction

	dir directory
}

var (
	_ eventstore.Store          = (*Store)(nil)
	_ eventstore.StateReader    = (*Store)(nil)
	_ eventstore.WatchedCreator = (*Store)(nil)
)

// New returns an empty in-memory store.
func New(opts ...Option) *Store {
	s := &Store{
		now:    time.Now,
		seed:   maphash.MakeSeed(),
		frozen: make(map[eventstore.Scope]map[string]eventstore.FrozenTransaction),
	}
	for _, o := range opts {
		o.apply(s)
	}
	for i := range s.shards {
		s.shards[i].txs = make(map[txKey]*txRec)
		s.shards[i].markers = make(map[txKey]map[markerCK]markerRec)
	}
	s.dir.init()
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

type txRec struct {
	tx      eventstore.Transaction
	tryouts []eventstore.Tryout // ordered by Index
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
	rec := &txRec{tx: cloneTx(tx)}
	if first != nil {
		rec.tryouts = []eventstore.Tryout{tryoutOf(tx.TxID, *first)}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.txs[k]; ok {
		return fmt.Errorf("memory: transaction %q: %w", tx.TxID, eventstore.ErrExists)
	}
	if watchdog != nil {
		s.dir.putEntry(tx.Scope, *watchdog)
	}
	sh.txs[k] = rec
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

// Transition overwrites the saga row and writes tryout, if non-nil,
// atomically.
func (s *Store) Transition(ctx context.Context, tx eventstore.Transaction, tryout *eventstore.Tryout) error {
	if err := s.check(ctx, tx.Validate(), tryout.ValidateFor(tx.TxID)); err != nil {
		return err
	}
	var tr eventstore.Tryout
	if tryout != nil {
		tr = tryoutOf(tx.TxID, *tryout)
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
	if ok && rec.tx.Version > tx.Version {
		// Fenced: an older version never overwrites a newer one (as
		// Cassandra's write timestamps make it).
		return nil
	}
	rec.tx = c
	if tryout != nil {
		rec.tryouts = putTryout(rec.tryouts, tr)
	}
	return nil
}

// tryoutOf returns a copy of t stored under txID (eventstore.Store: a
// tryout with an empty TxID takes the saga's).
func tryoutOf(txID string, t eventstore.Tryout) eventstore.Tryout {
	t = cloneTryout(t)
	t.TxID = txID
	return t
}

func putTryout(list []eventstore.Tryout, t eventstore.Tryout) []eventstore.Tryout {
	n := len(list)
	if n == 0 || list[n-1].Index < t.Index {
		return append(list, t)
	}
	i, found := slices.BinarySearchFunc(list, t.Index, func(e eventstore.Tryout, idx int) int { return cmp.Compare(e.Index, idx) })
	if found {
		list[i] = t
		return list
	}
	return slices.Insert(list, i, t)
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
	if !ok || len(rec.tryouts) == 0 {
		return nil, nil
	}
	out := make([]eventstore.Tryout, len(rec.tryouts))
	for i, t := range rec.tryouts {
		out[i] = cloneTryout(t)
	}
	return out, nil
}

// Freeze copies tx into the frozen table (overwriting an earlier copy).
func (s *Store) Freeze(ctx context.Context, tx eventstore.Transaction, reason string) error {
	if err := s.check(ctx, tx.Validate()); err != nil {
		return err
	}
	f := eventstore.FrozenTransaction{Transaction: cloneTx(tx), Reason: reason, FrozenAt: eventstore.StoredTime(s.now())}
	s.frozenMu.Lock()
	defer s.frozenMu.Unlock()
	m := s.frozen[tx.Scope]
	if m == nil {
		m = make(map[string]eventstore.FrozenTransaction)
		s.frozen[tx.Scope] = m
	}
	m[tx.TxID] = f
	return nil
}

// Unfreeze removes a saga from the frozen table (a no-op if absent).
func (s *Store) Unfreeze(ctx context.Context, scope eventstore.Scope, txID string) error {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return err
	}
	s.frozenMu.Lock()
	defer s.frozenMu.Unlock()
	if m := s.frozen[scope]; m != nil {
		delete(m, txID)
		if len(m) == 0 {
			delete(s.frozen, scope)
		}
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
	for id := range m {
		if id > afterTxID {
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
		f := m[id]
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
	f, ok := s.frozen[scope][txID]
	if !ok {
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
