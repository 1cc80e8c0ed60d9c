package recovery

import (
	"errors"
	"fmt"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// SlotsPerDay is the number of window slots of a recovery day: the range of
// eventstore.RecoveryPath.MinuteOfDay (0..1439).
const SlotsPerDay = eventstore.MinutesPerDay

// day is the length of a calendar day.
const day = 24 * time.Hour

// epoch anchors window numbering: window g starts at epoch + g×interval.
var epoch = time.Unix(0, 0).UTC()

// ErrInvalidInterval is wrapped by NewWindows' errors.
var ErrInvalidInterval = errors.New("recovery: invalid window interval")

// Windows is the window arithmetic of one interval: which window an instant
// falls in, which window lies n windows later, when a window is sealed.
//
// Every window has a global number g = floor((t − Unix epoch) / interval)
// and starts at epoch + g×interval. A recovery day holds PerDay windows;
// window g lies on day g / PerDay (as days since the epoch) at index
// g mod PerDay, and its directory slot (RecoveryPath.MinuteOfDay) is:
//
//   - minute intervals (a whole number of minutes dividing 1440): the
//     recovery day is the UTC calendar day, PerDay = 1440 / minutes, and the
//     slot is the window's first minute of the day (index × minutes), so
//     the tier-2 column really holds a minute of the day;
//   - second intervals (a whole number of seconds dividing 60, for tests
//     and demos): the slot is the index itself, PerDay = 1440, and a
//     "recovery day" lasts 1440 × interval (48 minutes at 2s). Its Day is
//     the date that many recovery days after 1970-01-01: a synthetic date
//     (year ~3600 at 2s) that keeps every window on its own (Day, slot)
//     key within the store's 0..1439 slot range. Lookback days then count
//     recovery days.
//
// The zero Windows is not usable; call NewWindows.
type Windows struct {
	interval time.Duration
	perDay   int64
	step     int // slot distance between consecutive windows
}

// Window is one recovery window.
type Window struct {
	// Day is the recovery day (midnight UTC of a date): the calendar day
	// for minute intervals, a synthetic date for second intervals.
	Day time.Time
	// Index is the window's position within Day, 0..PerDay-1.
	Index int
	// Slot is the value stored as RecoveryPath.MinuteOfDay.
	Slot int
	// Start and End bound the window: Start <= t < End.
	Start, End time.Time
}

// Sealed reports whether the window is over at now (End <= now): writers no
// longer register work in it and retry nodes may read it.
func (w Window) Sealed(now time.Time) bool { return !now.Before(w.End) }

// Path returns the recovery path of bucket in this window for instanceID.
func (w Window) Path(instanceID string, bucket int) eventstore.RecoveryPath {
	return eventstore.RecoveryPath{Day: w.Day, MinuteOfDay: w.Slot, InstanceID: instanceID, Bucket: bucket}
}

// String formats the window as "2026-01-02/0630 [10:30:00,10:31:00)".
func (w Window) String() string {
	return fmt.Sprintf("%s/%04d [%s,%s)", w.Day.Format(time.DateOnly), w.Slot,
		w.Start.Format(time.TimeOnly), w.End.Format(time.TimeOnly))
}

// ValidInterval reports whether d can be a window interval: a whole number
// of minutes dividing 1440, or a whole number of seconds (1s..30s)
// dividing 60.
func ValidInterval(d time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("%w: %v: must be positive", ErrInvalidInterval, d)
	case d < time.Minute:
		if d%time.Second != 0 || time.Minute%d != 0 {
			return fmt.Errorf("%w: %v: an interval under a minute must be whole seconds dividing 60s (1s, 2s, 3s, 4s, 5s, 6s, 10s, 12s, 15s, 20s or 30s)", ErrInvalidInterval, d)
		}
	default:
		if d%time.Minute != 0 || day%d != 0 {
			return fmt.Errorf("%w: %v: must be whole minutes dividing 1440 (e.g. 1m, 5m, 15m, 60m)", ErrInvalidInterval, d)
		}
	}
	return nil
}

// NewWindows returns the arithmetic of windows of length interval (see
// ValidInterval).
func NewWindows(interval time.Duration) (Windows, error) {
	if err := ValidInterval(interval); err != nil {
		return Windows{}, err
	}
	if interval < time.Minute {
		return Windows{interval: interval, perDay: SlotsPerDay, step: 1}, nil
	}
	return Windows{interval: interval, perDay: int64(day / interval), step: int(interval / time.Minute)}, nil
}

// MustWindows is NewWindows that panics on an invalid interval.
func MustWindows(interval time.Duration) Windows {
	ws, err := NewWindows(interval)
	if err != nil {
		panic(err)
	}
	return ws
}

// Interval is the length of a window.
func (ws Windows) Interval() time.Duration { return ws.interval }

// PerDay is the number of windows of a recovery day.
func (ws Windows) PerDay() int { return int(ws.perDay) }

// floorDiv divides rounding towards minus infinity.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// number returns the global number of the window containing t.
func (ws Windows) number(t time.Time) int64 {
	return floorDiv(int64(t.Sub(epoch)), int64(ws.interval))
}

// window builds the window with global number g.
func (ws Windows) window(g int64) Window {
	dayNo := floorDiv(g, ws.perDay)
	index := int(g - dayNo*ws.perDay)
	d := epoch.AddDate(0, 0, int(dayNo))
	var start time.Time
	if ws.interval < time.Minute {
		// Recovery days are shorter than calendar days: d is synthetic.
		start = epoch.Add(time.Duration(g) * ws.interval)
	} else {
		start = d.Add(time.Duration(index) * ws.interval)
	}
	return Window{
		Day:   d,
		Index: index,
		Slot:  index * ws.step,
		Start: start,
		End:   start.Add(ws.interval),
	}
}

// dayNumber returns the days since the epoch of day's date.
func dayNumber(d time.Time) int64 {
	return floorDiv(eventstore.DayOf(d).Unix(), int64(day/time.Second))
}

// globalOf returns the global number of w.
func (ws Windows) globalOf(w Window) int64 { return dayNumber(w.Day)*ws.perDay + int64(w.Index) }

// At returns the window containing t: the read window W when t is now
// (the seed's getCurrentReadWindow).
func (ws Windows) At(t time.Time) Window { return ws.window(ws.number(t)) }

// Add returns the window n windows after w (before it when n < 0), rolling
// over recovery days: the window after the last of a day is the first of
// the next.
func (ws Windows) Add(w Window, n int) Window { return ws.window(ws.globalOf(w) + int64(n)) }

// RetryWindow returns W+delay, the window a retry registered at now is
// written to (the seed's getImmediateRetryWriteWindow for delay 1). A delay
// below 1 is taken as 1: work is never registered in a window that may
// already be read.
func (ws Windows) RetryWindow(now time.Time, delay int) Window {
	return ws.Add(ws.At(now), max(delay, 1))
}

// RestoreWindow returns W+k, the window of the restore watchdog of a saga
// started at now (the seed's getFarFutureRestoreWindow). A k below 1 is
// taken as 1.
func (ws Windows) RestoreWindow(now time.Time, k int) Window {
	return ws.Add(ws.At(now), max(k, 1))
}

// DelayUntil returns the delay in windows (at least 1) of the first window
// that is sealed no earlier than after: the window W+d, W containing now,
// whose end is at or after now+after. Work registered there is read by a
// retry node at least after has passed (and, scans running as windows
// seal, within about one interval more). It is the restore watchdog's
// delay for a step due after that long (Writer.RegisterWatchdog).
func (ws Windows) DelayUntil(now time.Time, after time.Duration) int {
	w := ws.At(now)
	rest := now.Add(after).Sub(w.End)
	if rest <= 0 {
		return 1
	}
	d := int64((rest + ws.interval - 1) / ws.interval)
	return int(min(max(d, 1), MaxDelayWindows))
}

// FromSlot returns the window stored in the directory as (day, slot). A
// slot that is not a window start of this interval (written by a process
// configured with another interval) maps to the window containing it, whose
// end is never earlier than the writer's window start: writers finish
// writing a window before it starts, so reading it at that end is safe.
func (ws Windows) FromSlot(d time.Time, slot int) Window {
	return ws.window(dayNumber(d)*ws.perDay + int64(slot/ws.step))
}

// DayStart returns the start of recovery day d (its first window's start).
func (ws Windows) DayStart(d time.Time) time.Time {
	return ws.window(dayNumber(d) * ws.perDay).Start
}

// DayEnd returns the end of recovery day d (its last window's end).
func (ws Windows) DayEnd(d time.Time) time.Time {
	return ws.window((dayNumber(d)+1)*ws.perDay - 1).End
}

// AddDays returns the recovery day n days after d.
func (ws Windows) AddDays(d time.Time, n int) time.Time {
	return eventstore.DayOf(d).AddDate(0, 0, n)
}
