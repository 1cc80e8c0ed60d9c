// Command payment-service is an example worker service: it embeds a StackSaga
// worker that serves the place-order saga's payment step. Run Kafka first
// (docker compose up -d, or make services-up), then:
//
//	STACKSAGA_KAFKA_BROKERS=127.0.0.1:9092 go run ./examples/payment-service
//
// With POSTGRES_DSN set (eval "$(scripts/services env)" exports it), the step
// books its debits and refunds in a PostgreSQL ledger (payment_ledger)
// through the SQL barrier (package sqlbarrier), exactly once each; the
// barrier table and the ledger are created if missing.
package main

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/sqlbarrier"
	"github.com/stacksaga-go/stacksaga/worker"
)

func main() {
	dsn := os.Getenv("POSTGRES_DSN")
	if dsn == "" {
		placeorder.WorkerMain(placeorder.PaymentService, placeorder.RegisterPayment)
		return
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		slog.Error("postgres", "err", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err = placeorder.CreateLedger(ctx, db)
	cancel()
	if err != nil {
		slog.Error("postgres", "err", err)
		os.Exit(1)
	}
	b, err := sqlbarrier.New(db)
	if err != nil {
		slog.Error("sql barrier", "err", err)
		os.Exit(1)
	}
	go func() { _ = b.RunCleanup(context.Background(), time.Hour) }()
	slog.Info("payment ledger in PostgreSQL through the SQL barrier")
	placeorder.WorkerMain(placeorder.PaymentService, func(w *worker.Worker, o placeorder.Observer) error {
		return placeorder.RegisterPaymentSQL(w, b, o)
	}, worker.WithGuard(b))
}
