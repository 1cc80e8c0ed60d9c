package recovery

import (
	"context"
	"fmt"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// InFlightByDefinition counts the sagas of domain in scope that have not
// ended, by the definition version they were started with
// (eventstore.Transaction.Definition; 0 for sagas written before versions).
// The orchestrator's Run calls it to refuse to start while sagas in flight
// use a version it does not register (issue 40.3).
//
// It reads no table whole and adds nothing to a saga's hot path: every
// saga in flight has a restore watchdog in the recovery directory (written
// with the saga at its start and moved along with it), so it walks the
// directory's restore (odd) buckets as ListRetryPending walks the retry
// ones (today − LookbackDays at now, up to the farthest window an entry
// can be registered in), keeps the entries of domain, loads each saga they
// name (up to 16 at once) and counts those not terminal; it then adds the
// DISABLED sagas of the frozen table, which have no watchdog. The cost is
// one directory walk plus one read per saga in flight, paid once per
// orchestrator start. It counts what it finds: a saga started without
// recovery (no watchdog) or whose watchdog is older than the look-back is
// not counted.
func InFlightByDefinition(ctx context.Context, s eventstore.Store, scope eventstore.Scope, cfg Config, now time.Time, domain string) (map[int]int, error) {
	if err := scope.Validate(); err != nil {
		return nil, fmt.Errorf("recovery: count in flight: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ws, err := cfg.Windows()
	if err != nil {
		return nil, err
	}
	paths, _, err := walkDirectory(ctx, s, scope, cfg, ws, now, func(b int) bool { return b%2 == 1 }, domain)
	if err != nil {
		return nil, err
	}
	var ids []string
	for id := range paths {
		ids = append(ids, id)
	}
	txs, err := loadAll(ctx, s, scope, ids)
	if err != nil {
		return nil, err
	}
	out := map[int]int{}
	seen := map[string]bool{}
	for _, tx := range txs {
		if tx == nil || tx.Domain != domain || tx.State.Terminal() {
			continue
		}
		seen[tx.TxID] = true
		out[tx.Definition]++
	}
	for after := ""; ; {
		page, err := s.ListFrozenAfter(ctx, scope, after, cfg.PageSize)
		if err != nil {
			return nil, fmt.Errorf("recovery: count in flight: list frozen: %w", err)
		}
		for _, f := range page {
			if f.Domain == domain && f.State == eventstore.StateDisabled && !seen[f.TxID] {
				seen[f.TxID] = true
				out[f.Definition]++
			}
		}
		if len(page) == 0 || cfg.PageSize <= 0 || len(page) < cfg.PageSize {
			return out, nil
		}
		after = page[len(page)-1].TxID
	}
}
