package orchestrator

import "time"

// CachedSagas is how many sagas o's state cache holds.
func CachedSagas[T any](o *Orchestrator[T]) int { return o.cache.len() }

// WithRetryArmedHook has f told of every in-process retry armed (the
// saga and its delay).
func WithRetryArmedHook(f func(txID string, d time.Duration)) Option {
	return optFunc(func(c *config) { c.retryArmed = f })
}

// WithWaitPolls sets the first and the longest interval between Wait's
// reads of a saga.
func WithWaitPolls(first, most time.Duration) Option {
	return optFunc(func(c *config) { c.waitPoll = [2]time.Duration{first, most} })
}
