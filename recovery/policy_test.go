package recovery

import (
	"testing"
	"time"
)

func TestRetryPolicyBackoff(t *testing.T) {
	p := RetryPolicy{DelayWindows: 1, BackoffMultiplier: 2, MaxDelayWindows: 60}
	want := []int{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i, w := range want {
		if got := p.delay(i+1, 0.99, 0.99); got != w {
			t.Errorf("attempt %d: delay %d, want %d", i+1, got, w)
		}
	}
	if got := p.delay(10_000, 0, 0); got != 60 {
		t.Errorf("huge attempt: %d", got)
	}
	// A constant delay, and a cap below the base delay.
	if got := (RetryPolicy{DelayWindows: 3, BackoffMultiplier: 1, MaxDelayWindows: 60}).delay(5, 0, 0); got != 3 {
		t.Errorf("constant: %d", got)
	}
	if got := (RetryPolicy{DelayWindows: 5, BackoffMultiplier: 2, MaxDelayWindows: 2}).delay(3, 0, 0); got != 5 {
		t.Errorf("cap below base: %d", got)
	}
	// The zero policy still delays by one window.
	if got := (RetryPolicy{}).delay(1, 0.5, 0.5); got != 1 {
		t.Errorf("zero policy: %d", got)
	}
}

func TestRetryPolicyJitter(t *testing.T) {
	p := RetryPolicy{DelayWindows: 1, BackoffMultiplier: 2, MaxDelayWindows: 60, Jitter: 0.5}
	// attempt 5: 16 windows, plus up to 8.
	if got := p.delay(5, 0, 0); got != 16 {
		t.Errorf("no draw: %d", got)
	}
	if got := p.delay(5, 0.999, 0.999); got != 23 {
		t.Errorf("max draw: %d", got)
	}
	// Stochastic rounding spreads even one-window delays: 1 + 0.5×u1
	// rounds up with probability 0.5×u1.
	if got := p.delay(1, 1, 0.4); got != 2 {
		t.Errorf("rounded down: %d", got)
	}
	if got := p.delay(1, 1, 0.6); got != 1 {
		t.Errorf("rounded up: %d", got)
	}
	seen := map[int]int{}
	for range 10000 {
		d := p.Delay(4)
		if d < 8 || d > 12 {
			t.Fatalf("Delay(4) = %d outside 8..12", d)
		}
		seen[d]++
	}
	if len(seen) < 4 {
		t.Errorf("jitter does not spread: %v", seen)
	}
}

func TestRetryPolicyExhausted(t *testing.T) {
	unlimited := RetryPolicy{}
	if unlimited.Exhausted(1_000_000) {
		t.Error("MaxAttempts 0 is exhausted")
	}
	p := RetryPolicy{MaxAttempts: 3}
	for attempt, want := range map[int]bool{1: false, 2: false, 3: true, 4: true} {
		if got := p.Exhausted(attempt); got != want {
			t.Errorf("Exhausted(%d) = %v, want %v", attempt, got, want)
		}
	}
}

func TestRetryPolicyInProcessBackoff(t *testing.T) {
	p := RetryPolicy{BackoffMultiplier: 2, InitialInterval: time.Second, MaxInterval: 100 * time.Second}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 100, 100}
	for i, w := range want {
		if got := p.backoff(i+1, 0); got != w*time.Second {
			t.Errorf("attempt %d: backoff %v, want %v", i+1, got, w*time.Second)
		}
	}
	if got := p.backoff(1<<20, 0); got != 100*time.Second {
		t.Errorf("huge attempt: %v", got)
	}
	p.Jitter = 0.5
	if got := p.backoff(2, 0.999); got < 2*time.Second || got >= 3*time.Second {
		t.Errorf("jitter: %v, want within [2s, 3s)", got)
	}
	// A cap below the initial interval is the initial interval.
	if got := (RetryPolicy{InitialInterval: 5 * time.Second, MaxInterval: time.Second, BackoffMultiplier: 2}).backoff(3, 0); got != 5*time.Second {
		t.Errorf("cap below initial: %v", got)
	}
	if got := (RetryPolicy{BackoffMultiplier: 2}).Backoff(1); got != 0 {
		t.Errorf("off: %v, want 0", got)
	}
}

func TestRetryPolicyFallbackAfterTimer(t *testing.T) {
	p := RetryPolicy{DelayWindows: 1, BackoffMultiplier: 1, MaxDelayWindows: 1}
	// With 1-minute windows a 1 s retry keeps the policy's window delay.
	if got := p.FallbackWindows(1, time.Second, time.Minute); got != 2 {
		t.Errorf("1s in 1m windows: %d, want 2 (the policy's 1, raised to one whole window after the timer)", got)
	}
	// With 1 s windows the fallback moves a whole window past the timer.
	if got := p.FallbackWindows(1, 10*time.Second, time.Second); got != 12 {
		t.Errorf("10s in 1s windows: %d, want 12", got)
	}
	if got := p.FallbackWindows(1, 0, time.Second); got != 1 {
		t.Errorf("no timer: %d, want the policy's 1", got)
	}
}

func TestDefaultRetryIsAboutASecond(t *testing.T) {
	p := DefaultConfig().RetryPolicy("any", "svc/ep")
	if d := p.backoff(1, 0); d != time.Second {
		t.Errorf("default first retry after %v, want 1s", d)
	}
}
