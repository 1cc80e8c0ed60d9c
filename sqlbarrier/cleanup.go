package sqlbarrier

import (
	"context"
	"fmt"
	"time"
)

// Cleanup deletes the barrier rows written more than the retention ago
// (WithRetention), in batches of WithCleanupBatch rows, one statement (and
// transaction) each, and returns how many it deleted.
func (b *Barrier) Cleanup(ctx context.Context) (int64, error) {
	cutoff := b.now().Add(-b.retention)
	var total int64
	for {
		res, err := b.db.ExecContext(ctx, b.sqlDelete, cutoff, b.batch)
		if err != nil {
			return total, fmt.Errorf("sqlbarrier: cleanup: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("sqlbarrier: cleanup: %w", err)
		}
		total += n
		if n < int64(b.batch) {
			return total, nil
		}
	}
}

// RunCleanup runs Cleanup every interval until ctx ends, logging failures,
// and returns ctx's error.
func (b *Barrier) RunCleanup(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := b.Cleanup(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			b.log.WarnContext(ctx, "sqlbarrier: cleanup failed", "table", b.table, "err", err)
		case n > 0:
			b.log.DebugContext(ctx, "sqlbarrier: cleanup", "table", b.table, "deleted", n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
