package kafkaloop

import "errors"

// PermanentError marks a handler error that retrying cannot fix: the loop
// stops retrying the record and hands it to Options.DeadLetter. Build it
// with Permanent; test for it with IsPermanent or errors.As.
type PermanentError struct {
	// Err is the cause.
	Err error
}

// Error returns the cause's message.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, so errors.Is and errors.As see through it.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a *PermanentError; Permanent(nil) is nil. A
// handler returns it for a record that can never succeed (its key cannot
// be stored, its content is refused), so that the loop dead-letters the
// record instead of retrying it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err, or an error it wraps, is a
// *PermanentError.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe)
}
