package recovery

// Admin operations over the store alone (no Kafka): what `sagactl list` and
// `sagactl restore` do.

import (
	"cmp"
	"context"
	"crypto/subtle"
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
	// Offset skips that many of the sagas the list keeps after the
	// cursor (page numbers: Offset = (page−1) × Limit).
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
	l, err := listInState(ctx, s, scope, cfg, now, page, "retry-pending", eventstore.StateRetryPending, func(b int) bool { return b%2 == 0 })
	out := RetryPendingList{Next: l.next, Entries: l.entries, Candidates: l.candidates}
	if err != nil {
		return out, err
	}
	for i, tx := range l.txs {
		if tx == nil || tx.State != eventstore.StateRetryPending {
			continue // ended or re-driven since its state was read
		}
		ps := PendingSaga{Transaction: *tx, Retries: l.paths[l.kept[i]]}
		sortPaths(ps.Retries)
		ps.Due = l.ws.FromSlot(ps.Retries[0].Day, ps.Retries[0].MinuteOfDay).End
		out.Sagas = append(out.Sagas, ps)
	}
	return out, nil
}

// listing is what ListRetryPending and ListPaused share: the directory
// entries read, the page of sagas they name that were in the listed state,
// and those sagas loaded whole.
type listing struct {
	ws    Windows
	paths map[string][]eventstore.RecoveryPath // the entries naming each saga
	kept  []string                             // the page's sagas, newest first
	// txs are kept's sagas (nil: gone since their state was read).
	txs                 []*eventstore.Transaction
	next                string
	entries, candidates int
}

// listInState walks the directory's buckets that pass keep (walkDirectory),
// selects the page of the sagas named that are in state, newest first, and
// loads them. what names the listing in errors.
func listInState(ctx context.Context, s eventstore.Store, scope eventstore.Scope, cfg Config, now time.Time, page Page, what string, state eventstore.State, keep func(bucket int) bool) (listing, error) {
	var l listing
	if err := scope.Validate(); err != nil {
		return l, fmt.Errorf("recovery: list %s: %w", what, err)
	}
	if err := cfg.Validate(); err != nil {
		return l, err
	}
	ws, err := cfg.Windows()
	if err != nil {
		return l, err
	}
	l.ws = ws
	paths, n, err := walkDirectory(ctx, s, scope, cfg, ws, now, keep, "")
	l.paths, l.entries = paths, n
	if err != nil {
		return l, err
	}
	ids := make([]string, 0, len(paths))
	for id := range paths {
		ids = append(ids, id)
	}
	l.candidates = len(ids)
	kept, _, next, err := pageOf(ctx, s, scope, sortDesc(ids), page, inState(state))
	if err != nil {
		return l, err
	}
	l.kept, l.next = kept, next
	l.txs, err = loadAll(ctx, s, scope, kept)
	return l, err
}

// walkDirectory reads the tier-5 rows of the buckets that pass keep in
// every window of every instance of the whole token ring over the days a
// retry node scans (today − cfg.LookbackDays, at now) up to the farthest
// window an entry can be registered in, and returns the paths of the
// entries naming each saga and how many entries it read; with domain set,
// only the entries of that domain.
func walkDirectory(ctx context.Context, s eventstore.Directory, scope eventstore.Scope, cfg Config, ws Windows, now time.Time, keep func(bucket int) bool, domain string) (map[string][]eventstore.RecoveryPath, int, error) {
	paths := map[string][]eventstore.RecoveryPath{}
	today := ws.At(now).Day
	from := ws.AddDays(today, -cfg.LookbackDays)
	ahead := min(MaxDelayWindows, int(MaxDelay/ws.Interval())) + 1
	to := ws.Add(ws.At(now), ahead).Day
	days, err := listDays(ctx, s, scope, from, to)
	if err != nil {
		return paths, 0, err
	}
	total := 0
	for _, d := range days {
		n, err := entriesOfDay(ctx, s, scope, d, cfg.PageSize, keep, domain, paths)
		total += n
		if err != nil {
			return paths, total, err
		}
	}
	return paths, total, nil
}

// pageOf returns the sagas of ids (sorted newest first) that page selects
// among those whose state passes keep: the cursor applies to ids, the
// offset and the limit to the sagas kept. It reads states in chunks only
// until the page is full (one saga more than it tells whether there is a
// next page) and returns the kept ids with their states, and the cursor
// of the next page ("" on the last).
func pageOf(ctx context.Context, s eventstore.Store, scope eventstore.Scope, ids []string, page Page, keep func(eventstore.State) bool) ([]string, []eventstore.State, string, error) {
	ids = afterCursor(ids, page.After)
	offset := max(page.Offset, 0)
	need := 0 // 0: every saga
	if page.Limit > 0 {
		need = offset + page.Limit + 1
	}
	var kept []string
	var keptStates []eventstore.State
	for start := 0; start < len(ids) && (need == 0 || len(kept) < need); {
		n := len(ids) - start
		if need > 0 {
			n = min(n, max(need-len(kept), adminParallelism))
		}
		chunk := ids[start : start+n]
		start += n
		states, err := readStates(ctx, s, scope, chunk)
		if err != nil {
			return nil, nil, "", err
		}
		for i, id := range chunk {
			if keep(states[i]) {
				kept, keptStates = append(kept, id), append(keptStates, states[i])
			}
		}
	}
	offset = min(offset, len(kept))
	kept, keptStates = kept[offset:], keptStates[offset:]
	if page.Limit > 0 && len(kept) > page.Limit {
		kept, keptStates = kept[:page.Limit], keptStates[:page.Limit]
		return kept, keptStates, kept[page.Limit-1], nil
	}
	return kept, keptStates, "", nil
}

// inState returns a keep function of pageOf for the sagas in state want.
func inState(want eventstore.State) func(eventstore.State) bool {
	return func(st eventstore.State) bool { return st == want }
}

// sortPaths orders recovery paths by window, instance and bucket.
func sortPaths(ps []eventstore.RecoveryPath) {
	slices.SortFunc(ps, func(a, b eventstore.RecoveryPath) int {
		return cmp.Or(a.Day.Compare(b.Day), cmp.Compare(a.MinuteOfDay, b.MinuteOfDay),
			cmp.Compare(a.InstanceID, b.InstanceID), cmp.Compare(a.Bucket, b.Bucket))
	})
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

// entriesOfDay adds the tier-5 rows of every bucket of day d that passes
// keep (and is of domain, if set) to paths and returns how many it read.
func entriesOfDay(ctx context.Context, s eventstore.Directory, scope eventstore.Scope, d time.Time, pageSize int, keep func(bucket int) bool, domain string, paths map[string][]eventstore.RecoveryPath) (int, error) {
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
				if !keep(b) {
					continue
				}
				p := eventstore.RecoveryPath{Day: d, MinuteOfDay: slot, InstanceID: inst.ID, Bucket: b}
				for after := ""; ; {
					list, err := s.ListRecoveryEntries(ctx, scope, p, after, pageSize)
					if err != nil {
						return n, fmt.Errorf("recovery: list entries of %s: %w", fmtPath(p), err)
					}
					for _, e := range list {
						if domain == "" || e.Domain == domain {
							paths[e.TxID] = append(paths[e.TxID], e.RecoveryPath)
						}
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

// afterCursor returns the ids of ids (sorted newest first) below the
// cursor after ("": all of them).
func afterCursor(ids []string, after string) []string {
	if after == "" {
		return ids
	}
	i, _ := slices.BinarySearchFunc(ids, after, func(id, after string) int { return cmp.Compare(after, id) })
	for i < len(ids) && ids[i] >= after {
		i++
	}
	return ids[i:]
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
	kept, states, next, err := pageOf(ctx, s, scope, sortDesc(ids), page, filter.keeps)
	if err != nil {
		return out, err
	}
	for i, id := range kept {
		out.Sagas = append(out.Sagas, FrozenSaga{FrozenTransaction: byID[id], LiveState: states[i]})
	}
	out.Next = next
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
//     tryout-less Transition with Version+1 and Fence+1 (no write made
//     from the state before it can overwrite it); then it leaves the frozen
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
		// Away from the reply path: raise the fence, so that no write of
		// a reply applied to the state before the restore (the late
		// reply of a lost owner, at this version or a later one) can
		// overwrite it (eventstore.Store.Transition).
		tx.Version++
		tx.Fence++
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
		if err := s.Unfreeze(ctx, tx); err != nil {
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

// PausedSaga is a PAUSED saga found in the recovery directory.
type PausedSaga struct {
	// Transaction is the saga: PauseEvent names what it waits for,
	// PausedUntil is its deadline (zero: none, it waits for ever),
	// UpdatedAt is when it paused; Span, Kind, Endpoint and Attempt are
	// the step that paused it.
	eventstore.Transaction
	// CorrelationKey is the key a resume must give: the idempotency key of
	// the step that paused the saga.
	CorrelationKey string
	// Entries are the paths of the directory entries naming the saga
	// (its restore watchdog, the retry of a deadline or of a requested
	// resume), ordered by window.
	Entries []eventstore.RecoveryPath
	// Claim is the owner of the claim of its pause: "" when nobody claimed
	// it yet; eventstore.ClaimResume when a resume was requested through
	// the store (RequestResume) and a retry node has yet to continue it;
	// eventstore.ClaimDeadline when its deadline passed and the step is
	// being invoked again.
	Claim string
}

// PausedList is one page of ListPaused.
type PausedList struct {
	Sagas []PausedSaga
	// Next is the cursor of the next page (Page.After), "" on the last.
	Next string
	// Entries counts the directory entries read (retry and restore),
	// Candidates the distinct sagas they name (before the state check).
	Entries, Candidates int
}

// ListPaused lists the PAUSED sagas of scope, newest first, one page at a
// time, with their correlation keys. Like ListRetryPending it reads no
// table whole: it walks the recovery directory over the days a retry node
// scans (today − LookbackDays of cfg, at now) up to the farthest window an
// entry can be registered in, every window and instance of the whole token
// ring, both the retry (even) and the restore (odd) buckets (every saga in
// flight has a restore watchdog, re-armed by the retry nodes while it is
// paused; a pause with a deadline has a retry too), then reads the state of
// each saga named and keeps the PAUSED ones, each once. Only the sagas of
// the page are loaded whole, and their claims read.
//
// A paused saga is missed only if its watchdog is older than the look-back
// (no retry node re-armed it since) or was lost.
func ListPaused(ctx context.Context, s eventstore.Store, scope eventstore.Scope, cfg Config, now time.Time, page Page) (PausedList, error) {
	l, err := listInState(ctx, s, scope, cfg, now, page, "paused", eventstore.StatePaused, func(int) bool { return true })
	out := PausedList{Next: l.next, Entries: l.entries, Candidates: l.candidates}
	if err != nil {
		return out, err
	}
	txs := l.txs
	claims := make([]string, len(txs))
	err = parallel(ctx, len(txs), func(i int) error {
		tx := txs[i]
		if tx == nil || tx.State != eventstore.StatePaused {
			return nil
		}
		m, err := s.GetMarker(ctx, eventstore.ResumeClaimKey(scope, tx.TxID, tx.Span, tx.Kind, tx.Attempt))
		switch {
		case err == nil:
			claims[i] = m.Owner
		case !errors.Is(err, eventstore.ErrNotFound):
			return fmt.Errorf("recovery: read the pause claim of %s: %w", tx.TxID, err)
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	for i, tx := range txs {
		if tx == nil || tx.State != eventstore.StatePaused {
			continue // continued or ended since its state was read
		}
		ps := PausedSaga{Transaction: *tx, CorrelationKey: eventstore.CorrelationKey(tx.TxID, tx.Span, tx.Kind),
			Entries: l.paths[l.kept[i]], Claim: claims[i]}
		sortPaths(ps.Entries)
		out.Sagas = append(out.Sagas, ps)
	}
	return out, nil
}

// Errors of RequestResume.
var (
	// ErrNotPaused is matched by a *NotPausedError.
	ErrNotPaused = errors.New("recovery: saga not paused")
	// ErrCorrelationKey is matched by a *CorrelationError.
	ErrCorrelationKey = errors.New("recovery: wrong correlation key")
)

// NotPausedError is RequestResume's refusal of a saga that is not paused
// (any more), or cannot be continued.
type NotPausedError struct {
	TxID  string
	State eventstore.State
	// Reason adds what is wrong beyond the state ("" when the state says
	// it all).
	Reason string
}

func (e *NotPausedError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("recovery: saga %s is %s: %s", e.TxID, e.State, e.Reason)
	}
	return fmt.Sprintf("recovery: saga %s is %s, not PAUSED", e.TxID, e.State)
}

// Is reports whether target is ErrNotPaused.
func (e *NotPausedError) Is(target error) bool { return target == ErrNotPaused }

// CorrelationError is RequestResume's refusal of a correlation key.
type CorrelationError struct {
	TxID string
	// Stale is true for the key of another step of the saga (an earlier
	// one, or the other kind), false for a key that is none of its keys.
	Stale bool
}

func (e *CorrelationError) Error() string {
	if e.Stale {
		return fmt.Sprintf("recovery: stale correlation key for %s: another step's, not the paused one's", e.TxID)
	}
	return fmt.Sprintf("recovery: wrong correlation key for %s", e.TxID)
}

// Is reports whether target is ErrCorrelationKey.
func (e *CorrelationError) Is(target error) bool { return target == ErrCorrelationKey }

// ResumeRequestResult says what RequestResume did.
type ResumeRequestResult struct {
	TxID string
	// State is the saga's state as read (PAUSED unless AlreadyResumed).
	State eventstore.State
	// Claimed: this call claimed the pause for the resume (the pause's
	// deadline can no longer re-invoke the step).
	Claimed bool
	// AlreadyResumed: a resume with this correlation key claimed the pause
	// before (through RequestResume or an orchestrator's Resume); no new
	// claim was written and the resume context given now is not used.
	AlreadyResumed bool
	// Span, Kind, Endpoint, Attempt and Event are the paused step and what
	// it waits for (the saga as read).
	Span     int
	Kind     string
	Endpoint string
	Attempt  int
	Event    string
	// PausedUntil is the pause's deadline (zero: none).
	PausedUntil time.Time
	// Registered: a retry was registered (Retry; RetryDue is when a retry
	// node can pick it up: the end of its window), because the saga is
	// still PAUSED under a resume's claim. The retry node that picks it up
	// continues the saga. A second request for a saga still waiting for
	// its continuation registers another retry (harmless: the
	// continuation happens once), which also makes up for a registration
	// that failed.
	Registered bool
	Retry      eventstore.RecoveryPath
	RetryDue   time.Time
}

// RequestResume asks for the resume of the paused saga txID through the
// store alone (what `sagactl resume` does; an orchestrator's Resume does
// the same and continues the saga itself): it checks that the saga is
// PAUSED and that correlationKey is the key of the paused step (compared in
// constant time), writes the claim of the pause for a resume with
// resumeContext (eventstore.ResumeClaim: a lightweight transaction, so a
// resume and the pause's deadline never both win), and registers a retry
// for the next window (delay 1) with w, so that the next retry-node pass
// after that window continues the saga: the next step receives
// resumeContext, exactly as after Orchestrator.Resume.
//
// A request whose key already claimed a resume returns AlreadyResumed (not
// an error: a retried webhook or command). A wrong key returns a
// *CorrelationError (ErrCorrelationKey), a saga not paused, lost to its
// deadline or past its transaction lifetime (at now) a *NotPausedError
// (ErrNotPaused), a missing saga an error wrapping eventstore.ErrNotFound,
// an invalid resume context one wrapping eventstore.ErrInvalid; nothing is
// written then. w registers into the windows of its configuration: give
// it the configuration of the retry nodes.
func RequestResume(ctx context.Context, s eventstore.Store, w *Writer, scope eventstore.Scope, txID, correlationKey string, resumeContext map[string]string, now time.Time) (ResumeRequestResult, error) {
	res := ResumeRequestResult{TxID: txID}
	if w == nil {
		return res, fmt.Errorf("recovery: resume %s: no Writer to register its retry with", txID)
	}
	if err := eventstore.ValidResumeContext(resumeContext); err != nil {
		return res, fmt.Errorf("recovery: resume %s: %w", txID, err)
	}
	tx, err := s.LoadTransaction(ctx, scope, txID)
	if err != nil {
		return res, fmt.Errorf("recovery: resume %s: %w", txID, err)
	}
	res.State, res.Span, res.Kind, res.Endpoint, res.Attempt = tx.State, tx.Span, tx.Kind, tx.Endpoint, tx.Attempt
	res.Event, res.PausedUntil = tx.PauseEvent, tx.PausedUntil
	expected := eventstore.CorrelationKey(txID, tx.Span, tx.Kind)
	match := subtle.ConstantTimeCompare([]byte(expected), []byte(correlationKey)) == 1
	if tx.State != eventstore.StatePaused || !match {
		span, kind, ok := eventstore.ParseCorrelationKey(txID, correlationKey)
		if !ok {
			return res, &CorrelationError{TxID: txID}
		}
		before, err := resumedBefore(ctx, s, scope, txID, span, kind)
		if err != nil {
			return res, err
		}
		if before {
			res.AlreadyResumed = true
			return res, nil
		}
		if tx.State == eventstore.StatePaused {
			return res, &CorrelationError{TxID: txID, Stale: true}
		}
		return res, &NotPausedError{TxID: txID, State: tx.State}
	}
	if cfg := w.Config(); cfg.Expired(tx.LifetimeFrom(), now) {
		return res, &NotPausedError{TxID: txID, State: tx.State, Reason: fmt.Sprintf(
			"it outlived its transaction lifetime of %v (since %s): a retry node disables it rather than continue it", cfg.TransactionLifetime, tx.LifetimeFrom().Format(time.RFC3339))}
	}
	claim, err := eventstore.ResumeClaim(scope, txID, tx.Span, tx.Kind, tx.Attempt, eventstore.ClaimResume, resumeContext)
	if err != nil {
		return res, fmt.Errorf("recovery: resume %s: %w", txID, err)
	}
	applied, existing, err := s.InsertMarker(ctx, claim, eventstore.ResumeClaimTTL)
	if err != nil {
		return res, fmt.Errorf("recovery: resume %s: claim its pause: %w", txID, err)
	}
	switch {
	case applied:
		res.Claimed = true
	case existing.Owner == eventstore.ClaimResume:
		res.AlreadyResumed = true
	default:
		return res, &NotPausedError{TxID: txID, State: tx.State, Reason: "its deadline passed and the paused step is being invoked again"}
	}
	p, err := w.RegisterRetry(ctx, scope, txID, tx.Domain, 1)
	if err != nil {
		return res, fmt.Errorf("recovery: resume %s: the pause is claimed for the resume, but registering its retry failed (request the resume again, or its restore watchdog continues it later): %w", txID, err)
	}
	res.Registered, res.Retry, res.RetryDue = true, p, w.Windows().FromSlot(p.Day, p.MinuteOfDay).End
	return res, nil
}

// resumedBefore reports whether a resume claimed a pause of txID at span
// and kind (one read of the saga's marker partition).
func resumedBefore(ctx context.Context, s eventstore.Store, scope eventstore.Scope, txID string, span int, kind string) (bool, error) {
	ms, err := s.ListMarkers(ctx, scope, txID)
	if err != nil {
		return false, fmt.Errorf("recovery: resume %s: read its markers: %w", txID, err)
	}
	for _, m := range ms {
		if m.IsResumeOf(span, kind) {
			return true, nil
		}
	}
	return false, nil
}
