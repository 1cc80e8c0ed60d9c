package recovery

import (
	"log/slog"
	"time"
)

// Option configures a Writer or an Engine. Options that do not apply to
// what is being built are ignored.
type Option func(*options)

type options struct {
	now        func() time.Time
	logger     *slog.Logger
	instanceID string
	ranges     RangeSource
	writer     *Writer
	scanEvery  time.Duration
	margin     time.Duration
}

// DefaultRedriveMargin is the Engine's default WithRedriveMargin.
const DefaultRedriveMargin = 250 * time.Millisecond

func defaultOptions() options {
	return options{now: time.Now, logger: slog.Default(), margin: DefaultRedriveMargin}
}

// WithClock sets the clock (Writer and Engine). Default time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithLogger sets the logger (Writer and Engine). Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithInstanceID sets the Writer's instance id instead of a fresh random
// one. Only tests should need it: an instance id must never be reused by
// another process, or its bucket counters would collide with the old ones.
func WithInstanceID(id string) Option { return func(o *options) { o.instanceID = id } }

// WithRanges sets the Engine's token range source. Default: the whole ring
// (StaticRange(eventstore.FullRing)), for a retry node configured alone.
func WithRanges(r RangeSource) Option { return func(o *options) { o.ranges = r } }

// WithWriter gives the Engine the Writer with which it re-registers the
// entries its Redriver answers with Later (a retry node is a writer too).
// Without one, such an entry counts as failed and stays in its bucket.
func WithWriter(w *Writer) Option { return func(o *options) { o.writer = w } }

// WithRedriveMargin sets how much of its token range's validity an Engine
// must have left to start a re-drive (or any other work of a scan): with
// less, the scan stops and leaves the rest to the range's next holder.
// A re-drive in flight is bounded by the range's validity either way: its
// context ends when the range expires. Default DefaultRedriveMargin
// (250ms); 0 starts re-drives until the range expires; negative is an
// error.
func WithRedriveMargin(d time.Duration) Option { return func(o *options) { o.margin = d } }

// WithScanEvery sets how long Engine.Run waits between scans. Default: until
// the current window ends (so each window is scanned right after it is
// sealed), at most one interval, at least 100ms.
func WithScanEvery(d time.Duration) Option { return func(o *options) { o.scanEvery = d } }
