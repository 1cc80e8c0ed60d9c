package recovery

// Admin operations over the store alone (no Kafka): what `sagactl list` and
// `sagactl restore` do.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// ErrNotRestorable is matched (errors.Is) by the errors Restore returns for
// a saga in a state it cannot restore from (see NotRestorableError).
var ErrNotRestorable = errors.New("recovery: saga not restorable")

// NotRestorableError says why Restore refused a saga: its state.
type NotRestorableError struct {
	TxID  string
	State eventstore.State
	// Reason adds what is wrong beyond the state ("" when the state says
	// it all).
	Reason string
}

func (e *NotRestorableError) Error() string {
	msg := fmt.Sprintf("recovery: saga %s is %s: only DISABLED, COMPENSATION_FAILED and RETRY_PENDING sagas can be restored", e.TxID, e.State)
	if e.Reason != "" {
		msg = fmt.Sprintf("recovery: saga %s is %s: %s", e.TxID, e.State, e.Reason)
	}
	return msg
}

// Is reports whether target is ErrNotRestorable.
func (e *NotRestorableError) Is(target error) bool { return target == ErrNotRestorable }

// kindRevert is Transaction.Kind while a saga compensates (topics.KindRevert;
// this package does not depend on topics).
const kindRevert = "revert"

// adminParallelism bounds the saga reads the admin lists run at once.
const adminParallelism = 16

// frozenPageSize is the page size of the frozen-table reads.
const frozenPageSize = 1000

// Page selects one page of an admin list. Lists are ordered newest first:
// by transaction id descending, which is creation order for ids made by
// orchestrator.NewTxID (their first 48 bits are the creation time in unix
// milliseconds, hex-encoded, so they sort as text in time order).
type Page struct {
	// After is a cursor: the list starts with the first saga after this
	// transaction id in newest-first order (that is, ids below it). ""
	// starts at the newest. Pass the previous page's Next.
	After string
	// Offset skips that many sagas after the cursor (page numbers:
	// Offset = (page−1) × Limit).
	Offset int
	// Limit bounds the page (<= 0: no bound).
	Limit int
}

// PendingSaga is a RETRY_PENDING saga found in the retry buckets.
type PendingSaga struct {
	eventstore.Transaction
	// Retries are the paths of its retry entries (one per registration
	// not yet handled), ordered by window.
	Retries []eventstore.RecoveryPath
	// Due is when a retry node can pick up its earliest retry entry: the
	// end of that entry's window (it may be past: the entry waits for the
	// next scan).
	Due time.Time
}

// RetryPendingList is one page of ListRetryPending.
type RetryPendingList struct {
	Sagas []PendingSaga
	// Next is the cursor of the next page (Page.After), "" on the last.
	Next string
	// Entries counts the retry entries read, Candidates the distinct sagas
	// they name (before the state check).
	Entries, Candidates int
}

// ListRetryPending lists the RETRY_PENDING sagas of scope that have a retry
// registered, newest first, one page at a time. It reads no table whole:
// it walks the recovery directory top-down over the days a retry node
// scans (today − LookbackDays of cfg, at now) up to the farthest window a
// retry can be registered in, every window of them (sealed or not), every
// instance of the whole token ring and only their retry (even) buckets,
// then reads the state of each saga those entries name and keeps those
// still RETRY_PENDING (a saga registered twice is listed once). Only the
// sagas of the page are loaded whole.
//
// A saga left RETRY_PENDING without a retry entry (its registration failed
// or was lost, or it is older than the look-back) is not listed here: its
// restore watchdog (the odd bucket registered at its start, or re-armed by
// Restore) finds it instead and re-drives it, and `sagactl restore TXID`
// registers a retry for it at once.
func ListRetryPending(ctx context.Context, s eventstore.Store, scope eventstore.Scope, cfg Config, now time.Time, page Page) (RetryPendingList, error) {
	var out RetryPendingList
	if err := scope.Validate(); err != nil {
		return out, fmt.Errorf("recovery: list retry-pending: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return out, err
	}
	ws, err := cfg.Windows()
	if err != nil {
		return out, err
	}
	paths := map[string][]eventstore.RecoveryPath{}
	today := ws.At(now).Day
	from := ws.AddDays(today, -cfg.LookbackDays)
	ahead := min(MaxDelayWindows, int(MaxDelay/ws.Interval())) + 1
	to := ws.Add(ws.At(now), ahead).Day
	days, err := listDays(ctx, s, scope, from, to)
	if err != nil {
		return out, err
	}
	for _, d := range days {
		n, err := retryEntriesOfDay(ctx, s, scope, d, cfg.PageSize, paths)
		out.Entries += n
		if err != nil {
			return out, err
		}
	}
	ids := make([]string, 0, len(paths))
	for id := range paths {
		ids = append(ids, id)
	}
	out.Candidates = len(ids)
	ids = window(sortDesc(ids), page)

	// Read states in chunks until the page is full: one saga more than the
	// limit tells whether there is a next page.
	want := page.Limit
	var kept []string
	for start := 0; start < len(ids) && (want <= 0 || len(kept) <= want); {
		n := len(ids) - start
		if want > 0 {
			n = min(n, max(want+1-len(kept), adminParallelism))
		}
		chunk := ids[start : start+n]
		start += n
		states, err := readStates(ctx, s, scope, chunk)
		if err != nil {
			return out, err
		}
		for i, id := range chunk {
			if states[i] == eventstore.StateRetryPending {
				kept = append(kept, id)
			}
		}
	}
	if want > 0 && len(kept) > want {
		kept = kept[:want]
		out.Next = kept[want-1]
	}
	txs, err := loadAll(ctx, s, scope, kept)
	if err != nil {
		return out, err
	}
	for i, tx := range txs {
		if tx == nil || tx.State != eventstore.StateRetryPending {
			continue // ended or re-driven since its state was read
		}
		ps := PendingSaga{Transaction: *tx, Retries: paths[kept[i]]}
		slices.SortFunc(ps.Retries, func(a, b eventstore.RecoveryPath) int {
			return cmp.Or(a.Day.Compare(b.Day), cmp.Compare(a.MinuteOfDay, b.MinuteOfDay),
				cmp.Compare(a.InstanceID, b.InstanceID), cmp.Compare(a.Bucket, b.Bucket))
		})
		ps.Due = ws.FromSlot(ps.Retries[0].Day, ps.Retries[0].MinuteOfDay).End
		out.Sagas = append(out.Sagas, ps)
	}
	return out, nil
}

// listDays is Directory.ListDays over any span, one calendar year per call
// (ListDays refuses spans of more than MaxListDaysYears years).
func listDays(ctx context.Context, s eventstore.Directory, scope eventstore.Scope, from, to time.Time) ([]time.Time, error) {
	var days []time.Time
	for lo := eventstore.DayOf(from); !lo.After(to); {
		hi := time.Date(lo.Year(), 12, 31, 0, 0, 0, 0, time.UTC)
		if hi.After(to) {
			hi = eventstore.DayOf(to)
		}
		d, err := s.ListDays(ctx, scope, lo, hi)
		if err != nil {
			return nil, fmt.Errorf("recovery: list days %s..%s: %w", lo.Format(time.DateOnly), hi.Format(time.DateOnly), err)
		}
		days = append(days, d...)
		lo = time.Date(lo.Year()+1, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return days, nil
}

// retryEntriesOfDay adds the tier-5 rows of every retry bucket of day d to
// paths and returns how many it read.
func retryEntriesOfDay(ctx context.Context, s eventstore.Directory, scope eventstore.Scope, d time.Time, pageSize int, paths map[string][]eventstore.RecoveryPath) (int, error) {
	ds := d.Format(time.DateOnly)
	slots, err := s.ListWindows(ctx, scope, d)
	if err != nil {
		return 0, fmt.Errorf("recovery: list windows of %s: %w", ds, err)
	}
	n := 0
	for _, slot := range slots {
		insts, err := s.ListInstances(ctx, scope, d, slot, eventstore.FullRing)
		if err != nil {
			return n, fmt.Errorf("recovery: list instances of %s/%d: %w", ds, slot, err)
		}
		for _, inst := range insts {
			buckets, err := s.ListBuckets(ctx, scope, d, slot, inst.ID)
			if err != nil {
				return n, fmt.Errorf("recovery: list buckets of %s in %s/%d: %w", inst.ID, ds, slot, err)
			}
			for _, b := range buckets {
				if b%2 != 0 {
					continue // restore watchdogs
				}
				p := eventstore.RecoveryPath{Day: d, MinuteOfDay: slot, InstanceID: inst.ID, Bucket: b}
				for after := ""; ; {
					list, err := s.ListRecoveryEntries(ctx, scope, p, after, pageSize)
					if err != nil {
						return n, fmt.Errorf("recovery: list entries of %s: %w", fmtPath(p), err)
					}
					for _, e := range list {
						paths[e.TxID] = append(paths[e.TxID], e.RecoveryPath)
					}
					n += len(list)
					if len(list) == 0 || (pageSize > 0 && len(list) < pageSize) || pageSize <= 0 {
						break
					}
					after = list[len(list)-1].TxID
				}
			}
		}
	}
	return n, nil
}

// sortDesc sorts ids newest first.
func sortDesc(ids []string) []string {
	slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(b, a) })
	return ids
}

// window applies the cursor and offset of page to ids sorted newest first
// (the limit is applied by the caller, after filtering).
func window(ids []string, page Page) []string {
	if page.After != "" {
		i, _ := slices.BinarySearchFunc(ids, page.After, func(id, after string) int { return cmp.Compare(after, id) })
		for i < len(ids) && ids[i] >= page.After {
			i++
		}
		ids = ids[i:]
	}
	if page.Offset > 0 {
		ids = ids[min(page.Offset, len(ids)):]
	}
	return ids
}

// readStates returns the state of each saga of ids ("" when it is gone),
// reading up to adminParallelism at once, with StateReader when the store
// has it.
func readStates(ctx context.Context, s eventstore.Store, scope eventstore.Scope, ids []string) ([]eventstore.State, error) {
	states := make([]eventstore.State, len(ids))
	sr, _ := s.(eventstore.StateReader)
	err := parallel(ctx, len(ids), func(i int) error {
		var st eventstore.State
		var err error
		if sr != nil {
			st, err = sr.TransactionState(ctx, scope, ids[i])
		} else {
			var tx eventstore.Transaction
			tx, err = s.LoadTransaction(ctx, scope, ids[i])
			st = tx.State
		}
		switch {
		case errors.Is(err, eventstore.ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("recovery: read state of %s: %w", ids[i], err)
		}
		states[i] = st
		return nil
	})
	return states, err
}

// loadAll loads the sagas of ids (nil for one that is gone).
func loadAll(ctx context.Context, s eventstore.Store, scope eventstore.Scope, ids []string) ([]*eventstore.Transaction, error) {
	txs := make([]*eventstore.Transaction, len(ids))
	err := parallel(ctx, len(ids), func(i int) error {
		tx, err := s.LoadTransaction(ctx, scope, ids[i])
		switch {
		case errors.Is(err, eventstore.ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("recovery: load %s: %w", ids[i], err)
		}
		txs[i] = &tx
		return nil
	})
	return txs, err
}

// parallel runs f(0..n-1) with at most adminParallelism calls at once and
// returns the first error (the calls not yet started are then skipped).
func parallel(ctx context.Context, n int, f func(i int) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	for range min(adminParallelism, n) {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
				}
			}
		})
	}
	fed := 0
feed:
	for fed < n {
		select {
		case next <- fed:
			fed++
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && fed < n {
		// Only the caller's context can have stopped the feed without an
		// error of f.
		first = context.Cause(ctx)
	}
	return first
}

// FrozenFilter selects the frozen sagas ListFrozen returns, by their
// current state (the saga row's, not the frozen copy's: a copy may have
// been taken just before the saga's last transition).
type FrozenFilter int

const (
	// FrozenAll lists every saga of the frozen table.
	FrozenAll FrozenFilter = iota
	// FrozenDisabled lists the DISABLED ones (outlived their lifetime).
	FrozenDisabled
	// FrozenTerminated lists the COMPENSATION_FAILED ones ("terminated").
	FrozenTerminated
)

// String returns the filter's name as sagactl spells it.
func (f FrozenFilter) String() string {
	switch f {
	case FrozenDisabled:
		return "disabled"
	case FrozenTerminated:
		return "terminated"
	}
	return "frozen"
}

// keeps reports whether a saga in state st passes f.
func (f FrozenFilter) keeps(st eventstore.State) bool {
	switch f {
	case FrozenDisabled:
		return st == eventstore.StateDisabled
	case FrozenTerminated:
		return st == eventstore.StateCompensationFailed
	}
	return true
}

// FrozenSaga is a row of the frozen table with its saga's current state.
type FrozenSaga struct {
	eventstore.FrozenTransaction
	// LiveState is the state of the saga row now ("" if the row is gone).
	// The frozen copy's Transaction.State is the state when it was frozen.
	LiveState eventstore.State
}

// FrozenList is one page of ListFrozen.
type FrozenList struct {
	Sagas []FrozenSaga
	// Next is the cursor of the next page (Page.After), "" on the last.
	Next string
	// Total counts the rows of the frozen table of the scope.
	Total int
}

// ListFrozen lists the frozen sagas of scope that pass filter, newest first,
// one page at a time. The store lists the frozen table (one partition per
// scope) in ascending id order only, so the partition is read whole, in
// pages of 1000 rows; then the current state of the sagas is read (only as
// far as the page needs) to filter them and to report LiveState.
func ListFrozen(ctx context.Context, s eventstore.Store, scope eventstore.Scope, filter FrozenFilter, page Page) (FrozenList, error) {
	var out FrozenList
	if err := scope.Validate(); err != nil {
		return out, fmt.Errorf("recovery: list %s: %w", filter, err)
	}
	var all []eventstore.FrozenTransaction
	for after := ""; ; {
		list, err := s.ListFrozenAfter(ctx, scope, after, frozenPageSize)
		if err != nil {
			return out, fmt.Errorf("recovery: list %s: %w", filter, err)
		}
		all = append(all, list...)
		if len(list) < frozenPageSize {
			break
		}
		after = list[len(list)-1].TxID
	}
	out.Total = len(all)
	byID := make(map[string]eventstore.FrozenTransaction, len(all))
	ids := make([]string, len(all))
	for i, f := range all {
		byID[f.TxID], ids[i] = f, f.TxID
	}
	ids = window(sortDesc(ids), page)

	want := page.Limit
	for start := 0; start < len(ids) && (want <= 0 || len(out.Sagas) <= want); {
		n := len(ids) - start
		if want > 0 {
			n = min(n, max(want+1-len(out.Sagas), adminParallelism))
		}
		chunk := ids[start : start+n]
		start += n
		states, err := readStates(ctx, s, scope, chunk)
		if err != nil {
			return out, err
		}
		for i, id := range chunk {
			if filter.keeps(states[i]) {
				out.Sagas = append(out.Sagas, FrozenSaga{FrozenTransaction: byID[id], LiveState: states[i]})
			}
		}
	}
	if want > 0 && len(out.Sagas) > want {
		out.Sagas = out.Sagas[:want]
		out.Next = out.Sagas[want-1].TxID
	}
	return out, nil
}

// RestoreResult says what Restore did.
type RestoreResult struct {
	TxID string
	// From is the saga's state before, To after (RETRY_PENDING).
	From, To eventstore.State
	// Transitioned: the saga row was rewritten (From was DISABLED or
	// COMPENSATION_FAILED); Version is its new version.
	Transitioned bool
	Version      int64
	// LifetimeStart is the saga's new lifetime start (zero if unchanged).
	LifetimeStart time.Time
	// Watchdog is the restore watchdog registered for the saga and stored
	// as its RestorePath (nil if unchanged).
	Watchdog *eventstore.RecoveryPath
	// Retry is the retry entry registered; RetryDue is when a retry node
	// can pick it up (the end of its window).
	Retry    eventstore.RecoveryPath
	RetryDue time.Time
	// Span, Kind, Endpoint and Attempt are the step the retry node will
	// send again (with Attempt+1).
	Span     int
	Kind     string
	Endpoint string
	Attempt  int
	// Unfrozen: the saga was removed from the frozen table.
	Unfrozen bool
	// Warnings lists what went wrong without undoing the restore (the old
	// watchdog could not be deleted).
	Warnings []string
}

// Restore makes a frozen or parked saga run again, through the recovery
// engine (it sends nothing itself):
//
//   - DISABLED (outlived its transaction lifetime): its lifetime restarts
//     at now (LifetimeStart), it becomes RETRY_PENDING at its current step
//     (kind kept: a compensation stays a compensation), its Error is kept
//     with a note, and it gets a new restore watchdog (stored as its
//     RestorePath; the old one, if any, is deleted), all in one
//     tryout-less Transition with Version+1; then it leaves the frozen
//     table and a retry is registered for the next window (delay 1), so the
//     next retry-node pass after that window re-drives it: the step is sent
//     again with attempt+1.
//   - COMPENSATION_FAILED ("terminated"): the same, on its failed
//     compensation (Kind "revert"; a saga terminated outside a
//     compensation, e.g. one whose entity no longer decodes, is not
//     restorable). The retry re-sends the compensation (COMPENSATING).
//   - RETRY_PENDING: only a retry is registered for the next window (and
//     the saga leaves the frozen table if it is there: a restore
//     interrupted after its transition is finished by restoring again).
//   - any other state: a *NotRestorableError (ErrNotRestorable), nothing
//     written. A missing saga: an error wrapping eventstore.ErrNotFound.
//
// w registers into the windows of its configuration: give it the
// configuration of the retry nodes. The retry counts from the step's
// current attempt: a step whose retry policy is exhausted gets one more
// attempt, and fails for good again if that fails retryably.
func Restore(ctx context.Context, s eventstore.Store, w *Writer, scope eventstore.Scope, txID string, now time.Time) (RestoreResult, error) {
	res := RestoreResult{TxID: txID}
	tx, err := s.LoadTransaction(ctx, scope, txID)
	if err != nil {
		return res, fmt.Errorf("recovery: restore %s: %w", txID, err)
	}
	res.From, res.To = tx.State, eventstore.StateRetryPending
	res.Span, res.Kind, res.Endpoint, res.Attempt, res.Version = tx.Span, tx.Kind, tx.Endpoint, tx.Attempt, tx.Version
	switch tx.State {
	case eventstore.StateRetryPending:
	case eventstore.StateDisabled:
	case eventstore.StateCompensationFailed:
		if tx.Kind != kindRevert {
			return res, &NotRestorableError{TxID: txID, State: tx.State,
				Reason: fmt.Sprintf("it was terminated outside a compensation (step kind %q), so there is no failed compensation to retry", tx.Kind)}
		}
	default:
		return res, &NotRestorableError{TxID: txID, State: tx.State}
	}
	if tx.Endpoint == "" {
		return res, &NotRestorableError{TxID: txID, State: tx.State, Reason: "it has no step to send again"}
	}

	if tx.State != eventstore.StateRetryPending {
		// A new watchdog first: if anything below fails, the saga is
		// either still frozen (the watchdog then finds it frozen and does
		// nothing) or RETRY_PENDING with a watchdog that re-drives it.
		wd, err := w.RegisterRestore(ctx, scope, txID, tx.Domain)
		if err != nil {
			return res, fmt.Errorf("recovery: restore %s: watchdog: %w", txID, err)
		}
		old := tx.RestorePath
		now = eventstore.StoredTime(now)
		note := fmt.Sprintf("restored from %s at %s", tx.State, now.Format(time.RFC3339))
		if tx.Error != "" {
			tx.Error += " [" + note + "]"
		} else {
			tx.Error = note
		}
		tx.State = eventstore.StateRetryPending
		tx.LifetimeStart = now
		tx.RestorePath = &wd
		tx.Version++
		tx.UpdatedAt = now
		if err := s.Transition(ctx, tx, nil); err != nil {
			return res, fmt.Errorf("recovery: restore %s: transition to %s: %w", txID, tx.State, err)
		}
		res.Transitioned, res.Version, res.LifetimeStart, res.Watchdog = true, tx.Version, now, &wd
		if old != nil && *old != wd {
			if err := w.Unregister(ctx, scope, *old, txID); err != nil {
				res.Warnings = append(res.Warnings, fmt.Sprintf("old watchdog %s not deleted: %v", fmtPath(*old), err))
			}
		}
	}
	frozen := res.Transitioned
	if !frozen {
		// A RETRY_PENDING saga is frozen only after an interrupted
		// restore; look first rather than write a tombstone every time.
		_, err := s.GetFrozen(ctx, scope, txID)
		switch {
		case err == nil:
			frozen = true
		case !errors.Is(err, eventstore.ErrNotFound):
			return res, fmt.Errorf("recovery: restore %s: read frozen copy: %w", txID, err)
		}
	}
	if frozen {
		if err := s.Unfreeze(ctx, scope, txID); err != nil {
			return res, fmt.Errorf("recovery: restore %s: unfreeze (the saga is %s; restore it again): %w", txID, tx.State, err)
		}
		res.Unfrozen = true
	}
	p, err := w.RegisterRetry(ctx, scope, txID, tx.Domain, 1)
	if err != nil {
		return res, fmt.Errorf("recovery: restore %s: register retry (the saga is %s; restore it again): %w", txID, tx.State, err)
	}
	res.Retry = p
	res.RetryDue = w.Windows().FromSlot(p.Day, p.MinuteOfDay).End
	return res, nil
}
