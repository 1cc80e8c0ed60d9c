// Command order-service is the orchestrator of the README's quickstart: it
// starts checkout sagas, waits for each to end and prints its state. It is
// a retry node too, so it re-drives what a process that died left behind.
// Configured from a StackSaga YAML file:
//
//	go run ./examples/quickstart/order-service --config examples/stacksaga.yaml --orders 3
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stacksaga-go/stacksaga/config"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/examples/quickstart/checkout"
	"github.com/stacksaga-go/stacksaga/orchestrator"
)

func main() {
	path := flag.String("config", "stacksaga.yaml", "the StackSaga YAML file")
	orders := flag.Int("orders", 3, "orders to place; every third is over the limit and compensates")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *path, *orders); err != nil {
		slog.Error("order-service", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string, orders int) error {
	cfg, err := config.LoadFile(path) // the whole stacksaga document; STACKSAGA_* variables override it
	if err != nil {
		return err
	}
	store, err := cassandra.New(ctx, cfg.Cassandra)
	if err != nil {
		return err
	}
	defer store.Close()
	o, err := orchestrator.New(checkout.OrderService, checkout.Saga(),
		orchestrator.WithConfig(cfg), // region, cluster, brokers, group, recovery windows and retry policies
		orchestrator.WithStore(store),
		orchestrator.WithRetryNode()) // re-drives parked and stalled sagas: at least one per service
	if err != nil {
		return err
	}
	defer o.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if err := o.Run(ctx); err != nil {
			slog.Error("order-service: run", "err", err)
		}
	}()
	for i := 1; i <= orders; i++ {
		amount := int64(1999)
		if i%3 == 0 {
			amount = checkout.Limit + 1 // declined: the saga compensates
		}
		txID, err := o.Start(ctx, checkout.Order{OrderID: fmt.Sprintf("o-%d", i), Amount: amount})
		if err != nil {
			return err
		}
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		saga, err := o.Wait(wctx, txID) // returns once the saga is COMPLETED, COMPENSATED or COMPENSATION_FAILED
		wcancel()
		if err != nil {
			return fmt.Errorf("order o-%d (%s): %w", i, txID, err)
		}
		fmt.Printf("order o-%d: saga %s %s payment=%q refunded=%v\n", i, txID, saga.State, saga.Entity.PaymentID, saga.Entity.Refunded)
	}
	return nil
}
