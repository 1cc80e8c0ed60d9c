package orchestrator_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
)

// loadGate holds the first load, made from a function named caller, of a
// saga in state until release is closed, after closing held.
type loadGate struct {
	eventstore.Store
	caller  string
	state   eventstore.State
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func newLoadGate(s eventstore.Store, caller string, state eventstore.State) *loadGate {
	return &loadGate{Store: s, caller: caller, state: state, held: make(chan struct{}), release: make(chan struct{})}
}

func (g *loadGate) LoadTransaction(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.Transaction, error) {
	tx, err := g.Store.LoadTransaction(ctx, scope, txID)
	if err == nil && tx.State == g.state && calledFrom(g.caller) {
		first := false
		g.once.Do(func() { first = true })
		if first {
			close(g.held)
			<-g.release
		}
	}
	return tx, err
}

func waitClosed(t *testing.T, c <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(within):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// The step timer of the instance that sent a command (a) fires just as
// the instance owning the saga's callback partition (b) applies the
// command's reply: both read the saga at the same version before either
// writes. The saga's row must then be one of the two writes whole (the
// reply's move to the next step, or the timer's park), never a mix of
// their cells (Cassandra, and the memory store, merge two writes of one
// write time cell by cell). Before, the row became RETRY_PENDING at span 1
// with span 0's endpoint and span 0 completed; now a's timer, not owning
// the partition, sends the timeout to it, and b finds it stale.
func TestStepTimerRacingTheOwnersReplyWritesOneState(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		cfg := recovery.DefaultConfig()
		timeout := 2 * time.Second
		cfg.Retry.DefaultEndpoints = map[string]recovery.RetryOverride{r.svcStock + "/reserve": {StepTimeout: &timeout}}
		cfg.Retry.Default.InitialInterval = time.Hour // no in-process retry in this test
		cfg.Retry.Default.MaxInterval = time.Hour
		gateA := newLoadGate(r.store, "stepTimedOut", eventstore.StateStarted)
		gateB := newLoadGate(r.store, "handleRecord", eventstore.StateStarted)
		// b alone consumes the callback topic; a only starts sagas (Start
		// needs no Run) and so arms their step timers.
		b, _ := r.startOrchestrator(orchestrator.WithStore(gateB), orchestrator.WithRecovery(cfg))
		a, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...),
			orchestrator.WithKafkaOpts(r.kopts...), orchestrator.WithStore(gateA), orchestrator.WithRecovery(cfg))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
		id, err := a.Start(context.Background(), order{ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		waitClosed(t, gateA.held, time.Minute, "a's step timer to read the saga")
		r.startWorker(r.svcStock) // the reply now comes, to b
		waitClosed(t, gateB.held, 2*time.Minute, "b's reply path to read the saga")
		close(gateA.release)
		time.Sleep(time.Second) // a's park written (nothing else to wait for: a runs no listener)
		close(gateB.release)
		waitFor(t, time.Minute, "b to apply the reply", func() bool {
			tx, err := r.store.LoadTransaction(context.Background(), b.Scope(), id)
			return err == nil && tx.Version >= 2
		})
		time.Sleep(time.Second)
		tx, err := r.store.LoadTransaction(context.Background(), b.Scope(), id)
		if err != nil {
			t.Fatal(err)
		}
		parked := tx.State == eventstore.StateRetryPending && tx.Span == 0 && tx.Endpoint == r.svcStock+"/reserve" && len(tx.Completed) == 0
		moved := tx.State == eventstore.StateInProgress && tx.Span == 1 && tx.Endpoint == r.svcPay+"/charge" && len(tx.Completed) == 1
		if !parked && !moved {
			t.Errorf("the saga's row mixes the timer's park and the reply's move: %s span %d endpoint %s attempt %d completed %+v error %q",
				tx.State, tx.Span, tx.Endpoint, tx.Attempt, tx.Completed, tx.Error)
		}
	})
}

// A step timer that fires in an instance not owning the saga's callback
// partition, with no reply at all, is applied by the owner: the attempt is
// failed retryably there (the saga parks for its retry), once.
func TestStepTimerOfANonOwnerIsAppliedByTheOwner(t *testing.T) {
	r := newRig(t, "memory")
	cfg := recovery.DefaultConfig()
	timeout := time.Second
	cfg.Retry.DefaultEndpoints = map[string]recovery.RetryOverride{r.svcStock + "/reserve": {StepTimeout: &timeout}}
	cfg.Retry.Default.InitialInterval = time.Hour // the saga stays parked
	cfg.Retry.Default.MaxInterval = time.Hour
	b, _ := r.startOrchestrator(orchestrator.WithRecovery(cfg)) // alone in the group: the owner
	a, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...),
		orchestrator.WithKafkaOpts(r.kopts...), orchestrator.WithStore(r.store), orchestrator.WithRecovery(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	id, err := a.Start(context.Background(), order{ID: "1"}) // no worker: no reply ever
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, b, id, eventstore.StateRetryPending)
	tx, err := r.store.LoadTransaction(context.Background(), b.Scope(), id)
	if err != nil {
		t.Fatal(err)
	}
	if tx.Span != 0 || tx.Attempt != 1 || !strings.HasPrefix(tx.Error, "step timed out:") {
		t.Errorf("parked at span %d attempt %d with error %q, want span 0 attempt 1 failed by its step timeout", tx.Span, tx.Attempt, tx.Error)
	}
	if sa, sb := a.Stats().TimedOut, b.Stats().TimedOut; sa != 0 || sb != 1 {
		t.Errorf("timed out: %d by the instance whose timer fired, %d by the owner; want 0 and 1", sa, sb)
	}
}
