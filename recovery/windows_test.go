package recovery

import (
	"math/rand"
	"testing"
	"testing/quick"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func date(s string) time.Time {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return t
}

func checkWindow(t *testing.T, what string, w Window, day string, index, slot int, start string) {
	t.Helper()
	if !w.Day.Equal(date(day)) || w.Index != index || w.Slot != slot || !w.Start.Equal(at(start)) {
		t.Errorf("%s = %v (day %s, index %d, slot %d, start %s), want day %s index %d slot %d start %s",
			what, w, w.Day.Format(time.DateOnly), w.Index, w.Slot, w.Start.Format(time.RFC3339), day, index, slot, start)
	}
	if w.End.Sub(w.Start) <= 0 {
		t.Errorf("%s: empty window %v", what, w)
	}
}

// The seed's pseudo-code: getCurrentReadWindow, getImmediateRetryWriteWindow
// (with its midnight roll-over) and getFarFutureRestoreWindow (600 windows,
// crossing days).
func TestSeedWindowPseudoCode(t *testing.T) {
	ws := MustWindows(time.Minute)
	if ws.PerDay() != 1440 {
		t.Fatalf("PerDay %d, want 1440", ws.PerDay())
	}
	// getCurrentReadWindow: minutesSinceMidnight / interval.
	checkWindow(t, "read 10:30:45", ws.At(at("2026-03-10T10:30:45Z")), "2026-03-10", 630, 630, "2026-03-10T10:30:00Z")
	checkWindow(t, "read 00:00:00", ws.At(at("2026-03-10T00:00:00Z")), "2026-03-10", 0, 0, "2026-03-10T00:00:00Z")
	checkWindow(t, "read 23:59:59", ws.At(at("2026-03-10T23:59:59Z")), "2026-03-10", 1439, 1439, "2026-03-10T23:59:00Z")

	// getImmediateRetryWriteWindow: index+1, 1439 -> next day's 0.
	checkWindow(t, "retry 10:30:45", ws.RetryWindow(at("2026-03-10T10:30:45Z"), 1), "2026-03-10", 631, 631, "2026-03-10T10:31:00Z")
	checkWindow(t, "retry 23:59:30", ws.RetryWindow(at("2026-03-10T23:59:30Z"), 1), "2026-03-11", 0, 0, "2026-03-11T00:00:00Z")
	checkWindow(t, "retry 23:59 on New Year's Eve", ws.RetryWindow(at("2025-12-31T23:59:10Z"), 1), "2026-01-01", 0, 0, "2026-01-01T00:00:00Z")
	checkWindow(t, "retry 23:59 on Feb 28 of a leap year", ws.RetryWindow(at("2028-02-28T23:59:10Z"), 1), "2028-02-29", 0, 0, "2028-02-29T00:00:00Z")
	checkWindow(t, "retry W+3 at 23:58", ws.RetryWindow(at("2026-03-10T23:58:00Z"), 3), "2026-03-11", 1, 1, "2026-03-11T00:01:00Z")
	// A delay below 1 is never the read window itself.
	checkWindow(t, "retry W+0", ws.RetryWindow(at("2026-03-10T10:30:45Z"), 0), "2026-03-10", 631, 631, "2026-03-10T10:31:00Z")

	// getFarFutureRestoreWindow: (index + K) / 1440 days later, at
	// (index + K) % 1440.
	checkWindow(t, "restore 10:30 +600", ws.RestoreWindow(at("2026-03-10T10:30:00Z"), 600), "2026-03-10", 1230, 1230, "2026-03-10T20:30:00Z")
	checkWindow(t, "restore 23:00 +600", ws.RestoreWindow(at("2026-03-10T23:00:00Z"), 600), "2026-03-11", 540, 540, "2026-03-11T09:00:00Z")
	checkWindow(t, "restore 14:00 +1200", ws.RestoreWindow(at("2026-12-31T14:00:00Z"), 1200), "2027-01-01", 600, 600, "2027-01-01T10:00:00Z")
	checkWindow(t, "restore 12:00 +3000 (two days)", ws.RestoreWindow(at("2026-03-10T12:00:00Z"), 3000), "2026-03-12", 840, 840, "2026-03-12T14:00:00Z")
}

// With 5-minute windows the index counts windows and the slot stays a
// minute of the day.
func TestFiveMinuteWindows(t *testing.T) {
	ws := MustWindows(5 * time.Minute)
	if ws.PerDay() != 288 {
		t.Fatalf("PerDay %d, want 288", ws.PerDay())
	}
	checkWindow(t, "read 10:32", ws.At(at("2026-03-10T10:32:59Z")), "2026-03-10", 126, 630, "2026-03-10T10:30:00Z")
	checkWindow(t, "retry 23:57", ws.RetryWindow(at("2026-03-10T23:57:00Z"), 1), "2026-03-11", 0, 0, "2026-03-11T00:00:00Z")
	// 600 windows of 5 minutes are 50 hours.
	checkWindow(t, "restore 23:00 +600", ws.RestoreWindow(at("2026-03-10T23:00:00Z"), 600), "2026-03-13", 12, 60, "2026-03-13T01:00:00Z")
	w := ws.At(at("2026-03-10T10:32:59Z"))
	if got := ws.FromSlot(w.Day, w.Slot); got != w {
		t.Errorf("FromSlot(%v) = %v", w, got)
	}
	// A slot written with a 1-minute interval maps to the 5-minute window
	// containing it, which ends no earlier than the writer's window start.
	if got := ws.FromSlot(w.Day, 633); got != w {
		t.Errorf("FromSlot(633) = %v, want %v", got, w)
	}
	if !ws.DayEnd(date("2026-03-10")).Equal(at("2026-03-11T00:00:00Z")) || !ws.DayStart(date("2026-03-10")).Equal(at("2026-03-10T00:00:00Z")) {
		t.Errorf("DayStart/DayEnd of 2026-03-10: %v %v", ws.DayStart(date("2026-03-10")), ws.DayEnd(date("2026-03-10")))
	}
}

// Second intervals: 1440 windows to a (short) recovery day whose date is
// synthetic; every window still has its own (day, slot) key in 0..1439.
func TestSecondWindows(t *testing.T) {
	ws := MustWindows(2 * time.Second)
	if ws.PerDay() != SlotsPerDay {
		t.Fatalf("PerDay %d", ws.PerDay())
	}
	now := at("2026-03-10T10:30:45Z")
	w := ws.At(now)
	if w.Start.After(now) || !now.Before(w.End) || w.End.Sub(w.Start) != 2*time.Second {
		t.Fatalf("At(%v) = %v", now, w)
	}
	if err := (eventstore.RecoveryPath{Day: w.Day, MinuteOfDay: w.Slot, InstanceID: "i"}).Validate(); err != nil {
		t.Fatalf("slot does not fit the store: %v", err)
	}
	// The last window of a recovery day is followed by the first of the next.
	last := ws.Add(w, SlotsPerDay-1-w.Index)
	next := ws.Add(last, 1)
	if last.Index != SlotsPerDay-1 || next.Index != 0 || !next.Day.Equal(last.Day.AddDate(0, 0, 1)) || !next.Start.Equal(last.End) {
		t.Fatalf("roll-over: last %v, next %v", last, next)
	}
	if d := ws.DayEnd(w.Day).Sub(ws.DayStart(w.Day)); d != 48*time.Minute {
		t.Fatalf("a recovery day of 2s windows lasts %v, want 48m", d)
	}
	if got := ws.FromSlot(w.Day, w.Slot); got != w {
		t.Fatalf("FromSlot = %v, want %v", got, w)
	}
	// Distinct windows never share a (day, slot) key.
	seen := map[[2]int64]bool{}
	for i := range 5000 {
		x := ws.Add(w, i)
		k := [2]int64{x.Day.Unix(), int64(x.Slot)}
		if seen[k] {
			t.Fatalf("window %v reuses a key", x)
		}
		seen[k] = true
	}
}

func TestValidInterval(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 90 * time.Minute, 24 * time.Hour} {
		if err := ValidInterval(d); err != nil {
			t.Errorf("ValidInterval(%v): %v", d, err)
		}
	}
	for _, d := range []time.Duration{0, -time.Minute, 1500 * time.Millisecond, 7 * time.Second, 90 * time.Second, 7 * time.Minute, 48 * time.Hour} {
		if err := ValidInterval(d); err == nil {
			t.Errorf("ValidInterval(%v) accepted", d)
		}
	}
}

var intervals = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 7*time.Minute + 0, 15 * time.Minute, 60 * time.Minute, 24 * time.Hour,
}

// Property: for any instant, delay and interval, the retry and restore
// windows lie strictly after the read window (they start no earlier than
// it ends), the read window contains the instant, the slot fits the store,
// and (day, slot) names the window back.
func TestPropertyWriteWindowAfterReadWindow(t *testing.T) {
	valid := intervals[:0:0]
	for _, d := range intervals {
		if ValidInterval(d) == nil {
			valid = append(valid, d)
		}
	}
	lo, hi := at("1971-01-01T00:00:00Z").UnixNano(), at("2200-01-01T00:00:00Z").UnixNano()
	prop := func(ns int64, delay uint32, pick uint8) bool {
		now := time.Unix(0, lo+int64(uint64(ns)%uint64(hi-lo))).UTC()
		ws := MustWindows(valid[int(pick)%len(valid)])
		// Delays as Validate bounds them: at most MaxDelay ahead.
		d := int(delay%uint32(min(MaxDelayWindows, int(MaxDelay/ws.Interval())))) + 1
		r := ws.At(now)
		for _, w := range []Window{ws.RetryWindow(now, d), ws.RestoreWindow(now, d), ws.Add(r, d)} {
			if w.Start.Before(r.End) || !w.Start.After(now) || w.Sealed(now) {
				t.Logf("interval %v now %v delay %d: read %v, write %v", ws.Interval(), now, d, r, w)
				return false
			}
			if w.Slot < 0 || w.Slot >= SlotsPerDay || ws.FromSlot(w.Day, w.Slot) != w {
				t.Logf("interval %v: window %v does not round-trip through (day, slot)", ws.Interval(), w)
				return false
			}
			if got := w.Start.Sub(r.Start); got != time.Duration(d)*ws.Interval() {
				t.Logf("interval %v: W+%d starts %v after W", ws.Interval(), d, got)
				return false
			}
		}
		return !r.Start.After(now) && now.Before(r.End) && !r.Sealed(now) && r.Sealed(r.End)
	}
	cfg := &quick.Config{MaxCount: 20000, Rand: rand.New(rand.NewSource(1))}
	if err := quick.Check(prop, cfg); err != nil {
		t.Fatal(err)
	}
}

// DelayUntil names the first window sealed no earlier than after has
// passed, at least one window ahead (the current one is open to readers
// never, to writers no longer).
func TestDelayUntil(t *testing.T) {
	ws := MustWindows(time.Minute)
	start := time.Date(2026, 3, 10, 10, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		at    time.Duration // into the window
		after time.Duration
		want  int
	}{
		{time.Second, 40 * time.Second, 1},          // the current window ends after 40s, but is open: the next
		{30 * time.Second, 40 * time.Second, 1},     // ends at +30s: the next ends at +90s >= +40s
		{time.Second, 310 * time.Second, 5},         // ends +59s; +310s falls in the 5th window after
		{59 * time.Second, 310 * time.Second, 6},    // ends +1s: 309s more
		{0, 0, 1},                                   // nothing to wait: still the next window
		{time.Second, -time.Hour, 1},                // overdue: the next window
		{time.Second, 400 * 24 * time.Hour, 576000}, // far: as many as it takes
	} {
		now := start.Add(tc.at)
		got := ws.DelayUntil(now, tc.after)
		if got != tc.want {
			t.Errorf("DelayUntil(+%v, %v) = %d, want %d", tc.at, tc.after, got, tc.want)
		}
		if w := ws.Add(ws.At(now), got); w.End.Before(now.Add(tc.after)) || (got > 1 && !ws.Add(ws.At(now), got-1).End.Before(now.Add(tc.after))) {
			t.Errorf("DelayUntil(+%v, %v) = %d: window %v is not the first sealed after it", tc.at, tc.after, got, w)
		}
	}
}
