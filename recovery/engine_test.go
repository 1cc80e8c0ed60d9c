package recovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
)

var testScope = eventstore.Scope{Region: "r", Cluster: "c", Service: "s"}

// Run scans each window right after it is sealed, until its context ends
// (virtual time: 2-second windows, no real waiting).
func TestRunRedrivesAsWindowsSeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		cfg := DefaultConfig()
		cfg.Interval = 2 * time.Second
		cfg.Restore.DefaultDelayWindows = 5
		w, err := NewWriter(store, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := newSagas()
		en, err := NewEngine(store, testScope, s, cfg, WithWriter(w))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- en.Run(ctx) }()
		var all []string
		for i, id := range ids("run", 30) {
			s.add(id)
			all = append(all, id)
			if i%3 == 0 {
				if _, err := w.RegisterRestore(ctx, testScope, id, "d"); err != nil {
					t.Fatal(err)
				}
			} else if _, err := w.RegisterRetry(ctx, testScope, id, "d", 1+i%4); err != nil {
				t.Fatal(err)
			}
			time.Sleep(700 * time.Millisecond)
		}
		// The last registrations are due 5 windows (10s) after the last one.
		time.Sleep(15 * time.Second)
		s.check(t, 1, all...)
		tot, scans := en.Totals()
		if tot.Retried != 20 || tot.Restored != 10 || scans < 15 {
			t.Fatalf("totals %+v after %d scans", tot, scans)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

func TestNextWait(t *testing.T) {
	clk := newClock(base) // 10:30:15
	cfg := DefaultConfig()
	en, err := NewEngine(memory.New(), testScope, newSagas(), cfg, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	if d := en.nextWait(Result{}); d != 45*time.Second+10*time.Millisecond {
		t.Errorf("wait %v, want until 10:31 (+10ms)", d)
	}
	if d := en.nextWait(Result{NoRange: true}); d != time.Second {
		t.Errorf("wait without a range %v, want 1s", d)
	}
	clk.Set(at("2026-03-10T10:30:59.999Z"))
	if d := en.nextWait(Result{}); d != 100*time.Millisecond {
		t.Errorf("wait at the end of a window %v, want the 100ms floor", d)
	}
	en.scanEvery = 3 * time.Second
	if d := en.nextWait(Result{}); d != 3*time.Second {
		t.Errorf("WithScanEvery: %v", d)
	}
}

// A panicking Redriver fails its entry (the bucket is kept); the scan goes
// on.
func TestRedriverPanicIsAFailure(t *testing.T) {
	store := memory.New()
	clk := newClock(base)
	w, _ := NewWriter(store, DefaultConfig(), WithClock(clk.Now))
	for _, id := range ids("p", 3) {
		if _, err := w.RegisterRetry(t.Context(), testScope, id, "d", 1); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Minute)
	r := RedriverFunc(func(_ context.Context, e eventstore.RecoveryEntry) error {
		if e.TxID == "p-001" {
			panic("boom")
		}
		return nil
	})
	en, _ := NewEngine(store, testScope, r, DefaultConfig(), WithClock(clk.Now), WithLogger(quiet))
	res, err := en.Scan(t.Context())
	if err != nil || res.Failed != 1 || res.Retried != 2 || res.BucketsKept != 1 {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestNewEngineAndWriterValidate(t *testing.T) {
	bad := DefaultConfig()
	bad.BucketSize = 0
	_, err := NewEngine(nil, eventstore.Scope{}, nil, bad)
	for _, want := range []string{"nil directory", "nil redriver", "empty scope region", "recovery.bucket-size"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewEngine error lacks %q: %v", want, err)
		}
	}
	if _, err := NewEngine(memory.New(), testScope, newSagas(), DefaultConfig(), WithRanges(nil)); err == nil {
		t.Error("WithRanges(nil) accepted")
	}
	if _, err := NewWriter(nil, DefaultConfig()); err == nil {
		t.Error("NewWriter(nil) accepted")
	}
	if _, err := NewWriter(memory.New(), bad); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewWriter with a bad config: %v", err)
	}
}

// A fresh instance id per Writer, its token that of CQL token(); the
// writer forgets windows once they are sealed.
func TestWriterIdentityAndCache(t *testing.T) {
	store := memory.New()
	clk := newClock(base)
	w1, _ := NewWriter(store, DefaultConfig(), WithClock(clk.Now))
	w2, _ := NewWriter(store, DefaultConfig(), WithClock(clk.Now))
	if w1.InstanceID() == w2.InstanceID() || len(w1.InstanceID()) != 36 {
		t.Fatalf("instance ids %q %q", w1.InstanceID(), w2.InstanceID())
	}
	if w1.InstanceToken() == w2.InstanceToken() {
		t.Fatal("equal tokens")
	}
	for i := range 200 {
		if _, err := w1.RegisterRetry(t.Context(), testScope, "tx", "d", 1+i%3); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
	}
	if n := w1.cachedWindows(); n > 4 {
		t.Fatalf("%d windows cached after 200 windows of retries, want at most 4", n)
	}
	for range 50 {
		if _, err := w2.RegisterRestore(t.Context(), testScope, "tx", "d"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
	}
	if n := w2.cachedWindows(); n != 50 {
		t.Fatalf("%d watchdog windows cached, want 50 (none sealed yet)", n)
	}
	clk.Advance(700 * time.Minute)
	if _, err := w2.RegisterRetry(t.Context(), testScope, "tx", "d", 1); err != nil {
		t.Fatal(err)
	}
	if n := w2.cachedWindows(); n != 1 {
		t.Fatalf("%d windows cached once the watchdog windows are sealed, want 1", n)
	}
}

func TestLaterError(t *testing.T) {
	err := Later(3, "busy")
	if !errors.Is(err, ErrLater) {
		t.Fatal("Later does not match ErrLater")
	}
	var le *LaterError
	if !errors.As(err, &le) || le.DelayWindows != 3 || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("%v", err)
	}
	wrapped := errors.Join(errors.New("x"), err)
	if !errors.Is(wrapped, ErrLater) {
		t.Fatal("wrapped Later does not match")
	}
}

func TestIsNode0(t *testing.T) {
	if !IsNode0(eventstore.FullRing) || !IsNode0(lowHalf) || IsNode0(highHalf) {
		t.Fatal("IsNode0")
	}
}

// RegisterWatchdog writes the watchdog delay windows ahead, at most the
// domain's restore delay K; a delay below 1 is K.
func TestRegisterWatchdogDelay(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Restore.DefaultDelayWindows = 5
	now := time.Date(2026, 3, 10, 10, 30, 1, 0, time.UTC)
	w, err := NewWriter(memory.New(), cfg, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	ws := MustWindows(cfg.Interval)
	for _, tc := range []struct{ delay, want int }{{2, 2}, {1, 1}, {0, 5}, {9, 5}} {
		path, via, err := w.RegisterWatchdog(context.Background(), testScope, fmt.Sprintf("tx-%d", tc.delay), "d", tc.delay, nil)
		if err != nil || via {
			t.Fatalf("delay %d: via %v, %v", tc.delay, via, err)
		}
		if want := ws.Add(ws.At(now), tc.want); path.MinuteOfDay != want.Slot || path.Bucket%2 != 1 {
			t.Errorf("delay %d: written at slot %d bucket %d, want slot %d (%d windows ahead) in an odd bucket", tc.delay, path.MinuteOfDay, path.Bucket, want.Slot, tc.want)
		}
	}
}
