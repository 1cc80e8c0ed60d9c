package writeprotect_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/sagatest"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Shipment is the entity of the retry sagas.
type Shipment struct {
	ID      string `msgpack:"id"`
	Shipped bool   `msgpack:"shipped,omitempty"`
}

var errCarrierBusy = errors.New("carrier busy")

// attemptRuns counts handler runs per transaction and attempt.
type attemptRuns struct {
	mu   sync.Mutex
	runs map[string]map[int]int
}

func (a *attemptRuns) add(tx string, attempt int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runs[tx] == nil {
		a.runs[tx] = make(map[int]int)
	}
	a.runs[tx][attempt]++
}

func (a *attemptRuns) get(tx string) map[int]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[int]int)
	for k, v := range a.runs[tx] {
		out[k] = v
	}
	return out
}

// retrySagas runs sagas whose one step fails retryably at its first
// attempt and succeeds at the second, with every command delivered four
// times: each attempt's handler runs once (the duplicates of the failed
// attempt re-send its recorded reply), the orchestrator's retry runs it
// again, and every saga completes.
func retrySagas(t *testing.T, env *sagatest.Env, sagas int) {
	u := testenv.UniqueName(t, "retry")
	svc, dom := u+"-shipping", u
	runs := &attemptRuns{runs: make(map[string]map[int]int)}
	sagatest.Worker(env, svc, func(w *worker.Worker) error {
		return worker.Register(w, worker.Endpoint[Shipment]{
			Name: "ship",
			Process: func(_ context.Context, s *worker.Step, sh Shipment) (Shipment, error) {
				runs.add(s.TxID, s.Attempt)
				if s.Attempt == 1 {
					return sh, worker.Retryable(errCarrierBusy)
				}
				sh.Shipped = true
				return sh, nil
			},
			Revert: func(_ context.Context, _ *worker.Step, sh Shipment) (Shipment, error) { return sh, nil },
		})
	})
	rc := recovery.DefaultConfig()
	rc.Interval = time.Second
	rc.Restore.DefaultDelayWindows = 10
	rc.LookbackDays = 1
	o := sagatest.Orchestrator(env, u+"-order", orchestrator.Domain[Shipment]{
		Name:   dom,
		OnNext: orchestrator.Sequence[Shipment](orchestrator.Step{Service: svc, Endpoint: "ship"}),
	}, orchestrator.WithRecovery(rc), orchestrator.WithRetryNode(recovery.WithScanEvery(250*time.Millisecond)))
	ids := make([]string, sagas)
	for i := range ids {
		id, err := o.Start(t.Context(), Shipment{ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	states := env.WaitTerminal(o, ids...)
	env.Settle()
	for _, id := range ids {
		if states[id] != eventstore.StateCompleted {
			t.Errorf("saga %s ended %s", id, states[id])
		}
		if got := runs.get(id); got[1] != 1 || got[2] != 1 || len(got) != 2 {
			t.Errorf("saga %s: handler runs per attempt %v, want one run of attempt 1 and one of attempt 2", id, got)
		}
	}
	wp := env.WriteProtectionStats()
	if wp.RetryablesRecorded != uint64(sagas) || wp.Superseded != uint64(sagas) || wp.DuplicatesSkipped < uint64(3*sagas) {
		t.Errorf("write protection %+v", wp)
	}
	t.Logf("harness %+v\nwrite protection %+v", env.Stats(), wp)
}

func TestRetryableAttemptRunsOnce(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			retrySagas(t, sagatest.New(t, sagatest.WithWriteProtection(mode), sagatest.DuplicateCommands(3),
				sagatest.WithTimeout(time.Minute)), 20)
		})
	}
}

func TestKafkaCassandraRetryableAttemptRunsOnce(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			hosts, keyspace := testenv.CassandraKeyspace(t)
			retrySagas(t, sagatest.New(t, sagatest.WithKafka(testenv.KafkaBrokers(t)...), sagatest.WithCassandra(hosts, keyspace),
				sagatest.WithWriteProtection(mode), sagatest.DuplicateCommands(3), sagatest.WithTimeout(90*time.Second)), 10)
		})
	}
}
