package answer_test

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/answer"
	"github.com/stacksaga-go/stacksaga/topics"
)

func reply(kind topics.Kind, attempt int, outcome topics.Outcome) *topics.Envelope {
	return &topics.Envelope{Kind: kind, Attempt: attempt, Outcome: outcome}
}

func rec1(attempt int, r *topics.Envelope) answer.Recorded {
	return answer.Recorded{Attempt: attempt, Reply: r}
}

// Every case of ForAttempt.
func TestForAttempt(t *testing.T) {
	paused := reply(topics.KindProcess, 1, topics.OutcomeOK)
	paused.Pause = &topics.Pause{Event: "webhook", DeadlineMs: 1000}
	inPlace := reply(topics.KindProcess, 1, topics.OutcomeNonRetryable)
	inPlace.ActionDone = true
	for _, c := range []struct {
		name    string
		kind    topics.Kind
		attempt int
		rec     answer.Recorded
		want    answer.Decision
	}{
		{"duplicate of the same attempt (ok)", topics.KindProcess, 1, rec1(1, reply(topics.KindProcess, 1, topics.OutcomeOK)), answer.Replay},
		{"duplicate of the same attempt (failure)", topics.KindProcess, 1, rec1(1, reply(topics.KindProcess, 1, topics.OutcomeNonRetryable)), answer.Replay},
		{"duplicate of the same attempt (paused)", topics.KindProcess, 1, rec1(1, paused), answer.Replay},
		{"late copy of an earlier attempt", topics.KindProcess, 1, rec1(2, reply(topics.KindProcess, 2, topics.OutcomeNonRetryable)), answer.Replay},
		{"later attempt after a failure", topics.KindProcess, 2, rec1(1, reply(topics.KindProcess, 1, topics.OutcomeNonRetryable)), answer.Run},
		{"later attempt after a retryable failure", topics.KindProcess, 2, rec1(1, reply(topics.KindProcess, 1, topics.OutcomeRetryable)), answer.Run},
		{"later attempt of a revert after a failure (restore)", topics.KindRevert, 2, rec1(1, reply(topics.KindRevert, 1, topics.OutcomeNonRetryable)), answer.Run},
		{"later attempt after a failure with the effect in place", topics.KindProcess, 2, rec1(1, inPlace), answer.Replay},
		{"later attempt after ok", topics.KindProcess, 2, rec1(1, reply(topics.KindProcess, 1, topics.OutcomeOK)), answer.Replay},
		{"paused reply superseded", topics.KindProcess, 2, rec1(1, paused), answer.Run},
		{"unreadable recorded reply", topics.KindProcess, 1, answer.Recorded{Attempt: 1}, answer.Unreadable},
		{"unreadable recorded reply, later attempt", topics.KindProcess, 2, answer.Recorded{Attempt: 1}, answer.Unreadable},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := &topics.Envelope{Kind: c.kind, Attempt: c.attempt}
			if got := answer.ForAttempt(cmd, c.rec); got != c.want {
				t.Fatalf("ForAttempt = %s, want %s", got, c.want)
			}
		})
	}
}

// Every case of Compensates.
func TestCompensates(t *testing.T) {
	inPlace := reply(topics.KindProcess, 1, topics.OutcomeNonRetryable)
	inPlace.ActionDone = true
	paused := reply(topics.KindProcess, 1, topics.OutcomeOK)
	paused.Pause = &topics.Pause{Event: "webhook"}
	rec := func(r *topics.Envelope) answer.Process {
		return answer.Process{Found: true, Recorded: answer.Recorded{Attempt: 1, Reply: r}}
	}
	for _, c := range []struct {
		name       string
		actionDone bool
		p          answer.Process
		want       bool
	}{
		{"revert with effect in place", false, rec(reply(topics.KindProcess, 1, topics.OutcomeOK)), true},
		{"revert of a paused process", false, rec(paused), true},
		{"revert without process (null compensation)", false, answer.Process{}, false},
		{"revert without process whose ok reply the orchestrator holds", true, answer.Process{}, true},
		{"revert of a voided process", false, answer.Process{Found: true, Voided: true}, false},
		{"revert of a voided process whose ok reply the orchestrator holds", true, answer.Process{Found: true, Voided: true}, true},
		{"revert of a failed process", false, rec(reply(topics.KindProcess, 1, topics.OutcomeNonRetryable)), false},
		{"revert of a retryably failed process", false, rec(reply(topics.KindProcess, 1, topics.OutcomeRetryable)), false},
		{"revert of a failed process whose ok reply the orchestrator holds", true, rec(reply(topics.KindProcess, 1, topics.OutcomeRetryable)), true},
		{"revert of a failed process with its effect in place", false, rec(inPlace), true},
		{"unreadable recorded reply of the process", false, answer.Process{Found: true, Recorded: answer.Recorded{Attempt: 1}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := &topics.Envelope{Kind: topics.KindRevert, Attempt: 1, ActionDone: c.actionDone}
			if got := answer.Compensates(cmd, c.p); got != c.want {
				t.Fatalf("Compensates = %v, want %v", got, c.want)
			}
		})
	}
}
