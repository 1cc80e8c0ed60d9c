package orchestrator

import (
	"context"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Step names a command step: the worker service that owns the endpoint, and
// the endpoint. A query step has no compensation.
type Step struct {
	Service  string
	Endpoint string
	Query    bool
}

// querySuffix marks a query step in the qualified endpoint stored with a
// saga ("service/endpoint" or "service/endpoint#query").
const querySuffix = "#query"

func qualify(s Step) string {
	if s.Query {
		return s.Service + "/" + s.Endpoint + querySuffix
	}
	return s.Service + "/" + s.Endpoint
}

func isQuery(q string) bool { return strings.HasSuffix(q, querySuffix) }

func parseQualified(q string) (service, endpoint string) {
	service, endpoint, _ = strings.Cut(strings.TrimSuffix(q, querySuffix), "/")
	return service, endpoint
}

type decisionKind uint8

const (
	decideSend decisionKind = iota + 1
	decideComplete
	decideFail
	decidePause
)

// Decision is what OnNext and OnNextRevert return: send a command to a step,
// complete the saga (or its compensation), or fail.
type Decision struct {
	kind   decisionKind
	step   Step
	reason string
	// span pins the forward span a compensation undoes (Compensate).
	span    int
	hasSpan bool
	// deadline of a Pause.
	deadline time.Duration
}

// Send decides to send a command to endpoint of service.
func Send(service, endpoint string) Decision {
	return Decision{kind: decideSend, step: Step{Service: service, Endpoint: endpoint}}
}

// SendQuery decides to send a query command: it has no compensation.
func SendQuery(service, endpoint string) Decision {
	return Decision{kind: decideSend, step: Step{Service: service, Endpoint: endpoint, Query: true}}
}

// SendStep decides to send a command to s.
func SendStep(s Step) Decision { return Decision{kind: decideSend, step: s} }

// Complete decides that the saga is done (in OnNext: COMPLETED; in
// OnNextRevert: COMPENSATED).
func Complete() Decision { return Decision{kind: decideComplete} }

// Fail decides a non-retryable error. From OnNext it starts compensation;
// from OnNextRevert it terminates the saga (COMPENSATION_FAILED).
func Fail(reason string) Decision { return Decision{kind: decideFail, reason: reason} }

// Pause decides to pause the saga after the step that just succeeded (in
// OnNext: before the next forward step; in OnNextRevert: before the next
// compensation) until Orchestrator.Resume continues it, the correlation key
// being that step's idempotency key. event names what the saga waits for.
// With deadline > 0 the step is invoked again (next attempt, against the
// entity as it was before it) once the deadline passes with no resume; 0
// waits for ever. A deadline beyond the transaction lifetime fails the
// step. A worker's handler can pause too (worker.Step.Pause). After the
// resume, the decision function is asked again with Saga.Resume set.
func Pause(event string, deadline time.Duration) Decision {
	return Decision{kind: decidePause, reason: event, deadline: deadline}
}

// StepResult is the outcome of the step a decision follows.
type StepResult struct {
	Span     int
	Step     Step
	Kind     string
	Attempt  int
	Outcome  string
	Error    string
	Finished time.Time
}

// Saga is a saga as OnNext, OnNextRevert, Get and listeners see it.
type Saga[T any] struct {
	TxID   string
	Domain string
	// Version is the version of the domain's definition the saga was
	// started with, which drives it to its end (Domain.Versions; 1 for a
	// domain without versions and for sagas written before them).
	Version int
	State   eventstore.State
	Entity  T
	// Span is the current (or last) span; Step its endpoint; Kind is
	// "process" or "revert"; Attempt counts its re-drives from 1.
	Span    int
	Step    Step
	Kind    string
	Attempt int
	// Last is the result that led to this decision (nil at start).
	Last *StepResult
	// Completed lists the forward steps that succeeded, in order.
	Completed []CompletedStep
	Hints     map[string]string
	Error     string
	// PauseEvent and PausedUntil describe a PAUSED saga (PausedUntil is
	// zero without a deadline).
	PauseEvent  string
	PausedUntil time.Time
	// TraceID is the W3C trace id of the saga's trace (empty unless the
	// orchestrator traces, see WithTracerProvider, and sampled it).
	TraceID string
	// Resume is the context the saga was resumed with, when the decision
	// follows a resume (nil otherwise).
	Resume    map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// CompletedStep is a forward step that succeeded.
type CompletedStep struct {
	Span int
	Step Step
}

// Domain defines a saga domain: its name (one callback topic per domain)
// and its event manager.
type Domain[T any] struct {
	// Name identifies the domain; it names the callback topic.
	Name string
	// OnNext decides the next forward step. It sees Last == nil at start.
	// It must not change s.Entity (changes are not kept: the entity is the
	// workers' to change) and must be quick: it runs on the reply path.
	OnNext func(ctx context.Context, s *Saga[T]) Decision
	// OnNextRevert decides the next compensation step. Nil means the default:
	// compensate the completed non-query steps in reverse order.
	OnNextRevert func(ctx context.Context, s *Saga[T]) Decision
	// Versions, instead of OnNext and OnNextRevert, registers several
	// versions of the definition: new sagas start with the newest (or the
	// one WithStartVersion names), and each saga is driven by the version
	// it started with until it ends, re-drives, restores, pauses and
	// compensation included. OnNext and OnNextRevert alone are version 1,
	// as are sagas written before versions existed. Run refuses to start
	// while sagas in flight use a version left out (ErrVersionInFlight).
	// See docs/versions.md.
	Versions []Definition[T]
}

// Sequence returns an OnNext that runs steps in order and then completes.
func Sequence[T any](steps ...Step) func(ctx context.Context, s *Saga[T]) Decision {
	return func(_ context.Context, s *Saga[T]) Decision {
		if n := len(s.Completed); n < len(steps) {
			return SendStep(steps[n])
		}
		return Complete()
	}
}

// ReverseCompensation is the default OnNextRevert: it compensates the
// completed non-query steps in reverse order of completion, then completes.
// While compensating, s.Span is the span compensated last (or, at the start
// of compensation, the span that failed), so the next one to compensate is
// the latest completed non-query span below it.
func ReverseCompensation[T any](_ context.Context, s *Saga[T]) Decision {
	for i := len(s.Completed) - 1; i >= 0; i-- {
		c := s.Completed[i]
		if c.Span < s.Span && !c.Step.Query {
			return Compensate(c)
		}
	}
	return Complete()
}

// Compensate decides, in OnNextRevert, to run the compensation of c.
func Compensate(c CompletedStep) Decision {
	return Decision{kind: decideSend, step: c.Step, span: c.Span, hasSpan: true}
}
