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
// writes (PutMarker, DeleteMarker) and LWTs (InsertMarker, CommitMarker,
// DeleteMarkerIf).
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

func (c *countingStore) CommitMarker(ctx context.Context, m eventstore.Marker) (bool, eventstore.Marker, error) {
	c.lwts.Add(1)
	return c.Store.CommitMarker(ctx, m)
}

func (c *countingStore) DeleteMarkerIf(ctx context.Context, k eventstore.MarkerKey, state eventstore.MarkerState, owner string) (bool, eventstore.Marker, error) {
	c.lwts.Add(1)
	return c.Store.DeleteMarkerIf(ctx, k, state, owner)
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

// statementCase is one row of the package documentation's tables.
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

// The measured steps and setups the tables share.
var (
	runAction = func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
		run(t, g, s, tx, topics.KindProcess, "")
	}
	runCompensation = func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
		run(t, g, s, tx, topics.KindRevert, "")
	}
	setupAction = func(t *testing.T, _ *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
		run(t, g, s, tx, topics.KindProcess, "")
	}
	// runRetryable runs attempt 1 of the action, which fails retryably.
	runRetryable = func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
		run(t, g, s, tx, topics.KindProcess, topics.OutcomeRetryable)
	}
	setupRetryable = func(t *testing.T, _ *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
		run(t, g, s, tx, topics.KindProcess, topics.OutcomeRetryable)
	}
	// runNextAttempt runs attempt 2 of the action, which succeeds.
	runNextAttempt = func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
		cmd := command(s, tx, 1, topics.KindProcess)
		cmd.Attempt = 2
		runCmd(t, g, cmd, "")
	}
	// setupEnded runs the action and ends its saga (COMPLETED); the
	// markers are kept, as the orchestrator does by default.
	setupEnded = func(t *testing.T, b *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
		run(t, g, s, tx, topics.KindProcess, "")
		if err := b.store.CreateTransaction(context.Background(), eventstore.Transaction{Scope: s, TxID: tx, State: eventstore.StateCompleted}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// setupCleanedUp is setupEnded followed by the partition delete of an
	// orchestrator with WithMarkerCleanup.
	setupCleanedUp = func(t *testing.T, b *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
		setupEnded(t, b, g, s, tx)
		if err := b.store.DeleteMarkers(context.Background(), s, tx); err != nil {
			t.Fatal(err)
		}
	}
)

// statementCases is the default table (terminal fence off).
var statementCases = []statementCase{
	{name: "action, first delivery", measure: runAction,
		strict: stmts{LWTs: 2}, relaxed: stmts{Reads: 1, Writes: 1}},
	{name: "action, duplicate", setup: setupAction, measure: runAction,
		strict: stmts{LWTs: 1}, relaxed: stmts{Reads: 1}},
	{name: "compensation, first", setup: setupAction, measure: runCompensation,
		strict: stmts{Reads: 1, LWTs: 2}, relaxed: stmts{Reads: 2, Writes: 1}},
	{name: "compensation, duplicate",
		setup: func(t *testing.T, _ *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, "")
			run(t, g, s, tx, topics.KindRevert, "")
		},
		measure: runCompensation,
		strict:  stmts{Reads: 1, LWTs: 1}, relaxed: stmts{Reads: 2}},
	{name: "compensation, action marker lost",
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			cmd := command(s, tx, 1, topics.KindRevert)
			cmd.ActionDone = true
			runCmd(t, g, cmd, "")
		},
		strict: stmts{Reads: 1, LWTs: 2}, relaxed: stmts{Reads: 2, Writes: 1}},
	{name: "null compensation", measure: runCompensation,
		strict: stmts{Reads: 1, LWTs: 1}, relaxed: stmts{Reads: 1, LWTs: 1}},
	{name: "hanging action",
		setup: func(t *testing.T, _ *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindRevert, "")
		},
		measure: runAction,
		strict:  stmts{LWTs: 1}, relaxed: stmts{Reads: 1}},
	{name: "retryable outcome", measure: runRetryable,
		strict: stmts{LWTs: 2}, relaxed: stmts{Reads: 1, Writes: 1}},
	{name: "retryable outcome, duplicate", setup: setupRetryable, measure: runRetryable,
		strict: stmts{LWTs: 1}, relaxed: stmts{Reads: 1}},
	{name: "retryable outcome, next attempt", setup: setupRetryable, measure: runNextAttempt,
		strict: stmts{LWTs: 4}, relaxed: stmts{Reads: 1, Writes: 1}},
	{name: "late duplicate (markers kept)", setup: setupEnded, measure: runAction,
		strict: stmts{LWTs: 1}, relaxed: stmts{Reads: 1}},
}

// fencedStatementCases is the table with WithTerminalFence: one more read
// per executed step (none per skipped duplicate), and the row of a late
// duplicate after an orchestrator with WithMarkerCleanup deleted the
// saga's markers.
var fencedStatementCases = []statementCase{
	{name: "action, first delivery", measure: runAction,
		strict: stmts{Reads: 1, LWTs: 2}, relaxed: stmts{Reads: 2, Writes: 1}},
	{name: "action, duplicate", setup: setupAction, measure: runAction,
		strict: stmts{LWTs: 1}, relaxed: stmts{Reads: 1}},
	{name: "compensation, first", setup: setupAction, measure: runCompensation,
		strict: stmts{Reads: 2, LWTs: 2}, relaxed: stmts{Reads: 3, Writes: 1}},
	{name: "compensation, duplicate",
		setup: func(t *testing.T, _ *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindProcess, "")
			run(t, g, s, tx, topics.KindRevert, "")
		},
		measure: runCompensation,
		strict:  stmts{Reads: 1, LWTs: 1}, relaxed: stmts{Reads: 2}},
	{name: "compensation, action marker lost",
		measure: func(t *testing.T, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			cmd := command(s, tx, 1, topics.KindRevert)
			cmd.ActionDone = true
			runCmd(t, g, cmd, "")
		},
		strict: stmts{Reads: 2, LWTs: 2}, relaxed: stmts{Reads: 3, Writes: 1}},
	{name: "null compensation", measure: runCompensation,
		strict: stmts{Reads: 2, LWTs: 1}, relaxed: stmts{Reads: 2, LWTs: 1}},
	{name: "hanging action",
		setup: func(t *testing.T, _ *backend, g *writeprotect.Guard, s eventstore.Scope, tx string) {
			run(t, g, s, tx, topics.KindRevert, "")
		},
		measure: runAction,
		strict:  stmts{LWTs: 1}, relaxed: stmts{Reads: 1}},
	{name: "retryable outcome", measure: runRetryable,
		strict: stmts{Reads: 1, LWTs: 2}, relaxed: stmts{Reads: 2, Writes: 1}},
	{name: "retryable outcome, duplicate", setup: setupRetryable, measure: runRetryable,
		strict: stmts{LWTs: 1}, relaxed: stmts{Reads: 1}},
	{name: "retryable outcome, next attempt", setup: setupRetryable, measure: runNextAttempt,
		strict: stmts{Reads: 1, LWTs: 4}, relaxed: stmts{Reads: 2, Writes: 1}},
	{name: "late duplicate (markers kept)", setup: setupEnded, measure: runAction,
		strict: stmts{LWTs: 1}, relaxed: stmts{Reads: 1}},
	{name: "late duplicate after cleanup (fenced)", setup: setupCleanedUp, measure: runAction,
		strict: stmts{Reads: 1, LWTs: 2}, relaxed: stmts{Reads: 2}},
}

// checkStatements checks the package documentation's tables on b, whose
// store statements c counts: the default one, and the one with
// WithTerminalFence.
func checkStatements(t *testing.T, b *backend, c statementCounter) {
	for _, table := range []struct {
		name  string
		cases []statementCase
		opts  []writeprotect.Option
	}{
		{"default", statementCases, nil},
		{"fenced", fencedStatementCases, []writeprotect.Option{writeprotect.WithTerminalFence()}},
	} {
		for _, mode := range modes {
			for i, tc := range table.cases {
				t.Run(table.name+"/"+string(mode)+"/"+tc.name, func(t *testing.T) {
					g := b.guard(t, mode, table.opts...)
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
}

func TestStatementsMemory(t *testing.T) {
	b := memoryBackend(t)
	cs := &countingStore{Store: b.store}
	b.store = cs
	checkStatements(t, b, cs)
}
