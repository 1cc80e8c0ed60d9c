package worker

import (
	sagaconfig "github.com/stacksaga-go/stacksaga/config"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/topics"
)

// Defaults of the options.
const (
	// DefaultConcurrency bounds the commands handled at once.
	DefaultConcurrency = 64
	// DefaultMaxRecordBytes is the largest command record (key plus value)
	// a worker handles; larger ones are dead-lettered.
	DefaultMaxRecordBytes = 1 << 20
)

// Option configures a Worker.
type Option interface {
	apply(*config)
}

type option func(*config)

func (o option) apply(c *config) { o(c) }

type config struct {
	brokers        []string
	kopts          []kgo.Opt
	logger         *slog.Logger
	concurrency    int
	maxRecordBytes int
	group          string
	provision      topics.Provision
	noProvision    bool
	guard          Guard
	guardSet       bool     // WithGuard was given
	domains        []string // WithDomains
	// file is WithConfig's document, fileErr its Kafka settings' error.
	file           *sagaconfig.Config
	fileErr        error
	region         string
	cluster        string
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	groupType      topics.GroupType
	groupSet       bool
	share          topics.ShareSettings
	membership     topics.Membership
	instanceSet    bool // WithInstanceID was given (an empty id is refused)
}

// WithBrokers sets the seed brokers, overriding kgo's default
// (127.0.0.1:9092). A kgo.SeedBrokers passed with WithKafkaOpts wins over
// this option. An empty address makes New fail.
func WithBrokers(brokers ...string) Option {
	return option(func(c *config) { c.brokers = append([]string(nil), brokers...) })
}

// WithKafkaOpts adds kgo client options (TLS, SASL, a test's hooks...),
// applied after the worker's own, so they override them. The default is
// none. Do not override OnPartitionsRevoked (the worker commits there) or
// OnPartitionsAssigned (Running depends on it). A nil option makes New fail.
func WithKafkaOpts(opts ...kgo.Opt) Option {
	return option(func(c *config) { c.kopts = append(c.kopts, opts...) })
}

// WithLogger sets the logger, overriding slog.Default(). The worker logs
// dead letters at Warn, panics and undeliverable replies at Error, never a
// record at Info. A nil logger makes New fail.
func WithLogger(l *slog.Logger) Option {
	return option(func(c *config) { c.logger = l })
}

// WithConcurrency bounds the commands handled at once, overriding
// DefaultConcurrency (64). Commands of one transaction (one record key)
// always run one after the other.
func WithConcurrency(n int) Option {
	return option(func(c *config) { c.concurrency = n })
}

// WithMaxRecordBytes sets the largest command record (key plus value) the
// worker handles, overriding DefaultMaxRecordBytes (1 MiB). Larger records
// go to the dead-letter topic.
func WithMaxRecordBytes(n int) Option {
	return option(func(c *config) { c.maxRecordBytes = n })
}

// WithGroup sets the consumer group, overriding "stacksaga.<service>.worker".
// Every instance of a service must use the same group.
func WithGroup(id string) Option {
	return option(func(c *config) { c.group, c.groupSet = id, true })
}

// WithProvision sets how Run creates the command topic and its dead-letter
// topic if they are missing, overriding topics.Provision{} (8 partitions,
// the broker's default replication factor).
func WithProvision(p topics.Provision) Option {
	return option(func(c *config) { c.provision = p; c.noProvision = false })
}

// WithoutProvision makes Run use the topics as they are instead of
// creating missing ones (the default is to create them), for clusters whose
// topics are managed elsewhere.
func WithoutProvision() Option {
	return option(func(c *config) { c.noProvision = true })
}

// WithGuard wraps every command's execution in g (the write-protection
// layer), overriding the default, which runs the command as is. A nil g
// makes New fail. A g that also has ExecuteOverlapped (as
// writeprotect.Guard) is called through that method in a consumer group:
// it records the outcome while the worker sends the reply (see
// writeprotect, "The record and the reply, side by side"). A type that
// embeds *writeprotect.Guard to wrap Execute must wrap ExecuteOverlapped
// too, or its Execute is bypassed.
func WithGuard(g Guard) Option {
	return option(func(c *config) { c.guard, c.guardSet = g, true })
}

// WithDomains names the saga domains whose commands this worker serves.
// With it, New judges the write-protection domain names of the file given
// to WithConfig (stacksaga.cassandra.write-protection.domains) as the
// orchestrator does at start: a configured name that matches none of
// domains is warned about, or refused under stacksaga.instance.strict-names
// (config.CheckNames), and the mode of each is logged. Without it, a worker
// cannot judge those names at start; its Guard (writeprotect) logs each
// domain's mode at its first command and warns then when a domain runs at
// the default while configured names matched nothing, and strict-names
// with a write-protection domains section refuses the start, asking for
// WithDomains.
func WithDomains(domains ...string) Option {
	return option(func(c *config) { c.domains = append(c.domains, domains...) })
}

// WithRegion names the region this worker runs in (default ""), used in
// logs and available to guards through Region.
func WithRegion(region string) Option {
	return option(func(c *config) { c.region = region })
}

// WithCluster names the virtual cluster this worker runs in (default ""),
// used in logs and available to guards through Cluster.
func WithCluster(cluster string) Option {
	return option(func(c *config) { c.cluster = cluster })
}

// WithGroupType chooses how the worker consumes its command topic,
// overriding topics.GroupConsumer: topics.GroupShare joins a Kafka share
// group (KIP-932, Kafka 4.2+), so that any number of instances work one
// partition, each command acknowledged on its own (see the package
// documentation, "Share groups"). The default group becomes
// "stacksaga.<service>.worker.share" (a group id is either a consumer or a
// share group). An unknown type makes New fail.
func WithGroupType(g topics.GroupType) Option {
	return option(func(c *config) { c.groupType = g })
}

// WithShareSettings sets the share group's delivery limit and acquisition
// lock (topics.ShareSettings; default: 5 deliveries, the broker's lock of
// 30s), applied to the group when Run starts. It only matters with
// WithGroupType(topics.GroupShare). Out-of-range values make New fail.
func WithShareSettings(s topics.ShareSettings) Option {
	return option(func(c *config) { c.share = s })
}

// WithInstanceID makes the worker a static member of its consumer group
// (Kafka's group.instance.id, KIP-345): restarted with the same id after
// it died (kill -9, a crash, an OOM kill), it gets its partitions back as
// soon as it joins, instead of after the session timeout of its previous
// life (WithSessionTimeout), and without a rebalance. A graceful stop
// (Run's context ends, Close) leaves the group, as a dynamic member does,
// so that a process that does not come back does not hold its partitions
// for a session timeout.
//
// The id must be stable across the restarts of one process (a
// StatefulSet's pod name, a host name plus a slot) and unique among the
// live instances of the service: two live processes must never share one.
// If they do, Kafka gives the partitions to the one that joined last and
// Run of the other returns an error wrapping topics.ErrInstanceFenced.
// 1 to 249 of [a-zA-Z0-9._-] (topics.ValidInstanceID); New fails
// otherwise, and with a share group (WithGroupType), which has no static
// members. Default: none (a dynamic member).
func WithInstanceID(id string) Option {
	return option(func(c *config) { c.membership.InstanceID, c.instanceSet = id, true })
}

// WithSessionTimeout sets the session timeout of the worker's consumer
// group (kgo.SessionTimeout, Kafka's session.timeout.ms), overriding
// topics.DefaultSessionTimeout (10s): how long the group waits for an
// instance that stopped heartbeating (killed, hung, cut off) before its
// partitions go to another instance, or to its own restart when it has no
// instance id. Shorter moves them sooner but makes a process that stalls
// that long (CPU starvation, a paused VM, a network blip) lose its
// partitions and rejoin: correct (commands are redelivered; guard them),
// but a rebalance. The heartbeat interval becomes a third of it when that
// is under 3s. Between topics.MinSessionTimeout and
// topics.MaxSessionTimeout (New fails otherwise, and with a share group)
// and within the brokers' group.min/max.session.timeout.ms (6s to 30min by
// default; Run fails with topics.ErrSessionTimeoutRefused otherwise).
// YAML: stacksaga.kafka.worker.services.<service>.session-timeout
// (topics.LoadGroupConfig).
func WithSessionTimeout(d time.Duration) Option {
	return option(func(c *config) { c.membership.SessionTimeout = d })
}
