package sqlbarrier_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/sqlbarrier"
	"github.com/stacksaga-go/stacksaga/topics"
)

// handler is a fake worker's run for Execute: it writes one ledger row
// through the barrier's transaction and replies outcome.
type handler struct {
	runs    atomic.Int32
	outcome topics.Outcome
	pause   bool
	// inside, when set, is called after the write, before the reply.
	inside func()
}

func (h *handler) run(cmd *topics.Envelope) func(context.Context) *topics.Envelope {
	return func(ctx context.Context) *topics.Envelope {
		h.runs.Add(1)
		tx := sqlbarrier.TxFrom(ctx)
		rep := &topics.Envelope{Type: topics.TypeReply, TxID: cmd.TxID, Span: cmd.Span, Kind: cmd.Kind, Endpoint: cmd.Endpoint,
			Attempt: cmd.Attempt, IdempotencyKey: cmd.IdempotencyKey, Trace: cmd.Trace, Outcome: h.outcome, Payload: []byte{0x81, 0xa1, 'r', 0x01}}
		if tx == nil {
			rep.Outcome, rep.Error = topics.OutcomeNonRetryable, "no tx"
			return rep
		}
		amount := 10
		if cmd.Kind == topics.KindRevert {
			amount = -10
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO ledger (tx_id, span, kind, amount) VALUES ($1, $2, $3, $4)`, cmd.TxID, cmd.Span, string(cmd.Kind), amount); err != nil {
			rep.Outcome, rep.Error = topics.OutcomeRetryable, err.Error()
			return rep
		}
		if h.inside != nil {
			h.inside()
		}
		if h.outcome != topics.OutcomeOK {
			rep.Error = "failed"
		}
		if h.pause {
			rep.Pause = &topics.Pause{Event: "webhook", DeadlineMs: 1000}
		}
		return rep
	}
}

func newBarrier(t testing.TB, db *sql.DB, opts ...sqlbarrier.Option) *sqlbarrier.Barrier {
	t.Helper()
	b, err := sqlbarrier.New(db, append([]sqlbarrier.Option{sqlbarrier.WithLogger(quietLogger())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	sqlbarrier.MarkEndpoint(b, "charge")
	return b
}

func execute(t testing.TB, b *sqlbarrier.Barrier, cmd *topics.Envelope, h *handler) *topics.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := b.Execute(ctx, cmd, h.run(cmd))
	if err != nil {
		t.Fatal(err)
	}
	if rep == nil {
		t.Fatal("no reply")
	}
	return rep
}

// A command delivered three times runs once; the two duplicates get the
// recorded reply, addressed to them.
func TestDuplicatesGetTheRecordedReply(t *testing.T) {
	db, _ := openDB(t)
	b := newBarrier(t, db)
	h := &handler{outcome: topics.OutcomeOK}
	var first *topics.Envelope
	for i := 1; i <= 3; i++ {
		cmd := command("tx-dup", 0, topics.KindProcess, 1)
		cmd.Trace = map[string]string{"n": string(rune('0' + i))}
		rep := execute(t, b, cmd, h)
		if rep.Outcome != topics.OutcomeOK || string(rep.Payload) != "\x81\xa1r\x01" || rep.Trace["n"] != cmd.Trace["n"] {
			t.Fatalf("delivery %d: reply %+v", i, rep)
		}
		if first == nil {
			first = rep
		}
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if n := ledgerCount(t, db, "tx-dup", 0, topics.KindProcess); n != 1 {
		t.Fatalf("%d ledger rows, want 1", n)
	}
	if st := b.Stats(); st.Ran != 1 || st.Duplicates != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// waitLockWait returns once a session waits for a lock (the twin's insert
// on the barrier row's unique key).
func waitLockWait(t testing.TB, db *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no session ever waited for a lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A twin of a command in flight waits on the barrier row's key and, once
// the first commits, gets its reply without running the handler; if the
// first rolls back (retryable), the twin runs it.
func TestInFlightTwin(t *testing.T) {
	for _, firstOutcome := range []topics.Outcome{topics.OutcomeOK, topics.OutcomeRetryable} {
		t.Run(string(firstOutcome), func(t *testing.T) {
			db, _ := openDB(t)
			b := newBarrier(t, db)
			release := make(chan struct{})
			inside := make(chan struct{})
			h1 := &handler{outcome: firstOutcome, inside: func() { close(inside); <-release }}
			h2 := &handler{outcome: topics.OutcomeOK}
			cmd := command("tx-twin", 0, topics.KindProcess, 1)
			first := make(chan *topics.Envelope, 1)
			go func() {
				rep, err := b.Execute(context.Background(), cmd, h1.run(cmd))
				if err != nil {
					t.Error(err)
				}
				first <- rep
			}()
			<-inside
			second := make(chan *topics.Envelope, 1)
			go func() {
				rep, err := b.Execute(context.Background(), cmd, h2.run(cmd))
				if err != nil {
					t.Error(err)
				}
				second <- rep
			}()
			waitLockWait(t, db)
			close(release)
			r1, r2 := <-first, <-second
			if r1.Outcome != firstOutcome || r2.Outcome != topics.OutcomeOK {
				t.Fatalf("replies %s, %s", r1.Outcome, r2.Outcome)
			}
			wantSecondRuns := int32(0)
			if firstOutcome == topics.OutcomeRetryable {
				wantSecondRuns = 1
			}
			if h1.runs.Load() != 1 || h2.runs.Load() != wantSecondRuns {
				t.Fatalf("runs %d, %d; want 1, %d", h1.runs.Load(), h2.runs.Load(), wantSecondRuns)
			}
			if n := ledgerCount(t, db, "tx-twin", 0, topics.KindProcess); n != 1 {
				t.Fatalf("%d ledger rows, want 1", n)
			}
		})
	}
}

// A revert that comes first is a null compensation and makes the process
// that comes after it a no-op (hanging protection).
func TestNullCompensationAndHanging(t *testing.T) {
	db, _ := openDB(t)
	b := newBarrier(t, db)
	h := &handler{outcome: topics.OutcomeOK}
	rev := command("tx-null", 1, topics.KindRevert, 1)
	rev.Payload = []byte{0x81, 0xa1, 'x', 0x07}
	rep := execute(t, b, rev, h)
	if rep.Outcome != topics.OutcomeOK || string(rep.Payload) != string(rev.Payload) || h.runs.Load() != 0 {
		t.Fatalf("null compensation: reply %+v, runs %d", rep, h.runs.Load())
	}
	// Its duplicate too.
	if rep := execute(t, b, rev, h); rep.Outcome != topics.OutcomeOK || h.runs.Load() != 0 {
		t.Fatalf("duplicate null compensation: %+v, runs %d", rep, h.runs.Load())
	}
	proc := command("tx-null", 1, topics.KindProcess, 1)
	rep = execute(t, b, proc, h)
	if rep.Outcome != topics.OutcomeNonRetryable || !strings.Contains(rep.Error, "hanging") || h.runs.Load() != 0 {
		t.Fatalf("hanging process: reply %+v, runs %d", rep, h.runs.Load())
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ledger`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("ledger rows %d, %v; want none", n, err)
	}
	if st := b.Stats(); st.NullCompensations != 1 || st.Hanging != 1 || st.Ran != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A revert without a process row, saying that the orchestrator holds the
// process's ok reply (ActionDone, as the orchestrator's reverts do), runs
// the compensation (the row was cleaned up, or the process ran before the
// barrier), once; a late process is still a no-op.
func TestRevertWithActionDoneAndNoRowCompensates(t *testing.T) {
	db, _ := openDB(t)
	b := newBarrier(t, db)
	h := &handler{outcome: topics.OutcomeOK}
	rev := command("tx-ad", 0, topics.KindRevert, 1)
	rev.ActionDone = true
	for range 2 {
		if rep := execute(t, b, rev, h); rep.Outcome != topics.OutcomeOK {
			t.Fatalf("revert: %+v", rep)
		}
	}
	if rep := execute(t, b, command("tx-ad", 0, topics.KindProcess, 1), h); rep.Outcome != topics.OutcomeNonRetryable {
		t.Fatalf("late process: %+v", rep)
	}
	if p, r := ledgerCount(t, db, "tx-ad", 0, topics.KindProcess), ledgerCount(t, db, "tx-ad", 0, topics.KindRevert); p != 0 || r != 1 || h.runs.Load() != 1 {
		t.Fatalf("ledger: %d process, %d revert rows, %d runs; want 0, 1, 1", p, r, h.runs.Load())
	}
}

// A revert of a process that ran runs once; a revert of a process that
// failed (its writes rolled back) touches nothing.
func TestRevertRunsOnlyAfterACommittedProcess(t *testing.T) {
	db, _ := openDB(t)
	b := newBarrier(t, db)
	ok := &handler{outcome: topics.OutcomeOK}
	execute(t, b, command("tx-a", 0, topics.KindProcess, 1), ok)
	for range 3 {
		if rep := execute(t, b, command("tx-a", 0, topics.KindRevert, 1), ok); rep.Outcome != topics.OutcomeOK {
			t.Fatalf("revert: %+v", rep)
		}
	}
	if p, r := ledgerCount(t, db, "tx-a", 0, topics.KindProcess), ledgerCount(t, db, "tx-a", 0, topics.KindRevert); p != 1 || r != 1 {
		t.Fatalf("ledger: %d process, %d revert rows; want 1, 1", p, r)
	}

	fail := &handler{outcome: topics.OutcomeNonRetryable}
	if rep := execute(t, b, command("tx-b", 0, topics.KindProcess, 1), fail); rep.Outcome != topics.OutcomeNonRetryable {
		t.Fatalf("failing process: %+v", rep)
	}
	// Its duplicate gets the recorded failure without running.
	if rep := execute(t, b, command("tx-b", 0, topics.KindProcess, 1), fail); rep.Outcome != topics.OutcomeNonRetryable || fail.runs.Load() != 1 {
		t.Fatalf("duplicate of the failure: %+v, runs %d", rep, fail.runs.Load())
	}
	rev := &handler{outcome: topics.OutcomeOK}
	if rep := execute(t, b, command("tx-b", 0, topics.KindRevert, 1), rev); rep.Outcome != topics.OutcomeOK || rev.runs.Load() != 0 {
		t.Fatalf("revert of the failed process: %+v, runs %d", rep, rev.runs.Load())
	}
	if p, r := ledgerCount(t, db, "tx-b", 0, topics.KindProcess), ledgerCount(t, db, "tx-b", 0, topics.KindRevert); p != 0 || r != 0 {
		t.Fatalf("ledger of the failed step: %d process, %d revert rows; want none", p, r)
	}
}

// A retryable outcome rolls the writes back and records nothing: the
// re-driven attempt runs; a paused step runs again at a later attempt.
func TestRetryableAndPausedRunAgain(t *testing.T) {
	db, _ := openDB(t)
	b := newBarrier(t, db)
	retry := &handler{outcome: topics.OutcomeRetryable}
	if rep := execute(t, b, command("tx-r", 0, topics.KindProcess, 1), retry); rep.Outcome != topics.OutcomeRetryable {
		t.Fatalf("%+v", rep)
	}
	var rows int
	if err := db.QueryRow(`SELECT count(*) FROM stacksaga_barrier`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("barrier rows after a retryable outcome: %d, %v", rows, err)
	}
	ok := &handler{outcome: topics.OutcomeOK}
	execute(t, b, command("tx-r", 0, topics.KindProcess, 2), ok)
	execute(t, b, command("tx-r", 0, topics.KindProcess, 2), ok)
	if n := ledgerCount(t, db, "tx-r", 0, topics.KindProcess); n != 1 || ok.runs.Load() != 1 {
		t.Fatalf("ledger %d, runs %d; want 1, 1", n, ok.runs.Load())
	}

	paused := &handler{outcome: topics.OutcomeOK, pause: true}
	execute(t, b, command("tx-p", 0, topics.KindProcess, 1), paused)
	if rep := execute(t, b, command("tx-p", 0, topics.KindProcess, 1), paused); rep.Pause == nil || paused.runs.Load() != 1 {
		t.Fatalf("duplicate of the paused step: %+v, runs %d", rep, paused.runs.Load())
	}
	again := &handler{outcome: topics.OutcomeOK}
	if rep := execute(t, b, command("tx-p", 0, topics.KindProcess, 2), again); rep.Pause != nil || again.runs.Load() != 1 {
		t.Fatalf("re-invoked paused step: %+v, runs %d", rep, again.runs.Load())
	}
	if rep := execute(t, b, command("tx-p", 0, topics.KindProcess, 2), again); rep.Pause != nil || again.runs.Load() != 1 {
		t.Fatalf("duplicate of the re-invocation: %+v, runs %d", rep, again.runs.Load())
	}
}

// The database unreachable: Execute fails (the worker retries it later)
// and runs nothing.
func TestUnreachableDatabaseIsNotNow(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://u:p@"+testenvClosedAddr(t)+"/x?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := newBarrier(t, db)
	h := &handler{outcome: topics.OutcomeOK}
	cmd := command("tx-u", 0, topics.KindProcess, 1)
	rep, err := b.Execute(context.Background(), cmd, h.run(cmd))
	if err == nil || rep != nil || h.runs.Load() != 0 {
		t.Fatalf("Execute = %v, %v; runs %d", rep, err, h.runs.Load())
	}
	if errors.Is(err, sqlbarrier.ErrHanging) {
		t.Fatal(err)
	}
}
