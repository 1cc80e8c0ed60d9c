package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Payment is the domain entity a payment service sees.
type Payment struct {
	OrderID string `msgpack:"order_id"`
	Amount  int    `msgpack:"amount"`
	Charge  string `msgpack:"charge,omitempty"`
}

// A payment service registers a "charge" step with its compensation and
// runs the worker; here on an in-process kfake broker, with the test
// playing the orchestrator.
func Example() {
	broker, _ := kfake.NewCluster(kfake.NumBrokers(1))
	defer broker.Close()

	w, err := worker.New("payment-service",
		worker.WithBrokers(broker.ListenAddrs()...),
		worker.WithLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		panic(err)
	}
	err = worker.Register(w, worker.Endpoint[Payment]{
		Name: "charge",
		Process: func(ctx context.Context, s *worker.Step, p Payment) (Payment, error) {
			if p.Amount > 1000 {
				return p, worker.NonRetryable(fmt.Errorf("amount %d over the limit", p.Amount))
			}
			p.Charge = "ch-" + p.OrderID // call the payment provider with s.IdempotencyKey
			return p, nil
		},
		Revert: func(ctx context.Context, s *worker.Step, p Payment) (Payment, error) {
			s.PutHint("refunded", p.Charge) // later compensations can read it
			p.Charge = ""
			return p, nil
		},
	})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }() // creates the command topic
	<-w.Running()

	// The orchestrator's side: a callback topic, commands, replies.
	cl, _ := kgo.NewClient(
		kgo.SeedBrokers(broker.ListenAddrs()...),
		kgo.ConsumeTopics(topics.CallbackTopic("order")),
	)
	defer cl.Close()
	_ = topics.Ensure(ctx, kadm.NewClient(cl), topics.OrchestratorTopics("order"), topics.Provision{})
	send := func(tx string, span int, kind topics.Kind, p Payment) {
		payload, _ := msgpack.Marshal(p)
		v, _ := topics.Encode(&topics.Envelope{
			Type: topics.TypeCommand, Domain: "order", TxID: tx, Span: span, Kind: kind,
			Endpoint: "charge", IdempotencyKey: topics.IdempotencyKey(tx, span, kind), Attempt: 1,
			ReplyTo: topics.CallbackTopic("order"), Payload: payload,
		})
		cl.ProduceSync(ctx, &kgo.Record{Topic: topics.CommandTopic("payment-service"), Key: []byte(tx), Value: v})
	}
	receive := func() {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		for {
			if recs := cl.PollRecords(pctx, 1).Records(); len(recs) == 1 {
				rep, _ := topics.Decode(recs[0].Value)
				var p Payment
				_ = msgpack.Unmarshal(rep.Payload, &p)
				fmt.Printf("%s %s %s: %s %q %+v %v\n", rep.TxID, rep.Endpoint, rep.Kind, rep.Outcome, rep.Error, p, rep.Hints)
				return
			}
		}
	}
	send("tx-1", 1, topics.KindProcess, Payment{OrderID: "o-1", Amount: 250})
	receive()
	send("tx-2", 1, topics.KindProcess, Payment{OrderID: "o-2", Amount: 5000})
	receive()
	send("tx-1", 1, topics.KindRevert, Payment{OrderID: "o-1", Amount: 250, Charge: "ch-o-1"})
	receive()

	cancel()
	fmt.Println("run:", <-done, "stats:", fmt.Sprintf("%+v", w.Stats()))
	// Output:
	// tx-1 charge process: ok "" {OrderID:o-1 Amount:250 Charge:ch-o-1} map[]
	// tx-2 charge process: non_retryable "amount 5000 over the limit" {OrderID:o-2 Amount:5000 Charge:} map[]
	// tx-1 charge revert: ok "" {OrderID:o-1 Amount:250 Charge:} map[refunded:ch-o-1]
	// run: <nil> stats: {Processed:3 DeadLettered:0 Undeliverable:0 Panics:0}
}
