package writeprotect_test

import (
	"context"
	"testing"

	"github.com/stacksaga-go/stacksaga/answer/answertest"
	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Item 5 of issue 47, on the guard: after a restore, the re-driven
// compensation (attempt 2) of a compensation whose attempt 1 failed for
// good runs; its duplicates and a late copy of attempt 1 get its reply. A
// process re-driven after a failure runs again too, and the revert of a
// process whose marker's reply cannot be read runs (its effect is in
// place).
func scenarioLaterAttemptAfterFailure(t *testing.T, b *backend, mode writeprotect.Mode) {
	scope := uniqueScope(t)
	g, g2 := b.guard(t, mode), b.guard(t, mode)
	var h handler
	at := func(kind topics.Kind, n int) *topics.Envelope {
		cmd := command(scope, "tx-restore", 1, kind)
		cmd.Attempt = n
		return cmd
	}
	execute(t, g, at(topics.KindProcess, 1), h.run(at(topics.KindProcess, 1)))
	h.outcome = topics.OutcomeNonRetryable
	if rep := execute(t, g, at(topics.KindRevert, 1), h.run(at(topics.KindRevert, 1))); rep.Outcome != topics.OutcomeNonRetryable || h.runs.Load() != 2 {
		t.Fatalf("revert attempt 1: %+v after %d runs", rep, h.runs.Load())
	}
	if rep := execute(t, g2, at(topics.KindRevert, 1), h.run(at(topics.KindRevert, 1))); rep.Outcome != topics.OutcomeNonRetryable || h.runs.Load() != 2 {
		t.Fatalf("duplicate of revert attempt 1: %+v after %d runs", rep, h.runs.Load())
	}
	h.outcome = topics.OutcomeOK
	for i, gi := range []*writeprotect.Guard{g2, g, g2} {
		rep := execute(t, gi, at(topics.KindRevert, 2), h.run(at(topics.KindRevert, 2)))
		if rep.Outcome != topics.OutcomeOK || rep.Attempt != 2 || h.runs.Load() != 3 {
			t.Fatalf("revert attempt 2, delivery %d: %+v after %d runs; want ok, run once", i+1, rep, h.runs.Load())
		}
	}
	if rep := execute(t, g, at(topics.KindRevert, 1), h.run(at(topics.KindRevert, 1))); rep.Outcome != topics.OutcomeOK || rep.Attempt != 1 || h.runs.Load() != 3 {
		t.Fatalf("late copy of revert attempt 1: %+v after %d runs", rep, h.runs.Load())
	}

	// A process whose attempt 1 failed for good runs at attempt 2, once.
	p := func(n int) *topics.Envelope {
		cmd := command(scope, "tx-restore", 2, topics.KindProcess)
		cmd.Attempt = n
		return cmd
	}
	h.outcome = topics.OutcomeNonRetryable
	execute(t, g, p(1), h.run(p(1)))
	h.outcome = topics.OutcomeOK
	for i := range 2 {
		if rep := execute(t, g2, p(2), h.run(p(2))); rep.Outcome != topics.OutcomeOK || h.runs.Load() != 5 {
			t.Fatalf("process attempt 2 after a failure, delivery %d: %+v after %d runs", i+1, rep, h.runs.Load())
		}
	}

	// The revert of a process whose recorded reply is unreadable runs.
	pk := writeprotect.MarkerKeyFor(command(scope, "tx-restore", 3, topics.KindProcess))
	if err := b.store.PutMarker(context.Background(), eventstore.Marker{MarkerKey: pk, State: eventstore.MarkerCommitted, Owner: "newer-build", Reply: []byte{0xc1}}); err != nil {
		t.Fatal(err)
	}
	rev := command(scope, "tx-restore", 3, topics.KindRevert)
	if rep := execute(t, g, rev, h.run(rev)); rep.Outcome != topics.OutcomeOK || h.runs.Load() != 6 {
		t.Fatalf("revert of a process with an unreadable reply: %+v after %d runs; want it run", rep, h.runs.Load())
	}
}

// guardPath runs the answer gate's cases through a guard.
type guardPath struct {
	b     *backend
	g     *writeprotect.Guard
	scope eventstore.Scope
}

func (p guardPath) Command(txID string, kind topics.Kind, attempt int) *topics.Envelope {
	cmd := command(p.scope, txID, 0, kind)
	cmd.Attempt = attempt
	return cmd
}

func (p guardPath) Execute(t *testing.T, cmd *topics.Envelope, outcome topics.Outcome, pause bool) (bool, *topics.Envelope) {
	h := handler{outcome: outcome}
	run := h.run(cmd)
	rep := execute(t, p.g, cmd, func(ctx context.Context) *topics.Envelope {
		r := run(ctx)
		if pause {
			r.Pause = &topics.Pause{Event: "webhook", DeadlineMs: 1000}
		}
		return r
	})
	return h.runs.Load() > 0, rep
}

func (p guardPath) Corrupt(t *testing.T, cmd *topics.Envelope) {
	m := eventstore.Marker{MarkerKey: writeprotect.MarkerKeyFor(cmd), State: eventstore.MarkerCommitted, Owner: "newer-build", Reply: []byte{0xc1}}
	if err := p.b.store.PutMarker(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// runAnswerGate runs every case of the answer gate through a guard of
// each mode on the backend newBackend returns.
func runAnswerGate(t *testing.T, newBackend func(t *testing.T) *backend) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			answertest.Run(t, func(t *testing.T) answertest.Path {
				b := newBackend(t)
				return guardPath{b: b, g: b.guard(t, mode), scope: uniqueScope(t)}
			})
		})
	}
}

// Every case of the answer gate, through both modes, on the memory store.
func TestAnswerGateMemory(t *testing.T) {
	runAnswerGate(t, func(t *testing.T) *backend { return memoryBackend(t) })
}

// Every case of the answer gate, through both modes, on real Cassandra.
func TestAnswerGateCassandra(t *testing.T) {
	b, _ := cassandraBackend(t)
	runAnswerGate(t, func(*testing.T) *backend { return b })
}
