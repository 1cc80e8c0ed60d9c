package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Trip is the domain entity of the example saga.
type Trip struct {
	Hotel  string
	Flight string
}

// Example runs a two-step saga end to end on an in-process broker and the
// in-memory event store: a worker in "booking-service" serves both steps, an
// orchestrator in "trip-service" drives the saga.
func Example() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1))
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The worker side (normally another service).
	w, _ := worker.New("booking-service", worker.WithBrokers(brokers...))
	_ = worker.Register(w, worker.Endpoint[Trip]{
		Name: "book-hotel",
		Process: func(_ context.Context, _ *worker.Step, t Trip) (Trip, error) {
			t.Hotel = "booked"
			return t, nil
		},
		Revert: func(_ context.Context, _ *worker.Step, t Trip) (Trip, error) {
			t.Hotel = "cancelled"
			return t, nil
		},
	})
	_ = worker.Register(w, worker.Endpoint[Trip]{
		Name: "book-flight",
		Process: func(_ context.Context, _ *worker.Step, t Trip) (Trip, error) {
			t.Flight = "booked"
			return t, nil
		},
	})
	go func() { _ = w.Run(ctx) }()

	// The orchestrator side.
	o, err := orchestrator.New("trip-service", orchestrator.Domain[Trip]{
		Name: "book-trip",
		OnNext: orchestrator.Sequence[Trip](
			orchestrator.Step{Service: "booking-service", Endpoint: "book-hotel"},
			orchestrator.Step{Service: "booking-service", Endpoint: "book-flight"},
		),
	}, orchestrator.WithBrokers(brokers...))
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = o.Run(ctx) }()
	<-o.Running()

	id, err := o.Start(ctx, Trip{})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := o.Wait(ctx, id) // returns once the saga is terminal
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.State, s.Entity.Hotel, s.Entity.Flight)
	// Output: COMPLETED booked booked
}

// ExampleWithBusinessKey starts a saga with a business key (say, the
// Idempotency-Key header of the request that places the order), and again
// with the same key, as a client retrying the request would: the second
// Start starts nothing and returns the first saga's id with an
// *ExistsError. Wait then returns the saga once it is terminal.
func ExampleWithBusinessKey() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1))
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	w, _ := worker.New("booking-service", worker.WithBrokers(brokers...))
	_ = worker.Register(w, worker.Endpoint[Trip]{
		Name: "book-hotel",
		Process: func(_ context.Context, _ *worker.Step, t Trip) (Trip, error) {
			t.Hotel = "booked"
			return t, nil
		},
	})
	go func() { _ = w.Run(ctx) }()
	o, err := orchestrator.New("trip-service", orchestrator.Domain[Trip]{
		Name:   "book-trip",
		OnNext: orchestrator.Sequence[Trip](orchestrator.Step{Service: "booking-service", Endpoint: "book-hotel"}),
	}, orchestrator.WithBrokers(brokers...))
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = o.Run(ctx) }()

	first, err := o.Start(ctx, Trip{Flight: "none"}, orchestrator.WithBusinessKey("trip-2026-0042"))
	fmt.Println("first:", err)
	again, err := o.Start(ctx, Trip{Flight: "none"}, orchestrator.WithBusinessKey("trip-2026-0042"))
	var exists *orchestrator.ExistsError
	fmt.Println("again:", errors.Is(err, orchestrator.ErrExists), errors.As(err, &exists) && exists.TxID == first, again == first)

	s, err := o.Wait(ctx, first)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.State, s.Entity.Hotel)
	// Output:
	// first: <nil>
	// again: true true true
	// COMPLETED booked
}
