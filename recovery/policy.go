package recovery

import (
	"math"
	"math/rand/v2"
	"time"
)

// Exhausted reports whether a step whose attempt number attempt (counted
// from 1) just failed retryably may not be retried: MaxAttempts is set and
// reached. A forward step that is exhausted fails non-retryably and
// compensates; a compensation that is exhausted ends COMPENSATION_FAILED.
func (p RetryPolicy) Exhausted(attempt int) bool {
	return p.MaxAttempts > 0 && attempt >= p.MaxAttempts
}

// Delay returns how many windows after the current one to register the
// retry of a step whose attempt number attempt (from 1) just failed:
// DelayWindows × BackoffMultiplier^(attempt−1), capped at MaxDelayWindows
// (but never below DelayWindows), plus a random jitter of up to Jitter of
// that, rounded stochastically so that small delays are spread too. The
// result is at least 1.
func (p RetryPolicy) Delay(attempt int) int {
	return p.delay(attempt, rand.Float64(), rand.Float64())
}

// delay is Delay with the two uniform [0,1) draws given.
func (p RetryPolicy) delay(attempt int, u1, u2 float64) int {
	base := float64(max(p.DelayWindows, 1))
	limit := math.Max(float64(min(max(p.MaxDelayWindows, 1), MaxDelayWindows)), base)
	mult := p.BackoffMultiplier
	if mult < 1 || math.IsNaN(mult) {
		mult = 1
	}
	d := base * math.Pow(mult, float64(max(attempt, 1)-1))
	if math.IsInf(d, 0) || math.IsNaN(d) || d > limit {
		d = limit
	}
	d = math.Floor(d)
	if p.Jitter > 0 {
		extra := d * math.Min(p.Jitter, 1) * u1
		whole := math.Floor(extra)
		if u2 < extra-whole {
			whole++
		}
		d += whole
	}
	return int(math.Max(d, 1))
}

// Backoff returns the in-process retry delay of a step whose attempt
// number attempt (from 1) just failed: InitialInterval ×
// BackoffMultiplier^(attempt−1), capped at MaxInterval (never below
// InitialInterval), plus a random jitter of up to Jitter of that. It is 0
// when InitialInterval is 0 (in-process retries off).
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	return p.backoff(attempt, rand.Float64())
}

// backoff is Backoff with the uniform [0,1) draw given.
func (p RetryPolicy) backoff(attempt int, u float64) time.Duration {
	if p.InitialInterval <= 0 {
		return 0
	}
	base := float64(p.InitialInterval)
	limit := math.Max(float64(min(p.MaxInterval, MaxRetryInterval)), base)
	mult := p.BackoffMultiplier
	if mult < 1 || math.IsNaN(mult) {
		mult = 1
	}
	d := base * math.Pow(mult, float64(max(attempt, 1)-1))
	if math.IsInf(d, 0) || math.IsNaN(d) || d > limit {
		d = limit
	}
	if p.Jitter > 0 {
		d += d * math.Min(p.Jitter, 1) * u
	}
	return time.Duration(d)
}

// FallbackWindows returns how many windows of length interval ahead to
// register the durable retry of a step whose attempt attempt just failed
// and that is retried in process after backoff (Backoff; 0: not in
// process): Delay(attempt), but at least one whole window after the
// in-process retry is due, so that the fallback fires only when the
// process that parked the saga died (or its re-drive failed) and does not
// race a healthy timer.
func (p RetryPolicy) FallbackWindows(attempt int, backoff, interval time.Duration) int {
	w := p.Delay(attempt)
	if backoff > 0 && interval > 0 {
		w = max(w, int(backoff/interval)+2)
	}
	return min(w, MaxDelayWindows)
}
