package writeprotect_test

import (
	"context"
	"fmt"

	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// A guard configured from YAML runs a command delivered three times once,
// and answers the duplicates with the recorded reply. In a service, pass
// it to the worker: worker.New(service, worker.WithGuard(g)).
func Example() {
	cfg, err := writeprotect.LoadConfigWithEnv([]byte(`
stacksaga:
  cassandra:
    write-protection:
      default-mode: RELAXED_WITH_DEDUP
      domains:
        payment-saga:
          mode: STRICT
          lease-duration: 10s
`), nil)
	if err != nil {
		panic(err)
	}
	g, err := writeprotect.New(memory.New(), cfg)
	if err != nil {
		panic(err)
	}
	cmd := &topics.Envelope{
		Type: topics.TypeCommand, Region: "eu", Cluster: "default", Service: "order-service",
		Domain: "payment-saga", TxID: "tx-1", Span: 1, Kind: topics.KindProcess, Endpoint: "charge", Attempt: 1,
	}
	runs := 0
	charge := func(context.Context) *topics.Envelope {
		runs++
		return &topics.Envelope{Type: topics.TypeReply, Outcome: topics.OutcomeOK, Error: fmt.Sprintf("charged by run %d", runs)}
	}
	for range 3 {
		reply, err := g.Execute(context.Background(), cmd, charge)
		if err != nil {
			panic(err)
		}
		fmt.Println(reply.Outcome, reply.Error)
	}
	st := g.Stats()
	fmt.Println(cfg.Resolve("payment-saga").Mode, "runs:", runs, "executions:", st.Executions, "duplicates skipped:", st.DuplicatesSkipped)
	// Output:
	// ok charged by run 1
	// ok charged by run 1
	// ok charged by run 1
	// STRICT runs: 1 executions: 1 duplicates skipped: 2
}
