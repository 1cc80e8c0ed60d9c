package sqlbarrier_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/sagatest"
	"github.com/stacksaga-go/stacksaga/sqlbarrier"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Item 5 of issue 47, end to end on real PostgreSQL: a saga whose ship
// step fails compensates charge, whose refund fails for good once: the
// saga ends COMPENSATION_FAILED. `sagactl restore` (recovery.Restore) and
// the re-drive that follows send the refund again (attempt 2): the barrier
// runs it, the refund is written once and the saga ends COMPENSATED. On
// the memory event store (in-process Kafka) and on real Cassandra (real
// Kafka).
func TestRestoredCompensationRuns(t *testing.T) {
	t.Run("memory", func(t *testing.T) { restoredCompensation(t) })
	t.Run("cassandra", func(t *testing.T) {
		hosts, keyspace := testenv.CassandraKeyspace(t)
		restoredCompensation(t, sagatest.WithKafka(testenv.KafkaBrokers(t)...), sagatest.WithCassandra(hosts, keyspace))
	})
}

func restoredCompensation(t *testing.T, opts ...sagatest.Option) {
	db, _ := openDB(t)
	u := testenv.UniqueName(t, "rs")
	domain, pay, ship := "order-"+u, "pay-"+u, "ship-"+u
	barriers := map[string]*sqlbarrier.Barrier{}
	for _, svc := range []string{pay, ship} {
		b, err := sqlbarrier.New(db, sqlbarrier.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		barriers[svc] = b
	}
	env := sagatest.New(t, append(opts, sagatest.WithGuard(func(service string) worker.Guard { return barriers[service] }))...)
	var refunds atomic.Int32
	charge := ledgerEndpoint("charge", nil)
	refund := charge.Revert
	charge.Revert = func(ctx context.Context, tx *sql.Tx, s *worker.Step, in order) (order, error) {
		out, err := refund(ctx, tx, s, in) // written, then rolled back on the first try
		if refunds.Add(1) == 1 && err == nil {
			return in, worker.NonRetryable(errors.New("refund: card processor refused"))
		}
		return out, err
	}
	sagatest.Worker(env, pay, func(w *worker.Worker) error { return sqlbarrier.Register(w, barriers[pay], charge) })
	sagatest.Worker(env, ship, func(w *worker.Worker) error {
		return sqlbarrier.Register(w, barriers[ship], ledgerEndpoint("ship", nil))
	})
	o := sagatest.Orchestrator(env, "orders-"+u, orchestrator.Domain[order]{Name: domain, OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: pay, Endpoint: "charge"},
		orchestrator.Step{Service: ship, Endpoint: "ship"},
	)})
	ctx := t.Context()
	id, err := o.Start(ctx, order{Amount: 10, Fail: "ship"})
	if err != nil {
		t.Fatal(err)
	}
	if s := env.WaitTerminal(o, id)[id]; s != eventstore.StateCompensationFailed {
		t.Fatalf("saga ended %s, want COMPENSATION_FAILED (the refund failed for good)", s)
	}
	w, err := recovery.NewWriter(o.Store(), recovery.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recovery.Restore(ctx, o.Store(), w, o.Scope(), id, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := o.Redrive(ctx, id); err != nil {
		t.Fatal(err)
	}
	if s := env.WaitTerminal(o, id)[id]; s != eventstore.StateCompensated {
		h, _ := o.History(ctx, id)
		t.Fatalf("restored saga ended %s, want COMPENSATED; history %+v", s, h)
	}
	if d, r := ledgerCount(t, db, id, 0, topics.KindProcess), ledgerCount(t, db, id, 0, topics.KindRevert); d != 1 || r != 1 {
		t.Fatalf("ledger of charge: %d debits, %d refunds; want 1, 1", d, r)
	}
	if n := ledgerCount(t, db, id, 1, topics.KindProcess); n != 0 {
		t.Fatalf("ledger of the failed ship: %d rows, want none", n)
	}
	if n := refunds.Load(); n != 2 {
		t.Fatalf("refund ran %d times, want 2 (the failed attempt 1, then attempt 2)", n)
	}
	env.AssertExactlyOnce()
}
