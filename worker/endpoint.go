package worker

import (
	"context"
	"fmt"

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

	hints map[string]string
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
