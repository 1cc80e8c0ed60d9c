package recovery

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
)

// Issue 35.10: a re-drive must not outlive the node's token range, or it
// runs alongside the next holder's.

// blocker is a Redriver whose chosen calls (numbered from 1 in the order
// they arrive) block until their context ends, recording how it ended; the
// others go to its sagas (whose hook numbers only those).
type blocker struct {
	*sagas
	block   func(n int) bool
	started chan struct{} // one send per blocked call

	mu     sync.Mutex
	n      int
	ended  []error         // ctx.Err() of each blocked call once it ended
	limits []time.Duration // how far its deadline was when it began (-1: none)
}

func newBlocker(s *sagas, block func(n int) bool) *blocker {
	return &blocker{sagas: s, block: block, started: make(chan struct{}, 16)}
}

func (b *blocker) Redrive(ctx context.Context, e eventstore.RecoveryEntry) error {
	b.mu.Lock()
	b.n++
	n := b.n
	b.mu.Unlock()
	if !b.block(n) {
		return b.sagas.Redrive(ctx, e)
	}
	limit := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		limit = time.Until(d)
	}
	b.started <- struct{}{}
	// Bounded, so that an engine that never ends the context fails the
	// test instead of hanging it.
	select {
	case <-ctx.Done():
	case <-time.After(20 * time.Second):
	}
	b.mu.Lock()
	b.ended = append(b.ended, ctx.Err())
	b.limits = append(b.limits, limit)
	b.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("blocker: the context did not end")
}

func (b *blocker) results() ([]error, []time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]error(nil), b.ended...), append([]time.Duration(nil), b.limits...)
}

// A re-drive that blocks sees its context end when the range expires: its
// deadline is the range's validity left when it was dispatched.
func testRedriveBoundedByRange(t *testing.T, e *env) {
	w := e.writer()
	e.retry(w, "slow", 1)
	e.windows(2)
	const validity = 300 * time.Millisecond
	var lease Lease
	lease.Set(eventstore.FullRing, e.clock.Now().Add(validity))
	s := newSagas("slow")
	b := newBlocker(s, func(int) bool { return true })
	start := time.Now()
	res, err := e.engine(b, WithRanges(&lease), WithRedriveMargin(100*time.Millisecond)).Scan(t.Context())
	took := time.Since(start)
	ended, limits := b.results()
	if len(ended) != 1 {
		t.Fatalf("%d blocked re-drives ended, want 1 (scan %+v, %v)", len(ended), res, err)
	}
	if !errors.Is(ended[0], context.DeadlineExceeded) {
		t.Fatalf("the blocked re-drive's context ended with %v after %v, want its deadline at the range's expiry (%v)", ended[0], took, validity)
	}
	if limits[0] < 0 || limits[0] > validity {
		t.Fatalf("the re-drive's deadline was %v away, want at most the range's %v", limits[0], validity)
	}
	if res.Dispatched != 1 || res.Failed != 1 || res.BucketsKept != 1 || res.BucketsDropped != 0 {
		t.Fatalf("scan %+v", res)
	}
	if got := len(only(e.dumpAround(), "t5")); got != 1 {
		t.Fatalf("%d rows left, want the unfinished one", got)
	}
}

// A range that expires (on the engine's clock) while a re-drive blocks
// ends that re-drive's context as soon as the scan sees it, and no further
// dispatch starts.
func testRedriveCancelledWhenRangeExpires(t *testing.T, e *env) {
	e.cfg.Concurrency = 2
	w := e.writer()
	list := ids("x", 5)
	for _, id := range list {
		e.retry(w, id, 1)
	}
	e.windows(2)
	var lease Lease
	lease.Set(eventstore.FullRing, e.clock.Now().Add(time.Minute))
	s := newSagas(list...)
	b := newBlocker(s, func(n int) bool { return n == 1 })
	s.hook = func(n int, _ eventstore.RecoveryEntry) {
		if n == 1 { // the re-drive beside the blocked one
			<-b.started                  // the first re-drive is blocked
			e.clock.Advance(time.Minute) // the range runs out
		}
	}
	res := e.scan(e.engine(b, WithRanges(&lease)))
	ended, _ := b.results()
	if len(ended) != 1 || !errors.Is(ended[0], context.Canceled) {
		t.Fatalf("the blocked re-drive ended with %v, want its context cancelled at the range's expiry", ended)
	}
	if !res.Stopped || res.Dispatched != 2 || res.BucketsKept != 1 {
		t.Fatalf("scan %+v", res)
	}
}

// No re-drive starts with less than the margin of the range left: not at
// the start of a scan, nor mid-bucket.
func testRedriveMargin(t *testing.T, e *env) {
	e.cfg.Concurrency = 1
	w := e.writer()
	list := ids("m", 5)
	for _, id := range list {
		e.retry(w, id, 1)
	}
	e.windows(2)
	var lease Lease
	s := newSagas(list...)
	lease.Set(eventstore.FullRing, e.clock.Now().Add(400*time.Millisecond))
	res := e.scan(e.engine(s, WithRanges(&lease), WithRedriveMargin(time.Second)))
	if res.Dispatched != 0 {
		t.Fatalf("dispatched %d with 400ms of the range left and a 1s margin: %+v", res.Dispatched, res)
	}
	// Mid-bucket: after the second re-drive only 900ms are left.
	lease.Set(eventstore.FullRing, e.clock.Now().Add(time.Minute))
	s.hook = func(n int, _ eventstore.RecoveryEntry) {
		if n == 2 {
			e.clock.Advance(time.Minute - 900*time.Millisecond)
		}
	}
	res = e.scan(e.engine(s, WithRanges(&lease), WithRedriveMargin(time.Second)))
	if !res.Stopped || res.Dispatched != 2 || res.BucketsKept != 1 {
		t.Fatalf("scan with the margin reached mid-bucket: %+v", res)
	}
	// The next holder finishes.
	s.hook = nil
	lease.Set(eventstore.FullRing, e.clock.Now().Add(time.Minute))
	if res := e.scan(e.engine(s, WithRanges(&lease), WithRedriveMargin(time.Second))); res.BucketsDropped != 1 {
		t.Fatalf("next holder %+v", res)
	}
	s.check(t, -1, list...)
}

// A node whose next range no longer holds the instance of the bucket in
// progress stops re-driving it: the instance is the new owner's now.
func testRangeMovesMidBucket(t *testing.T, e *env) {
	e.cfg.Concurrency = 1
	w := e.writer(WithInstanceID(instanceIn(highHalf, "pod")))
	list := ids("r", 5)
	for _, id := range list {
		e.retry(w, id, 1)
	}
	e.windows(2)
	var lease Lease
	until := e.clock.Now().Add(time.Minute)
	lease.Set(eventstore.FullRing, until)
	s := newSagas(list...)
	s.hook = func(n int, _ eventstore.RecoveryEntry) {
		if n == 2 {
			lease.Set(lowHalf, until) // the next minute's split
		}
	}
	res := e.scan(e.engine(s, WithRanges(&lease)))
	if res.Dispatched != 2 || res.BucketsKept != 1 || res.InstancesDeleted != 0 {
		t.Fatalf("scan %+v", res)
	}
}

func TestRedriveMarginNegativeIsRefused(t *testing.T) {
	_, err := NewEngine(memory.New(), eventstore.Scope{Region: "r", Cluster: "c", Service: "s"},
		RedriverFunc(func(context.Context, eventstore.RecoveryEntry) error { return nil }), DefaultConfig(),
		WithRedriveMargin(-time.Second))
	if err == nil || !strings.Contains(err.Error(), "WithRedriveMargin(-1s): must be at least 0") {
		t.Fatalf("NewEngine with a negative margin: %v", err)
	}
}
