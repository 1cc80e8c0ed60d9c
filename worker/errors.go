package worker

import (
	"context"
	"errors"
)

// Sentinel errors.
var (
	// ErrStarted is returned by Register after Run has started and by a
	// second Run.
	ErrStarted = errors.New("worker: already started")
	// ErrClosed is returned by Run after Close.
	ErrClosed = errors.New("worker: closed")
	// ErrDuplicateEndpoint is returned by Register for a name already
	// registered.
	ErrDuplicateEndpoint = errors.New("worker: duplicate endpoint")
	// ErrInvalidEndpoint is returned by Register for an endpoint without a
	// name or a Process handler.
	ErrInvalidEndpoint = errors.New("worker: invalid endpoint")
)

// RetryableError marks a transient failure: the worker replies
// topics.OutcomeRetryable and the saga is re-driven later with the same
// idempotency key. Make one with Retryable.
type RetryableError struct{ Err error }

// Error returns the message of the wrapped error unchanged: it is what the
// reply carries.
func (e *RetryableError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *RetryableError) Unwrap() error { return e.Err }

func (*RetryableError) retryable() bool { return true }

// NonRetryableError marks a business failure: the worker replies
// topics.OutcomeNonRetryable; a failing forward step starts compensation and
// a failing compensation terminates the saga. Make one with NonRetryable.
type NonRetryableError struct{ Err error }

// Error returns the message of the wrapped error unchanged: it is what the
// reply carries.
func (e *NonRetryableError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *NonRetryableError) Unwrap() error { return e.Err }

func (*NonRetryableError) retryable() bool { return false }

type classified interface {
	error
	retryable() bool
}

// Retryable marks err as transient. It returns nil for a nil err.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &RetryableError{Err: err}
}

// NonRetryable marks err as a business failure. It returns nil for a nil
// err.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &NonRetryableError{Err: err}
}

// IsRetryable reports how the worker classifies a handler's error:
//
//   - the outermost RetryableError or NonRetryableError in err's chain
//     decides (so NonRetryable(Retryable(e)) is non-retryable);
//   - otherwise an error matching context.DeadlineExceeded is retryable (a
//     timeout is transient);
//   - any other error is non-retryable: an error the handler did not
//     classify is taken as a business failure, which compensates instead of
//     re-driving a step forever.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var c classified
	if errors.As(err, &c) {
		return c.retryable()
	}
	return errors.Is(err, context.DeadlineExceeded)
}
