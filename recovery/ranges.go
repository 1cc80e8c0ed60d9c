package recovery

import (
	"math"
	"sync"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// RangeSource tells a retry node which part of the token ring it owns. A
// node scans only the tier-3 instances whose token lies in its range, and
// only while the range is valid: with no valid range it does not scan, and
// a range that expires mid-scan stops the scan (the unfinished buckets are
// kept for whoever owns the range next).
type RangeSource interface {
	// Range returns the node's range at now and until when it is valid;
	// ok is false when the node holds no range.
	Range(now time.Time) (r eventstore.TokenRange, validUntil time.Time, ok bool)
}

// forever is the validity of a static range.
var forever = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// StaticRange is a range that is always valid: eventstore.FullRing for a
// retry node configured alone.
type StaticRange eventstore.TokenRange

// Range returns the static range, valid forever.
func (s StaticRange) Range(time.Time) (eventstore.TokenRange, time.Time, bool) {
	return eventstore.TokenRange(s), forever, true
}

// RangeFunc adapts a function to RangeSource.
type RangeFunc func(now time.Time) (eventstore.TokenRange, time.Time, bool)

// Range calls f.
func (f RangeFunc) Range(now time.Time) (eventstore.TokenRange, time.Time, bool) { return f(now) }

// Lease is a RangeSource set from outside, e.g. by the ring coordinator
// connector each time it receives the node's range for the next minute.
// The zero Lease holds no range. It is safe for concurrent use.
type Lease struct {
	mu    sync.Mutex
	r     eventstore.TokenRange
	until time.Time
	ok    bool
}

// Set makes r the node's range until validUntil.
func (l *Lease) Set(r eventstore.TokenRange, validUntil time.Time) {
	l.mu.Lock()
	l.r, l.until, l.ok = r, validUntil, true
	l.mu.Unlock()
}

// Clear withdraws the range.
func (l *Lease) Clear() {
	l.mu.Lock()
	l.ok = false
	l.mu.Unlock()
}

// Range returns the range last set, if it is still valid at now.
func (l *Lease) Range(now time.Time) (eventstore.TokenRange, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r, l.until, l.ok && now.Before(l.until)
}

// IsNode0 reports whether a node owning r is Node-0: the owner of the
// lowest range, the one that starts at the lowest token of the ring. Node-0
// alone compacts tiers 2 and 1.
func IsNode0(r eventstore.TokenRange) bool { return r.Contains(math.MinInt64) }
