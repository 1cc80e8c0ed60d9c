package worker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/topics"
)

// Endpoint is one saga step a worker executes, over the domain entity type
// T, which is carried msgpack-encoded in the command's payload.
type Endpoint[T any] struct {
	// Name is what commands address (topics.Envelope.Endpoint).
	Name string
	// Process runs the step's forward action and returns the updated
	// entity. Its error is classified by IsRetryable.
	Process func(ctx context.Context, s *Step, in T) (T, error)
	// Revert runs the step's compensation and returns the updated entity.
	// It is optional: a revert command for an endpoint without it (a query
	// step) replies ok with the payload unchanged.
	Revert func(ctx context.Context, s *Step, in T) (T, error)
}

// Step describes the command a handler runs and holds the saga's revert
// hint store. A Step is not safe for concurrent use.
type Step struct {
	// TxID is the saga's transaction id.
	TxID string
	// Domain is the saga's domain.
	Domain string
	// Span is the index of the step in the saga.
	Span int
	// Kind is topics.KindProcess or topics.KindRevert.
	Kind topics.Kind
	// Endpoint is the name of the endpoint run.
	Endpoint string
	// Attempt counts re-drives of this span and kind, from 1.
	Attempt int
	// IdempotencyKey is stable across retries and redeliveries of this
	// span and kind: use it to make side effects idempotent.
	IdempotencyKey string
	// Trace holds the command's trace-context headers; do not modify it.
	Trace map[string]string

	hints  map[string]string
	resume ResumeContext
	pause  *topics.Pause
}

// ResumeContext is what the Resume that continued a paused saga was given
// (say, a payment webhook's fields); see Step.Resumed.
type ResumeContext map[string]string

// Get returns the value under key.
func (c ResumeContext) Get(key string) (string, bool) {
	v, ok := c[key]
	return v, ok
}

// String returns the value under key, or "" when there is none.
func (c ResumeContext) String(key string) string { return c[key] }

// Int returns the value under key as an int64.
func (c ResumeContext) Int(key string) (int64, error) {
	v, ok := c[key]
	if !ok {
		return 0, fmt.Errorf("worker: resume context has no %q", key)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("worker: resume context %q: %w", key, err)
	}
	return n, nil
}

// Bool returns the value under key as a bool (strconv.ParseBool).
func (c ResumeContext) Bool(key string) (bool, error) {
	v, ok := c[key]
	if !ok {
		return false, fmt.Errorf("worker: resume context has no %q", key)
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("worker: resume context %q: %w", key, err)
	}
	return b, nil
}

// Resumed returns the resume context when this step is the first one run
// after its saga was resumed (nil otherwise).
func (s *Step) Resumed() ResumeContext { return s.resume }

// Pause asks the orchestrator to pause the saga once this step has
// succeeded: going forward, before the next step; in compensation, before
// the next compensation. The saga waits, holding no resources, for
// Orchestrator.Resume with this step's IdempotencyKey as the correlation
// key (hand it to the system that will call back). With deadline > 0, if no
// resume came by then, this step is invoked again (next Attempt) against the
// entity as it was before it, to re-check, re-request or fail; 0 waits for
// ever. The handler must return a nil error for the pause to apply.
func (s *Step) Pause(event string, deadline time.Duration) {
	s.pause = &topics.Pause{Event: event, DeadlineMs: max(deadline, 0).Milliseconds()}
}

// Hint returns the value that an earlier compensation of this saga put
// under key (see PutHint).
func (s *Step) Hint(key string) (string, bool) {
	v, ok := s.hints[key]
	return v, ok
}

// PutHint stores value under key in the saga's revert hint store, which
// the reply carries. The orchestrator keeps the store only from the reply
// of a compensation (a Revert handler) with outcome ok, and sends it with
// the later commands, so values put by one compensation that succeeded are
// visible to the compensations after it. Values put by a forward step
// (Process), or by a compensation that failed, are not kept.
func (s *Step) PutHint(key, value string) {
	if s.hints == nil {
		s.hints = make(map[string]string)
	}
	s.hints[key] = value
}

// endpoint is an Endpoint with its type erased.
type endpoint interface {
	// run executes kind on payload and returns the updated payload.
	run(ctx context.Context, s *Step, kind topics.Kind, payload []byte) ([]byte, error)
}

type typed[T any] struct{ e Endpoint[T] }

func (t *typed[T]) run(ctx context.Context, s *Step, kind topics.Kind, payload []byte) ([]byte, error) {
	fn := t.e.Process
	if kind == topics.KindRevert {
		if t.e.Revert == nil {
			return payload, nil
		}
		fn = t.e.Revert
	}
	var in T
	if len(payload) > 0 {
		if err := msgpack.Unmarshal(payload, &in); err != nil {
			return nil, NonRetryable(fmt.Errorf("worker: decode %T payload of endpoint %q: %w", in, t.e.Name, err))
		}
	}
	out, err := fn(ctx, s, in)
	if err != nil {
		return nil, err
	}
	b, err := msgpack.Marshal(&out)
	if err != nil {
		return nil, NonRetryable(fmt.Errorf("worker: encode %T result of endpoint %q: %w", out, t.e.Name, err))
	}
	return b, nil
}

// Register adds e to w. It fails with ErrInvalidEndpoint if e has no Name
// or no Process, with ErrDuplicateEndpoint if the name is taken, and with
// ErrStarted once Run has been called (ErrClosed after Close).
func Register[T any](w *Worker, e Endpoint[T]) error {
	if e.Name == "" {
		return fmt.Errorf("%w: empty name", ErrInvalidEndpoint)
	}
	if e.Process == nil {
		return fmt.Errorf("%w: %q has no Process handler", ErrInvalidEndpoint, e.Name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.state {
	case stateNew:
	case stateClosed:
		return fmt.Errorf("%w: cannot register %q", ErrClosed, e.Name)
	default:
		return fmt.Errorf("%w: cannot register %q", ErrStarted, e.Name)
	}
	if _, dup := w.endpoints[e.Name]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateEndpoint, e.Name)
	}
	w.endpoints[e.Name] = &typed[T]{e: e}
	return nil
}
