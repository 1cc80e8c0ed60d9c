package ringcoordinator

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Option configures a Master, a Slave, a Connector or FetchAssignment.
// Options that do not apply to what is being built are ignored.
type Option func(*options)

type options struct {
	region, cluster string
	listen          string // master's or slave's bind address
	advertise       string // slave's address for orchestrators
	master          string // slave's or connector's master
	cycle           time.Duration
	offset          time.Duration // publish instant within a cycle
	guard           time.Duration // connector
	lazy            int           // master
	minBackoff      time.Duration
	maxBackoff      time.Duration
	nodeID          string
	now             func() time.Time
	log             *slog.Logger
	transport       Transport
	token           string // shared secret checked at connection setup
	insecure        bool   // run without a token, explicitly
	maxSlaves       int    // master
}

func defaultOptions() options {
	return options{
		region:     DefaultRegion,
		cluster:    DefaultCluster,
		cycle:      DefaultCycle,
		minBackoff: DefaultMinBackoff,
		maxBackoff: DefaultMaxBackoff,
		now:        time.Now,
		log:        slog.Default(),
		transport:  RSocketTransport{},
		maxSlaves:  DefaultMaxSlaves,
	}
}

// Defaults of the options (and of Config).
const (
	DefaultRegion     = "default"
	DefaultCluster    = "default"
	DefaultCycle      = time.Minute
	DefaultMinBackoff = 200 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
	// MinCycle is the shortest publish cycle accepted (for tests and demos).
	MinCycle = 500 * time.Millisecond
	// MinTokenLength is the shortest shared secret WithToken accepts.
	MinTokenLength = 16
	// DefaultMaxSlaves bounds the slaves a master registers at once.
	DefaultMaxSlaves = 256
	// MaxMessageSize bounds a message a node accepts: a longer request is
	// refused before it is decoded.
	MaxMessageSize = 64 << 10
)

// DefaultPublishOffset returns the publish instant within a cycle: second
// 30 of a minute, the midpoint of any cycle.
func DefaultPublishOffset(cycle time.Duration) time.Duration { return cycle / 2 }

// DefaultGuard returns the connector's guard interval for a cycle: a
// thirtieth of it (2s of a minute).
func DefaultGuard(cycle time.Duration) time.Duration { return cycle / 30 }

// WithConfig applies c (from LoadConfig): region, cluster, cycle, publish
// offset, lazy rebalance, backoff, the guard, the token (or insecure) and
// the slave cap (0 offset and guard derive
// from the cycle). Addresses are role
// specific and are not taken from it: use WithListen, WithAdvertise and
// WithMaster (Config.MasterListenAddr and its siblings give them).
func WithConfig(c Config) Option {
	return func(o *options) {
		o.region, o.cluster = c.Region, c.Cluster
		o.cycle, o.offset = c.Cycle, c.PublishOffset
		o.lazy = c.LazyRebalanceCycles
		o.minBackoff, o.maxBackoff = c.MinBackoff, c.MaxBackoff
		o.guard = c.Guard
		o.token, o.insecure = c.Token, c.Insecure
		if c.MaxSlaves > 0 {
			o.maxSlaves = c.MaxSlaves
		}
	}
}

// WithScope sets the region (stacksaga.instance.region) and the virtual
// cluster (stacksaga.instance.cluster). Default "default" and "default".
func WithScope(region, cluster string) Option {
	return func(o *options) { o.region, o.cluster = region, cluster }
}

// WithListen sets the address a Master or Slave binds ("host:port", port 0
// for a free one). Default 127.0.0.1:0.
func WithListen(addr string) Option { return func(o *options) { o.listen = addr } }

// WithAdvertise sets the address a Slave gives orchestrators (through the
// master) to reach it. Default: the bound address; a port 0 is replaced by
// the bound port.
func WithAdvertise(addr string) Option { return func(o *options) { o.advertise = addr } }

// WithMaster sets the master a Slave registers with and a Connector asks
// for a slave (stacksaga.agent.slave.target-master.host / .port).
func WithMaster(addr string) Option { return func(o *options) { o.master = addr } }

// WithCycle sets the publish cycle: a minute in production (the seed's),
// a few seconds in tests and demos. "Minute" everywhere in this package
// means one cycle; cycles are aligned on the Unix epoch. Master, slaves and
// connectors must be given the same cycle: a slave or connector refuses a
// range that is not valid for exactly one of its cycles.
func WithCycle(d time.Duration) Option { return func(o *options) { o.cycle = d } }

// WithPublishOffset sets when within a cycle the master publishes the next
// cycle's split. Default DefaultPublishOffset (second 30 of a minute).
func WithPublishOffset(d time.Duration) Option { return func(o *options) { o.offset = d } }

// WithGuard sets how long before the end of its minute a Connector stops
// handing out the minute's range, to absorb clock skew between nodes.
// Default DefaultGuard of the cycle.
func WithGuard(d time.Duration) Option { return func(o *options) { o.guard = d } }

// WithLazyRebalance sets for how many publish cycles the Master keeps the
// slot of a departed slave that was not the last one registered, so that a
// slave that registers meanwhile takes it (and the other slaves keep their
// slices); its slice stays unassigned meanwhile. 0 (the default) recomputes
// the split among the registered slaves at the next publish.
func WithLazyRebalance(cycles int) Option { return func(o *options) { o.lazy = cycles } }

// WithBackoff sets the bounds of the exponential backoff (with jitter) of
// a Slave re-registering and a Connector re-asking the master.
func WithBackoff(minimum, maximum time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = minimum, maximum }
}

// WithNodeID sets the id of a Slave or Connector (default: a random UUID
// per instance). Ids must be unique within a cluster.
func WithNodeID(id string) Option { return func(o *options) { o.nodeID = id } }

// WithToken sets the shared secret (at least MinTokenLength bytes) that
// every node of a ring presents when it opens a connection and checks on
// the connections it accepts: a peer without it, or with another one, is
// refused at connection setup. Every node of a ring needs the same token.
// A Master, Slave or Connector on the RSocket transport refuses to start
// without a token unless WithInsecure is given. The token is never logged.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithInsecure lets a Master, Slave or Connector run without a token: any
// peer that reaches its address is accepted. It logs a warning at start.
// Use it only on loopback or a network where every peer is trusted.
func WithInsecure() Option { return func(o *options) { o.insecure = true } }

// WithMaxSlaves bounds the slaves a Master registers at once (default
// DefaultMaxSlaves); a registration beyond it is refused.
func WithMaxSlaves(n int) Option { return func(o *options) { o.maxSlaves = n } }

// WithClock sets the clock. Default time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithLogger sets the logger. Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithTransport sets the transport. Default RSocketTransport{}.
func WithTransport(t Transport) Option {
	return func(o *options) {
		if t != nil {
			o.transport = t
		}
	}
}

// build applies opts to the defaults and fills the derived defaults.
func build(opts []Option) options {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.offset == 0 {
		o.offset = DefaultPublishOffset(o.cycle)
	}
	if o.guard == 0 {
		o.guard = DefaultGuard(o.cycle)
	}
	if o.listen == "" {
		o.listen = "127.0.0.1:0"
	}
	if at, ok := o.transport.(authTransport); ok {
		o.transport = at.withAuth(o.token, o.log)
	}
	return o
}

// authTransport is a transport that authenticates its connections with the
// token (RSocketTransport): a role on it needs a token or WithInsecure.
type authTransport interface {
	// withAuth returns the transport with the token (unless "") and the
	// logger (unless it has one).
	withAuth(token string, log *slog.Logger) Transport
	hasToken() bool
}

// checkAuth reports a token that is too short, or a missing one on a
// transport that authenticates, unless the role runs insecure (then it
// logs a warning).
func (o *options) checkAuth(role string) error {
	if o.token != "" && len(o.token) < MinTokenLength {
		return fmt.Errorf("ringcoordinator: %s: the token must be at least %d bytes, got %d", role, MinTokenLength, len(o.token))
	}
	if at, ok := o.transport.(authTransport); !ok || at.hasToken() {
		return nil
	}
	if !o.insecure {
		return fmt.Errorf("ringcoordinator: %s: no token: set one with WithToken (stacksaga.coordinator.token-file or the environment variable %s), "+
			"or run unauthenticated with WithInsecure (stacksaga.coordinator.insecure: true)", role, EnvToken)
	}
	o.log.Warn("ringcoordinator: running without a token (insecure): any peer that reaches this node is accepted", "role", role)
	return nil
}

// validate reports every problem of o for a role that needs a master
// address (needMaster).
func (o *options) validate(role string, needMaster bool) error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("ringcoordinator: %s: "+format, append([]any{role}, args...)...))
	}
	if o.region == "" || o.cluster == "" {
		add("region and cluster must not be empty (got %q, %q)", o.region, o.cluster)
	}
	if o.cycle < MinCycle || o.cycle%time.Millisecond != 0 {
		add("cycle %v must be whole milliseconds and at least %v", o.cycle, MinCycle)
	}
	if o.offset <= 0 || o.offset >= o.cycle {
		add("publish offset %v must lie strictly within the cycle %v", o.offset, o.cycle)
	}
	if o.guard < 0 || o.guard >= o.cycle/2 {
		add("guard %v must be at least 0 and under half the cycle %v", o.guard, o.cycle)
	}
	if o.lazy < 0 {
		add("lazy rebalance cycles must be 0 or more, got %d", o.lazy)
	}
	if o.minBackoff <= 0 || o.maxBackoff < o.minBackoff {
		add("backoff bounds %v..%v must be positive and ordered", o.minBackoff, o.maxBackoff)
	}
	if needMaster && o.master == "" {
		add("no master address (WithMaster)")
	}
	if o.maxSlaves <= 0 {
		add("max slaves must be positive, got %d", o.maxSlaves)
	}
	if err := o.checkAuth(role); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
