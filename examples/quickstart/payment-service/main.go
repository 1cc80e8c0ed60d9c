// Command payment-service is the worker of the README's quickstart: it
// serves the checkout saga's charge step under STRICT write protection
// (the guard keeps its execution markers in Cassandra), configured from a
// StackSaga YAML file:
//
//	go run ./examples/quickstart/payment-service --config examples/stacksaga.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/stacksaga-go/stacksaga/config"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/examples/quickstart/checkout"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

func main() {
	path := flag.String("config", "stacksaga.yaml", "the StackSaga YAML file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *path); err != nil {
		slog.Error("payment-service", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string) error {
	cfg, err := config.LoadFile(path) // the whole stacksaga document; STACKSAGA_* variables override it
	if err != nil {
		return err
	}
	store, err := cassandra.New(ctx, cfg.Cassandra)
	if err != nil {
		return err
	}
	defer store.Close()
	guard, err := writeprotect.New(store, cfg.WriteProtection) // checkout: { mode: STRICT }
	if err != nil {
		return err
	}
	w, err := worker.New(checkout.PaymentService, worker.WithConfig(cfg), worker.WithGuard(guard)) // region, cluster, brokers, group
	if err != nil {
		return err
	}
	defer w.Close()
	err = worker.Register(w, worker.Endpoint[checkout.Order]{
		Name: checkout.Charge,
		Process: func(ctx context.Context, s *worker.Step, o checkout.Order) (checkout.Order, error) {
			if o.Amount > checkout.Limit {
				return o, worker.NonRetryable(checkout.ErrDeclined) // business failure: the saga compensates
			}
			// Pass s.IdempotencyKey to the payment provider: it is the same
			// for every delivery and retry of this step.
			o.PaymentID = "pay-" + s.IdempotencyKey
			return o, nil
		},
		Revert: func(ctx context.Context, s *worker.Step, o checkout.Order) (checkout.Order, error) {
			o.Refunded = o.PaymentID != ""
			return o, nil
		},
	})
	if err != nil {
		return err
	}
	fmt.Println("payment-service: running")
	return w.Run(ctx)
}
