package writeprotect

import (
	"testing"
	"time"
)

// The lease arithmetic: MinLease is the shortest lease that leaves the
// handler minRunTime with the default skew, every accepted lease leaves at
// least that, and the handler's deadline never reaches past what the lease
// is certain to last.
func TestLeaseBudget(t *testing.T) {
	if got := minLeaseFor(DefaultClockSkew); got != MinLease {
		t.Fatalf("minLeaseFor(DefaultClockSkew) = %v, MinLease %v", got, MinLease)
	}
	for _, tc := range []struct{ lease, skew, exclusive, runFor time.Duration }{
		{2 * time.Second, DefaultClockSkew, 500 * time.Millisecond, 300 * time.Millisecond},
		{1500 * time.Millisecond, DefaultClockSkew, 500 * time.Millisecond, 300 * time.Millisecond}, // rounded up to 2s
		{5 * time.Second, DefaultClockSkew, 3500 * time.Millisecond, 3 * time.Second},
		{10 * time.Second, DefaultClockSkew, 8500 * time.Millisecond, 7500 * time.Millisecond},
		{time.Minute, DefaultClockSkew, 58500 * time.Millisecond, 57500 * time.Millisecond},
		{3 * time.Second, time.Second, time.Second, 700 * time.Millisecond},
	} {
		exclusive, runFor := leaseBudget(tc.lease, tc.skew)
		if exclusive != tc.exclusive || runFor != tc.runFor {
			t.Errorf("leaseBudget(%v, %v) = %v, %v; want %v, %v", tc.lease, tc.skew, exclusive, runFor, tc.exclusive, tc.runFor)
		}
	}
	for _, skew := range []time.Duration{0, DefaultClockSkew, time.Second, 2500 * time.Millisecond} {
		minLease := minLeaseFor(skew)
		if _, runFor := leaseBudget(minLease-time.Second, skew); runFor >= minRunTime {
			t.Errorf("skew %v: minimum %v, but %v leaves %v", skew, minLease, minLease-time.Second, runFor)
		}
		for l := minLease; l <= MaxLease; l += time.Second {
			exclusive, runFor := leaseBudget(l, skew)
			if runFor < minRunTime || exclusive > l-time.Second-skew || runFor >= exclusive {
				t.Fatalf("skew %v, lease %v: exclusive %v, deadline %v", skew, l, exclusive, runFor)
			}
		}
	}
}
