package memory_test

import (
	"context"
	"fmt"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
)

func Example() {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()

	scope := eventstore.Scope{Region: "eu", Cluster: "default", Service: "order-service"}
	tx := eventstore.Transaction{Scope: scope, TxID: "tx-1", Domain: "order-saga", State: eventstore.StateStarted, Version: 1}
	_ = s.CreateTransaction(ctx, tx, nil)

	tx.State, tx.Version = eventstore.StateInProgress, 2
	_ = s.Transition(ctx, tx, &eventstore.Tryout{Index: 0, Endpoint: "payment-service/charge", Outcome: "ok"})

	got, _ := s.LoadTransaction(ctx, scope, "tx-1")
	history, _ := s.Tryouts(ctx, scope, "tx-1")
	fmt.Println(got.State, got.Version, len(history), history[0].Endpoint)

	err := s.CreateTransaction(ctx, tx, nil)
	fmt.Println(err)
	// Output:
	// IN_PROGRESS 2 1 payment-service/charge
	// memory: transaction "tx-1": eventstore: already exists
}
