package writeprotect_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// stmts counts store statements by kind, as the package documentation's
// table does: reads (GetMarker, LoadTransaction, TransactionState), plain
// writes (PutMarker, DeleteMarker) and LWTs (InsertMarker).
type stmts struct{ Reads, Writes, LWTs int64 }

func (s stmts) String() string {
	return fmt.Sprintf("%d reads + %d writes + %d LWTs", s.Reads, s.Writes, s.LWTs)
}

// statementCounter measures the statements a backend's store sends.
type statementCounter interface {
	reset()
	counts() stmts
}

// countingStore counts the calls a guard makes to a (memory) store.
type countingStore struct {
	eventstore.Store
	reads, writes, lwts atomic.Int64
}

func (c *countingStore) reset() { c.reads.Store(0); c.writes.Store(0); c.lwts.Store(0) }
func (c *countingStore) counts() stmts {
	return stmts{c.reads.Load(), c.writes.Load(), c.lwts.Load()}
}

func (c *countingStore) InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (bool, eventstore.Marker, error) {
	c.lwts.Add(1)
	return c.Store.InsertMarker(ctx, m, lease)
}

func (c *countingStore) PutMarker(ctx context.Context, m eventstore.Marker) error {
	c.writes.Add(1)
	return c.Store.PutMarker(ctx, m)
}

func (c *countingStore) GetMarker(ctx context.Context, k eventstore.MarkerKey) (eventstore.Marker, error) {
	c.reads.Add(1)
	return c.Store.GetMarker(ctx, k)
}

func (c *countingStore) DeleteMarker(ctx context.Context, k eventstore.MarkerKey) error {
	c.writes.Add(1)
	return c.Store.DeleteMarker(ctx, k)
}

func (c *countingStore) LoadTransaction(ctx context.Context, s eventstore.Scope, tx string) (eventstore.Transaction, error) {
	c.reads.Add(1)
	return c.Store.LoadTransaction(ctx, s, tx)
}

func (c *countingStore) TransactionState(ctx context.Context, s eventstore.Scope, tx string) (eventstore.State, error) {
	c.reads.Add(1)
	return c.Store.(eventstore.StateReader).TransactionState(ctx, s, tx)
}

// statementCase is one row of the package documentation's table.
type statementCase struct {
	name string
	// setup runs unmeasured; measure is measured.
	setup   func(t *testing.T, b *backend, g *writeprotect.Guard, scope eventstore.Scope, tx string)
	measure func(t *testing.T, g *writeprotect.Guard, scope eventstore.Scope, tx string)
	strict  stmts
	relaxed stmts
}

func run(t *testing.T, g *writeprotect.Guard, scope eventstore.Scope, tx string, kind topics.Kind, outcome topics.Outcome) {
	t.Helper()
	runCmd(t, g, command(scope, tx, 1, kind), outcome)
}

func runCmd(t *testing.T, g *writeprotect.Guard, cmd *topics.Envelope, outcome topics.Outcome) {
	t.Helper()
	h := handler{outcome: outcome}
	if _, err := g.Execute(context.Background(), cmd, h.run(cmd)); err != nil {
		t.Fatal(err)
	}
}

var statementCases = []statementCase{
	{name: "action, first delivery",
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, "")
		},
		strict: stmts{Reads: 1, Writes: 1, LWTs: 1}, relaxed: stmts{Reads: 2, Writes: 1}},
	{name: "action, duplicate",
		setup: func(t *testing.T, _ *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, "")
		},
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, "")
		},
		strict: stmts{LWTs: 1}, relaxed: stmts{Reads: 1}},
	{name: "compensation, first",
		setup: func(t *testing.T, _ *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, "")
		},
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindRevert, "")
		},
		strict: stmts{Reads: 2, Writes: 1, LWTs: 1}, relaxed: stmts{Reads: 3, Writes: 1}},
	{name: "compensation, duplicate",
		setup: func(t *testing.T, _ *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, "")
			run(t, g, s, tx, topics.KindRevert, "")
		},
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindRevert, "")
		},
		strict: stmts{Reads: 1, LWTs: 1}, relaxed: stmts{Reads: 2}},
	{name: "compensation, action marker lost",
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			cmd := command(s, tx, 1, topics.KindRevert)
			cmd.ActionDone = true
			runCmd(t, g, cmd, "")
		},
		strict: stmts{Reads: 2, Writes: 1, LWTs: 1}, relaxed: stmts{Reads: 3, Writes: 1}},
	{name: "null compensation",
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindRevert, "")
		},
		strict: stmts{Reads: 2, LWTs: 1}, relaxed: stmts{Reads: 2, LWTs: 1}},
	{name: "hanging action",
		setup: func(t *testing.T, _ *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindRevert, "")
		},
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, "")
		},
		strict: stmts{LWTs: 1}, relaxed: stmts{Reads: 1}},
	{name: "retryable outcome",
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, topics.OutcomeRetryable)
		},
		strict: stmts{Reads: 1, Writes: 1, LWTs: 1}, relaxed: stmts{Reads: 2}},
	{name: "late duplicate (fenced)",
		setup: func(t *testing.T, b *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, "")
			ctx := context.Background()
			if err := b.store.CreateTransaction(ctx, eventstore.Transaction{Scope: s, TxID: tx, State: eventstore.StateCompleted}, nil); err != nil {
				t.Fatal(err)
			}
			if err := b.store.DeleteMarkers(ctx, s, tx); err != nil {
				t.Fatal(err)
			}
		},
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, "")
		},
		strict: stmts{Reads: 1, Writes: 1, LWTs: 1}, relaxed: stmts{Reads: 2}},
}

// checkStatements checks the package documentation's table on b, whose
// store statements c counts.
func checkStatements(t *testing.T, b *backend, c statementCounter) {
	for _, mode := range modes {
		for i, tc := range statementCases {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				g := b.guard(t, mode)
				scope := uniqueScope(t)
				tx := fmt.Sprintf("tx-stmt-%d", i)
				if tc.setup != nil {
					tc.setup(t, b, g, scope, tx)
				}
				c.reset()
				tc.measure(t, g, scope, tx)
				want := tc.strict
				if mode == writeprotect.RelaxedWithDedup {
					want = tc.relaxed
				}
				if got := c.counts(); got != want {
					t.Fatalf("%s: %v, want %v", tc.name, got, want)
				}
			})
		}
	}
}

func TestStatementsMemory(t *testing.T) {
	b := memoryBackend(t)
	cs := &countingStore{Store: b.store}
	b.store = cs
	checkStatements(t, b, cs)
}
