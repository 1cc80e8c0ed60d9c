// Package answer is the one rule of which recorded outcome answers an
// attempt of a saga step. Every guard that records what a step replied
// consults it: the SQL barrier (sqlbarrier), the write-protection guard
// (writeprotect, STRICT and RELAXED markers) and the harness's duplicate
// replay and double-effect check (sagatest).
//
// The rule:
//   - a duplicate of attempt n (or a late copy of an earlier attempt) gets
//     the recorded reply, whatever it was;
//   - a later attempt of a step whose recorded outcome was a failure
//     (retryable or non-retryable) runs again: a failed attempt left no
//     effect (its local transaction rolled back), unless its reply says
//     that the step's effect is in place (topics.Envelope.ActionDone);
//   - a later attempt of a step whose recorded reply paused its saga runs
//     again (the step is invoked again after the pause's deadline);
//   - a later attempt of a step that succeeded gets the recorded ok reply:
//     running it again would be a double effect;
//   - a recorded reply that cannot be read answers as a failure saying the
//     step ran (Unreadable);
//   - a revert runs whenever its process's effect may be in place (the
//     process's recorded reply is ok, is unreadable, or the revert says the
//     orchestrator holds the process's ok reply); otherwise it is a null
//     compensation.
package answer

import "github.com/stacksaga-go/stacksaga/topics"

// Decision is what answers an attempt of a step that has a recorded
// outcome.
type Decision int

const (
	// Replay: answer with the recorded reply, without running the step.
	Replay Decision = iota
	// Run: the attempt supersedes the recorded outcome and runs the step.
	Run
	// Unreadable: the step ran but its recorded reply cannot be read;
	// answer with a failure that says so (for a process, with ActionDone:
	// its effect is in place).
	Unreadable
)

// String names the decision.
func (d Decision) String() string {
	switch d {
	case Replay:
		return "replay"
	case Run:
		return "run"
	case Unreadable:
		return "unreadable"
	}
	return "unknown"
}

// Recorded is the outcome a guard recorded for one step (a span and kind)
// of a saga.
type Recorded struct {
	// Attempt is the attempt whose outcome is recorded.
	Attempt int
	// Reply is the recorded reply; nil when it cannot be read.
	Reply *topics.Envelope
}

// ForAttempt decides how cmd, an attempt of a step whose outcome rec is
// recorded, is answered (see the package documentation).
func ForAttempt(cmd *topics.Envelope, rec Recorded) Decision {
	switch {
	case rec.Reply == nil:
		return Unreadable
	case cmd.Attempt <= rec.Attempt:
		return Replay
	case rec.Reply.Pause != nil:
		return Run
	case rec.Reply.Outcome == topics.OutcomeOK, effectInPlace(rec.Reply):
		return Replay
	}
	return Run
}

// Process is what a guard knows of the process (action) a revert
// compensates.
type Process struct {
	// Found: the process has a record.
	Found bool
	// Voided: the record says the process never ran (an earlier revert
	// recorded a null compensation in its place).
	Voided bool
	// Recorded is the process's recorded outcome when Found and not
	// Voided (Reply nil: unreadable).
	Recorded Recorded
}

// Compensates reports whether the revert cmd runs its handler given its
// process p: whenever the process's effect may be in place. Otherwise the
// revert is a null compensation (it replies ok without running).
func Compensates(cmd *topics.Envelope, p Process) bool {
	switch {
	case cmd.ActionDone:
		return true // the orchestrator holds the process's ok reply
	case !p.Found, p.Voided:
		return false
	case p.Recorded.Reply == nil:
		return true // it committed; what it replied is lost
	}
	r := p.Recorded.Reply
	return r.Outcome == topics.OutcomeOK || effectInPlace(r)
}

// effectInPlace reports whether the failure r of a process says that the
// step's effect is in place all the same.
func effectInPlace(r *topics.Envelope) bool {
	return r.Outcome == topics.OutcomeNonRetryable && r.ActionDone && r.Kind == topics.KindProcess
}
