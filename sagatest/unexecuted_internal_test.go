package sagatest

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
)

// A step whose deciding reply answered attempt 2 without its handler
// running is excused only when attempt 1's handler returned that reply
// (a step timeout re-sent the step while the first run's reply was late,
// and the guard answered with the reply it recorded); a first run that
// failed retryably excuses nothing.
func TestUnexecutedExcusesOnlyARecordedEarlierResult(t *testing.T) {
	x := Execution{TxID: "tx", Span: 0, Kind: topics.KindProcess}
	tries := []eventstore.Tryout{
		{TxID: "tx", Index: 1, Span: 0, Kind: string(topics.KindProcess), Attempt: 1, Outcome: string(topics.OutcomeRetryable)},
		{TxID: "tx", Index: 2, Span: 0, Kind: string(topics.KindProcess), Attempt: 2, Outcome: string(topics.OutcomeOK)},
	}
	counts := map[attemptKey]int{{x, 1}: 1}
	total := map[Execution]int{x: 1}
	delivs := map[attemptKey]int{{x, 1}: 1, {x, 2}: 1}
	for _, c := range []struct {
		name  string
		first topics.Outcome
		want  int
	}{
		{"first run ok, its reply late", topics.OutcomeOK, 0},
		{"first run failed retryably", topics.OutcomeRetryable, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			results := map[attemptKey]topics.Outcome{{x, 1}: c.first}
			if got := unexecuted("tx", tries, counts, total, delivs, results); len(got) != c.want {
				t.Fatalf("unexecuted = %q, want %d finding(s)", got, c.want)
			}
		})
	}
}
