package sagatest

import (
	"log/slog"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
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
	crashEvery   int
	reorder      bool
	groupType    topics.GroupType
	workerGroups map[string]topics.GroupType
	share        topics.ShareSettings
	instances    int
	seed         int64
	seedSet      bool
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
	cfg := writeprotect.DefaultConfig()
	cfg.DefaultMode = mode
	return WithWriteProtectionConfig(cfg, opts...)
}

// WithWriteProtectionConfig is WithWriteProtection with a whole
// configuration: modes and leases per domain (a short lease makes a test
// of CrashWorkersEvery under STRICT faster).
func WithWriteProtectionConfig(cfg writeprotect.Config, opts ...writeprotect.Option) Option {
	return optFunc(func(c *config) {
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

// RestartWorkersEvery restarts a worker instance with redelivery each
// time it has executed n handlers since it started (see Service.Restart):
// the instance stops gracefully (the handlers in flight finish, reply and
// commit), its group's committed offsets are set back to where they stood
// when it started, and a new instance takes its place, to which the
// commands the stopped one handled since it started are delivered again.
// It is redelivery as after a crash that lost the offset commits; no
// handler is interrupted (CrashWorkersEvery does that). Default 0: never.
func RestartWorkersEvery(n int) Option { return optFunc(func(c *config) { c.restartEvery = n }) }

// CrashWorkersEvery makes a worker instance crash every n handler
// executions: its first crash comes at an execution between the first and
// the n-th, chosen by the env's seed (WithSeed), and each later one at the
// n-th execution since it last crashed (restarts with redelivery do not
// reset the count). Each instance alternates between two points, starting
// at the one the seed chooses for it:
//
//   - in the handler, before it does anything: the guard has called run
//     (a STRICT guard holds the step's lease, a RELAXED one has written
//     nothing), and the handler does not run;
//   - after the handler ran and the guard returned its reply (a guard has
//     committed the step's marker), before the worker sends the reply.
//
// The crashed instance sends no reply for that command and handles
// nothing more: a command in its guard at that moment does not start its
// handler or send its reply, and later ones fail before their guard. It
// is then stopped: the commands it finished are committed up to the first
// unfinished one of each partition, so the crashed command and those
// behind it stay uncommitted. A new instance takes its place (offsets are
// not rewound) and is handed them again, so the crashed command's
// redelivery meets the live lease of the first point or the committed
// marker of the second. A handler stopped at the first point is not an
// execution (Executions does not count it). A guard that records replies
// runs each step once; without one, the second point runs the step again.
// Default 0: never; n must not be 1 (the redelivered command would crash
// again, for ever). The crashes are listed by Env.Faults.
//
// A crash that kills a handler half way through its side effects is not
// simulated (the handler never starts, or has finished); writeprotect's
// kill test covers a real SIGKILL between the lease and the commit.
func CrashWorkersEvery(n int) Option { return optFunc(func(c *config) { c.crashEvery = n }) }

// ReorderReplies makes workers' replies go through a relay (as
// DuplicateReplies does) that keeps a copy of the latest reply of each
// saga and writes it again right after the saga's next reply with another
// (span, kind, attempt), marked with HeaderStale: the orchestrator gets a
// stale reply after a newer one, which it must ignore. Duplicates of a
// reply already relayed are relayed as they come. Default off.
func ReorderReplies() Option { return optFunc(func(c *config) { c.reorder = true }) }

// WithGroupType makes every worker and orchestrator of the env consume
// with g (worker.WithGroupType, orchestrator.WithGroupType): test a saga
// under topics.GroupShare as well as under topics.GroupConsumer (the
// default). With share groups there is no per-saga order and every
// delivery may go to any instance, so run them with STRICT write
// protection. RestartWorkersEvery, CrashWorkersEvery and Service.Restart
// rewind consumer-group offsets and are refused with share groups.
func WithGroupType(g topics.GroupType) Option {
	return optFunc(func(c *config) { c.groupType = g })
}

// WithWorkerGroupType overrides the group type of one worker service (a
// saga whose steps are served by share-group and consumer-group workers).
func WithWorkerGroupType(service string, g topics.GroupType) Option {
	return optFunc(func(c *config) {
		if c.workerGroups == nil {
			c.workerGroups = map[string]topics.GroupType{}
		}
		c.workerGroups[service] = g
	})
}

// WithShareSettings sets the share groups' delivery limit and acquisition
// lock (topics.ShareSettings) for every share-group worker and
// orchestrator of the env. Default: the broker's (5 deliveries, 30s).
func WithShareSettings(s topics.ShareSettings) Option {
	return optFunc(func(c *config) { c.share = s })
}

// WorkerInstances runs every worker service as n instances in one group
// (default 1): with a share group they all work every partition, with a
// consumer group they split the partitions. It cannot be combined with
// TwinWorkers.
func WorkerInstances(n int) Option { return optFunc(func(c *config) { c.instances = n }) }

// WithSeed sets the seed of the env's fault schedule: where
// CrashWorkersEvery crashes each worker instance (at which of its handler
// executions, and at which point first). It is the only random choice of
// the harness; the other faults follow from what the instances handle.
// Default: a random seed. A test that fails prints its env's seed (with
// the faults injected), and WithSeed(seed) replays that schedule: the same
// instances get the same faults at the same executions. When sagas run one
// at a time (each started after the one before ended) the instances handle
// the same commands in the same order, so the whole run repeats; with
// concurrent sagas, which command an instance's n-th execution is depends
// on the interleaving.
func WithSeed(seed int64) Option {
	return optFunc(func(c *config) { c.seed, c.seedSet = seed, true })
}
