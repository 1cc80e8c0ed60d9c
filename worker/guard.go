package worker

import (
	"context"

	"github.com/stacksaga-go/stacksaga/topics"
)

// Guard wraps the execution of every command, for duplicate-delivery
// protection (package writeprotect implements it).
//
// Execute is called with the decoded command and run, which executes the
// command's handler (a panic in the handler is already turned into a
// non-retryable reply) and returns the reply. Execute calls run at most once
// and returns the reply to send: run's, or one it recorded earlier for the
// same idempotency key. A nil reply with a nil error sends nothing. An error
// means "not now" (a lease held elsewhere, the store unreachable): the
// worker sends nothing, does not commit the command and calls Execute again
// for it after a backoff.
type Guard interface {
	Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error)
}

// overlappingGuard is a Guard that can record a run's outcome while the
// worker sends its reply (writeprotect.Guard is one): ExecuteOverlapped is
// Execute returning as soon as the step ran, with wait, which returns once
// the outcome's write is done. The worker calls wait after sending the
// reply and before the command is committed, so a step's critical path has
// the record's write and the reply's produce side by side, not one after
// the other. A worker in a share group calls Execute (see guarded).
type overlappingGuard interface {
	ExecuteOverlapped(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (reply *topics.Envelope, wait func(), err error)
}

// passThrough is the default Guard: it runs every command.
type passThrough struct{}

func (passThrough) Execute(ctx context.Context, _ *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	return run(ctx), nil
}
