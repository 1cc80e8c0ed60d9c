package tracewindow

import (
	"context"
	"fmt"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
)

// RepairResult says what Repair did.
type RepairResult struct {
	// Directory counts the sagas named by the recovery directory and the
	// frozen table (recovery.ListInFlight), each written to the index;
	// Indexed the index rows of sagas not ended that were checked against
	// the store, Moved those whose state had moved (written again).
	Directory, Indexed, Moved int
	// Truncated says the index check stopped at its bound (maxRepairRows).
	Truncated bool
}

// maxRepairRows bounds the index rows one Repair checks.
const maxRepairRows = 100_000

// Repair writes into idx, from the store, what a process that fed idx and
// died may have taken with it (cassandraindex writes in batches: a kill
// loses the queue). Call it at start, where the index is fed (before or
// while the orchestrator runs; `sagactl trace-window` calls it too):
//
//   - every saga the store enumerates without a scan
//     (recovery.ListInFlight over the days a retry node scans, at now, in
//     any state): each saga in flight, and each saga that ended but whose
//     watchdog is still there (the orchestrator deletes a saga's watchdog
//     only after its listeners ran, and cassandraindex writes an end
//     through before returning), is written with its state;
//   - every index row of a saga not ended, created within the last
//     rcfg.TransactionLifetime (at most MaxRange), whose state in the store
//     moved, is written again (a lost end, a change made without the
//     orchestrator).
//
// Then it waits until an asynchronous index has written (Flush). A saga
// created and ended before the kill whose watchdog the orchestrator had
// deleted has its end in the index already (written through).
func Repair(ctx context.Context, store eventstore.Store, idx Index, scope eventstore.Scope, rcfg recovery.Config, now time.Time) (RepairResult, error) {
	var res RepairResult
	if idx == nil {
		return res, fmt.Errorf("tracewindow: repair: no index")
	}
	all := func(eventstore.State) bool { return true }
	l, err := recovery.ListInFlight(ctx, store, scope, rcfg, now, recovery.Page{}, recovery.SagaFilter{States: all})
	if err != nil {
		return res, fmt.Errorf("tracewindow: repair from the recovery directory: %w", err)
	}
	for i := range l.Sagas {
		idx.Observe(scope, EntryOf(&l.Sagas[i]))
	}
	res.Directory = len(l.Sagas)
	if err := repairIndexed(ctx, store, idx, scope, now.Add(-min(rcfg.TransactionLifetime, MaxRange)), now, &res); err != nil {
		return res, err
	}
	if f, ok := idx.(flusher); ok {
		if err := f.Flush(ctx); err != nil {
			return res, fmt.Errorf("tracewindow: repair: %w", err)
		}
	}
	return res, nil
}

// repairIndexed checks the index's rows of sagas not ended, created in
// [from, to], against the store, and writes the moved ones again.
func repairIndexed(ctx context.Context, store eventstore.Store, idx Index, scope eventstore.Scope, from, to time.Time, res *RepairResult) error {
	domains, err := idx.Domains(ctx, scope)
	if err != nil {
		return fmt.Errorf("tracewindow: repair: %w", err)
	}
	for _, d := range domains {
		q := Query{Scope: scope, Domain: d, From: from, To: to, States: UnendedStates(), Limit: MaxLimit}
		for {
			p, err := idx.Recent(ctx, q)
			if err != nil {
				return fmt.Errorf("tracewindow: repair: read the index: %w", err)
			}
			_, moved, err := verify(ctx, store, scope, p.Entries, nil)
			if err != nil {
				return fmt.Errorf("tracewindow: repair: read states: %w", err)
			}
			for _, e := range moved {
				idx.Observe(scope, e)
			}
			res.Indexed += len(p.Entries)
			res.Moved += len(moved)
			if res.Indexed >= maxRepairRows {
				res.Truncated = true
				return nil
			}
			if p.Next == "" {
				break
			}
			q.After = p.Next
		}
	}
	return nil
}
