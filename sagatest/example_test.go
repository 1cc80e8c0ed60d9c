package sagatest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/sagatest"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Purchase is the entity of the example saga.
type Purchase struct {
	Item     string
	Amount   int
	Reserved bool
	Charged  bool
}

// A place-order saga (reserve stock, then charge) tested with every
// command delivered three times: STRICT write protection runs each step
// once. In a test, pass the test's *testing.T to sagatest.New.
func Example() {
	t := newExampleT()
	defer t.finish()

	env := sagatest.New(t, sagatest.DuplicateCommands(2), sagatest.WithWriteProtection(writeprotect.Strict))
	sagatest.Worker(env, "inventory-service", func(w *worker.Worker) error {
		return worker.Register(w, worker.Endpoint[Purchase]{
			Name: "reserve",
			Process: func(_ context.Context, _ *worker.Step, p Purchase) (Purchase, error) {
				p.Reserved = true
				return p, nil
			},
			Revert: func(_ context.Context, _ *worker.Step, p Purchase) (Purchase, error) {
				p.Reserved = false
				return p, nil
			},
		})
	})
	sagatest.Worker(env, "payment-service", func(w *worker.Worker) error {
		return worker.Register(w, worker.Endpoint[Purchase]{
			Name: "charge",
			Process: func(_ context.Context, _ *worker.Step, p Purchase) (Purchase, error) {
				if p.Amount > 1000 {
					return p, worker.NonRetryable(errors.New("card declined"))
				}
				p.Charged = true
				return p, nil
			},
		})
	})
	o := sagatest.Orchestrator(env, "order-service", orchestrator.Domain[Purchase]{
		Name: "place-order",
		OnNext: orchestrator.Sequence[Purchase](
			orchestrator.Step{Service: "inventory-service", Endpoint: "reserve"},
			orchestrator.Step{Service: "payment-service", Endpoint: "charge"},
		),
	})

	ctx := context.Background()
	small, _ := o.Start(ctx, Purchase{Item: "book", Amount: 20})
	large, _ := o.Start(ctx, Purchase{Item: "piano", Amount: 5000})
	states := env.WaitTerminal(o, small, large)
	env.AssertExactlyOnce() // settles first: late duplicates are counted too

	fmt.Println("book: ", states[small], "reserve ran", env.Executions(small, 0, topics.KindProcess), "time(s)")
	fmt.Println("piano:", states[large], "reserve undone", env.Executions(large, 0, topics.KindRevert), "time(s)")
	fmt.Println("command copies:", env.Stats().CommandCopies, "duplicate executions:", env.DuplicateExecutions())
	// Output:
	// book:  COMPLETED reserve ran 1 time(s)
	// piano: COMPENSATED reserve undone 1 time(s)
	// command copies: 10 duplicate executions: 0
}

// exampleT stands in for a test's *testing.T.
type exampleT struct{ cleanups []func() }

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()                           {}
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Errorf(format string, args ...any) { fmt.Printf("error: "+format+"\n", args...) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Logf(string, ...any)               {}

func (t *exampleT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
