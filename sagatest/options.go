package sagatest

import (
	"log/slog"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Defaults of the options.
const (
	// DefaultPartitions is the partition count of the topics the harness
	// creates.
	DefaultPartitions = 4
	// DefaultTimeout bounds every wait of the harness (WaitTerminal,
	// Settle, a worker joining its group).
	DefaultTimeout = time.Minute
	// TwinWindow is how long the first of two twin instances to receive a
	// command waits for the other one before running it alone.
	TwinWindow = 200 * time.Millisecond
	// ReorderWindow is how long the reply relay of ReorderReplies gathers
	// replies before releasing them in reverse order.
	ReorderWindow = 15 * time.Millisecond
)

// Option configures an Env.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	brokers      []string
	cass         bool
	cassHosts    []string
	keyspace     string
	store        eventstore.Store
	guard        func(service string) worker.Guard
	protect      *writeprotect.Config
	protectOpts  []writeprotect.Option
	partitions   int
	logger       *slog.Logger
	timeout      time.Duration
	cmdCopies    int
	replyCopies  int
	twins        bool
	restartEvery int
	reorder      bool
}

// WithKafka runs the env on a real Kafka cluster instead of an in-process
// kfake broker (the default). Topic and group names are derived from the
// service and domain names as they are, so tests sharing a broker must
// each use their own service and domain names.
func WithKafka(brokers ...string) Option {
	return optFunc(func(c *config) { c.brokers = append([]string(nil), brokers...) })
}

// WithCassandra keeps saga state and execution markers in Cassandra
// (eventstore/cassandra) instead of the in-memory store (the default). The
// schema is created in keyspace (SimpleStrategy, replication factor 1) if
// it is missing; the store is closed when the test ends.
func WithCassandra(hosts []string, keyspace string) Option {
	return optFunc(func(c *config) {
		c.cass = true
		c.cassHosts = append([]string(nil), hosts...)
		c.keyspace = keyspace
	})
}

// WithStore uses s as the env's event store instead of the in-memory store
// (the default). The caller closes it.
func WithStore(s eventstore.Store) Option { return optFunc(func(c *config) { c.store = s }) }

// WithGuard makes every worker instance guard its commands with the guard
// newGuard returns for the instance's service; it is called once per
// instance start (a restart gets a fresh guard, as a new process would).
// Default: no guard (every delivery runs the handler).
func WithGuard(newGuard func(service string) worker.Guard) Option {
	return optFunc(func(c *config) { c.guard = newGuard })
}

// WithWriteProtection guards every worker instance with its own
// writeprotect.Guard over the env's store, in mode for every domain with
// the default lease, made with opts (the env's logger unless opts set
// one). It replaces WithGuard. Default: no guard.
func WithWriteProtection(mode writeprotect.Mode, opts ...writeprotect.Option) Option {
	return optFunc(func(c *config) {
		cfg := writeprotect.DefaultConfig()
		cfg.DefaultMode = mode
		c.protect = &cfg
		c.protectOpts = opts
	})
}

// WithPartitions sets the partition count of the topics the harness
// creates. Default DefaultPartitions (4).
func WithPartitions(n int) Option { return optFunc(func(c *config) { c.partitions = n }) }

// WithLogger sets the logger of the orchestrators, workers and store.
// Default: errors are written to the test log.
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *config) { c.logger = l }) }

// WithTimeout bounds every wait of the harness. Default DefaultTimeout
// (one minute).
func WithTimeout(d time.Duration) Option { return optFunc(func(c *config) { c.timeout = d }) }

// DuplicateCommands delivers every command k extra times: a relay copies
// each command record k times onto the same topic partition, behind the
// original (copies are not copied again). Default 0.
func DuplicateCommands(k int) Option { return optFunc(func(c *config) { c.cmdCopies = k }) }

// DuplicateReplies delivers every reply k extra times: workers reply to a
// staging topic (the callback topic + ".sagatest-staging") from which a
// relay writes each reply k+1 times to the callback topic. Default 0.
func DuplicateReplies(k int) Option { return optFunc(func(c *config) { c.replyCopies = k }) }

// TwinWorkers runs every worker service as two instances in two consumer
// groups, so that each command reaches both. The first instance to
// receive a command waits up to TwinWindow for the other, so that both
// hand it to their guards at the same moment. Default: one instance.
func TwinWorkers() Option { return optFunc(func(c *config) { c.twins = true }) }

// RestartWorkersEvery crashes and restarts a worker instance each time it
// has executed n handlers since it started. A crash loses the offsets the
// instance committed, so the commands it handled are delivered again to
// the instance started in its place (see Service.Restart). Default 0:
// never.
func RestartWorkersEvery(n int) Option { return optFunc(func(c *config) { c.restartEvery = n }) }

// ReorderReplies makes workers' replies go through a relay that gathers
// them for ReorderWindow and releases each batch in reverse order, so
// later replies of a saga overtake earlier ones. Default off.
func ReorderReplies() Option { return optFunc(func(c *config) { c.reorder = true }) }
