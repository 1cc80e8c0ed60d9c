package sqlbarrier_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/sqlbarrier"
	"github.com/stacksaga-go/stacksaga/topics"
)

// CreateSchema from nothing, concurrently from four instances, then again:
// one table at SchemaVersion, rows kept; a newer version is refused.
func TestCreateSchemaMigrates(t *testing.T) {
	dsn, _ := testenv.PostgresSchema(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const table = "pay_barrier"
	var wg sync.WaitGroup
	var fresh atomic.Int32
	for range 4 {
		wg.Go(func() {
			before, err := sqlbarrier.CreateSchema(ctx, db, table)
			if err != nil {
				t.Error(err)
			}
			if before == 0 {
				fresh.Add(1)
			}
		})
	}
	wg.Wait()
	if n := fresh.Load(); n != 1 {
		t.Fatalf("%d calls found no schema, want exactly 1", n)
	}
	b, err := sqlbarrier.New(db, sqlbarrier.WithTable(table), sqlbarrier.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	sqlbarrier.MarkEndpoint(b, "charge")
	if _, err := db.ExecContext(ctx, ledgerDDL); err != nil {
		t.Fatal(err)
	}
	execute(t, b, command("tx-m", 0, topics.KindProcess, 1), &handler{outcome: topics.OutcomeOK})
	before, err := sqlbarrier.CreateSchema(ctx, db, table)
	if err != nil || before != sqlbarrier.SchemaVersion {
		t.Fatalf("second CreateSchema = %d, %v; want %d", before, err, sqlbarrier.SchemaVersion)
	}
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("rows after the second CreateSchema: %d, %v; want 1", rows, err)
	}
	var cols int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`, table).Scan(&cols); err != nil || cols != 8 {
		t.Fatalf("columns %d, %v; want 8", cols, err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE `+table+`_schema SET version = 99`); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlbarrier.CreateSchema(ctx, db, table); err == nil {
		t.Fatal("CreateSchema accepted a newer schema version")
	}
	if _, err := sqlbarrier.CreateSchema(ctx, db, "x; DROP TABLE y"); !errors.Is(err, sqlbarrier.ErrInvalidTable) {
		t.Fatalf("invalid name: %v", err)
	}
}

// Cleanup deletes, in batches, the rows older than the retention by the
// barrier's clock, and only those.
func TestCleanupDeletesOldRowsInBatches(t *testing.T) {
	db, _ := openDB(t)
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	b := newBarrier(t, db, sqlbarrier.WithClock(clock), sqlbarrier.WithRetention(24*time.Hour), sqlbarrier.WithCleanupBatch(3))
	h := &handler{outcome: topics.OutcomeOK}
	for i := range 7 {
		execute(t, b, command("tx-old", i, topics.KindProcess, 1), h)
	}
	now.Add(int64(23 * time.Hour))
	execute(t, b, command("tx-new", 0, topics.KindProcess, 1), h)
	now.Add(int64(2 * time.Hour)) // the 7 are 25h old, the new one 2h
	n, err := b.Cleanup(context.Background())
	if err != nil || n != 7 {
		t.Fatalf("Cleanup = %d, %v; want 7", n, err)
	}
	var left int
	if err := db.QueryRow(`SELECT count(*) FROM stacksaga_barrier WHERE tx_id = 'tx-new'`).Scan(&left); err != nil || left != 1 {
		t.Fatalf("young rows left: %d, %v; want 1", left, err)
	}
	if n, err := b.Cleanup(context.Background()); err != nil || n != 0 {
		t.Fatalf("second Cleanup = %d, %v", n, err)
	}
}
