package tracewindow_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// TestSagaErrorIsHistoryOrState: a saga's last error is its state only
// where it explains the state; a COMPLETED saga that recovered from a
// timeout shows it as history (last_error), a RETRY_PENDING or COMPENSATED
// one as its error.
func TestSagaErrorIsHistoryOrState(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name, id, err, last string
	}{
		{"completed after a retry", f.retried, "", "payment gateway timeout"},
		{"retry pending", f.pending, "payment gateway timeout", ""},
		{"compensated", f.compensated, "cannot ship: address unknown", ""},
		{"compensation failed", f.terminated, "stock ledger refused the release", ""},
		{"completed, no error", f.completed, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var d tracewindow.Detail
			if code := f.get("/api/sagas/"+c.id, &d); code != 200 {
				t.Fatalf("status %d", code)
			}
			if d.Saga.Error != c.err || d.Saga.LastError != c.last {
				t.Fatalf("%s: error %q last_error %q, want %q and %q", d.Saga.State, d.Saga.Error, d.Saga.LastError, c.err, c.last)
			}
		})
	}
}

// TestWatchdogWindowInRealTime: with a sub-minute window the directory's
// day is synthetic (year ~2300); the saga's watchdog also carries the
// window's real start and end, computed back with the window length.
func TestWatchdogWindowInRealTime(t *testing.T) {
	for _, interval := range []time.Duration{time.Second, 2 * time.Second, time.Minute, 5 * time.Minute} {
		t.Run(interval.String(), func(t *testing.T) {
			cfg := recovery.DefaultConfig()
			cfg.Interval = interval
			f := newFixture(t, tracewindow.WithRecovery(cfg))
			ws, err := cfg.Windows()
			if err != nil {
				t.Fatal(err)
			}
			due := ws.RestoreWindow(f.now, 3)
			tx, err := f.store.LoadTransaction(context.Background(), f.scope, f.inflight)
			if err != nil {
				t.Fatal(err)
			}
			p := due.Path("instance-1", 1)
			tx.RestorePath, tx.Version = &p, tx.Version+1
			if err := f.store.Transition(context.Background(), tx, nil); err != nil {
				t.Fatal(err)
			}
			var d tracewindow.Detail
			if code := f.get("/api/sagas/"+f.inflight, &d); code != 200 {
				t.Fatalf("status %d", code)
			}
			w := d.Saga.Watchdog
			if w == nil || w.WindowStart == nil || w.WindowEnd == nil {
				t.Fatalf("watchdog %+v: no window time", w)
			}
			if !w.WindowStart.Equal(due.Start) || !w.WindowEnd.Equal(due.End) || w.WindowStart.Sub(f.now) > 4*interval || w.WindowStart.Before(f.now) {
				t.Fatalf("watchdog window %v..%v, want %v..%v (now %v); day %s", w.WindowStart, w.WindowEnd, due.Start, due.End, f.now, w.Day)
			}
		})
	}
}

// TestInFlightMeansUnended: "in flight" in a list is every state that has
// not ended, DISABLED included, the same rule sagactl list in-flight uses.
func TestInFlightMeansUnended(t *testing.T) {
	want := []eventstore.State{eventstore.StateStarted, eventstore.StateInProgress, eventstore.StatePaused, eventstore.StateRetryPending,
		eventstore.StateFailed, eventstore.StateCancelling, eventstore.StateCompensating, eventstore.StateDisabled}
	if got := tracewindow.UnendedStates(); !slices.Equal(got, want) {
		t.Fatalf("UnendedStates %v, want %v", got, want)
	}
	f := newFixture(t)
	var d listDoc
	from := f.now.Add(-31 * time.Hour).UnixMilli()
	if code := f.get("/api/sagas?state=in_flight&from="+itoa(from), &d); code != 200 {
		t.Fatal(code)
	}
	if !slices.Equal(d.ids(), []string{f.inflight, f.pending, f.disabled}) {
		t.Fatalf("in flight over 31h: %v, want %v", d.ids(), []string{f.inflight, f.pending, f.disabled})
	}
}
