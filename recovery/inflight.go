package recovery

import (
	"context"
	"fmt"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// SagaFilter selects the sagas of ListInFlight.
type SagaFilter struct {
	// Domain keeps the sagas of one domain ("" any).
	Domain string
	// States keeps the sagas whose state it accepts (read from the store);
	// nil keeps every state that is not terminal.
	States func(eventstore.State) bool
	// IDs keeps the transaction ids it accepts before any state is read
	// (a creation-time range read from the id, one id); nil keeps all.
	IDs func(txID string) bool
}

// SagaList is one page of ListInFlight.
type SagaList struct {
	// Sagas are newest first (transaction id descending), read whole.
	Sagas []eventstore.Transaction
	// Next is the cursor of the next page (Page.After), "" on the last.
	Next string
	// Entries counts the directory entries read, Frozen the frozen rows,
	// Candidates the distinct sagas they name (before the filters).
	Entries, Frozen, Candidates int
}

// ListInFlight lists the sagas of scope that the store can enumerate
// without a scan, newest first, one page at a time, keeping those f
// selects: every saga named by the recovery directory over the days a
// retry node scans (as ListPaused walks it: both retry and restore
// buckets; every saga in flight has a restore watchdog from its start,
// re-armed while it waits) and every saga of the frozen table (DISABLED and
// COMPENSATION_FAILED sagas, whose watchdog is gone). Each candidate's
// state is read from the store; only the page's sagas are loaded whole.
//
// With f.States nil it answers "which sagas have not ended": a saga in
// flight is missed only if its watchdog is older than the look-back (no
// retry node re-armed it since) or its registration failed. With f.States
// accepting every state it also returns ended sagas whose watchdog is
// still in the directory (a saga ended and was not yet cleaned up, or a
// retry node has yet to drop its entry): what an index repairs itself
// from (tracewindow.Repair).
func ListInFlight(ctx context.Context, s eventstore.Store, scope eventstore.Scope, cfg Config, now time.Time, page Page, f SagaFilter) (SagaList, error) {
	var out SagaList
	if err := scope.Validate(); err != nil {
		return out, fmt.Errorf("recovery: list in flight: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return out, err
	}
	ws, err := cfg.Windows()
	if err != nil {
		return out, err
	}
	paths, n, err := walkDirectory(ctx, s, scope, cfg, ws, now, func(int) bool { return true }, f.Domain)
	out.Entries = n
	if err != nil {
		return out, err
	}
	frozen, err := frozenRowIDs(ctx, s, scope, f.Domain)
	out.Frozen = len(frozen)
	if err != nil {
		return out, err
	}
	ids := make([]string, 0, len(paths)+len(frozen))
	for id := range paths {
		ids = append(ids, id)
	}
	for _, id := range frozen {
		if _, ok := paths[id]; !ok {
			ids = append(ids, id)
		}
	}
	out.Candidates = len(ids)
	if f.IDs != nil {
		kept := ids[:0]
		for _, id := range ids {
			if f.IDs(id) {
				kept = append(kept, id)
			}
		}
		ids = kept
	}
	keep := f.States
	if keep == nil {
		keep = func(st eventstore.State) bool { return !st.Terminal() }
	}
	// pageOf reads "" for a saga gone since: never kept.
	kept, _, next, err := pageOf(ctx, s, scope, sortDesc(ids), page, func(st eventstore.State) bool { return st != "" && keep(st) })
	if err != nil {
		return out, err
	}
	txs, err := loadAll(ctx, s, scope, kept)
	if err != nil {
		return out, err
	}
	for _, tx := range txs {
		if tx != nil && keep(tx.State) && (f.Domain == "" || tx.Domain == f.Domain) {
			out.Sagas = append(out.Sagas, *tx)
		}
	}
	out.Next = next
	return out, nil
}

// frozenIDs returns the ids of the frozen table's rows of scope (of domain,
// if set), reading it in pages.
func frozenRowIDs(ctx context.Context, s eventstore.Store, scope eventstore.Scope, domain string) ([]string, error) {
	var ids []string
	for after := ""; ; {
		list, err := s.ListFrozenAfter(ctx, scope, after, frozenPageSize)
		if err != nil {
			return ids, fmt.Errorf("recovery: list in flight: read the frozen table: %w", err)
		}
		for _, f := range list {
			if domain == "" || f.Domain == domain {
				ids = append(ids, f.TxID)
			}
		}
		if len(list) < frozenPageSize {
			return ids, nil
		}
		after = list[len(list)-1].TxID
	}
}
