package sqlbarrier_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// ledgerKey names the ledger rows of one step's process or revert.
type ledgerKey struct {
	tx   string
	span int
	kind topics.Kind
}

// Sagas of three SQL-barrier steps (reserve and ship on one service, charge
// on another), run by a real orchestrator (Cassandra event store, real
// Kafka) while each service's worker process is SIGKILLed, again and again,
// at TestKillChild's injected points (at random and once at each: the
// window between the commit and the reply included) and by the test
// wherever it happens to be, and restarted. A fifth of the sagas fail at
// charge and a fifth at ship, non-retryably, and compensate. The
// orchestrator recovers on its own (the redelivered commands, its step
// timeouts and in-process retries, duplicate replies ignored). Over at
// least 1,000 steps: every saga ends COMPLETED or COMPENSATED as its order
// says, and the ledger in PostgreSQL holds exactly one debit per step the
// saga's history says completed, exactly one refund per step it says was
// compensated, and nothing for the rest (no effect of a failed step, no
// compensation of a step that never committed): 0 doubles.
func TestKillWorkersUnderOrchestrator(t *testing.T) {
	testenv.Long(t, "kills worker processes under an orchestrator over 1,000 steps")
	db, dsn := openDB(t)
	brokers := testenv.KafkaBrokers(t)
	hosts, keyspace := testenv.CassandraKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scfg := cassandra.DefaultConfig()
	scfg.ContactPoints, scfg.Keyspace, scfg.Replication, scfg.CreateSchema = hosts, keyspace, cassandra.SimpleReplication(1), true
	store, err := cassandra.New(ctx, scfg, cassandra.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })

	u := testenv.UniqueName(t, "ko")
	domain, stock, pay := "order-"+u, "stock-"+u, "pay-"+u
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	names := append(append(topics.WorkerTopics(stock), topics.WorkerTopics(pay)...), topics.OrchestratorTopics(domain)...)
	err = topics.Ensure(ctx, kadm.NewClient(cl), names, topics.Provision{Partitions: 4, ReplicationFactor: 1})
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}

	// Small step timeouts and in-process retries: a step whose worker died
	// is re-sent (a new attempt, a duplicate at the barrier) within seconds.
	rcfg := recovery.DefaultConfig()
	rcfg.Retry.Default.InitialInterval = 200 * time.Millisecond
	rcfg.Retry.Default.MaxInterval = time.Second
	rcfg.Retry.Default.StepTimeout = 10 * time.Second
	o, err := orchestrator.New("orders", orchestrator.Domain[order]{Name: domain, OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: stock, Endpoint: "reserve"},
		orchestrator.Step{Service: pay, Endpoint: "charge"},
		orchestrator.Step{Service: stock, Endpoint: "ship"},
	)}, orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store), orchestrator.WithRecovery(rcfg),
		orchestrator.WithoutProvision(), orchestrator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- o.Run(runCtx) }()
	t.Cleanup(func() {
		stopRun()
		if err := <-ran; err != nil {
			t.Errorf("orchestrator Run: %v", err)
		}
	})
	select {
	case <-o.Running():
	case err := <-ran:
		t.Fatalf("orchestrator Run: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the orchestrator did not start")
	}

	workers := []*killedWorker{
		superviseKillChild(t, killChild{Brokers: brokers, DSN: dsn, Service: stock, Endpoints: []string{"reserve", "ship"},
			Callback: o.CallbackTopic(), Seed: 100, Prob: 0.0005}, killPlan{ForcedAt: 25, External: 2}),
		superviseKillChild(t, killChild{Brokers: brokers, DSN: dsn, Service: pay, Endpoints: []string{"charge"},
			Callback: o.CallbackTopic(), Seed: 200, Prob: 0.0005}, killPlan{ForcedAt: 25, External: 2}),
	}

	// 320 sagas: 3 of 5 complete (3 steps), 1 fails at charge (2 steps
	// and 1 compensation), 1 at ship (3 steps and 2 compensations): 1,088
	// steps.
	const sagas = 320
	orders := make([]order, sagas)
	ids := make([]string, sagas)
	for i := range orders {
		orders[i] = order{Amount: int64(100 + i), Fail: [5]string{1: "charge", 2: "ship"}[i%5]}
	}
	// At most inFlight sagas at a time: a backlog of commands longer than
	// the step timeout would make every attempt time out before its reply
	// came (each re-sent attempt queued behind the others).
	const inFlight = 32
	states := make([]eventstore.State, sagas)
	began := time.Now()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer wcancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	next := make(chan int, sagas)
	for i := range sagas {
		next <- i
	}
	close(next)
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id, err := o.Start(wctx, orders[i])
				var s *orchestrator.Saga[order]
				if err == nil {
					s, err = o.Wait(wctx, id)
				}
				mu.Lock()
				ids[i] = id
				if err != nil {
					failures = append(failures, fmt.Errorf("order %d (saga %q): %w", i, id, err))
				} else {
					states[i] = s.State
				}
				mu.Unlock()
				if err != nil {
					wcancel() // fail fast
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		// The ledger is checked all the same, for doubles.
		t.Errorf("%d sagas not terminal after %v (orchestrator stats %+v): %v", len(failures), time.Since(began).Round(time.Second), o.Stats(), failures[0])
	} else {
		t.Logf("every saga terminal %v after the first start", time.Since(began).Round(time.Millisecond))
	}
	for _, w := range workers {
		w.stop() // no write after the ledger is read
	}

	// The ledger, from PostgreSQL.
	type effect struct{ rows, sum int64 }
	ledger := map[ledgerKey]effect{}
	rows, err := db.Query(`SELECT tx_id, span, kind, count(*), sum(amount) FROM ledger GROUP BY tx_id, span, kind`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k ledgerKey
		var kind string
		var e effect
		if err := rows.Scan(&k.tx, &k.span, &kind, &e.rows, &e.sum); err != nil {
			t.Fatal(err)
		}
		k.kind = topics.Kind(kind)
		ledger[k] = e
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	// Each saga's history against its order and the ledger.
	endpoints := []string{stock + "/reserve", pay + "/charge", stock + "/ship"}
	steps, retried, doubles, missing, wrong := 0, 0, 0, 0, 0
	checked := map[ledgerKey]bool{}
	for i, id := range ids {
		if !states[i].Terminal() {
			// Not terminal (the wait failed, reported above): only a
			// second row of one step's process or revert is known wrong.
			for span := range endpoints {
				for _, kind := range []topics.Kind{topics.KindProcess, topics.KindRevert} {
					k := ledgerKey{id, span, kind}
					checked[k] = true
					if e := ledger[k]; e.rows > 1 {
						doubles += int(e.rows - 1)
						t.Errorf("%s span %d %s (saga not terminal): %d ledger rows", id, span, kind, e.rows)
					}
				}
			}
			continue
		}
		h, err := o.History(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		// The outcome the saga took of each step (its last decided
		// attempt): ok or non_retryable.
		decided := map[ledgerKey]string{}
		for _, tr := range h {
			switch tr.Outcome {
			case "ok", "non_retryable":
				decided[ledgerKey{id, tr.Span, topics.Kind(tr.Kind)}] = tr.Outcome
				if tr.Span < 0 || tr.Span >= len(endpoints) || tr.Endpoint != endpoints[tr.Span] {
					t.Errorf("%s: span %d is %s", id, tr.Span, tr.Endpoint)
				}
			case "retryable":
				retried++
			}
		}
		steps += len(decided)
		// What the order makes of the saga.
		failAt := slices.Index([]string{"reserve", "charge", "ship"}, orders[i].Fail) // -1: none
		wantState := eventstore.StateCompleted
		if failAt >= 0 {
			wantState = eventstore.StateCompensated
		}
		if states[i] != wantState {
			t.Errorf("%s (order %d, fail %q): %s, want %s", id, i, orders[i].Fail, states[i], wantState)
		}
		for span := range endpoints {
			p, r := ledgerKey{id, span, topics.KindProcess}, ledgerKey{id, span, topics.KindRevert}
			checked[p], checked[r] = true, true
			// The history: the process decided ok for every span before
			// the failing one, non_retryable at it, nothing after; a
			// compensation decided ok for each completed span of a
			// compensated saga.
			wantP, wantR := "", ""
			switch {
			case failAt < 0 || span < failAt:
				wantP = "ok"
				if failAt >= 0 {
					wantR = "ok"
				}
			case span == failAt:
				wantP = "non_retryable"
			}
			if decided[p] != wantP || decided[r] != wantR {
				t.Errorf("%s (order %d, fail %q) span %d: history says process %q, revert %q; want %q, %q", id, i, orders[i].Fail, span, decided[p], decided[r], wantP, wantR)
				wrong++
			}
			// The ledger: one debit per step the history says completed,
			// one refund per compensation it says ran, none otherwise.
			for _, c := range []struct {
				k      ledgerKey
				want   int64
				amount int64
			}{{p, b2i(decided[p] == "ok"), -orders[i].Amount}, {r, b2i(decided[r] == "ok"), orders[i].Amount}} {
				got := ledger[c.k]
				switch {
				case got.rows > c.want:
					doubles += int(got.rows - c.want)
				case got.rows < c.want:
					missing += int(c.want - got.rows)
				}
				if got.rows != c.want || got.sum != c.want*c.amount {
					t.Errorf("%s span %d %s: %d ledger rows summing to %d; want %d (history: %q)", id, span, c.k.kind, got.rows, got.sum, c.want, decided[c.k])
				}
			}
		}
	}
	for k, e := range ledger {
		if !checked[k] {
			t.Errorf("ledger rows of no saga step: %+v: %+v", k, e)
			doubles += int(e.rows)
		}
	}
	st := o.Stats()
	t.Logf("%d sagas, %d steps decided (%d retryable attempts: step timeouts), orchestrator stats %+v", sagas, steps, retried, st)
	if steps < 1000 {
		t.Errorf("only %d steps", steps)
	}
	all := map[string]int{}
	for _, w := range workers {
		n, kills := w.report()
		t.Logf("%s: %d worker processes, kills by point %v", w.cfg.Service, n, kills)
		for p, c := range kills {
			all[p] += c
		}
	}
	t.Logf("%d double effects, %d missing, %d histories not as the orders say", doubles, missing, wrong)
	for _, p := range append(slices.Clone(killPoints), "random") {
		if all[p] == 0 {
			t.Errorf("no worker was killed at %q", p)
		}
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
