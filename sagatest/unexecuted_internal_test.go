package sagatest

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/answer"
	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
)

// answered is the result of attempt 1 of x answered with outcome (paused:
// the reply paused the saga).
func answered(x Execution, outcome topics.Outcome, paused bool) map[attemptKey]answer.Recorded {
	r := &topics.Envelope{Kind: x.Kind, Attempt: 1, Outcome: outcome}
	if paused {
		r.Pause = &topics.Pause{Event: "webhook", DeadlineMs: 1000}
	}
	return map[attemptKey]answer.Recorded{{x, 1}: {Attempt: 1, Reply: r}}
}

// A step whose deciding reply answered attempt 2 without its handler
// running is excused only when attempt 1's handler returned that reply
// and a guard may answer attempt 2 with it (a step timeout re-sent the
// step while the first run's reply was late); a first run that failed, or
// paused its saga, excuses nothing: attempt 2 must run.
func TestUnexecutedExcusesOnlyARecordedEarlierResult(t *testing.T) {
	x := Execution{TxID: "tx", Span: 0, Kind: topics.KindProcess}
	counts := map[attemptKey]int{{x, 1}: 1}
	total := map[Execution]int{x: 1}
	delivs := map[attemptKey]int{{x, 1}: 1, {x, 2}: 1}
	for _, c := range []struct {
		name    string
		first   topics.Outcome
		paused  bool
		decided topics.Outcome // attempt 2's reply, recorded in the tryouts
		want    int
	}{
		{"first run ok, its reply late", topics.OutcomeOK, false, topics.OutcomeOK, 0},
		{"first run failed retryably", topics.OutcomeRetryable, false, topics.OutcomeOK, 1},
		{"first run failed for good (a restored saga)", topics.OutcomeNonRetryable, false, topics.OutcomeNonRetryable, 1},
		{"first run paused, past its deadline", topics.OutcomeOK, true, topics.OutcomeOK, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tries := []eventstore.Tryout{
				{TxID: "tx", Index: 1, Span: 0, Kind: string(topics.KindProcess), Attempt: 1, Outcome: string(topics.OutcomeRetryable)},
				{TxID: "tx", Index: 2, Span: 0, Kind: string(topics.KindProcess), Attempt: 2, Outcome: string(c.decided)},
			}
			if got := unexecuted("tx", tries, counts, total, delivs, runs{results: answered(x, c.first, c.paused)}); len(got) != c.want {
				t.Fatalf("unexecuted = %q, want %d finding(s)", got, c.want)
			}
		})
	}
}

// Item 8 of issue 47: a run of attempt 2 after attempt 1's run was
// answered ok is a double effect; after a failure, or after a pause (the
// step is invoked again past the pause's deadline, as the framework
// documents), it is not.
func TestDoubleEffectAcrossAttempts(t *testing.T) {
	x := Execution{TxID: "tx", Span: 1, Kind: topics.KindProcess}
	for _, c := range []struct {
		name   string
		first  topics.Outcome
		paused bool
		double bool
	}{
		{"after ok", topics.OutcomeOK, false, true},
		{"after a pause, past its deadline", topics.OutcomeOK, true, false},
		{"after a retryable failure", topics.OutcomeRetryable, false, false},
		{"after a non-retryable failure", topics.OutcomeNonRetryable, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := &Env{execs: map[attemptKey]int{}, total: map[Execution]int{}, results: answered(x, c.first, c.paused)}
			e.count(attemptKey{x, 2})
			if got := len(e.doubles) == 1; got != c.double {
				t.Fatalf("doubles = %q, want a double effect: %v", e.doubles, c.double)
			}
			e.count(attemptKey{x, 1}) // a second run of attempt 1 is a duplicate, counted apart
			if len(e.doubles) > 1 {
				t.Fatalf("doubles = %q after a run of attempt 1", e.doubles)
			}
		})
	}
}

// A compensation that replied ok without running is excused (a null
// compensation) only where the answer gate (answer.Compensates) lets a
// guard answer it so: its action never ran, or ran and failed, and the
// revert does not say that the orchestrator holds the action's ok reply.
func TestUnexecutedRevertFollowsTheGate(t *testing.T) {
	action := Execution{TxID: "tx", Span: 0, Kind: topics.KindProcess}
	rev := Execution{TxID: "tx", Span: 0, Kind: topics.KindRevert}
	tries := []eventstore.Tryout{{TxID: "tx", Index: 3, Span: 0, Kind: string(topics.KindRevert), Attempt: 1, Outcome: string(topics.OutcomeOK)}}
	delivs := map[attemptKey]int{{rev, 1}: 1}
	for _, c := range []struct {
		name       string
		ran        bool
		answer     topics.Outcome // "": the action's run got no answer (a crash)
		actionDone bool
		want       int
	}{
		{"action never ran", false, "", false, 0},
		{"action ran ok", true, topics.OutcomeOK, false, 1},
		{"action ran and failed", true, topics.OutcomeNonRetryable, false, 0},
		{"action ran and failed, the revert says it holds its ok reply", true, topics.OutcomeNonRetryable, true, 1},
		{"action ran without an answer", true, "", false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			total := map[Execution]int{}
			r := runs{results: map[attemptKey]answer.Recorded{}, actionDone: map[attemptKey]bool{{rev, 1}: c.actionDone}}
			if c.ran {
				total[action] = 1
			}
			if c.answer != "" {
				r.results = answered(action, c.answer, false)
			}
			if got := unexecuted("tx", tries, map[attemptKey]int{}, total, delivs, r); len(got) != c.want {
				t.Fatalf("unexecuted = %q, want %d finding(s)", got, c.want)
			}
		})
	}
}
