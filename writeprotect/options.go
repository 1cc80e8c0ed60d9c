package writeprotect

import (
	"log/slog"
	"time"
)

// Defaults of the options.
const (
	// DefaultBackoffInitial is the first pause of a guard waiting for
	// another execution's lease.
	DefaultBackoffInitial = 10 * time.Millisecond
	// DefaultBackoffMax caps the pauses (doubled from the initial one).
	DefaultBackoffMax = 250 * time.Millisecond
	// DefaultCommitTimeout bounds the write that commits (or releases) a
	// step's marker after the step ran.
	DefaultCommitTimeout = 10 * time.Second
	// DefaultClockSkew is the clock-skew margin a STRICT handler's
	// deadline leaves before its lease may end (WithClockSkew).
	DefaultClockSkew = 500 * time.Millisecond
	// DefaultMaxLeaseWait bounds, in real time, how long a command waits
	// for another execution's lease before Execute returns ErrLeaseHeld
	// (WithMaxLeaseWait).
	DefaultMaxLeaseWait = 10 * time.Second
)

// Option configures a Guard.
type Option interface{ apply(*options) }

type optFunc func(*options)

func (f optFunc) apply(o *options) { f(o) }

type options struct {
	now            func() time.Time
	log            *slog.Logger
	owner          string
	backoffInitial time.Duration
	backoffMax     time.Duration
	commitTimeout  time.Duration
	clockSkew      time.Duration
	maxLeaseWait   time.Duration
	fence          bool
}

// WithClock sets the clock that measures leases: how long a guard waits
// for another execution's lease, and whether a step outlived its own. Give
// the store the same clock (memory.WithClock) when testing on a fake one.
// Default time.Now. Pauses between tries are real time (WithBackoff).
func WithClock(now func() time.Time) Option {
	return optFunc(func(o *options) { o.now = now })
}

// WithLogger sets the logger, overriding slog.Default(). The guard logs
// skipped duplicates at Debug, refused hanging actions, fenced late
// duplicates and lease overruns at Warn, failed commits at Error.
func WithLogger(l *slog.Logger) Option {
	return optFunc(func(o *options) { o.log = l })
}

// WithOwner sets the instance id that prefixes the owner of every lease the
// guard takes (each execution appends a sequence number, so owners are
// unique per attempt). Default: host name, process id and a random suffix.
func WithOwner(id string) Option {
	return optFunc(func(o *options) { o.owner = id })
}

// WithBackoff sets the pauses of a guard waiting for another execution's
// lease to be committed or to expire: initial, doubled up to max, each
// jittered down by up to half. Defaults DefaultBackoffInitial (10ms) and
// DefaultBackoffMax (250ms).
func WithBackoff(initial, max time.Duration) Option {
	return optFunc(func(o *options) { o.backoffInitial, o.backoffMax = initial, max })
}

// WithCommitTimeout bounds the write that records a step's outcome after
// it ran, overriding DefaultCommitTimeout (10s). That write is not bound
// by the caller's context: a step that ran is recorded even if the caller
// gave up meanwhile.
func WithCommitTimeout(d time.Duration) Option {
	return optFunc(func(o *options) { o.commitTimeout = d })
}

// WithTerminalFence turns on the terminal fence: before running a step
// whose marker it did not find, the guard reads the saga's state
// (eventstore.StateReader if the store has it, else Store.LoadTransaction;
// one read per executed step) and drops the command if the saga is
// terminal. It is needed only when markers do not outlive their saga: when
// the orchestrator deletes them at the end (orchestrator.WithMarkerCleanup)
// or Config.MarkerRetention is shorter than a duplicate may arrive late.
// By default committed markers are kept for Config.MarkerRetention, a late
// duplicate finds its step's marker, and the fence is off.
func WithTerminalFence() Option {
	return optFunc(func(o *options) { o.fence = true })
}

// WithoutTerminalFence turns the terminal fence off (the default; see
// WithTerminalFence).
func WithoutTerminalFence() Option {
	return optFunc(func(o *options) { o.fence = false })
}

// WithClockSkew sets the clock-skew margin of STRICT leases, overriding
// DefaultClockSkew (500ms): how much earlier than its TTL says a lease may
// end because clocks disagree. A lease's expiry is computed by the
// Cassandra node that writes it and judged by the node that reads it, each
// on its own clock (a node whose clock runs ahead sees leases expire
// early), and a clock stepped by NTP moves expiries too. The handler's
// deadline is the lease less a second (Cassandra's whole-second TTLs), less
// this margin, less the commit's reserve, counted from before the lease's
// insert on the worker's monotonic clock (see the package documentation).
// Set it to the worst skew between the Cassandra nodes, as NTP keeps it. A
// larger margin raises the shortest lease New accepts (MinLease for the
// default). It must be in [0, MaxLease).
func WithClockSkew(d time.Duration) Option {
	return optFunc(func(o *options) { o.clockSkew = d })
}

// WithMaxLeaseWait bounds how long a command waits for another execution's
// lease on its step (or, for a compensation, on its action), overriding
// DefaultMaxLeaseWait (10s). After it, or after the lease plus a second if
// that is sooner, Execute returns an error wrapping ErrLeaseHeld and the
// worker tries the command again later. The wait blocks the worker's poll
// loop, and with it the consumer group's rebalances: keep it well below the
// group's rebalance timeout. Measured in real time, whatever WithClock.
func WithMaxLeaseWait(d time.Duration) Option {
	return optFunc(func(o *options) { o.maxLeaseWait = d })
}
