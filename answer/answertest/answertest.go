// Package answertest runs every case of the answer gate (which recorded
// outcome answers an attempt) through a guard: each guard that consults
// answer.ForAttempt and answer.Compensates runs Run in its tests, so that
// a path that drifts from the gate fails the same table.
package answertest

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/topics"
)

// Path is one guard under test.
type Path interface {
	// Command returns the command of txID's span 0 in kind and attempt,
	// addressed as the guard needs.
	Command(txID string, kind topics.Kind, attempt int) *topics.Envelope
	// Execute hands cmd to the guard with a handler that replies outcome
	// (pausing the saga if pause) and returns whether the handler ran and
	// the guard's reply.
	Execute(t *testing.T, cmd *topics.Envelope, outcome topics.Outcome, pause bool) (ran bool, reply *topics.Envelope)
	// Corrupt makes the recorded reply of cmd's step unreadable, as a row
	// written by a newer build read after a downgrade.
	Corrupt(t *testing.T, cmd *topics.Envelope)
}

// Step is one command of a case, or (Corrupt) the corruption of the
// recorded reply of its step.
type Step struct {
	Kind       topics.Kind
	Attempt    int
	ActionDone bool
	Outcome    topics.Outcome
	Pause      bool
	Corrupt    bool
}

// Want is what the last step of a case gets.
type Want struct {
	Ran        bool
	Outcome    topics.Outcome
	ActionDone bool
}

// Case is a history of a step and the command that follows it.
type Case struct {
	Name  string
	Steps []Step
	Want  Want
}

var (
	ok    = topics.OutcomeOK
	retry = topics.OutcomeRetryable
	fail  = topics.OutcomeNonRetryable
	proc  = topics.KindProcess
	rev   = topics.KindRevert
)

// Cases are every case of the gate.
var Cases = []Case{
	{"duplicate of the same attempt", []Step{{Kind: proc, Attempt: 1, Outcome: ok}, {Kind: proc, Attempt: 1, Outcome: ok}}, Want{false, ok, false}},
	{"duplicate of a failed attempt", []Step{{Kind: proc, Attempt: 1, Outcome: fail}, {Kind: proc, Attempt: 1, Outcome: ok}}, Want{false, fail, false}},
	{"later attempt after a failure", []Step{{Kind: proc, Attempt: 1, Outcome: fail}, {Kind: proc, Attempt: 2, Outcome: ok}}, Want{true, ok, false}},
	{"later attempt after a retryable failure", []Step{{Kind: proc, Attempt: 1, Outcome: retry}, {Kind: proc, Attempt: 2, Outcome: ok}}, Want{true, ok, false}},
	{"later attempt after ok", []Step{{Kind: proc, Attempt: 1, Outcome: ok}, {Kind: proc, Attempt: 2, Outcome: ok}}, Want{false, ok, false}},
	{"paused reply superseded", []Step{{Kind: proc, Attempt: 1, Outcome: ok, Pause: true}, {Kind: proc, Attempt: 2, Outcome: ok}}, Want{true, ok, false}},
	{"unreadable recorded reply", []Step{{Kind: proc, Attempt: 1, Outcome: ok}, {Kind: proc, Attempt: 1, Corrupt: true}, {Kind: proc, Attempt: 1, Outcome: ok}}, Want{false, fail, true}},
	{"revert with effect in place", []Step{{Kind: proc, Attempt: 1, Outcome: ok}, {Kind: rev, Attempt: 1, Outcome: ok}}, Want{true, ok, false}},
	{"revert without process (null compensation)", []Step{{Kind: rev, Attempt: 1, Outcome: ok}}, Want{false, ok, false}},
	{"revert of a failed process (null compensation)", []Step{{Kind: proc, Attempt: 1, Outcome: fail}, {Kind: rev, Attempt: 1, Outcome: ok}}, Want{false, ok, false}},
	{"revert of a process whose reply is unreadable", []Step{{Kind: proc, Attempt: 1, Outcome: ok}, {Kind: proc, Attempt: 1, Corrupt: true}, {Kind: rev, Attempt: 1, Outcome: ok}}, Want{true, ok, false}},
	{"revert whose process's ok reply the orchestrator holds", []Step{{Kind: rev, Attempt: 1, ActionDone: true, Outcome: ok}}, Want{true, ok, false}},
	{"later attempt of a failed revert (restore)", []Step{{Kind: proc, Attempt: 1, Outcome: ok}, {Kind: rev, Attempt: 1, Outcome: fail}, {Kind: rev, Attempt: 2, Outcome: ok}}, Want{true, ok, false}},
	{"duplicate of a revert", []Step{{Kind: proc, Attempt: 1, Outcome: ok}, {Kind: rev, Attempt: 1, Outcome: ok}, {Kind: rev, Attempt: 1, Outcome: ok}}, Want{false, ok, false}},
}

// Run runs every case on a fresh transaction of the path newPath returns.
func Run(t *testing.T, newPath func(t *testing.T) Path) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			p := newPath(t)
			tx := "tx-answer"
			var ran bool
			var rep *topics.Envelope
			for _, s := range c.Steps {
				cmd := p.Command(tx, s.Kind, s.Attempt)
				cmd.ActionDone = s.ActionDone
				if s.Corrupt {
					p.Corrupt(t, cmd)
					continue
				}
				ran, rep = p.Execute(t, cmd, s.Outcome, s.Pause)
			}
			if rep == nil {
				t.Fatal("no reply")
			}
			if ran != c.Want.Ran || rep.Outcome != c.Want.Outcome || rep.ActionDone != c.Want.ActionDone {
				t.Fatalf("ran %v, reply %s (action done %v) %q; want ran %v, %s (action done %v)",
					ran, rep.Outcome, rep.ActionDone, rep.Error, c.Want.Ran, c.Want.Outcome, c.Want.ActionDone)
			}
		})
	}
}
