package tracewindow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// List runs q on idx (an empty q.Domain merges the pages of every domain
// the index knows) and reads each listed saga's state from store: the
// index is fed asynchronously and misses changes made without the
// orchestrator (sagactl restore, a batch lost to a crash until Repair), so
// an entry whose state moved is refreshed from the saga row and dropped
// when it no longer passes q.States; a saga gone from the store is
// dropped. moved holds the refreshed entries (write them back to the index
// so that its counts agree: the Trace Window does). It is what GET
// /api/sagas and `sagactl list all` answer.
func List(ctx context.Context, store eventstore.Store, idx Index, q Query) (page Page, moved []Entry, err error) {
	if idx == nil {
		return Page{}, nil, errors.New("tracewindow: list: no index")
	}
	if page, err = recent(ctx, idx, q); err != nil {
		return Page{}, nil, err
	}
	kept, moved, err := verify(ctx, store, q.Scope, page.Entries, q.States)
	if err != nil {
		return Page{}, moved, fmt.Errorf("read states: %w", err)
	}
	page.Entries = kept
	return page, moved, nil
}

// recent runs q on the index; an empty domain merges every domain's page.
func recent(ctx context.Context, idx Index, q Query) (Page, error) {
	if q.Domain != "" {
		return idx.Recent(ctx, q)
	}
	domains, err := idx.Domains(ctx, q.Scope)
	if err != nil {
		return Page{}, err
	}
	var all []Entry
	var out Page
	floor := "" // every domain is read down to here
	for _, d := range domains {
		dq := q
		dq.Domain = d
		p, err := idx.Recent(ctx, dq)
		if err != nil {
			return Page{}, err
		}
		out.Scanned += p.Scanned
		all = append(all, p.Entries...)
		if p.Next != "" && p.Next > floor {
			floor = p.Next
		}
	}
	slices.SortFunc(all, func(a, b Entry) int { return strings.Compare(b.TxID, a.TxID) })
	if floor != "" {
		i := 0
		for i < len(all) && all[i].TxID >= floor {
			i++
		}
		all = all[:i]
	}
	if len(all) > q.Limit {
		all = all[:q.Limit]
		out.Next = all[q.Limit-1].TxID
	} else {
		out.Next = floor
	}
	out.Entries = all
	return out, nil
}

// verify reads the live state of each entry from the store; an entry whose
// state moved is refreshed from the saga row (and returned in moved) and
// dropped when it no longer passes the state filter.
func verify(ctx context.Context, store eventstore.Store, scope eventstore.Scope, entries []Entry, states []eventstore.State) (kept, moved []Entry, err error) {
	sr, ok := store.(eventstore.StateReader)
	if !ok || len(entries) == 0 {
		return entries, nil, nil
	}
	out := make([]*Entry, len(entries))
	sem := make(chan struct{}, verifyParallelism)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range entries {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			e := entries[i]
			st, err := sr.TransactionState(ctx, scope, e.TxID)
			if err == nil && st != e.State {
				var tx eventstore.Transaction
				if tx, err = store.LoadTransaction(ctx, scope, e.TxID); err == nil {
					e = EntryOf(&tx)
					mu.Lock()
					moved = append(moved, e)
					mu.Unlock()
				}
			}
			switch {
			case errors.Is(err, eventstore.ErrNotFound):
				return
			case err != nil:
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			if stateIn(e.State, states) {
				out[i] = &e
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, moved, firstErr
	}
	kept = make([]Entry, 0, len(entries))
	for _, e := range out {
		if e != nil {
			kept = append(kept, *e)
		}
	}
	return kept, moved, nil
}
