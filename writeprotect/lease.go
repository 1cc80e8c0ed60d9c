package writeprotect

import "time"

// Bounds of a lease (default-lease-duration and domains.<name>.lease-duration).
const (
	// MinLease is the shortest lease Config.Validate accepts: the
	// shortest whole-second lease that leaves a handler at least
	// minRunTime once a second is lost to Cassandra's whole-second TTL
	// arithmetic, DefaultClockSkew is set aside and the commit is
	// reserved its time (see the package documentation, "The handler's
	// deadline"). A guard with a larger WithClockSkew needs longer leases,
	// which New checks.
	MinLease = 2 * time.Second
	// MaxLease is the longest lease Config.Validate accepts. A step that
	// needs longer does not belong under a lease: a crashed execution's
	// lease holds its saga for that long.
	MaxLease = 5 * time.Minute
)

// minRunTime is the least time a lease must leave the handler.
const minRunTime = 250 * time.Millisecond

// truncationLoss is what Cassandra's TTL arithmetic may take off a lease:
// it computes a TTL's expiry from the insert's time truncated to whole
// seconds, so a lease written at x.99 lives 0.01s less than its TTL.
const truncationLoss = time.Second

// commitReserve is the part of a lease (whole seconds) kept for recording
// the step's outcome after the handler's deadline: a tenth of the lease,
// at most a second.
func commitReserve(lease time.Duration) time.Duration {
	return min(lease/10, time.Second)
}

// leaseBudget splits a STRICT lease, counted from before its conditional
// insert was sent, on the sender's monotonic clock. The lease (rounded up
// to whole seconds, as the store does) is certain to live for exclusive:
// its TTL less truncationLoss and skew. The handler's deadline is runFor:
// exclusive less the commit reserve.
func leaseBudget(lease, skew time.Duration) (exclusive, runFor time.Duration) {
	l := ceilSeconds(lease)
	exclusive = l - truncationLoss - skew
	return exclusive, exclusive - commitReserve(l)
}

// minLeaseFor returns the shortest whole-second lease that leaves the
// handler at least minRunTime with a clock-skew margin of skew.
func minLeaseFor(skew time.Duration) time.Duration {
	l := time.Second
	for {
		if _, runFor := leaseBudget(l, skew); runFor >= minRunTime {
			return l
		}
		l += time.Second
	}
}
