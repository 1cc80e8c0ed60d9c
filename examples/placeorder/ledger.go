package placeorder

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stacksaga-go/stacksaga/sqlbarrier"
	"github.com/stacksaga-go/stacksaga/worker"
)

// LedgerDDL creates the payment service's ledger: one row per debit
// (kind "process", the amount negative) and per refund (kind "revert").
// It has no unique key, so a double effect would show as a second row.
const LedgerDDL = `CREATE TABLE IF NOT EXISTS payment_ledger (
	id        bigserial   PRIMARY KEY,
	tx_id     text        NOT NULL,
	kind      text        NOT NULL,
	order_id  text        NOT NULL,
	amount    bigint      NOT NULL,
	booked_at timestamptz NOT NULL DEFAULT now()
)`

// CreateLedger creates the barrier table and the ledger in db if missing.
func CreateLedger(ctx context.Context, db *sql.DB) error {
	if _, err := sqlbarrier.CreateSchema(ctx, db, ""); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, LedgerDDL); err != nil {
		return fmt.Errorf("payment ledger: %w", err)
	}
	return nil
}

// RegisterPaymentSQL registers the charge-payment endpoint on w through
// the SQL barrier b (which must be w's guard): the step is the one of
// RegisterPayment, and books its debit (or its refund) in the ledger in the
// barrier's transaction, so that each is booked exactly once.
func RegisterPaymentSQL(w *worker.Worker, b *sqlbarrier.Barrier, o Observer) error {
	book := func(ctx context.Context, tx *sql.Tx, s *worker.Step, in Order, amount int64) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO payment_ledger (tx_id, kind, order_id, amount) VALUES ($1, $2, $3, $4)`,
			s.TxID, string(s.Kind), in.OrderID, amount)
		if err != nil {
			return fmt.Errorf("payment ledger: %w", err)
		}
		return nil
	}
	return sqlbarrier.Register(w, b, sqlbarrier.Endpoint[Order]{
		Name: ChargePayment,
		Process: func(ctx context.Context, tx *sql.Tx, s *worker.Step, in Order) (Order, error) {
			out, err := charge(o, s, in)
			if err != nil {
				return out, err
			}
			return out, book(ctx, tx, s, in, -in.Amount)
		},
		Revert: func(ctx context.Context, tx *sql.Tx, s *worker.Step, in Order) (Order, error) {
			out := refund(o, s, in)
			return out, book(ctx, tx, s, in, in.Amount)
		},
	})
}

// LedgerEffects counts the ledger's rows (effects) and the rows beyond
// the first for one transaction and kind (doubles: 0 when every debit and
// refund was booked exactly once).
func LedgerEffects(ctx context.Context, db *sql.DB) (effects, doubles int64, err error) {
	err = db.QueryRowContext(ctx, `SELECT count(*), count(*) - count(DISTINCT (tx_id, kind)) FROM payment_ledger`).Scan(&effects, &doubles)
	if err != nil {
		return 0, 0, fmt.Errorf("payment ledger: %w", err)
	}
	return effects, doubles, nil
}
