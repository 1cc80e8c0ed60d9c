package orchestrator_test

import (
	"context"
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
	for {
		s, _ := o.Get(ctx, id)
		if s.State.Terminal() {
			fmt.Println(s.State, s.Entity.Hotel, s.Entity.Flight)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output: COMPLETED booked booked
}
