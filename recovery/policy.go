package recovery

import (
	"math"
	"math/rand/v2"
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
