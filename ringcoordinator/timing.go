package ringcoordinator

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/wait"
)

// cycleStart returns the start of the cycle ("minute") containing t.
// Cycles are aligned on the Unix epoch in whole milliseconds.
func cycleStart(t time.Time, cycle time.Duration) time.Time {
	c := cycle.Milliseconds()
	m := t.UnixMilli()
	q := m / c
	if m%c < 0 {
		q--
	}
	return time.UnixMilli(q * c).UTC()
}

// nextPublish returns the first publish instant strictly after now and the
// start of the minute it publishes (the minute after the instant's).
func nextPublish(now time.Time, cycle, offset time.Duration) (at, minute time.Time) {
	at = cycleStart(now, cycle).Add(offset)
	if !at.After(now) {
		at = at.Add(cycle)
	}
	return at, cycleStart(at, cycle).Add(cycle)
}

// sleepUntil waits until now() reaches t or ctx ends; it reports whether t
// was reached.
func sleepUntil(ctx context.Context, now func() time.Time, t time.Time) bool {
	for {
		d := t.Sub(now())
		if d <= 0 {
			return ctx.Err() == nil
		}
		if !wait.Sleep(ctx, d) {
			return false
		}
	}
}

// backoff is an exponential backoff with jitter between min and max.
type backoff struct {
	min, max, cur time.Duration
}

// next returns the next pause: min, 2*min, ... up to max, each with up to
// half of it taken off at random.
func (b *backoff) next() time.Duration {
	switch {
	case b.cur == 0:
		b.cur = b.min
	case b.cur < b.max:
		b.cur = min(b.cur*2, b.max)
	}
	half := b.cur / 2
	if half <= 0 {
		return b.cur
	}
	return b.cur - time.Duration(rand.Int64N(int64(half)))
}

// reset starts over from min.
func (b *backoff) reset() { b.cur = 0 }
