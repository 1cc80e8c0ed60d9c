package orchestrator

import "time"

// CachedSagas is how many sagas o's state cache holds.
func CachedSagas[T any](o *Orchestrator[T]) int { return o.cache.len() }

// WithRetryArmedHook has f told of every in-process retry armed (the
// saga and its delay).
func WithRetryArmedHook(f func(txID string, d time.Duration)) Option {
	return optFunc(func(c *config) { c.retryArmed = f })
}

// WithStepArmedHook has f told of every step timer armed (the saga, its
// span, the delay, and whether it is armed for the saga's deadline).
func WithStepArmedHook(f func(txID string, span int, d time.Duration, deadline bool)) Option {
	return optFunc(func(c *config) { c.stepArmed = f })
}

// WithWaitPolls sets the first and the longest interval between Wait's
// reads of a saga.
func WithWaitPolls(first, most time.Duration) Option {
	return optFunc(func(c *config) { c.waitPoll = [2]time.Duration{first, most} })
}

// FileApplied returns, for tests, what WithConfig set: the seed brokers,
// the session timeout, the region code and the recovery window.
func FileApplied[T any](o *Orchestrator[T]) (brokers []string, session time.Duration, regionCode uint16, window time.Duration) {
	code, _ := o.cfg.regions.RegionCode(o.cfg.region)
	return o.cfg.brokers, o.cfg.membership.SessionTimeout, code, o.cfg.recovery.Interval
}
