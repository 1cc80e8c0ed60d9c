package sqlbarrier_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/sqlbarrier"
	"github.com/stacksaga-go/stacksaga/topics"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ledgerDDL is the business table of the tests: no unique key, so that a
// double effect shows as a second row instead of an error.
const ledgerDDL = `CREATE TABLE ledger (id bigserial PRIMARY KEY, tx_id text NOT NULL, span integer NOT NULL, kind text NOT NULL, amount bigint NOT NULL)`

// openDB returns a database on a fresh schema of the real PostgreSQL with
// the barrier table and the ledger.
func openDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	dsn, _ := testenv.PostgresSchema(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sqlbarrier.CreateSchema(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, ledgerDDL); err != nil {
		t.Fatal(err)
	}
	return db, dsn
}

// ledgerCount counts the ledger rows of tx, span and kind.
func ledgerCount(t testing.TB, db *sql.DB, txID string, span int, kind topics.Kind) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ledger WHERE tx_id = $1 AND span = $2 AND kind = $3`, txID, span, string(kind)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func command(txID string, span int, kind topics.Kind, attempt int) *topics.Envelope {
	return &topics.Envelope{
		Type: topics.TypeCommand, Region: "default", Cluster: "default", Service: "orders",
		Domain: "dom", TxID: txID, Span: span, Kind: kind, Endpoint: "charge",
		IdempotencyKey: topics.IdempotencyKey(txID, span, kind), Attempt: attempt,
		ReplyTo: "stacksaga.dom.callback", Payload: []byte{0x80},
	}
}

func testenvClosedAddr(t testing.TB) string { return testenv.ClosedAddr(t) }
