package orchestrator

import (
	"fmt"
	sagaconfig "github.com/stacksaga-go/stacksaga/config"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Option configures an Orchestrator.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	brokers   []string
	kafkaOpts []kgo.Opt
	store     eventstore.Store
	storeSet  bool // WithStore was given
	ownStore  bool
	// file is WithConfig's document, fileErr its Kafka settings' error.
	file        *sagaconfig.Config
	fileErr     error
	region      string
	cluster     string
	regions     RegionResolver
	logger      *slog.Logger
	concurrency int
	groupID     string
	listeners   []func(Event)
	now         func() time.Time
	provision   bool
	topicCfg    topics.Provision

	deliveryTimeout time.Duration
	shutdownGrace   time.Duration

	recovery   recovery.Config
	recoveryOn bool
	retryNode  bool
	engineOpts []recovery.Option
	fault      func(FaultPoint, string) bool
	// retryArmed, when set (tests), is told of every in-process retry armed.
	retryArmed func(txID string, d time.Duration)
	// stepArmed, when set (tests), is told of every step timer armed
	// (deadline: armed for the saga's deadline).
	stepArmed func(txID string, span int, d time.Duration, deadline bool)

	stateCacheSize int
	markerCleanup  bool
	// startVersion is WithStartVersion's (0: the newest).
	startVersion int

	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	groupType      topics.GroupType
	share          topics.ShareSettings
	claimLease     time.Duration
	membership     topics.Membership
	instanceSet    bool // WithInstanceID was given (an empty id is refused)

	// keyGrace and keyRetention: WithBusinessKeyGrace and
	// WithBusinessKeyRetention (0: their defaults).
	keyGrace, keyRetention time.Duration
	// waitPoll bounds the intervals of Wait's reads.
	waitPoll [2]time.Duration
	// sagaTimeout is WithSagaTimeout's (sagaTimeoutSet: given; otherwise
	// the recovery configuration's deadline of the domain applies).
	sagaTimeout    time.Duration
	sagaTimeoutSet bool
}

func defaultConfig() config {
	return config{
		region:      DefaultRegion,
		cluster:     "default",
		regions:     RegionMap{},
		logger:      slog.Default(),
		concurrency: 256,
		now:         func() time.Time { return time.Now().UTC() },
		provision:   true,

		deliveryTimeout: 30 * time.Second,
		shutdownGrace:   15 * time.Second,

		recovery:   recovery.DefaultConfig(),
		recoveryOn: true,

		stateCacheSize: DefaultStateCacheSize,
		waitPoll:       [2]time.Duration{waitPollMin, waitPollMax},
	}
}

// group is the consumer group of the callback topic: one per region,
// cluster, service and domain, so that every orchestrating deployment
// sees every reply and keeps those of its own scope.
func (c *config) group(scope eventstore.Scope, domain string) string {
	if c.groupID != "" {
		return c.groupID
	}
	g := topics.Prefix + "." + scope.Region + "." + scope.Cluster + "." + scope.Service + "." + domain + ".orchestrator"
	if c.groupType == topics.GroupShare {
		g += ".share" // a group id is either a consumer or a share group
	}
	return g
}

// DefaultClaimLease is how long a share-group orchestrator holds its claim
// on a saga version while it applies a reply (WithClaimLease).
const DefaultClaimLease = 10 * time.Second

// WithGroupType chooses how the orchestrator consumes the domain's callback
// topic, overriding topics.GroupConsumer. With topics.GroupShare its
// instances join a Kafka share group (KIP-932, Kafka 4.2+): any number of
// them share the callback topic's partitions, and replies of one saga may
// reach several instances at once, so every transition is fenced (see
// "Share groups" in the package documentation). The default group becomes
// "….orchestrator.share". An unknown type makes New fail.
func WithGroupType(g topics.GroupType) Option {
	return optFunc(func(c *config) { c.groupType = g })
}

// WithShareSettings sets the share group's delivery limit and acquisition
// lock (default: 5 deliveries, the broker's 30s lock), applied when Run
// starts. Only with WithGroupType(topics.GroupShare); out-of-range values
// make New fail.
func WithShareSettings(s topics.ShareSettings) Option {
	return optFunc(func(c *config) { c.share = s })
}

// WithClaimLease sets how long a share-group orchestrator holds the claim
// on the saga version it is advancing (DefaultClaimLease, 10s; whole
// seconds, at least 1s): another instance holding a reply of the same
// version releases it for later while the claim lives, and takes over once
// it expired if the saga did not move (the claimer died). Choose it longer
// than a transition can take (publish and persist).
func WithClaimLease(d time.Duration) Option {
	return optFunc(func(c *config) { c.claimLease = d })
}

// WithInstanceID makes the orchestrator a static member of its callback
// topic's consumer group (Kafka's group.instance.id, KIP-345): restarted
// with the same id after it died (kill -9, a crash, an OOM kill), it gets
// its partitions back as soon as it joins, instead of after the session
// timeout of its previous life (WithSessionTimeout), and without a
// rebalance. A graceful stop (Run's context ends, Close) leaves the group,
// as a dynamic member does, so that a process that does not come back
// does not hold its partitions for a session timeout.
//
// The id must be stable across the restarts of one process (a
// StatefulSet's pod name, a host name plus a slot) and unique among the
// live instances of the deployment: two live processes must never share
// one. If they do, Kafka gives the partitions to the one that joined last
// and Run of the other returns an error wrapping topics.ErrInstanceFenced.
// 1 to 249 of [a-zA-Z0-9._-] (topics.ValidInstanceID); New fails
// otherwise, and with a share group (WithGroupType), which has no static
// members. Default: none (a dynamic member).
func WithInstanceID(id string) Option {
	return optFunc(func(c *config) { c.membership.InstanceID, c.instanceSet = id, true })
}

// WithSessionTimeout sets the session timeout of the callback topic's
// consumer group (kgo.SessionTimeout, Kafka's session.timeout.ms),
// overriding topics.DefaultSessionTimeout (10s): how long the group waits
// for an instance that stopped heartbeating (killed, hung, cut off) before
// its partitions go to another instance, or to its own restart when it
// has no instance id. Shorter moves them sooner but makes a process that
// stalls that long (CPU starvation, a paused VM, a network blip) lose its
// partitions and rejoin: correct (replies are redelivered; the saga's
// state is written once, though a reply it was applying as it lost its
// partitions may be applied by its successor too, which WithListener's
// listeners then see twice), but a rebalance. The heartbeat interval becomes a third of it
// when that is under 3s. Between topics.MinSessionTimeout and
// topics.MaxSessionTimeout (New fails otherwise, and with a share group)
// and within the brokers' group.min/max.session.timeout.ms (6s to 30min by
// default; Run fails with topics.ErrSessionTimeoutRefused otherwise).
// YAML: stacksaga.kafka.orchestrator.domains.<domain>.session-timeout
// (topics.LoadGroupConfig).
func WithSessionTimeout(d time.Duration) Option {
	return optFunc(func(c *config) { c.membership.SessionTimeout = d })
}

// WithBrokers sets the Kafka seed brokers. Required unless WithKafkaOpts
// supplies kgo.SeedBrokers.
func WithBrokers(brokers ...string) Option {
	return optFunc(func(c *config) { c.brokers = append(c.brokers, brokers...) })
}

// WithKafkaOpts adds franz-go client options (TLS, SASL, tuning). They are
// applied after the orchestrator's own, to its producer and to its
// consumer; consumer and group options (kgo.ConsumerOpt, kgo.GroupOpt, the
// share group's among them) to its consumer only.
func WithKafkaOpts(opts ...kgo.Opt) Option {
	return optFunc(func(c *config) { c.kafkaOpts = append(c.kafkaOpts, opts...) })
}

// WithStore sets the event store. Default: a new in-memory store (the
// embedded default), closed with the orchestrator.
func WithStore(s eventstore.Store) Option { return optFunc(func(c *config) { c.setStore(s) }) }

// WithRegion sets the instance's region (stacksaga.instance.region). Default
// "default" (code 1). A custom region needs WithRegionResolver.
func WithRegion(region string) Option { return optFunc(func(c *config) { c.region = region }) }

// WithCluster sets the virtual cluster (stacksaga.instance.cluster).
// Default "default".
func WithCluster(cluster string) Option { return optFunc(func(c *config) { c.cluster = cluster }) }

// WithRegionResolver maps region names to their 12-bit codes. Default: only
// "default" (code 1) is known.
func WithRegionResolver(r RegionResolver) Option {
	return optFunc(func(c *config) { c.regions = r })
}

// WithLogger sets the logger. Default slog.Default().
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *config) { c.logger = l }) }

// WithConcurrency bounds the replies handled at once (replies of one saga
// are always handled in order). Default 256.
func WithConcurrency(n int) Option { return optFunc(func(c *config) { c.concurrency = n }) }

// WithGroup sets the consumer group of the callback topic. Default
// "stacksaga.<region>.<cluster>.<service>.<domain>.orchestrator". Instances
// of one deployment must share it; different deployments (regions, virtual
// clusters, services) sharing a domain must not.
func WithGroup(id string) Option { return optFunc(func(c *config) { c.groupID = id }) }

// WithListener registers a function called synchronously on every state
// change. It must be quick and must not call back into the orchestrator.
//
// Delivery is at least once across instances: the instance that applies a
// reply calls its listeners, and when the reply's callback partition moves
// to another instance while it is being applied (a rebalance whose drain
// outlasts kafkaloop.DefaultMaxBatchTime, or an instance that stalled past
// its session timeout and was replaced), the new owner applies the same
// reply from the state it reads and calls its own listeners too. The store
// keeps one state (the writes share the saga's version and fence), and the
// next command, sent twice, is deduplicated by the worker's guard; but a
// listener may see a change, a saga's end among them, twice. A listener
// that must act once per saga end (a mail, a webhook) deduplicates by
// Event.TxID: a saga ends once, in one state. With one instance every
// change is delivered once.
func WithListener(f func(Event)) Option {
	return optFunc(func(c *config) { c.listeners = append(c.listeners, f) })
}

// WithClock sets the clock. Default time.Now in UTC.
func WithClock(now func() time.Time) Option { return optFunc(func(c *config) { c.now = now }) }

// WithProvision sets how Run creates the callback topic and its dead-letter
// topic. Default topics.Provision{} (its own defaults).
func WithProvision(p topics.Provision) Option {
	return optFunc(func(c *config) { c.topicCfg = p; c.provision = true })
}

// WithoutProvision stops Run from creating topics (they must exist).
func WithoutProvision() Option { return optFunc(func(c *config) { c.provision = false }) }

// WithDeliveryTimeout bounds how long a command is retried by the Kafka
// client before its publish fails. Default 30s.
func WithDeliveryTimeout(d time.Duration) Option {
	return optFunc(func(c *config) { c.deliveryTimeout = d })
}

// WithShutdownGrace bounds how long, after Run's context ends, the replies
// in flight may still publish their next commands. Default 15s.
func WithShutdownGrace(d time.Duration) Option {
	return optFunc(func(c *config) { c.shutdownGrace = d })
}

// WithSagaTimeout sets the domain's saga-level deadline (Temporal's
// workflow execution timeout), counted from the saga's creation: a saga
// whose forward steps have not all completed by then fails non-retryably
// with an error saying "saga timed out" and compensates the steps that
// completed (a step whose reply comes after the deadline included; a
// parked retry is not re-driven). A step in flight at the deadline is
// waited for, as after a Cancel: the saga becomes CANCELLING, and the
// step is compensated if it succeeds, or if its step timeout passes
// with no reply (its outcome is unknown). Compensation itself is not bounded by it, and a
// paused saga is held by its pause deadline instead. 0 turns it off; it
// overrides the recovery configuration's
// stacksaga.cassandra.recovery.deadline.domains.<domain>.saga-timeout
// (none by default). Valid: 0 or 10ms..recovery.MaxSagaTimeout.
func WithSagaTimeout(d time.Duration) Option {
	return optFunc(func(c *config) { c.sagaTimeout, c.sagaTimeoutSet = d, true })
}

// WithRecovery sets the recovery configuration (see package recovery and
// recovery.LoadConfigFile): the window interval, the per-domain retry and
// restore delays, the retry policy per domain and endpoint, the transaction
// lifetime. Recovery is on by default with recovery.DefaultConfig(): every
// saga start registers a restore watchdog, every retryable failure a retry,
// and a terminal state deletes the watchdog. Retry policies are looked up by
// the domain name and the endpoint as "service/endpoint".
//
// What this orchestrator does itself is the in-process retry of a
// retryable failure (initial-interval) and the step timeouts. What the
// directory holds is acted on only by a retry node (WithRetryNode): the
// retries whose process died, the restore watchdogs of stalled sagas, pause
// deadlines and sagactl's restore and resume requests. Run at least one
// retry node per service.
func WithRecovery(cfg recovery.Config) Option {
	return optFunc(func(c *config) { c.recovery, c.recoveryOn = cfg, true })
}

// WithoutRecovery turns the recovery directory off: no watchdogs and no
// retry registrations are written, and sagas parked in RETRY_PENDING or
// stranded in flight wait for Redrive or Restore. It saves the two
// statements per saga that the watchdog costs.
func WithoutRecovery() Option {
	return optFunc(func(c *config) { c.recoveryOn = false })
}

// WithRetryNode makes the orchestrator a retry node as well as a standard
// node: Run also runs a recovery.Engine over the orchestrator's scope that
// re-drives, once their windows are sealed, the sagas registered for a
// retry and those whose restore watchdog fired while still unfinished.
// opts configure the engine (recovery.WithRanges for the token range the
// node scans — the whole ring by default, recovery.WithScanEvery,
// recovery.WithLogger); the clock is the orchestrator's. Run at least one
// retry node per service, or nothing heals on its own.
func WithRetryNode(opts ...recovery.Option) Option {
	return optFunc(func(c *config) { c.retryNode = true; c.engineOpts = append(c.engineOpts, opts...) })
}

// FaultPoint names a point where WithFaultInjection can make the
// orchestrator abandon a saga.
type FaultPoint int

const (
	// FaultAfterCreate: the saga is persisted but its first command is
	// never published.
	FaultAfterCreate FaultPoint = iota + 1
	// FaultBeforePublish: a reply is applied and the saga persisted as
	// waiting for its next step, whose command is never published.
	FaultBeforePublish
	// FaultBeforePublishRevert: the same in compensation.
	FaultBeforePublishRevert
	// FaultParkRetry: a saga is being parked in RETRY_PENDING (a retryable
	// failure, a command that cannot be published) and only the first of
	// its two writes, the retry registration, is done.
	FaultParkRetry
	// FaultAfterClaim: a Start with a business key (WithBusinessKey) has
	// claimed the key but not yet created the saga. Start returns the id
	// the key names, and no saga with it exists. A hook that blocks here
	// and returns false makes a slow Start instead.
	FaultAfterClaim
	// FaultLoseCommand: a command is lost on its way to the worker (as if
	// the broker dropped it): nothing is published, yet the orchestrator
	// goes on as if it had been, and stays alive: its step timer fails the
	// attempt at the step timeout and the step is retried. The saga is not
	// abandoned (Stats.Abandoned does not count it). Asked before every
	// command is published.
	FaultLoseCommand
)

// String names the point.
func (p FaultPoint) String() string {
	switch p {
	case FaultAfterCreate:
		return "after-create"
	case FaultBeforePublish:
		return "before-publish"
	case FaultBeforePublishRevert:
		return "before-publish-revert"
	case FaultParkRetry:
		return "park-retry"
	case FaultAfterClaim:
		return "after-claim"
	case FaultLoseCommand:
		return "lose-command"
	}
	return fmt.Sprintf("FaultPoint(%d)", int(p))
}

// WithFaultInjection is for tests and demos of recovery: at each point,
// when f returns true for the saga, the orchestrator abandons it there with
// no cleanup, as if its process had died at that instant, and goes on with
// the other sagas. The restore watchdog (or Restore) is what brings such a
// saga back.
func WithFaultInjection(f func(p FaultPoint, txID string) bool) Option {
	return optFunc(func(c *config) { c.fault = f })
}

// WithStateCacheSize bounds the sagas whose last persisted state the
// orchestrator keeps in memory, so that applying a reply reads nothing
// from the store (default DefaultStateCacheSize; 0 turns the cache off and
// every reply reads the saga row). A saga beyond the bound is read from the
// store when its reply comes. Only the sagas whose callback partition this
// instance owns while Run consumes are cached (a saga started before Run
// is read once), and a share group caches nothing.
func WithStateCacheSize(n int) Option { return optFunc(func(c *config) { c.stateCacheSize = n }) }

// WithMarkerCleanup makes the orchestrator delete a saga's execution
// markers with one partition delete when the saga ends (the seed's
// cleanup). By default it does not: the guards write committed markers with
// a retention TTL (writeprotect.Config.MarkerRetention) and they expire by
// themselves, which lets a late duplicate find its step's marker without a
// read of the saga's state. With cleanup on, the workers' guards need
// writeprotect.WithTerminalFence, or a duplicate arriving after the end
// runs its step again.
func WithMarkerCleanup() Option { return optFunc(func(c *config) { c.markerCleanup = true }) }

// WithStartVersion makes new sagas start with definition version v (which
// Domain.Versions must register) instead of the newest. A rolling deploy
// that adds a version uses it to register the new version on every
// instance first, starting sagas with the old one, and then switches.
func WithStartVersion(v int) Option {
	return optFunc(func(c *config) { c.startVersion = v })
}
