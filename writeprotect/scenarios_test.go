package writeprotect_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

var modes = []writeprotect.Mode{writeprotect.Strict, writeprotect.RelaxedWithDedup}

// scale sizes the scenarios per backend (Cassandra LWTs are slow on a
// small machine).
type scale struct {
	concurrentTxs, instances, raceTxs int
}

// runScenarios runs every store-backed scenario on the backend newBackend
// returns (a fresh one or a shared one; scopes are unique per subtest).
func runScenarios(t *testing.T, sc scale, newBackend func(t *testing.T) *backend) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Run("SequentialDuplicates", func(t *testing.T) { scenarioSequential(t, newBackend(t), mode) })
			t.Run("Retryable", func(t *testing.T) { scenarioRetryable(t, newBackend(t), mode) })
			t.Run("RetryableThenCompensation", func(t *testing.T) { scenarioRetryableThenCompensation(t, newBackend(t), mode) })
			t.Run("NullCompensationAndHanging", func(t *testing.T) { scenarioNullAndHanging(t, newBackend(t), mode) })
			t.Run("Compensation", func(t *testing.T) { scenarioCompensation(t, newBackend(t), mode) })
			t.Run("TerminalFence", func(t *testing.T) { scenarioTerminalFence(t, newBackend(t), mode) })
			t.Run("LateDuplicateAfterEnd", func(t *testing.T) { scenarioLateDuplicate(t, newBackend(t), mode) })
			t.Run("ReplyAddressedToRedrive", func(t *testing.T) { scenarioRedrive(t, newBackend(t), mode) })
			t.Run("CommitFailureThenCompensation", func(t *testing.T) { scenarioCommitFailure(t, newBackend(t), mode) })
			t.Run("LaterAttemptAfterFailure", func(t *testing.T) { scenarioLaterAttemptAfterFailure(t, newBackend(t), mode) })
		})
	}
	t.Run("STRICT/ConcurrentInstances", func(t *testing.T) { scenarioConcurrent(t, newBackend(t), sc) })
	t.Run("STRICT/RetryableNextAttemptRace", func(t *testing.T) { scenarioRetryableNextAttemptRace(t, newBackend(t), sc.instances) })
	t.Run("STRICT/CrashBetweenLeaseAndCommit", func(t *testing.T) { scenarioCrashPanic(t, newBackend(t)) })
	t.Run("STRICT/AbandonedLease", func(t *testing.T) { scenarioAbandonedLease(t, newBackend(t), sc.instances) })
	t.Run("STRICT/CompensationRacesAction", func(t *testing.T) { scenarioRace(t, newBackend(t), sc.raceTxs) })
}

// The same command K times, on two instances one after the other: one
// run, identical replies.
func scenarioSequential(t *testing.T, b *backend, mode writeprotect.Mode) {
	scope := uniqueScope(t)
	g1, g2 := b.guard(t, mode), b.guard(t, mode)
	var h handler
	cmd := command(scope, "tx-seq", 1, topics.KindProcess)
	var replies []*topics.Envelope
	for i := range 6 {
		g := g1
		if i%2 == 1 {
			g = g2
		}
		replies = append(replies, execute(t, g, cmd, h.run(cmd)))
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	for i, r := range replies {
		if err := sameReply(replies[0], r); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	if r := replies[0]; r.Outcome != topics.OutcomeOK || str(r.Payload) != "entity-v1|process-run-1" || r.Hints["ran"] != "1" {
		t.Fatalf("reply %+v", r)
	}
	st := sumStats(g1, g2)
	if st.Executions != 1 || st.DuplicatesSkipped != 5 {
		t.Fatalf("stats %+v", st)
	}
	m, err := b.store.GetMarker(context.Background(), writeprotect.MarkerKeyFor(cmd))
	if err != nil {
		t.Fatal(err)
	}
	if m.State != eventstore.MarkerCommitted || len(m.Reply) == 0 || !retained(m) {
		t.Fatalf("marker %+v, want COMMITTED with the reply, expiring after the retention (%v)", m, writeprotect.DefaultMarkerRetention)
	}
	if m.Site != "worker:charge" || m.Span != 1 || m.Kind != "process" || m.Scope != scope {
		t.Fatalf("marker key %+v", m.MarkerKey)
	}
}

// A retryable outcome is recorded under its attempt: duplicates of that
// attempt, on any instance, re-send the recorded reply without running the
// step (review finding: every duplicate ran the handler again); the next
// attempt runs it, and so on until an outcome that is final. A stale
// duplicate of an earlier attempt gets the latest record.
func scenarioRetryable(t *testing.T, b *backend, mode writeprotect.Mode) {
	scope := uniqueScope(t)
	g, g2 := b.guard(t, mode), b.guard(t, mode)
	h := handler{outcome: topics.OutcomeRetryable}
	attempt := func(n int) *topics.Envelope {
		cmd := command(scope, "tx-retry", 2, topics.KindProcess)
		cmd.Attempt = n
		return cmd
	}
	for n := 1; n <= 2; n++ {
		cmd := attempt(n)
		first := execute(t, g, cmd, h.run(cmd))
		if first.Outcome != topics.OutcomeRetryable || first.Attempt != n || h.runs.Load() != int64(n) {
			t.Fatalf("attempt %d: reply %+v after %d runs", n, first, h.runs.Load())
		}
		m, err := b.store.GetMarker(context.Background(), writeprotect.MarkerKeyFor(cmd))
		if err != nil || m.State != eventstore.MarkerCommitted || !retained(m) {
			t.Fatalf("attempt %d: marker after a retryable outcome %+v, %v; want it recorded", n, m, err)
		}
		for i := range 4 {
			gi := g
			if i%2 == 0 {
				gi = g2
			}
			dup := execute(t, gi, cmd, h.run(cmd))
			if err := sameReply(first, dup); err != nil {
				t.Fatalf("attempt %d, duplicate %d: %v", n, i, err)
			}
		}
		if h.runs.Load() != int64(n) {
			t.Fatalf("attempt %d: the handler ran %d times, want %d (duplicates of a retryably failed attempt must not run)", n, h.runs.Load(), n)
		}
	}
	h.outcome = topics.OutcomeOK
	cmd3 := attempt(3)
	first := execute(t, g2, cmd3, h.run(cmd3))
	again := execute(t, g, cmd3, h.run(cmd3))
	if h.runs.Load() != 3 || first.Outcome != topics.OutcomeOK || first.Attempt != 3 {
		t.Fatalf("runs %d, reply %+v", h.runs.Load(), first)
	}
	if err := sameReply(first, again); err != nil {
		t.Fatal(err)
	}
	// A late copy of attempt 1 gets the final reply (addressed to it; the
	// orchestrator drops it as stale).
	if late := execute(t, g, attempt(1), h.run(attempt(1))); h.runs.Load() != 3 || late.Outcome != topics.OutcomeOK || late.Attempt != 1 {
		t.Fatalf("late duplicate of attempt 1: reply %+v after %d runs", late, h.runs.Load())
	}
	st := sumStats(g, g2)
	if st.RetryablesRecorded != 2 || st.Superseded != 2 || st.Executions != 3 || st.DuplicatesSkipped != 10 || st.Released != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A non-retryable outcome is final for its attempt (its duplicates
	// get it); a later attempt (a restored saga) runs again (issue 47).
	h.outcome = topics.OutcomeNonRetryable
	cmd4 := command(scope, "tx-retry", 3, topics.KindProcess)
	r1 := execute(t, g, cmd4, h.run(cmd4))
	if dup := execute(t, g2, cmd4, h.run(cmd4)); h.runs.Load() != 4 || r1.Outcome != topics.OutcomeNonRetryable || sameReply(r1, dup) != nil {
		t.Fatalf("runs %d, reply %+v, duplicate %+v", h.runs.Load(), r1, dup)
	}
	cmd4b := *cmd4
	cmd4b.Attempt = 2
	if r2 := execute(t, g, &cmd4b, h.run(&cmd4b)); h.runs.Load() != 5 || r2.Attempt != 2 || r2.Outcome != topics.OutcomeNonRetryable {
		t.Fatalf("attempt 2 after a non-retryable attempt 1: runs %d, reply %+v", h.runs.Load(), r2)
	}
}

// The next attempt of a retryably failed step, delivered to many STRICT
// instances at once, runs once: only one removes the record (a
// conditional delete), the others find its lease and then its commit.
func scenarioRetryableNextAttemptRace(t *testing.T, b *backend, instances int) {
	scope := uniqueScope(t)
	h := handler{outcome: topics.OutcomeRetryable}
	cmd := command(scope, "tx-retry-race", 1, topics.KindProcess)
	execute(t, b.guard(t, writeprotect.Strict), cmd, h.run(cmd))
	h.outcome = topics.OutcomeOK
	next := *cmd
	next.Attempt = 2
	guards := make([]*writeprotect.Guard, instances)
	for i := range guards {
		guards[i] = b.guard(t, writeprotect.Strict)
	}
	replies := make([]*topics.Envelope, instances)
	var wg sync.WaitGroup
	for i, g := range guards {
		wg.Go(func() { replies[i] = execute(t, g, &next, h.run(&next)) })
	}
	wg.Wait()
	if h.runs.Load() != 2 {
		t.Fatalf("the handler ran %d times, want 2 (attempt 1 and one run of attempt 2)", h.runs.Load())
	}
	for i, r := range replies {
		if err := sameReply(replies[0], r); err != nil || r.Outcome != topics.OutcomeOK {
			t.Fatalf("instance %d: %+v, %v", i, r, err)
		}
	}
	if st := sumStats(guards...); st.Superseded != 1 || st.Executions != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A compensation of an action whose only attempt failed retryably: without
// ActionDone the action did not complete, so the compensation is null and
// the action's next attempt is refused (hanging), as when a retryable
// outcome left no marker; with ActionDone (the orchestrator holds an ok
// reply) the compensation runs.
func scenarioRetryableThenCompensation(t *testing.T, b *backend, mode writeprotect.Mode) {
	scope := uniqueScope(t)
	g := b.guard(t, mode)
	h := handler{outcome: topics.OutcomeRetryable}
	proc := command(scope, "tx-retry-comp", 1, topics.KindProcess)
	execute(t, g, proc, h.run(proc))
	h.outcome = topics.OutcomeOK
	rev := command(scope, "tx-retry-comp", 1, topics.KindRevert)
	if r := execute(t, g, rev, h.run(rev)); r.Outcome != topics.OutcomeOK || h.runs.Load() != 1 {
		t.Fatalf("compensation: reply %+v after %d runs, want a null compensation", r, h.runs.Load())
	}
	next := *proc
	next.Attempt = 2
	if r := execute(t, g, &next, h.run(&next)); r.Error != writeprotect.ErrHanging.Error() || h.runs.Load() != 1 {
		t.Fatalf("next attempt after the null compensation: reply %+v after %d runs, want refused", r, h.runs.Load())
	}
	if st := g.Stats(); st.NullCompensations != 1 || st.HangingRefusals != 1 || st.MissingActionMarkers != 0 {
		t.Fatalf("stats %+v", st)
	}

	h.outcome = topics.OutcomeRetryable
	proc2 := command(scope, "tx-retry-comp", 2, topics.KindProcess)
	execute(t, g, proc2, h.run(proc2))
	h.outcome = topics.OutcomeOK
	rev2 := command(scope, "tx-retry-comp", 2, topics.KindRevert)
	rev2.ActionDone = true
	if r := execute(t, g, rev2, h.run(rev2)); r.Outcome != topics.OutcomeOK || h.runs.Load() != 3 {
		t.Fatalf("compensation with ActionDone: reply %+v after %d runs, want it run", r, h.runs.Load())
	}
	if st := g.Stats(); st.MissingActionMarkers != 0 {
		t.Fatalf("stats %+v: the action's marker was there", st)
	}
}

// A compensation whose action never ran is empty; the action arriving
// afterwards is refused. Neither calls the handler.
func scenarioNullAndHanging(t *testing.T, b *backend, mode writeprotect.Mode) {
	scope := uniqueScope(t)
	g1, g2 := b.guard(t, mode), b.guard(t, mode)
	var h handler
	revert := command(scope, "tx-null", 4, topics.KindRevert)
	process := command(scope, "tx-null", 4, topics.KindProcess)

	r1 := execute(t, g1, revert, h.run(revert))
	if r1.Outcome != topics.OutcomeOK || str(r1.Payload) != "entity-v1" || r1.Hints["h"] != "1" || r1.Kind != topics.KindRevert {
		t.Fatalf("null compensation reply %+v", r1)
	}
	m, err := b.store.GetMarker(context.Background(), writeprotect.MarkerKeyFor(process))
	if err != nil || m.State != eventstore.MarkerCompensatedEmpty || !retained(m) {
		t.Fatalf("action marker %+v, %v; want COMPENSATED_EMPTY expiring after the retention", m, err)
	}
	r2 := execute(t, g2, revert, h.run(revert))
	if err := sameReply(r1, r2); err != nil {
		t.Fatalf("repeated compensation: %v", err)
	}
	for _, g := range []*writeprotect.Guard{g1, g2} {
		r := execute(t, g, process, h.run(process))
		if r.Outcome != topics.OutcomeNonRetryable || r.Error != writeprotect.ErrHanging.Error() ||
			str(r.Payload) != "entity-v1" || r.Kind != topics.KindProcess {
			t.Fatalf("hanging action reply %+v", r)
		}
	}
	if n := h.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times (%v), want 0", n, h.ran())
	}
	if st := sumStats(g1, g2); st.NullCompensations != 1 || st.HangingRefusals != 2 || st.DuplicatesSkipped != 1 || st.Executions != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The normal order: the action runs, then its compensation; duplicates of
// either are skipped.
func scenarioCompensation(t *testing.T, b *backend, mode writeprotect.Mode) {
	scope := uniqueScope(t)
	g := b.guard(t, mode)
	var h handler
	process := command(scope, "tx-comp", 1, topics.KindProcess)
	revert := command(scope, "tx-comp", 1, topics.KindRevert)
	execute(t, g, process, h.run(process))
	r1 := execute(t, g, revert, h.run(revert))
	r2 := execute(t, g, revert, h.run(revert))
	execute(t, g, process, h.run(process))
	if got := fmt.Sprint(h.ran()); got != "[tx-comp/1/process tx-comp/1/revert]" {
		t.Fatalf("runs %s", got)
	}
	if r1.Outcome != topics.OutcomeOK || str(r1.Payload) != "entity-v1|revert-run-2" {
		t.Fatalf("compensation reply %+v", r1)
	}
	if err := sameReply(r1, r2); err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); st.NullCompensations != 0 || st.HangingRefusals != 0 || st.DuplicatesSkipped != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// With WithTerminalFence, after the saga is terminal and its markers are
// deleted (the partition delete of an orchestrator with
// WithMarkerCleanup), late duplicates do not run (nor record a null
// compensation) and leave the partition empty.
func scenarioTerminalFence(t *testing.T, b *backend, mode writeprotect.Mode) {
	ctx := context.Background()
	scope := uniqueScope(t)
	g := b.guard(t, mode, writeprotect.WithTerminalFence())
	var h handler
	process := command(scope, "tx-fence", 1, topics.KindProcess)
	revert := command(scope, "tx-fence", 2, topics.KindRevert)
	execute(t, g, process, h.run(process))
	if err := b.store.CreateTransaction(ctx, eventstore.Transaction{
		Scope: scope, TxID: "tx-fence", Domain: testDomain, State: eventstore.StateCompleted, Version: 3,
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.store.DeleteMarkers(ctx, scope, "tx-fence"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []*topics.Envelope{process, revert, process} {
		rep, err := g.Execute(ctx, cmd, h.run(cmd))
		if err != nil || rep != nil {
			t.Fatalf("late %s: reply %+v, err %v; want nothing", cmd.Kind, rep, err)
		}
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	ms, err := b.store.ListMarkers(ctx, scope, "tx-fence")
	if err != nil || len(ms) != 0 {
		t.Fatalf("markers after the fence: %+v, %v; want none", ms, err)
	}
	if st := g.Stats(); st.TerminalFenced != 3 || st.NullCompensations != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The fence is what stops them: without it (the default, or turned
	// off again) the duplicate runs again once the markers are deleted.
	for i, open := range []*writeprotect.Guard{
		b.guard(t, mode),
		b.guard(t, mode, writeprotect.WithTerminalFence(), writeprotect.WithoutTerminalFence()),
	} {
		if err := b.store.DeleteMarkers(ctx, scope, "tx-fence"); err != nil {
			t.Fatal(err)
		}
		execute(t, open, process, h.run(process))
		if n := h.runs.Load(); n != int64(2+i) {
			t.Fatalf("guard %d without the fence: the handler ran %d times, want %d", i, n, 2+i)
		}
		if st := open.Stats(); st.TerminalFenced != 0 || st.Executions != 1 {
			t.Fatalf("guard %d without the fence: stats %+v", i, st)
		}
	}
	// A saga that is not terminal is not fenced.
	if err := b.store.Transition(ctx, eventstore.Transaction{
		Scope: scope, TxID: "tx-fence", Domain: testDomain, State: eventstore.StateCompensating, Version: 4,
	}, nil); err != nil {
		t.Fatal(err)
	}
	other := command(scope, "tx-fence", 5, topics.KindProcess)
	if rep := execute(t, g, other, h.run(other)); rep == nil || h.runs.Load() != 4 {
		t.Fatalf("live saga's step: reply %+v, runs %d", rep, h.runs.Load())
	}
}

// By default the orchestrator keeps a saga's markers when it ends and they
// expire after the retention: a late duplicate of any of its steps, on
// any instance, finds its step's marker, is skipped and re-sends the
// recorded reply, without a read of the saga's state (the terminal fence
// is off) and without taking a compensation with ActionDone for one whose
// action marker was lost. With the fence on, the markers kept mean that it
// is not even read.
func scenarioLateDuplicate(t *testing.T, b *backend, mode writeprotect.Mode) {
	ctx := context.Background()
	scope := uniqueScope(t)
	const tx = "tx-late"
	var h handler
	// The saga: span 1 runs, span 2 fails for good, span 1 is compensated.
	ran := b.guard(t, mode)
	proc1 := command(scope, tx, 1, topics.KindProcess)
	proc2 := command(scope, tx, 2, topics.KindProcess)
	rev1 := command(scope, tx, 1, topics.KindRevert)
	rev1.ActionDone = true
	first := map[*topics.Envelope]*topics.Envelope{}
	first[proc1] = execute(t, ran, proc1, h.run(proc1))
	failing := handler{outcome: topics.OutcomeNonRetryable}
	first[proc2] = execute(t, ran, proc2, failing.run(proc2))
	first[rev1] = execute(t, ran, rev1, h.run(rev1))
	if err := b.store.CreateTransaction(ctx, eventstore.Transaction{
		Scope: scope, TxID: tx, Domain: testDomain, State: eventstore.StateCompensated, Version: 5,
	}, nil); err != nil {
		t.Fatal(err)
	}
	late := b.guard(t, mode)
	fenced := b.guard(t, mode, writeprotect.WithTerminalFence())
	for _, g := range []*writeprotect.Guard{late, fenced} {
		for _, cmd := range []*topics.Envelope{proc1, proc2, rev1} {
			again := *cmd
			again.Attempt = 2 // a re-sent command: the reply is addressed to it
			if cmd == proc2 {
				// A later attempt of a failed step runs again (issue 47):
				// the late copy is of the failed attempt itself.
				again.Attempt = 1
			}
			rep, err := g.Execute(ctx, &again, h.run(&again))
			if err != nil || rep == nil {
				t.Fatalf("late %s/%d: reply %+v, err %v; want the recorded reply", cmd.Kind, cmd.Span, rep, err)
			}
			want := *first[cmd]
			want.Attempt = again.Attempt
			if err := sameReply(&want, rep); err != nil {
				t.Fatalf("late %s/%d: %v", cmd.Kind, cmd.Span, err)
			}
		}
	}
	if n, f := h.runs.Load(), failing.runs.Load(); n != 2 || f != 1 {
		t.Fatalf("handlers ran %d and %d times, want 2 and 1", n, f)
	}
	for _, g := range []*writeprotect.Guard{late, fenced} {
		if st := g.Stats(); st.DuplicatesSkipped != 3 || st.Executions != 0 || st.TerminalFenced != 0 ||
			st.MissingActionMarkers != 0 || st.NullCompensations != 0 {
			t.Fatalf("stats %+v", st)
		}
	}
	ms, err := b.store.ListMarkers(ctx, scope, tx)
	if err != nil || len(ms) != 3 {
		t.Fatalf("markers %+v, %v; want the three steps'", ms, err)
	}
	for _, m := range ms {
		if m.State != eventstore.MarkerCommitted || !retained(m) {
			t.Fatalf("marker %+v: want COMMITTED, expiring after the retention", m)
		}
	}
	if b.clock == nil {
		return // Cassandra: the retention is not waited for
	}
	// Markers do not stay forever: after the retention they are gone.
	b.clock.Add(writeprotect.DefaultMarkerRetention + time.Second)
	if ms, err := b.store.ListMarkers(ctx, scope, tx); err != nil || len(ms) != 0 {
		t.Fatalf("markers after the retention: %+v, %v; want none", ms, err)
	}
}

// A re-driven command (another attempt, another trace) of a committed step
// gets the recorded outcome addressed to it, so the orchestrator does not
// drop it as stale.
func scenarioRedrive(t *testing.T, b *backend, mode writeprotect.Mode) {
	scope := uniqueScope(t)
	g := b.guard(t, mode)
	var h handler
	cmd := command(scope, "tx-redrive", 1, topics.KindProcess)
	first := execute(t, g, cmd, h.run(cmd))
	again := *cmd
	again.Attempt = 3
	again.Trace = map[string]string{"traceparent": "00-abc-def-01"}
	rep := execute(t, g, &again, h.run(&again))
	if h.runs.Load() != 1 || rep.Attempt != 3 || rep.Trace["traceparent"] != "00-abc-def-01" ||
		str(rep.Payload) != str(first.Payload) || rep.Outcome != first.Outcome {
		t.Fatalf("runs %d, redrive reply %+v", h.runs.Load(), rep)
	}
}

// The action runs but its commit fails (the store refuses the write until
// the guard gives up): the guard replies ok all the same and no marker
// records the action. The orchestrator, holding that ok reply, compensates
// the span and says so (ActionDone): the compensation runs, guarded like
// any step; it is not taken for a null compensation (review finding: it
// was, and the action's effect was never undone). A compensation without
// ActionDone in the same situation is still a null compensation: only the
// orchestrator knows that the action ran.
func scenarioCommitFailure(t *testing.T, base *backend, mode writeprotect.Mode) {
	ctx := context.Background()
	fs := &faultStore{Store: base.store}
	b := *base
	b.store = fs
	scope := uniqueScope(t)
	g1, g2 := b.guard(t, mode), b.guard(t, mode)
	var h handler
	for span := 1; span <= 2; span++ {
		proc := command(scope, "tx-lost-commit", span, topics.KindProcess)
		fs.putErr.Store(injected())
		rep, err := g1.Execute(ctx, proc, h.run(proc))
		fs.putErr.Store(nil)
		if err != nil || rep.Outcome != topics.OutcomeOK {
			t.Fatalf("span %d action: reply %+v, err %v", span, rep, err)
		}
	}
	if st := g1.Stats(); st.CommitFailures != 2 || st.Executions != 2 {
		t.Fatalf("stats after the failed commits %+v", st)
	}
	// A STRICT lease left behind expires (on Cassandra the compensation
	// waits for it).
	b.expire()

	rev := command(scope, "tx-lost-commit", 1, topics.KindRevert)
	rev.ActionDone = true
	r1 := execute(t, g1, rev, h.run(rev))
	if r1.Outcome != topics.OutcomeOK || str(r1.Payload) != "entity-v1|revert-run-3" {
		t.Fatalf("compensation reply %+v", r1)
	}
	if st := g1.Stats(); st.NullCompensations != 0 || st.MissingActionMarkers != 1 || st.Executions != 3 {
		t.Fatalf("stats after the compensation %+v", st)
	}
	if _, err := b.store.GetMarker(ctx, writeprotect.MarkerKeyFor(command(scope, "tx-lost-commit", 1, topics.KindProcess))); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("action marker after the compensation: %v, want none (no COMPENSATED_EMPTY)", err)
	}
	m, err := b.store.GetMarker(ctx, writeprotect.MarkerKeyFor(rev))
	if err != nil || m.State != eventstore.MarkerCommitted {
		t.Fatalf("compensation marker %+v, %v; want COMMITTED", m, err)
	}
	// The compensation is guarded like any step: a duplicate, on another
	// instance, re-sends its recorded reply.
	r2 := execute(t, g2, rev, h.run(rev))
	if err := sameReply(r1, r2); err != nil {
		t.Fatalf("duplicate compensation: %v", err)
	}

	// Span 2, compensated without ActionDone: a null compensation.
	rev2 := command(scope, "tx-lost-commit", 2, topics.KindRevert)
	if r := execute(t, g1, rev2, h.run(rev2)); r.Outcome != topics.OutcomeOK || str(r.Payload) != "entity-v1" {
		t.Fatalf("compensation without ActionDone: %+v", r)
	}
	if got, want := fmt.Sprint(h.ran()), "[tx-lost-commit/1/process tx-lost-commit/2/process tx-lost-commit/1/revert]"; got != want {
		t.Fatalf("runs %s, want %s", got, want)
	}
	if st := sumStats(g1, g2); st.NullCompensations != 1 || st.DuplicatesSkipped != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// The same command reaches several instances at once, for many sagas: one
// run per saga, every instance replies the recorded reply.
func scenarioConcurrent(t *testing.T, b *backend, sc scale) {
	scope := uniqueScope(t)
	gs := make([]*writeprotect.Guard, sc.instances)
	for i := range gs {
		gs[i] = b.guard(t, writeprotect.Strict, writeprotect.WithOwner(fmt.Sprintf("instance-%d", i)))
	}
	for n := range sc.concurrentTxs {
		var h handler
		cmd := command(scope, fmt.Sprintf("tx-conc-%d", n), 1, topics.KindProcess)
		replies := make([]*topics.Envelope, len(gs))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, g := range gs {
			wg.Go(func() {
				<-start
				replies[i] = execute(t, g, cmd, h.run(cmd))
			})
		}
		close(start)
		wg.Wait()
		if h.runs.Load() != 1 || h.maxCur.Load() != 1 {
			t.Fatalf("%s: handler ran %d times (at most %d at once), want once", cmd.TxID, h.runs.Load(), h.maxCur.Load())
		}
		for i, r := range replies {
			if err := sameReply(replies[0], r); err != nil {
				t.Fatalf("%s instance %d: %v", cmd.TxID, i, err)
			}
		}
	}
	st := sumStats(gs...)
	if st.Executions != uint64(sc.concurrentTxs) || st.DuplicatesSkipped != uint64(sc.concurrentTxs*(sc.instances-1)) {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("stats %+v", st)
}

// The instance holding the lease crashes before committing (its run
// panics): the lease expires, then exactly one other instance runs the
// step, never while the first one runs.
func scenarioCrashPanic(t *testing.T, b *backend) {
	scope := uniqueScope(t)
	crashing := b.guard(t, writeprotect.Strict, writeprotect.WithOwner("crashing"))
	var h handler
	cmd := command(scope, "tx-crash", 1, topics.KindProcess)
	h.panicNext.Store(true)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the run's panic did not propagate")
			}
		}()
		_, _ = crashing.Execute(context.Background(), cmd, h.run(cmd))
	}()
	m, err := b.store.GetMarker(context.Background(), writeprotect.MarkerKeyFor(cmd))
	if err != nil || m.State != eventstore.MarkerLeased || m.TTL <= 0 {
		t.Fatalf("after the crash: marker %+v, %v; want a live lease", m, err)
	}
	survivors := []*writeprotect.Guard{b.guard(t, writeprotect.Strict, writeprotect.WithOwner("a")), b.guard(t, writeprotect.Strict, writeprotect.WithOwner("b"))}
	replies := make([]*topics.Envelope, len(survivors))
	var wg sync.WaitGroup
	for i, g := range survivors {
		wg.Go(func() { replies[i] = execute(t, g, cmd, h.run(cmd)) })
	}
	waitUntil(t, 30*time.Second, "the survivors to wait for the lease", func() bool {
		return sumStats(survivors...).LeaseWaits == uint64(len(survivors)) || h.runs.Load() > 1
	})
	b.expire()
	wg.Wait()
	if h.runs.Load() != 2 || h.maxCur.Load() != 1 {
		t.Fatalf("handler ran %d times (%d at once), want the crashed run and one more, never at once", h.runs.Load(), h.maxCur.Load())
	}
	if err := sameReply(replies[0], replies[1]); err != nil {
		t.Fatal(err)
	}
	if str(replies[0].Payload) != "entity-v1|process-run-2" {
		t.Fatalf("reply %+v", replies[0])
	}
	if st := sumStats(survivors...); st.Executions != 1 || st.LeaseWaits < 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A lease abandoned by a crashed instance (written directly) blocks every
// instance until it expires; then the step runs once.
func scenarioAbandonedLease(t *testing.T, b *backend, instances int) {
	ctx := context.Background()
	scope := uniqueScope(t)
	cmd := command(scope, "tx-abandoned", 1, topics.KindProcess)
	applied, _, err := b.store.InsertMarker(ctx, eventstore.Marker{
		MarkerKey: writeprotect.MarkerKeyFor(cmd), State: eventstore.MarkerLeased, Owner: "crashed/1",
	}, b.lease)
	if err != nil || !applied {
		t.Fatalf("abandoned lease: %v, %v", applied, err)
	}
	var h handler
	gs := make([]*writeprotect.Guard, instances)
	replies := make([]*topics.Envelope, instances)
	var wg sync.WaitGroup
	for i := range gs {
		gs[i] = b.guard(t, writeprotect.Strict, writeprotect.WithOwner(fmt.Sprintf("i%d", i)))
		wg.Go(func() { replies[i] = execute(t, gs[i], cmd, h.run(cmd)) })
	}
	waitUntil(t, 30*time.Second, "every instance to wait for the lease", func() bool {
		return sumStats(gs...).LeaseWaits == uint64(instances) || h.runs.Load() > 0
	})
	if h.runs.Load() != 0 && b.clock != nil {
		t.Fatal("ran before the lease expired")
	}
	b.expire()
	wg.Wait()
	if h.runs.Load() != 1 || h.maxCur.Load() != 1 {
		t.Fatalf("handler ran %d times (%d at once), want once", h.runs.Load(), h.maxCur.Load())
	}
	for i, r := range replies {
		if err := sameReply(replies[0], r); err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
	}
}

// A compensation and its action arrive at the same time on two instances
// (STRICT): exactly one wins the action's key. Either the action runs and
// then the compensation, or the compensation is empty and the action is
// refused; never an action left uncompensated nor a compensation before
// its action.
func scenarioRace(t *testing.T, b *backend, txs int) {
	scope := uniqueScope(t)
	ga := b.guard(t, writeprotect.Strict, writeprotect.WithOwner("actions"))
	gr := b.guard(t, writeprotect.Strict, writeprotect.WithOwner("compensations"))
	var ranBoth, empty int
	for n := range txs {
		var h handler
		tx := fmt.Sprintf("tx-race-%d", n)
		process := command(scope, tx, 1, topics.KindProcess)
		revert := command(scope, tx, 1, topics.KindRevert)
		var pr, rr *topics.Envelope
		var wg sync.WaitGroup
		start := make(chan struct{})
		// Staggered by 0, 5 or 10ms so that on a slow store either side
		// also gets to win.
		stagger := time.Duration(n%3) * 5 * time.Millisecond
		wg.Go(func() { <-start; time.Sleep(stagger); pr = execute(t, ga, process, h.run(process)) })
		wg.Go(func() { <-start; rr = execute(t, gr, revert, h.run(revert)) })
		close(start)
		wg.Wait()
		switch got := fmt.Sprint(h.ran()); got {
		case fmt.Sprintf("[%s/1/process %s/1/revert]", tx, tx):
			ranBoth++
			if pr.Outcome != topics.OutcomeOK || str(rr.Payload) != "entity-v1|revert-run-2" {
				t.Fatalf("%s: replies %+v / %+v", tx, pr, rr)
			}
		case "[]":
			empty++
			if pr.Error != writeprotect.ErrHanging.Error() || rr.Outcome != topics.OutcomeOK || str(rr.Payload) != "entity-v1" {
				t.Fatalf("%s: replies %+v / %+v", tx, pr, rr)
			}
		default:
			t.Fatalf("%s: runs %s", tx, got)
		}
	}
	st := sumStats(ga, gr)
	if st.NullCompensations != uint64(empty) || st.HangingRefusals != uint64(empty) {
		t.Fatalf("stats %+v with %d empty compensations", st, empty)
	}
	t.Logf("%d sagas: %d ran action then compensation, %d compensated empty and refused the action", txs, ranBoth, empty)
}

// A compensation that says its action ran (ActionDone) is not stopped by a
// COMPENSATED_EMPTY that an earlier compensation without ActionDone
// recorded: the action's ok reply shows that it ran before that record.
func TestActionDoneOverridesRecordedNullCompensation(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			b := memoryBackend(t)
			g := b.guard(t, mode)
			var h handler
			scope := uniqueScope(t)
			rev := command(scope, "tx-done-over-empty", 1, topics.KindRevert)
			if r := execute(t, g, rev, h.run(rev)); r.Outcome != topics.OutcomeOK || h.runs.Load() != 0 {
				t.Fatalf("null compensation %+v, runs %d", r, h.runs.Load())
			}
			done := *rev
			done.ActionDone = true
			r := execute(t, g, &done, h.run(&done))
			if r.Outcome != topics.OutcomeOK || str(r.Payload) != "entity-v1|revert-run-1" || h.runs.Load() != 1 {
				t.Fatalf("compensation with ActionDone %+v, runs %d", r, h.runs.Load())
			}
			// A late action is still refused: the record stays.
			proc := command(scope, "tx-done-over-empty", 1, topics.KindProcess)
			if r := execute(t, g, proc, h.run(proc)); r.Error != writeprotect.ErrHanging.Error() || h.runs.Load() != 1 {
				t.Fatalf("late action %+v, runs %d", r, h.runs.Load())
			}
			if st := g.Stats(); st.NullCompensations != 1 || st.MissingActionMarkers != 1 || st.HangingRefusals != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}
