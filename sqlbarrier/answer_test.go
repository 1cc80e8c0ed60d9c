package sqlbarrier_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stacksaga-go/stacksaga/answer/answertest"
	"github.com/stacksaga-go/stacksaga/sqlbarrier"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Item 5 of issue 47: after a restore, the re-driven compensation
// (attempt 2) of a compensation whose attempt 1 failed for good runs (the
// failed attempt's transaction left no effect); its duplicates get its
// reply, and so does a late copy of attempt 1. A process re-driven after
// a failure runs again too.
func TestLaterAttemptAfterFailureRuns(t *testing.T) {
	db, _ := openDB(t)
	b := newBarrier(t, db)
	ok := &handler{outcome: topics.OutcomeOK}
	execute(t, b, command("tx-f", 0, topics.KindProcess, 1), ok)
	fail := &handler{outcome: topics.OutcomeNonRetryable}
	if rep := execute(t, b, command("tx-f", 0, topics.KindRevert, 1), fail); rep.Outcome != topics.OutcomeNonRetryable {
		t.Fatalf("revert attempt 1: %+v", rep)
	}
	if rep := execute(t, b, command("tx-f", 0, topics.KindRevert, 1), fail); rep.Outcome != topics.OutcomeNonRetryable || fail.runs.Load() != 1 {
		t.Fatalf("duplicate of revert attempt 1: %+v after %d runs", rep, fail.runs.Load())
	}
	refund := &handler{outcome: topics.OutcomeOK}
	for i := range 2 {
		rep := execute(t, b, command("tx-f", 0, topics.KindRevert, 2), refund)
		if rep.Outcome != topics.OutcomeOK || rep.Attempt != 2 || refund.runs.Load() != 1 {
			t.Fatalf("revert attempt 2, delivery %d: %+v after %d runs; want ok, run once", i+1, rep, refund.runs.Load())
		}
	}
	if rep := execute(t, b, command("tx-f", 0, topics.KindRevert, 1), refund); rep.Outcome != topics.OutcomeOK || rep.Attempt != 1 || refund.runs.Load() != 1 {
		t.Fatalf("late copy of revert attempt 1: %+v after %d runs", rep, refund.runs.Load())
	}
	if n := ledgerCount(t, db, "tx-f", 0, topics.KindRevert); n != 1 {
		t.Fatalf("%d refund rows, want 1", n)
	}

	// A failing revert at attempt 2 replaces attempt 1's record; attempt 3
	// then runs.
	execute(t, b, command("tx-g", 0, topics.KindProcess, 1), ok)
	execute(t, b, command("tx-g", 0, topics.KindRevert, 1), fail)
	if rep := execute(t, b, command("tx-g", 0, topics.KindRevert, 2), fail); rep.Outcome != topics.OutcomeNonRetryable || rep.Attempt != 2 || fail.runs.Load() != 3 {
		t.Fatalf("failing revert attempt 2: %+v after %d runs", rep, fail.runs.Load())
	}
	if rep := execute(t, b, command("tx-g", 0, topics.KindRevert, 2), refund); rep.Outcome != topics.OutcomeNonRetryable || rep.Attempt != 2 {
		t.Fatalf("duplicate of the failing attempt 2: %+v", rep)
	}
	if rep := execute(t, b, command("tx-g", 0, topics.KindRevert, 3), refund); rep.Outcome != topics.OutcomeOK || refund.runs.Load() != 2 {
		t.Fatalf("revert attempt 3: %+v after %d runs", rep, refund.runs.Load())
	}

	// A process whose attempt 1 failed runs at attempt 2.
	execute(t, b, command("tx-h", 0, topics.KindProcess, 1), fail)
	again := &handler{outcome: topics.OutcomeOK}
	if rep := execute(t, b, command("tx-h", 0, topics.KindProcess, 2), again); rep.Outcome != topics.OutcomeOK || again.runs.Load() != 1 {
		t.Fatalf("process attempt 2 after a failure: %+v after %d runs", rep, again.runs.Load())
	}
	if n := ledgerCount(t, db, "tx-h", 0, topics.KindProcess); n != 1 {
		t.Fatalf("%d process rows, want 1", n)
	}
}

// Item 6 of issue 47: the revert of a committed process whose recorded
// reply cannot be read (a row of a newer build) runs: the process's
// effect is in place.
func TestRevertOfProcessWithUnreadableReplyRuns(t *testing.T) {
	db, _ := openDB(t)
	b := newBarrier(t, db)
	ok := &handler{outcome: topics.OutcomeOK}
	execute(t, b, command("tx-u", 0, topics.KindProcess, 1), ok)
	if _, err := db.Exec(`UPDATE stacksaga_barrier SET reply = '\xc1c1'::bytea WHERE tx_id = 'tx-u' AND kind = 'process'`); err != nil {
		t.Fatal(err)
	}
	dup := execute(t, b, command("tx-u", 0, topics.KindProcess, 1), ok)
	if dup.Outcome != topics.OutcomeNonRetryable || !dup.ActionDone || ok.runs.Load() != 1 {
		t.Fatalf("duplicate of the process: %+v; want a failure saying its effect is in place", dup)
	}
	refund := &handler{outcome: topics.OutcomeOK}
	if rep := execute(t, b, command("tx-u", 0, topics.KindRevert, 1), refund); rep.Outcome != topics.OutcomeOK || refund.runs.Load() != 1 {
		t.Fatalf("revert: %+v after %d runs; want the refund run", rep, refund.runs.Load())
	}
	if n := ledgerCount(t, db, "tx-u", 0, topics.KindRevert); n != 1 {
		t.Fatalf("%d refund rows, want 1", n)
	}
	if st := b.Stats(); st.NullCompensations != 0 {
		t.Fatalf("stats %+v: the revert was taken for a null compensation", st)
	}
}

// Item 7 of issue 47: a database error reading the barrier row (here a
// lock timeout) is reported as the database's error, not as a row that
// "keeps changing".
func TestReadErrorIsTheDatabases(t *testing.T) {
	db, dsn := openDB(t)
	b := newBarrier(t, db)
	ok := &handler{outcome: topics.OutcomeOK}
	execute(t, b, command("tx-l", 0, topics.KindProcess, 1), ok)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	short, err := sql.Open("pgx", dsn+sep+"lock_timeout=200")
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	holder, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	var attempt int
	if err := holder.QueryRow(`SELECT attempt FROM stacksaga_barrier WHERE tx_id = 'tx-l' FOR SHARE`).Scan(&attempt); err != nil {
		t.Fatal(err)
	}
	bl := newBarrier(t, short)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := command("tx-l", 0, topics.KindProcess, 1)
	rep, err := bl.Execute(ctx, cmd, ok.run(cmd))
	var pg *pgconn.PgError
	if rep != nil || !errors.As(err, &pg) || pg.Code != "55P03" || strings.Contains(err.Error(), "keeps changing") {
		t.Fatalf("Execute = %v, %v; want the lock timeout (55P03)", rep, err)
	}
}

// barrierPath runs the answer gate's cases through the barrier, on real
// PostgreSQL.
type barrierPath struct {
	db *sql.DB
	b  *sqlbarrier.Barrier
}

func (p barrierPath) Command(txID string, kind topics.Kind, attempt int) *topics.Envelope {
	return command(txID, 0, kind, attempt)
}

func (p barrierPath) Execute(t *testing.T, cmd *topics.Envelope, outcome topics.Outcome, pause bool) (bool, *topics.Envelope) {
	h := &handler{outcome: outcome, pause: pause}
	rep := execute(t, p.b, cmd, h)
	return h.runs.Load() > 0, rep
}

func (p barrierPath) Corrupt(t *testing.T, cmd *topics.Envelope) {
	if _, err := p.db.Exec(`UPDATE stacksaga_barrier SET reply = '\xc1c1'::bytea WHERE tx_id = $1 AND span = $2 AND kind = $3`, cmd.TxID, cmd.Span, string(cmd.Kind)); err != nil {
		t.Fatal(err)
	}
}

// Every case of the answer gate, through the barrier.
func TestAnswerGate(t *testing.T) {
	db, _ := openDB(t)
	answertest.Run(t, func(t *testing.T) answertest.Path {
		if _, err := db.Exec(`DELETE FROM stacksaga_barrier`); err != nil {
			t.Fatal(err)
		}
		return barrierPath{db: db, b: newBarrier(t, db)}
	})
}
