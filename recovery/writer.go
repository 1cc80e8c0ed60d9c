package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
)

// Status values written in tier-5 rows (RecoveryEntry.Status).
const (
	StatusRetry   = "RETRY"
	StatusRestore = "RESTORE"
)

// ErrLate means a registration kept completing after its target window had
// started, so a retry node might already have passed it (see Writer).
var ErrLate = errors.New("recovery: registration completed after its window started")

// lateAttempts bounds the re-registrations of a late write.
const lateAttempts = 3

// Writer registers sagas in the recovery directory: retries in even buckets
// of W+delay, restore watchdogs in odd buckets of W+K. Every orchestrator
// process (standard node or retry node) has one; it is safe for concurrent
// use.
//
// A Writer has a fresh instance id (a random UUID) unless WithInstanceID
// says otherwise; its tier-3 rows are clustered by that id's Murmur3 token,
// which decides the retry node that handles them. It counts the rows it
// registered per window and parity and moves to the next bucket of that
// parity every BucketSize rows. The first registration in a bucket writes
// the tiers 1-4 keys and the tier-5 row in one batch (RegisterRecovery);
// later ones write the tier-5 row alone (PutRecoveryEntry), or hand it to
// the caller to write with its own statement (RegisterRestoreVia): one
// round trip per registration, or none of its own. Window state is dropped once the window is
// sealed.
//
// A registration must complete before its window starts: retry nodes read a
// window once it is over, so a row landing later could be missed. A
// registration that completes after its window's start is written again to
// a fresh window (at most 3 times; then ErrLate). Clocks of writers and
// retry nodes must agree to well within one interval.
type Writer struct {
	dir   eventstore.Directory
	cfg   Config
	ws    Windows
	id    string
	token int64
	now   func() time.Time
	log   *slog.Logger

	mu      sync.Mutex
	windows map[windowKey]*windowState
	swept   int64 // global number of the read window at the last sweep

	registrations, batches, writes, late, unregistrations atomic.Int64
}

type windowKey struct {
	scope eventstore.Scope
	g     int64
}

// windowState is what a Writer remembers of one target window.
type windowState struct {
	w      Window
	counts [2]atomic.Int64 // rows registered, by parity (0 retry, 1 restore)

	mu      sync.Mutex
	buckets map[int]*bucketState
}

// bucketState records whether the tiers 1-4 keys of a bucket were written.
type bucketState struct {
	mu      sync.Mutex
	written bool
}

// WriterStats counts a Writer's statements.
type WriterStats struct {
	// Registrations is the number of Register calls that wrote a row.
	Registrations int64
	// Batches are registrations that also wrote the tiers 1-4 keys (the
	// first of a bucket): one logged batch each.
	Batches int64
	// Writes are registrations that wrote the tier-5 row without the
	// tiers 1-4 keys: alone, or with the caller's writes
	// (RegisterRestoreVia).
	Writes int64
	// Late counts writes that completed after their window started and
	// were written again.
	Late int64
	// Unregistrations counts Unregister deletes.
	Unregistrations int64
}

// NewWriter returns a Writer over dir with configuration cfg (validated).
// Options: WithClock, WithLogger, WithInstanceID.
func NewWriter(dir eventstore.Directory, cfg Config, opts ...Option) (*Writer, error) {
	if dir == nil {
		return nil, errors.New("recovery: NewWriter: nil directory")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	ws, err := cfg.Windows()
	if err != nil {
		return nil, err
	}
	id := o.instanceID
	if id == "" {
		id = uuid.NewString()
	}
	return &Writer{
		dir: dir, cfg: cfg, ws: ws, id: id, token: ringcoordinator.Token([]byte(id)),
		now: o.now, log: o.logger, windows: make(map[windowKey]*windowState),
	}, nil
}

// InstanceID is the writer's instance id (tiers 3-5 of its rows).
func (w *Writer) InstanceID() string { return w.id }

// InstanceToken is the Murmur3 token of InstanceID, equal to CQL
// token(instance_id): the tier-3 clustering key retry nodes slice by.
func (w *Writer) InstanceToken() int64 { return w.token }

// Config returns the writer's configuration.
func (w *Writer) Config() Config { return w.cfg }

// Windows returns the writer's window arithmetic.
func (w *Writer) Windows() Windows { return w.ws }

// Stats returns the writer's counters.
func (w *Writer) Stats() WriterStats {
	return WriterStats{
		Registrations: w.registrations.Load(), Batches: w.batches.Load(), Writes: w.writes.Load(),
		Late: w.late.Load(), Unregistrations: w.unregistrations.Load(),
	}
}

// RegisterRetry registers saga txID of domain for a retry delayWindows
// windows after the current one (W+delayWindows), in an even bucket. A
// delayWindows below 1 takes the domain's retry delay-windows (use
// Config.RetryPolicy(domain, endpoint).Delay(attempt) for the backoff). It
// returns the row's path.
func (w *Writer) RegisterRetry(ctx context.Context, scope eventstore.Scope, txID, domain string, delayWindows int) (eventstore.RecoveryPath, error) {
	if delayWindows < 1 {
		delayWindows = w.cfg.RetryPolicy(domain, "").DelayWindows
	}
	path, _, err := w.register(ctx, scope, txID, domain, 0, delayWindows, nil)
	return path, err
}

// RegisterRestore registers the restore watchdog of saga txID of domain in
// an odd bucket of W+K (K: the domain's restore delay-windows) and returns
// its path, to be stored as the saga's RestorePath and passed to
// Unregister when the saga reaches a terminal state.
func (w *Writer) RegisterRestore(ctx context.Context, scope eventstore.Scope, txID, domain string) (eventstore.RecoveryPath, error) {
	path, _, err := w.register(ctx, scope, txID, domain, 1, w.cfg.RestoreDelay(domain), nil)
	return path, err
}

// RegisterRestoreVia is RegisterRestore for a caller that writes the
// watchdog row together with other writes: the orchestrator writes it in
// one statement with the saga's create (eventstore.WatchedCreator). When
// the row's bucket already has its tiers 1-4 keys, write is called with
// the row and must write it; via is then true and write's error is
// returned wrapped. Otherwise (the first registration of a bucket, or a nil
// write) the writer writes the row itself, with the keys, as
// RegisterRestore does, and write is not called: via is false, and the
// caller writes the rest alone.
//
// A row that completed after its window started is registered again by the
// writer alone, in a later window, as RegisterRestore does. With via false
// the path returned is the last row written. With via true it stays the
// row write put, which the caller stored with its own writes: the saga
// ends by deleting that one, and a restore pickup of the later row finds
// the saga finished and deletes it. With via true, an error wrapping
// ErrLate means write succeeded and only registering again failed (or was
// late too): the caller's writes have landed; any other error is write's.
func (w *Writer) RegisterRestoreVia(ctx context.Context, scope eventstore.Scope, txID, domain string, write func(context.Context, eventstore.RecoveryEntry) error) (path eventstore.RecoveryPath, via bool, err error) {
	return w.register(ctx, scope, txID, domain, 1, w.cfg.RestoreDelay(domain), write)
}

// RegisterWatchdog is RegisterRestoreVia with the watchdog's window given:
// delayWindows ahead (W+delayWindows), capped at the domain's restore delay
// K; below 1: K. The orchestrator registers a saga's watchdog due when its
// first step's timeout (plus RestoreMargin) has passed (Windows.DelayUntil)
// rather than K windows ahead, so that a saga stalled by a crash is
// restored about a step timeout after its last transition; the pickup rolls
// it forward when it finds the saga moving (see Redriver).
func (w *Writer) RegisterWatchdog(ctx context.Context, scope eventstore.Scope, txID, domain string, delayWindows int, write func(context.Context, eventstore.RecoveryEntry) error) (path eventstore.RecoveryPath, via bool, err error) {
	return w.register(ctx, scope, txID, domain, 1, w.watchdogDelay(domain, delayWindows), write)
}

// watchdogDelay bounds a watchdog's delay to 1..K of domain (below 1: K).
func (w *Writer) watchdogDelay(domain string, delayWindows int) int {
	k := w.cfg.RestoreDelay(domain)
	if delayWindows < 1 || delayWindows > k {
		return k
	}
	return delayWindows
}

// Unregister deletes the row of txID at path (a restore watchdog when its
// saga ended). A zero path (no instance id) is a no-op.
func (w *Writer) Unregister(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath, txID string) error {
	if path.InstanceID == "" {
		return nil
	}
	if err := w.dir.DeleteRecoveryEntry(ctx, scope, path, txID); err != nil {
		return fmt.Errorf("recovery: unregister %s: %w", txID, err)
	}
	w.unregistrations.Add(1)
	return nil
}

// reregister registers e again forward with the same parity: a retry
// delayWindows ahead (below 1: the domain's delay), a restore watchdog at
// W+K.
func (w *Writer) reregister(ctx context.Context, scope eventstore.Scope, e eventstore.RecoveryEntry, delayWindows int) (eventstore.RecoveryPath, error) {
	if e.Restore() {
		if delayWindows < 1 {
			delayWindows = w.cfg.RestoreDelay(e.Domain)
		}
		path, _, err := w.register(ctx, scope, e.TxID, e.Domain, 1, delayWindows, nil)
		return path, err
	}
	return w.RegisterRetry(ctx, scope, e.TxID, e.Domain, delayWindows)
}

// delay bounds a delay in windows to 1..MaxDelayWindows and MaxDelay.
func (w *Writer) delay(windows int) int {
	return min(max(windows, 1), MaxDelayWindows, int(MaxDelay/w.ws.Interval()))
}

// register writes a row of txID delay windows ahead, in a bucket of parity
// (1: restore), again in a later window while the write completes late, up
// to lateAttempts rows. The first row goes through via, when not nil and
// its bucket has its keys already (see RegisterRestoreVia, whose results
// register returns: the path is then that row's whatever follows, and an
// error after it wraps ErrLate); every other row is the writer's own.
func (w *Writer) register(ctx context.Context, scope eventstore.Scope, txID, domain string, parity, delay int, via func(context.Context, eventstore.RecoveryEntry) error) (path eventstore.RecoveryPath, viaUsed bool, err error) {
	kind := "retry"
	if parity == 1 {
		kind = "restore"
	}
	delay = w.delay(delay)
	for attempt := 1; ; attempt++ {
		target, b, e := w.slot(scope, txID, domain, parity, delay)
		if attempt == 1 && via != nil {
			b.mu.Lock()
			viaUsed = b.written
			b.mu.Unlock()
		}
		if attempt == 1 && viaUsed {
			err = via(ctx, e)
		} else {
			err = w.write(ctx, scope, b, e)
		}
		switch {
		case err != nil && viaUsed && attempt > 1:
			if !errors.Is(err, ErrLate) {
				err = fmt.Errorf("%w: %s's watchdog, written late with its saga, not registered again: recovery: register %s %s in %v: %w",
					ErrLate, txID, kind, txID, target, err)
			}
			return path, true, err
		case err != nil:
			return eventstore.RecoveryPath{}, viaUsed, fmt.Errorf("recovery: register %s %s in %v: %w", kind, txID, target, err)
		}
		w.registrations.Add(1)
		if attempt == 1 || !viaUsed {
			path = e.RecoveryPath // via's row stays the path once written
		}
		if attempt == 1 && viaUsed {
			w.writes.Add(1) // w.write counts its own
		}
		if w.now().Before(target.Start) {
			return path, viaUsed, nil
		}
		w.late.Add(1)
		if attempt == lateAttempts {
			return path, viaUsed, fmt.Errorf("%w: %s %s in %v", ErrLate, kind, txID, target)
		}
		w.log.Warn("recovery: registration completed after its window started; registering again",
			"tx", txID, "kind", kind, "window", target.String())
	}
}

// slot takes the next slot of parity (1: restore) in the window delay
// windows ahead of now and returns that window, the slot's bucket and the
// row of txID in it.
func (w *Writer) slot(scope eventstore.Scope, txID, domain string, parity, delay int) (Window, *bucketState, eventstore.RecoveryEntry) {
	status := StatusRetry
	if parity == 1 {
		status = StatusRestore
	}
	now := w.now()
	target := w.ws.Add(w.ws.At(now), delay)
	st := w.state(scope, target, now)
	n := st.counts[parity].Add(1) - 1
	bucket := parity + 2*int(n/int64(w.cfg.BucketSize))
	e := eventstore.RecoveryEntry{
		RecoveryPath: target.Path(w.id, bucket), TxID: txID, Domain: domain, Status: status, InstanceToken: w.token,
	}
	return target, st.bucket(bucket), e
}

// write writes e: with its tiers 1-4 keys if its bucket has none yet.
// Registrations of a bucket whose keys are being written wait for that
// write, so that no tier-5 row is left without the keys that lead to it.
func (w *Writer) write(ctx context.Context, scope eventstore.Scope, b *bucketState, e eventstore.RecoveryEntry) error {
	b.mu.Lock()
	if !b.written {
		err := w.dir.RegisterRecovery(ctx, scope, e)
		if err == nil {
			b.written = true
			w.batches.Add(1)
		}
		b.mu.Unlock()
		return err
	}
	b.mu.Unlock()
	if err := w.dir.PutRecoveryEntry(ctx, scope, e); err != nil {
		return err
	}
	w.writes.Add(1)
	return nil
}

// state returns the state of target window, creating it, and drops the
// states of sealed windows when the read window has moved since the last
// sweep.
func (w *Writer) state(scope eventstore.Scope, target Window, now time.Time) *windowState {
	k := windowKey{scope, w.ws.globalOf(target)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := w.ws.number(now); g != w.swept {
		w.swept = g
		for key, st := range w.windows {
			if st.w.Sealed(now) {
				delete(w.windows, key)
			}
		}
	}
	st := w.windows[k]
	if st == nil {
		st = &windowState{w: target, buckets: make(map[int]*bucketState)}
		w.windows[k] = st
	}
	return st
}

func (s *windowState) bucket(b int) *bucketState {
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := s.buckets[b]
	if bs == nil {
		bs = &bucketState{}
		s.buckets[b] = bs
	}
	return bs
}

// cachedWindows reports how many window states the writer holds (tests).
func (w *Writer) cachedWindows() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.windows)
}
