// Package orchestrator is the saga execution coordinator: it starts sagas,
// asks the domain's event manager for the next step (OnNext) or the next
// compensation (OnNextRevert), publishes commands to the workers' command
// topics, consumes the domain's one callback topic, and persists every
// transition and step attempt through the event store.
//
// An Orchestrator is generic over the saga's domain entity T, which travels
// msgpack-encoded in every command and reply.
//
// # Business keys
//
// Start(ctx, entity, WithBusinessKey(key)) starts at most one saga per key
// (per scope and domain, for the key's retention): a second Start with the
// key, on any instance, returns the first saga's id and an *ExistsError
// (errors.Is(err, ErrExists)). The key is claimed in the event store
// (eventstore.BusinessKeys; on Cassandra a lightweight transaction on
// es_business_key) before the saga is created, and the claim records the
// saga's id, entity and creation time. A Start that finds the key claimed
// but no saga waits for it up to a grace period (WithBusinessKeyGrace,
// default 10s) after the claim, then takes the claim over and creates the
// saga itself, from the recorded entity and under the recorded id, with a
// fence that makes its create win over a late create of the Start it
// replaced; that one, if it was only slow, confirms its claim before it
// sends anything, finds it lost and sends nothing. So a Start whose process
// dies after its claim or after its create still leaves one saga, which
// the next Start with the key completes (created by it) or the saga's
// watchdog restores (already created). A Start whose saga was not created
// (its create refused, its context ended first) releases the key. Keys
// are kept for WithBusinessKeyRetention (default the transaction lifetime).
// The clocks of the instances must differ by less than half the grace
// period. A keyed Start costs one conditional write more than a plain one
// (a plain Start is unchanged); a duplicate, that write and one read.
//
// Wait(ctx, id) returns a saga once it is terminal: at once when this
// instance applies its last transition, otherwise by reading it at growing
// intervals (200 ms up to 5 s).
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/kafkaloop"
	"github.com/stacksaga-go/stacksaga/internal/wait"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Errors callers branch on.
var (
	// ErrClosed means the orchestrator was closed.
	ErrClosed = errors.New("orchestrator: closed")
	// ErrStarted means Run was called a second time.
	ErrStarted = errors.New("orchestrator: already running")
	// ErrNotRetryPending means Redrive was called on a saga that is not
	// parked after a retryable error.
	ErrNotRetryPending = errors.New("orchestrator: saga is not retry-pending")
	// ErrNotFound means no saga has that transaction id.
	ErrNotFound = eventstore.ErrNotFound
	// ErrNotInFlight means Restore was called on a saga that has no step
	// in flight: it is terminal, paused or parked in RETRY_PENDING (use
	// Redrive for those).
	ErrNotInFlight = errors.New("orchestrator: saga has no step in flight")
	// ErrSagaTimedOut means Redrive found the saga past its saga-level
	// deadline (WithSagaTimeout): instead of re-sending its step it failed
	// the saga, whose compensation has begun.
	ErrSagaTimedOut = errors.New("orchestrator: saga timed out")
	// ErrNoCallbackTopic means Start found the domain's callback topic
	// missing and topic provisioning is disabled (WithoutProvision): a
	// worker could not reply, so no saga is started.
	ErrNoCallbackTopic = errors.New("orchestrator: callback topic does not exist")
)

// Orchestrator drives the sagas of one domain for one service.
type Orchestrator[T any] struct {
	// instance names this orchestrator in the reply claims of a share
	// group (unique per New).
	instance string
	service  string
	domain   Domain[T]
	// defs are the domain's definition versions (version.go);
	// startVersion the one new sagas start with.
	defs         definitions[T]
	startVersion int
	cfg          config
	store        eventstore.Store
	watched      eventstore.WatchedCreator // store, if it is one (nil otherwise)
	scope        eventstore.Scope
	code         uint16
	prod         *kgo.Client // commands and dead letters; made by New
	cbTopic      string

	locks [4096]sync.Mutex
	seed  maphash.Seed

	// topicsMu serialises the first Start's check that the callback
	// topic exists; topicsReady skips it afterwards.
	topicsMu    sync.Mutex
	topicsReady atomic.Bool

	// shareRenew: the share group's record locks are renewed while a reply
	// is applied (set by runShare before the first reply).
	shareRenew bool

	stats counters
	cache stateCache
	waits waiters // the calls of Wait
	tel   otelState

	// rec registers watchdogs and retries (nil: WithoutRecovery); engine
	// is the retry node's engine (nil unless WithRetryNode); restoreDelay
	// is the longest a saga may go without a transition before a restore
	// pickup re-sends its step (K windows; a step with a timeout is
	// restored sooner: restoreAfter).
	rec          *recovery.Writer
	engine       *recovery.Engine
	restoreDelay time.Duration
	win          recovery.Windows
	redriver     recovery.Redriver
	// retries are the in-process retries of the sagas this orchestrator
	// parked (fastretry.go).
	retries sagaTimers
	// steps are the step timeouts of the sagas this orchestrator sent a
	// command of (steptimeout.go).
	steps sagaTimers
	// stepTimeouts caches the step timeout of each endpoint (qualified
	// endpoint -> time.Duration).
	stepTimeouts sync.Map

	mu        sync.Mutex // guards closed, cancelRun
	closed    bool
	runErr    error // why Run failed (closedErr), set before it closes
	started   atomic.Bool
	cancelRun context.CancelFunc
	done      chan struct{} // closed when Run returns
	running   chan struct{}
	runOnce   sync.Once
	release   sync.Once
}

type counters struct {
	started, replies, stale, foreign, commands, deadLettered atomic.Int64
	completed, compensated, compensationFailed               atomic.Int64
	retried, restored, disabled, exhausted, abandoned        atomic.Int64
	fastRetried, timedOut                                    atomic.Int64
	// cancel.go
	cancelled, terminated, controlsIgnored, afterTerminate atomic.Int64
	// terminatedDisabled counts the terminated sagas that were DISABLED
	// (already out of the in-flight gauge).
	terminatedDisabled atomic.Int64
	// version.go
	unknownVersion atomic.Int64
	// what became of the sagas whose Start failed after a create that
	// may have landed (failStart), one counter per outcome so that each
	// is monotonic
	startsMarked, startsRestorable, startsUnwatched atomic.Int64
}

// Stats is a snapshot of an orchestrator's counters.
type Stats struct {
	Started            int64
	Replies            int64 // replies applied
	StaleReplies       int64 // duplicate or stale replies ignored
	ForeignReplies     int64 // replies for another region, cluster or service, ignored
	Commands           int64 // commands published
	DeadLettered       int64
	Completed          int64
	Compensated        int64
	CompensationFailed int64
	// Retried counts sagas re-driven from RETRY_PENDING (Redrive, by
	// hand or by the retry node); Restored the steps re-sent by restore
	// pickups and Restore; Disabled the sagas frozen as DISABLED for
	// outliving their lifetime; Exhausted the steps that failed after their
	// retry policy's last attempt; Abandoned the sagas dropped by
	// WithFaultInjection.
	Retried, Restored, Disabled, Exhausted, Abandoned int64
	// FastRetried counts the re-drives of Retried done by this
	// orchestrator's in-process retry timers (recovery.RetryPolicy.Backoff)
	// rather than by a retry node's window scan or by hand; RetryTimers is
	// how many such timers are armed now.
	FastRetried, RetryTimers int64
	// TimedOut counts the step attempts this orchestrator failed for
	// exceeding their step timeout (recovery.RetryPolicy.StepTimeout).
	TimedOut int64
	// Cancelled and Terminated count the Cancel and Terminate requests
	// this instance applied (as the owner of the saga's replies);
	// ControlsIgnored those it found with nothing to do (the saga had
	// ended, or was compensating already); RepliesAfterTerminate the
	// replies it ignored because their saga was TERMINATED (also counted
	// in StaleReplies).
	Cancelled, Terminated, ControlsIgnored, RepliesAfterTerminate int64
	// UnknownVersion counts the replies, cancels and resumes this
	// instance left alone because their saga's definition version is not
	// registered here (see Domain.Versions).
	UnknownVersion int64
	// FailedStarts counts the Start calls whose create failed but may have
	// landed (a timeout, a batch applied in part), after which Start tried
	// (or, too late to, did not try) to mark the saga COMPENSATED to keep
	// it from running.
	// FailedStartsUnmarked counts those whose mark did not land either:
	// such a saga, if its create landed, is restored by its watchdog and
	// runs although Start failed (logged at WARN), unless it is counted in
	// FailedStartsUnwatched too: left without a watchdog (it could not be
	// written, or recovery is off), so that if its create landed it stays
	// in flight with no command sent until an admin restores it (Restore;
	// logged at ERROR with its id).
	FailedStarts, FailedStartsUnmarked, FailedStartsUnwatched int64
}

// Awaiting is the number of commands this instance published whose reply
// it has neither applied nor found stale yet (Commands - Replies -
// StaleReplies, at least 0). A reply is counted once applied, after the
// command it leads to is published. With a domain on one instance, 0 means
// no step of its sagas is in flight (a paused step, a saga waiting for its
// retry or abandoned by a crash has no command in flight); with several
// instances, replies reach the instance that owns their callback partition,
// so only the sum over the instances means that.
func (s Stats) Awaiting() int64 {
	return max(s.Commands-s.Replies-s.StaleReplies, 0)
}

// New returns an orchestrator for domain, embedded in service. It validates
// its arguments and options; the Kafka client connects lazily.
func New[T any](service string, domain Domain[T], opts ...Option) (*Orchestrator[T], error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	var errs []error
	if err := topics.ValidName(service); err != nil {
		errs = append(errs, fmt.Errorf("orchestrator: service: %w", err))
	}
	if err := topics.ValidName(domain.Name); err != nil {
		errs = append(errs, fmt.Errorf("orchestrator: domain name: %w", err))
	}
	errs = append(errs, cfg.applyFile(service, domain.Name)...)
	defs, defErrs := newDefinitions(domain)
	errs = append(errs, defErrs...)
	startVersion := defs.newest
	if cfg.startVersion != 0 {
		startVersion = cfg.startVersion
		if defs.byVersion[startVersion] == nil && len(defErrs) == 0 {
			errs = append(errs, fmt.Errorf("orchestrator: WithStartVersion(%d): not a registered definition version (registered: %v)", cfg.startVersion, keysOf(defs.byVersion)))
		}
	}
	if len(cfg.brokers) == 0 && len(cfg.kafkaOpts) == 0 {
		errs = append(errs, errors.New("orchestrator: no Kafka brokers (use WithBrokers)"))
	}
	if cfg.logger == nil {
		errs = append(errs, errors.New("orchestrator: WithLogger(nil)"))
	}
	if cfg.now == nil {
		errs = append(errs, errors.New("orchestrator: WithClock(nil)"))
	}
	if cfg.regions == nil {
		errs = append(errs, errors.New("orchestrator: WithRegionResolver(nil)"))
	}
	if cfg.concurrency < 1 {
		errs = append(errs, fmt.Errorf("orchestrator: WithConcurrency(%d): want at least 1", cfg.concurrency))
	}
	if cfg.groupType == "" {
		cfg.groupType = topics.GroupConsumer
	}
	if !cfg.groupType.Valid() {
		errs = append(errs, fmt.Errorf("orchestrator: WithGroupType(%q): want %s or %s", cfg.groupType, topics.GroupConsumer, topics.GroupShare))
	}
	if err := cfg.share.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("orchestrator: WithShareSettings: %w", err))
	}
	if err := cfg.membership.Validate(); err != nil {
		for _, e := range strings.Split(err.Error(), "\n") {
			errs = append(errs, fmt.Errorf("orchestrator: %s", membershipOption(e)))
		}
	}
	if cfg.instanceSet && cfg.membership.InstanceID == "" {
		errs = append(errs, errors.New(`orchestrator: WithInstanceID(""): want an instance id (leave the option out for a dynamic member)`))
	}
	if cfg.groupType == topics.GroupShare && (cfg.membership != topics.Membership{}) {
		errs = append(errs, errors.New("orchestrator: WithInstanceID and WithSessionTimeout are for a consumer group; a share group has neither (its records held by a dead instance come back after the record lock, WithShareSettings)"))
	}
	if cfg.claimLease == 0 {
		cfg.claimLease = DefaultClaimLease
	}
	if cfg.claimLease < time.Second {
		errs = append(errs, fmt.Errorf("orchestrator: WithClaimLease(%v): want at least 1s", cfg.claimLease))
	}
	errs = append(errs, cfg.businessKeyDefaults()...)
	if d := cfg.sagaTimeout; cfg.sagaTimeoutSet && (d < 0 || d > recovery.MaxSagaTimeout || (d > 0 && d < 10*time.Millisecond)) {
		errs = append(errs, fmt.Errorf("orchestrator: WithSagaTimeout(%v): want 0 (none) or 10ms..%v", d, recovery.MaxSagaTimeout))
	}
	if !cfg.sagaTimeoutSet {
		cfg.sagaTimeout = cfg.recovery.SagaTimeout(domain.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	code, err := cfg.regions.RegionCode(cfg.region)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	o := &Orchestrator[T]{
		instance:     uuid.NewString(),
		service:      service,
		domain:       domain,
		defs:         defs,
		startVersion: startVersion,
		cfg:          cfg,
		store:        cfg.store,
		scope:        eventstore.Scope{Region: cfg.region, Cluster: cfg.cluster, Service: service},
		code:         code,
		cbTopic:      topics.CallbackTopic(domain.Name),
		seed:         maphash.MakeSeed(),
		running:      make(chan struct{}),
		done:         make(chan struct{}),
	}
	if err := o.initTelemetry(); err != nil {
		return nil, err
	}
	// The producer is separate from the consumer that Run makes: an
	// orchestrator that only starts sagas (or has not reached Run yet)
	// must not join the callback topic's group and hold partitions that
	// nobody polls.
	o.prod, err = kgo.NewClient(kafkaloop.WithoutConsumerOpts(o.baseOpts(append(kafkaloop.ProducerOpts(),
		kgo.RecordDeliveryTimeout(cfg.deliveryTimeout),
	)...))...)
	if err != nil {
		o.closeTelemetry()
		return nil, fmt.Errorf("orchestrator: kafka client: %w", err)
	}
	if o.store == nil {
		o.store = memory.New(memory.WithClock(cfg.now))
		o.cfg.ownStore = true
	}
	o.watched, _ = o.store.(eventstore.WatchedCreator)
	if o.cfg.groupType == topics.GroupConsumer {
		// A share group reads each saga under its reply claim: no cache.
		o.cache.limit = int64(cfg.stateCacheSize)
		o.cache.part = kgo.StickyKeyPartitioner(nil).ForTopic(o.cbTopic)
	}
	o.redriver = &entryRedriver{o.redriveEntry} // a pointer: comparable in the mux
	if err := o.initRecovery(); err != nil {
		o.closeTelemetry()
		o.prod.Close()
		if o.cfg.ownStore {
			_ = o.store.Close()
		}
		return nil, err
	}
	// Any retry node of the scope running in this process can hand this
	// domain's directory entries to o.
	muxFor(o.scope).register(o.domain.Name, o.redriver)
	return o, nil
}

// membershipOption renames the key of a topics.Membership problem
// ("instance-id: ...") after the option that set it.
func membershipOption(problem string) string {
	key, msg, _ := strings.Cut(problem, ": ")
	switch key {
	case "instance-id":
		return "WithInstanceID: " + msg
	case "session-timeout":
		return "WithSessionTimeout: " + msg
	}
	return problem
}

// baseOpts returns the seed brokers, then opts, then the user's options.
func (o *Orchestrator[T]) baseOpts(opts ...kgo.Opt) []kgo.Opt {
	var all []kgo.Opt
	if len(o.cfg.brokers) > 0 {
		all = append(all, kgo.SeedBrokers(o.cfg.brokers...))
	}
	all = append(all, opts...)
	if o.tel.kafkaOpt != nil {
		all = append(all, o.tel.kafkaOpt)
	}
	return append(all, o.cfg.kafkaOpts...)
}

// Service returns the name of the service the orchestrator is embedded in.
func (o *Orchestrator[T]) Service() string { return o.service }

// CallbackTopic returns the domain's callback topic.
func (o *Orchestrator[T]) CallbackTopic() string { return o.cbTopic }

// Store returns the event store the orchestrator persists through.
func (o *Orchestrator[T]) Store() eventstore.Store { return o.store }

// Scope returns the partition-key prefix of the orchestrator's rows.
func (o *Orchestrator[T]) Scope() eventstore.Scope { return o.scope }

// Running is closed once Run has provisioned its topics and is consuming.
func (o *Orchestrator[T]) Running() <-chan struct{} { return o.running }

// Stats returns a snapshot of the counters.
func (o *Orchestrator[T]) Stats() Stats {
	c := &o.stats
	st := Stats{
		Started: c.started.Load(), Replies: c.replies.Load(), StaleReplies: c.stale.Load(), ForeignReplies: c.foreign.Load(),
		Commands: c.commands.Load(), DeadLettered: c.deadLettered.Load(),
		Completed: c.completed.Load(), Compensated: c.compensated.Load(),
		CompensationFailed: c.compensationFailed.Load(),
		Retried:            c.retried.Load(), Restored: c.restored.Load(), Disabled: c.disabled.Load(),
		Exhausted: c.exhausted.Load(), Abandoned: c.abandoned.Load(),
		FastRetried: c.fastRetried.Load(), RetryTimers: int64(o.retries.armed()),
		TimedOut:  c.timedOut.Load(),
		Cancelled: c.cancelled.Load(), Terminated: c.terminated.Load(),
		ControlsIgnored: c.controlsIgnored.Load(), RepliesAfterTerminate: c.afterTerminate.Load(),
		UnknownVersion: c.unknownVersion.Load(),
	}
	marked, restorable, unwatched := c.startsMarked.Load(), c.startsRestorable.Load(), c.startsUnwatched.Load()
	st.FailedStarts, st.FailedStartsUnmarked, st.FailedStartsUnwatched = marked+restorable+unwatched, restorable+unwatched, unwatched
	return st
}

// Run provisions the callback topic (and its dead-letter topic) unless
// disabled, joins the callback topic's consumer group and handles replies
// until ctx ends. It then stops polling, finishes the replies in flight
// (their commands get WithShutdownGrace to reach the broker), commits what
// is marked and releases the orchestrator, as Close does. Run may be called
// once; a second call returns ErrStarted. Run returns an error wrapping
// topics.ErrInstanceFenced when another process joined the group with its
// instance id (WithInstanceID), and one wrapping
// topics.ErrSessionTimeoutRefused when the brokers refuse its session
// timeout (WithSessionTimeout). Before joining the group it counts the
// domain's sagas in flight by definition version (InFlight) and returns a
// *VersionInFlightError (ErrVersionInFlight) naming each version that has
// sagas in flight but is not registered, with their count.
func (o *Orchestrator[T]) Run(ctx context.Context) (err error) {
	if !o.started.CompareAndSwap(false, true) {
		return ErrStarted
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		close(o.done)
		return ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	o.cancelRun = cancel
	o.mu.Unlock()
	defer func() {
		cancel()
		if err != nil {
			o.mu.Lock()
			o.runErr = err
			o.mu.Unlock()
		}
		o.releaseAll()
		close(o.done)
	}()
	if o.cfg.provision {
		if err := o.ensureTopics(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	// Refuse to drive the domain while sagas in flight use a definition
	// version that is not registered (version.go).
	if err := o.checkVersions(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	consumerOpts := append([]kgo.Opt{
		kgo.ConsumerGroup(o.cfg.group(o.scope, o.domain.Name)),
		kgo.ConsumeTopics(o.cbTopic),
		kgo.OnPartitionsAssigned(func(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
			// Called at every rebalance, with nothing new too: the first
			// one settles the sagas started before it.
			if ps := assigned[o.cbTopic]; o.cache.enabled() && (len(ps) > 0 || o.cache.pending()) {
				o.cache.assign(ps, o.callbackPartitions(ctx))
			}
		}),
	}, append(kafkaloop.ClientOpts(), kafkaloop.MembershipOpts(o.cfg.membership)...)...)
	if o.cfg.groupType == topics.GroupShare {
		consumerOpts = o.shareClientOpts()
	}
	cons, err := kgo.NewClient(o.baseOpts(consumerOpts...)...)
	if err != nil {
		return fmt.Errorf("orchestrator: kafka consumer: %w", err)
	}
	// A static member leaves the group on the way out (a process that
	// dies does not, and keeps its partitions for its restart).
	defer kafkaloop.CloseMember(cons, o.logger())
	// Replies in flight when ctx ends still publish and persist; they get
	// a grace period, after which the producer is closed, failing whatever
	// it still holds (those replies are not marked and are redelivered to
	// the next owner). A cancelled context alone would not stop a produce
	// that is being retried.
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer pcancel()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(o.cfg.shutdownGrace, func() {
			pcancel()
			o.releaseAll()
		})
		context.AfterFunc(pctx, func() { t.Stop() })
	})
	defer stopGrace()
	if o.engine != nil {
		engineDone := make(chan struct{})
		go func() {
			defer close(engineDone)
			_ = o.engine.Run(ctx)
		}()
		defer func() { <-engineDone }()
	}
	if o.cfg.groupType == topics.GroupShare {
		err = o.runShare(ctx, pctx, cons)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	o.cache.expectAssignment()
	defer o.cache.off() // Run owns no partition once it returns
	o.runOnce.Do(func() { close(o.running) })
	err = kafkaloop.Run(ctx, cons, loopHandler(pctx, o.handleRecord), kafkaloop.Options{
		Concurrency: o.cfg.concurrency,
		Logger:      o.cfg.logger,
		Revoked:     func(ps map[string][]int32) { o.cache.revoke(ps[o.cbTopic]) },
		DeadLetter: func(_ context.Context, r *kgo.Record, reason string) error {
			return o.deadLetter(pctx, r, dlGivenUp, "orchestrator: "+reason)
		},
	})
	if ctx.Err() != nil || err == nil {
		return nil
	}
	return fmt.Errorf("orchestrator: %w", err)
}

// Close stops Run (as if its context ended) and waits for it to return,
// then closes the producer (and the store, if the orchestrator made it).
// It is safe to call more than once, and without Run.
func (o *Orchestrator[T]) Close() error {
	o.mu.Lock()
	o.closed = true
	cancel := o.cancelRun
	o.mu.Unlock()
	if cancel != nil {
		cancel()
		<-o.done
	}
	o.releaseAll()
	return nil
}

// releaseAll closes the producer and an owned store, once.
func (o *Orchestrator[T]) releaseAll() {
	o.release.Do(func() {
		o.mu.Lock()
		o.closed = true
		o.mu.Unlock()
		muxFor(o.scope).unregister(o.domain.Name, o.redriver)
		o.retries.stop()
		o.steps.stop()
		o.closeTelemetry()
		o.prod.Close()
		if o.cfg.ownStore {
			_ = o.store.Close()
		}
	})
}

// closedErr gives a call that failed because Run's failure closed the
// orchestrator (ErrClosed, or the client's "client closed") the reason
// Run failed, a dial error say, wrapping both; other errors pass.
func (o *Orchestrator[T]) closedErr(err error) error {
	o.mu.Lock()
	runErr := o.runErr
	o.mu.Unlock()
	if runErr == nil || !(errors.Is(err, ErrClosed) || errors.Is(err, kgo.ErrClientClosed)) {
		return err
	}
	return fmt.Errorf("%w: Run failed: %w", ErrClosed, runErr)
}

func (o *Orchestrator[T]) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

func (o *Orchestrator[T]) lock(txID string) *sync.Mutex {
	return &o.locks[maphash.String(o.seed, txID)%uint64(len(o.locks))]
}

// ensureTopics makes sure the callback topic (and its dead-letter topic)
// exist: it creates them when provisioning is enabled, and otherwise
// checks that the callback topic exists (ErrNoCallbackTopic if not). Once
// it has succeeded it costs nothing.
func (o *Orchestrator[T]) ensureTopics(ctx context.Context) error {
	if o.topicsReady.Load() {
		return nil
	}
	o.topicsMu.Lock()
	defer o.topicsMu.Unlock()
	if o.topicsReady.Load() {
		return nil
	}
	if o.cfg.provision {
		if err := topics.Ensure(ctx, kadm.NewClient(o.prod), topics.OrchestratorTopics(o.domain.Name), o.cfg.topicCfg); err != nil {
			return fmt.Errorf("orchestrator: provision: %w", topics.NameBrokerError(err, o.cfg.brokers))
		}
	} else {
		// A direct request: kadm's cached metadata could still say
		// "missing" for a topic created a moment ago.
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(o.cbTopic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, o.prod)
		if err != nil {
			return fmt.Errorf("orchestrator: check callback topic %s: %w", o.cbTopic, topics.NameBrokerError(err, o.cfg.brokers))
		}
		found := false
		for _, t := range resp.Topics {
			if t.Topic != nil && *t.Topic == o.cbTopic && t.ErrorCode == 0 && len(t.Partitions) > 0 {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%w: %s (create it, or drop WithoutProvision)", ErrNoCallbackTopic, o.cbTopic)
		}
	}
	o.topicsReady.Store(true)
	return nil
}

// callbackPartitions returns the number of partitions of the callback
// topic, or 0 if it cannot be read (the state cache then stays off until
// the next assignment).
func (o *Orchestrator[T]) callbackPartitions(ctx context.Context) int32 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tds, err := kadm.NewClient(o.prod).ListTopics(ctx, o.cbTopic)
	if err == nil {
		err = tds.Error()
	}
	if err != nil {
		o.logger().Warn("orchestrator: cannot read the callback topic's partition count; replies read their saga from the store until the next assignment", "topic", o.cbTopic, "err", err)
		return 0
	}
	return int32(len(tds[o.cbTopic].Partitions))
}

// Start begins a saga for entity: it asks OnNext for the first step,
// persists the saga as STARTED and publishes the first command. It returns
// the new transaction id.
//
// With WithBusinessKey, Start is idempotent per key: the first Start with a
// key starts the saga, and every later one (on any instance, for the
// key's retention) returns that saga's id with an error matching ErrExists
// (an *ExistsError carrying the id), also when the first Start's process
// died between claiming the key and creating the saga: the later Start then
// creates it, from the first Start's entity, once a grace period has
// passed (see "Business keys" in the package documentation). Without a key,
// Start costs no more than it did without the option (no extra round trip).
//
// An error with an empty id normally means the saga did not start: a
// create that failed but may have landed is marked COMPENSATED ("start
// failed: ...") so that it never runs. If the store stays unreachable for
// that too, the saga's watchdog may restore it (logged at WARN with its
// id), or, if the watchdog could not be written either or recovery is off,
// it may be left in flight unsent (logged at ERROR); Stats counts each of
// these outcomes (FailedStarts). Marking it takes up to 30s more (and 10s
// for the watchdog), whatever ctx says; a ctx that has already ended when
// Start is called writes nothing. An error with an
// id means the saga exists: ErrExists (above), or its first command could
// not be published: it is parked in RETRY_PENDING for Redrive or, with
// recovery, the retry node (if even that write failed, its watchdog
// restores it), so do not start it again.
//
// Start may be called before Run: the first call makes sure the domain's
// callback topic exists (creating it unless WithoutProvision, failing with
// ErrNoCallbackTopic otherwise), so that a worker's reply always has
// somewhere to go. Replies are applied once Run is consuming.
func (o *Orchestrator[T]) Start(ctx context.Context, entity T, opts ...StartOption) (string, error) {
	var so startOptions
	if len(opts) > 0 {
		var err error
		if so, err = startOptionsOf(opts); err != nil {
			return "", err
		}
	}
	if o.tel.tracer == nil {
		return o.start(ctx, entity, nil, &so)
	}
	ctx, span := o.startSpan(ctx, "start", producerSpan)
	txID, err := o.start(ctx, entity, span, &so)
	if err != nil && !errors.Is(err, ErrExists) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return txID, err
}

// start is Start; span is Start's span when tracing is on (nil otherwise).
func (o *Orchestrator[T]) start(ctx context.Context, entity T, span trace.Span, so *startOptions) (string, error) {
	if o.isClosed() {
		return "", o.closedErr(ErrClosed)
	}
	if err := o.ensureTopics(ctx); err != nil {
		return "", o.closedErr(err)
	}
	now := o.cfg.now()
	txID, err := NewTxID(now, o.code)
	if err != nil {
		return "", err
	}
	payload, err := msgpack.Marshal(&entity)
	if err != nil {
		return "", fmt.Errorf("orchestrator: encode entity: %w", err)
	}
	if so.keyed {
		return o.startKeyed(ctx, entity, span, so.key, txID, payload, now)
	}
	return o.launch(ctx, entity, span, eventstore.Transaction{TxID: txID, Payload: payload, CreatedAt: now}, nil)
}

// launch creates the saga whose id, payload (entity encoded) and creation
// time base holds, and sends its first command: the body of Start. base
// also carries the Fence and LifetimeStart of a saga created by a takeover
// of its business key; claim is the claim of the key the saga is started
// under (nil without one), which launch releases if the saga was not
// created and confirms if it took long (see startKeyed).
func (o *Orchestrator[T]) launch(ctx context.Context, entity T, span trace.Span, base eventstore.Transaction, claim *eventstore.BusinessKey) (string, error) {
	txID, now := base.TxID, o.cfg.now()
	s := &Saga[T]{TxID: txID, Domain: o.domain.Name, Version: o.startVersion, State: eventstore.StateStarted, Entity: entity, Span: -1, CreatedAt: base.CreatedAt, UpdatedAt: now}
	d := o.decide(ctx, o.defs.byVersion[o.startVersion].OnNext, s)
	if d.kind == decidePause {
		d = Fail("OnNext paused before the first step: a pause follows a step that succeeded")
	}
	tx := eventstore.Transaction{
		Scope: o.scope, TxID: txID, Domain: o.domain.Name, State: eventstore.StateStarted,
		Version: 1, Fence: base.Fence, Definition: o.startVersion, Payload: base.Payload, LifetimeStart: base.LifetimeStart, CreatedAt: base.CreatedAt, UpdatedAt: now,
	}
	switch d.kind {
	case decideSend:
		tx.Span, tx.Kind, tx.Endpoint, tx.Attempt = 0, string(topics.KindProcess), qualify(d.step), 1
	case decideComplete:
		tx.State = eventstore.StateCompleted
	default:
		tx.State, tx.Error = eventstore.StateCompensated, d.reason
	}
	if span != nil {
		sc := span.SpanContext()
		tx.TraceParent = telemetry.TraceParent(sc)
		if sc.IsSampled() {
			tx.TraceID = sc.TraceID().String()
		}
		if span.IsRecording() {
			span.SetAttributes(telemetry.AttrDomain.String(o.domain.Name), telemetry.AttrTxID.String(txID), telemetry.AttrSagaState.String(string(tx.State)))
		}
	}
	if err := ctx.Err(); err != nil {
		// Nothing is written for a context that ended before the create:
		// no saga, no failed-start row.
		if claim != nil {
			o.releaseKey(ctx, claim)
		}
		return "", fmt.Errorf("orchestrator: start: %w", err)
	}
	if claim != nil && o.faultAt(FaultAfterClaim, txID) {
		return txID, nil
	}
	// No lock: the saga is persisted before its first command exists, so
	// no reply can race with this.
	if err := o.create(ctx, &tx, d.kind == decideSend); err != nil {
		if claim != nil {
			return o.keyedCreateFailed(ctx, claim, err)
		}
		return "", err
	}
	if claim != nil {
		if err := o.confirmKey(ctx, claim); err != nil {
			return txID, err
		}
	}
	o.cache.put(&tx)
	o.stats.started.Add(1)
	o.emit(Event{TxID: txID, Domain: o.domain.Name, Version: versionOf(&tx), To: tx.State, At: now})
	if d.kind != decideSend {
		o.countTerminal(tx.State)
		return txID, nil
	}
	if o.faultAt(FaultAfterCreate, txID) {
		return txID, nil // as if the process died: no step timer either
	}
	o.timeStep(&tx)
	if err := o.publish(ctx, &tx, d.step); err != nil {
		return txID, o.parkUnsent(ctx, &tx, err)
	}
	return txID, nil
}

// create persists the new saga tx. When its first command is to follow
// (inFlight) and recovery is on, the saga's restore watchdog goes with it:
// it must exist before the saga can be stranded, so that if this process
// dies anywhere after the create, a retry node finds it. Where the store
// has eventstore.WatchedCreator and the watchdog's bucket has its
// directory keys (all but the first saga of a bucket), both are one
// statement; otherwise the watchdog is written first, then the saga. A
// create that fails but may have landed is undone by failStart, so that
// Start's error means the saga does not run.
func (o *Orchestrator[T]) create(ctx context.Context, tx *eventstore.Transaction, inFlight bool) error {
	if inFlight && o.rec != nil {
		var write func(context.Context, eventstore.RecoveryEntry) error
		var dog eventstore.RecoveryEntry
		if o.watched != nil {
			write = func(ctx context.Context, e eventstore.RecoveryEntry) error {
				tx.RestorePath, dog = &e.RecoveryPath, e
				return o.watched.CreateTransactionWatched(ctx, *tx, nil, e)
			}
		}
		// Due when the first step's timeout (plus a margin) has passed:
		// the watchdog follows the saga (see redriveEntry).
		delay := o.watchdogDelay(tx, o.cfg.now())
		path, via, err := o.rec.RegisterWatchdog(ctx, o.scope, tx.TxID, o.domain.Name, delay, write)
		switch {
		case via && errors.Is(err, recovery.ErrLate):
			// The saga and its watchdog are written, only late for a retry
			// node that may have read the window already: go on and send
			// the step (the warning names the saga).
			o.logger().Warn("orchestrator: restore watchdog registered late; the saga goes on, but a crash before its end may not be restored", "tx", tx.TxID, "err", err)
			return nil
		case via && err != nil:
			if mayHaveLanded(err) && o.failStart(ctx, *tx, &dog, err) {
				return startUndone{fmt.Errorf("orchestrator: create saga: %w", err)}
			}
			return fmt.Errorf("orchestrator: create saga: %w", err)
		case via:
			return nil
		case err != nil:
			// The saga was not written: its watchdog comes first.
			return startUndone{fmt.Errorf("orchestrator: register restore watchdog: %w", err)}
		}
		tx.RestorePath = &path
	}
	if err := o.store.CreateTransaction(ctx, *tx, nil); err != nil {
		if inFlight && mayHaveLanded(err) && o.failStart(ctx, *tx, nil, err) {
			return startUndone{fmt.Errorf("orchestrator: create saga: %w", err)}
		}
		return fmt.Errorf("orchestrator: create saga: %w", err)
	}
	return nil
}

// startUndone is the error of a create that failed and whose saga never
// runs although the error may be transient: the watchdog written before it
// failed (nothing was created), or the create may have landed and
// failStart marked the saga COMPENSATED.
type startUndone struct{ error }

func (e startUndone) Unwrap() error { return e.error }

// mayHaveLanded reports whether a failed write may have been applied
// anyway: anything but a refusal (invalid arguments, a closed store, a
// taken id, a request the database rejects before applying it).
func mayHaveLanded(err error) bool {
	return !errors.Is(err, eventstore.ErrInvalid) && !errors.Is(err, eventstore.ErrClosed) &&
		!errors.Is(err, eventstore.ErrExists) && !errors.Is(err, eventstore.ErrPermanent)
}

// failStartBudget bounds how long failStart tries to mark a saga failed.
const failStartBudget = 30 * time.Second

// failStart keeps a saga whose create failed (cause), but may have landed,
// from running: its first command was never sent, so it is written
// COMPENSATED (nothing ran, nothing to undo) at the next version, which
// wins over the create whenever that lands (stores fence versions), and
// its watchdog is deleted. The mark is tried again with backoff (it is
// idempotent) for at most failStartBudget, and only while no retry node
// can restore the saga yet (half the restore delay after its create): a
// restore would write that same next version. If the mark does not land,
// a watchdog that went in the create's own statement (dog) is written
// again alone, so that a create that landed is restored by the retry node
// instead of stranded; the saga may then run although Start failed
// (logged). A context that ends while the create is on its way leaves the
// COMPENSATED row too (the create may have been sent): a saga that never
// ran, named by its error; Start writes nothing for a context that ended
// before it. Stats counts each outcome (FailedStarts and the two below it).
// It reports whether the mark landed.
func (o *Orchestrator[T]) failStart(ctx context.Context, tx eventstore.Transaction, dog *eventstore.RecoveryEntry, cause error) bool {
	end := tx
	end.State, end.Error = eventstore.StateCompensated, "start failed: "+cause.Error()
	end.Kind, end.Endpoint, end.Attempt = "", "", 0 // the step was never sent
	end.Version++
	err := o.markStartFailed(ctx, tx.UpdatedAt, o.restoreAfter(&tx), end)
	if err == nil {
		o.stats.startsMarked.Add(1)
		o.cleanUp(ctx, &end) // the saga is terminal: as any that ends
		return true
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var werr error
	if dog != nil {
		werr = o.store.PutRecoveryEntry(wctx, o.scope, *dog)
	}
	if o.rec != nil && werr == nil {
		o.stats.startsRestorable.Add(1)
		o.logger().Warn("orchestrator: saga create failed and could not be marked failed: if the create landed, the saga's watchdog restores it and it runs",
			"tx", tx.TxID, "err", cause, "mark_err", err)
		return false
	}
	o.stats.startsUnwatched.Add(1)
	attrs := []any{"tx", tx.TxID, "err", cause, "mark_err", err}
	if werr != nil {
		attrs = append(attrs, "watchdog_err", werr)
	}
	o.logger().Error("orchestrator: saga create failed and could not be marked failed: if the create landed, the saga may stay in flight without its first command and without a watchdog", attrs...)
	return false
}

// errNoTimeToMark is markStartFailed's error when a retry node could
// restore the saga before the mark lands.
var errNoTimeToMark = errors.New("no time left before a retry node could restore the saga")

// markStartFailed writes end, a saga created at created marked failed,
// again with backoff while the write may have failed without landing, for
// at most failStartBudget and only while no retry node could restore the
// saga (half its restore delay, after, past its create, on the
// orchestrator's clock).
func (o *Orchestrator[T]) markStartFailed(ctx context.Context, created time.Time, after time.Duration, end eventstore.Transaction) error {
	budget := failStartBudget
	if o.rec != nil {
		budget = min(budget, after/2-o.cfg.now().Sub(created))
	}
	if budget <= 0 {
		return errNoTimeToMark
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	defer cancel()
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		end.UpdatedAt = o.cfg.now()
		if o.rec != nil && end.UpdatedAt.Sub(created) >= after/2 {
			return errNoTimeToMark
		}
		err := o.store.Transition(mctx, end, nil)
		if err == nil || !mayHaveLanded(err) || !wait.Sleep(mctx, delay) {
			return err
		}
	}
}

// parkUnsent handles a command that could not be published after its saga
// was persisted as waiting for it: the saga is moved to RETRY_PENDING (so
// Redrive, an admin or the recovery engine can send it again) and err is
// returned, wrapped.
func (o *Orchestrator[T]) parkUnsent(ctx context.Context, tx *eventstore.Transaction, err error) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	l := o.lock(tx.TxID)
	l.Lock()
	defer l.Unlock()
	cur, lerr := o.store.LoadTransaction(pctx, o.scope, tx.TxID)
	if lerr != nil || cur.Version != tx.Version {
		return err // gone, or moved on meanwhile: leave it
	}
	from := cur.State
	service, _ := parseQualified(cur.Endpoint)
	reason := o.unsentReason(pctx, service, err)
	o.logger().Warn("orchestrator: command not published; saga parked in RETRY_PENDING", "tx", tx.TxID, "topic", topics.CommandTopic(service), "reason", reason)
	tryout := unsentTryout(&cur, reason, o.cfg.now())
	cur.State, cur.Error = eventstore.StateRetryPending, reason
	cur.Version++
	// Away from the reply path: raise the fence. A publish that failed may
	// still have reached the broker, and the reply to it be applied by the
	// instance owning the saga's callback partition (not always this one)
	// at this same version: the park must win whole over that write, not
	// be merged with it cell by cell (eventstore.Store.Transition).
	cur.Fence++
	cur.UpdatedAt = o.cfg.now()
	tryout.Index = int(cur.Version)
	o.cache.drop(cur.TxID)
	// The retry first, as park does: a saga parked without one would wait
	// for its restore watchdog.
	fast := o.registerRetry(pctx, &cur)
	if o.faultAt(FaultParkRetry, cur.TxID) {
		return err
	}
	if perr := o.store.Transition(pctx, cur, tryout); perr != nil {
		o.logger().Error("orchestrator: saga stranded: command not sent and state not saved", "tx", tx.TxID, "err", err, "persist_err", perr)
		return err
	}
	o.timeStep(&cur)
	o.armRetry(cur.TxID, cur.Version, fast)
	o.emit(Event{TxID: cur.TxID, Domain: cur.Domain, Version: versionOf(&cur), From: from, To: cur.State, Span: cur.Span, Kind: cur.Kind, Endpoint: cur.Endpoint, Error: cur.Error, At: cur.UpdatedAt})
	return fmt.Errorf("%w (saga %s parked in RETRY_PENDING)", err, tx.TxID)
}

// Get returns the saga with transaction id txID.
func (o *Orchestrator[T]) Get(ctx context.Context, txID string) (*Saga[T], error) {
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: get %s: %w", txID, err)
	}
	return o.view(&tx, nil)
}

// History returns the saga's step attempts in order. Endpoint is
// "service/endpoint"; Query marks query steps.
func (o *Orchestrator[T]) History(ctx context.Context, txID string) ([]eventstore.Tryout, error) {
	h, err := o.store.Tryouts(ctx, o.scope, txID)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: history %s: %w", txID, err)
	}
	for i := range h {
		if isQuery(h[i].Endpoint) {
			h[i].Endpoint, h[i].Query = strings.TrimSuffix(h[i].Endpoint, querySuffix), true
		}
	}
	return h, nil
}

// Redrive sends the step of a saga parked in RETRY_PENDING again, with the
// next attempt number, against the entity snapshot taken before the step.
// The recovery engine calls it for stalled sagas; tests and admins may too.
// One instance re-drives a park: another that reads it at the same time
// fails with ErrRedriveHeld.
func (o *Orchestrator[T]) Redrive(ctx context.Context, txID string) error {
	tx, err := o.prepareRedrive(ctx, txID)
	if err != nil {
		return err
	}
	ctx, span := o.sagaSpan(ctx, "redrive", &tx)
	service, endpoint := parseQualified(tx.Endpoint)
	if err = o.publish(ctx, &tx, Step{Service: service, Endpoint: endpoint, Query: isQuery(tx.Endpoint)}); err != nil {
		err = o.parkUnsent(ctx, &tx, err)
	}
	endSpan(span, &tx, err)
	return err
}

// Restore re-sends the command a saga in flight is waiting for (its
// current span, kind and attempt) without changing the saga. It is for a
// saga stranded because its command or the reply to it was lost: the
// process died between persisting a step and publishing its command, or a
// worker dead-lettered a command whose reply it could not deliver. The
// worker's guard makes a step that already ran skip and re-send its
// recorded reply; a reply that arrives twice is ignored. A saga parked in
// RETRY_PENDING is re-driven as Redrive does; a terminal or paused saga
// returns ErrNotInFlight. The recovery engine calls it for restore
// (watchdog) pickups.
func (o *Orchestrator[T]) Restore(ctx context.Context, txID string) error {
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if err != nil {
		return fmt.Errorf("orchestrator: restore %s: %w", txID, err)
	}
	switch {
	case tx.State == eventstore.StateRetryPending:
		return o.Redrive(ctx, txID)
	case !awaitsReply(tx.State):
		return fmt.Errorf("%w: %s is %s", ErrNotInFlight, txID, tx.State)
	}
	if _, err := o.gate(ctx, &tx, pathRestore); err != nil {
		return err
	}
	ctx, span := o.sagaSpan(ctx, "restore", &tx)
	// Armed before the re-send: its reply, applied here, re-arms it for
	// the saga's next version.
	o.timeStep(&tx)
	service, endpoint := parseQualified(tx.Endpoint)
	if err := o.publish(ctx, &tx, Step{Service: service, Endpoint: endpoint, Query: isQuery(tx.Endpoint)}); err != nil {
		err = fmt.Errorf("orchestrator: restore %s: %w", txID, err)
		endSpan(span, &tx, err)
		return err
	}
	o.stats.restored.Add(1)
	endSpan(span, &tx, nil)
	return nil
}

// prepareRedrive moves a RETRY_PENDING saga to its next attempt and
// persists it before the command is published: the reply to that command is
// handled on another goroutine and must find the new attempt.
func (o *Orchestrator[T]) prepareRedrive(ctx context.Context, txID string) (eventstore.Transaction, error) {
	return o.prepareRedriveAt(ctx, txID, 0)
}

// prepareRedriveAt is prepareRedrive of a saga parked at version only
// (0: at any version): an in-process retry armed when the saga was parked
// must not re-drive a later park of it early.
func (o *Orchestrator[T]) prepareRedriveAt(ctx context.Context, txID string, version int64) (eventstore.Transaction, error) {
	l := o.lock(txID)
	l.Lock()
	defer l.Unlock()
	tx, err := o.store.LoadTransaction(ctx, o.scope, txID)
	if err != nil {
		return tx, fmt.Errorf("orchestrator: redrive %s: %w", txID, err)
	}
	if tx.State != eventstore.StateRetryPending {
		return tx, fmt.Errorf("%w: %s is %s", ErrNotRetryPending, txID, tx.State)
	}
	if version != 0 && tx.Version != version {
		return tx, fmt.Errorf("%w: %s was parked again since (version %d, not %d)", ErrNotRetryPending, txID, tx.Version, version)
	}
	path := pathRedrive
	if o.pastDeadline(&tx, o.cfg.now()) {
		path = pathDeadline // failParked decides the compensation
	}
	if _, err := o.gate(ctx, &tx, path); err != nil {
		return tx, err
	}
	// A cancel or terminate may have claimed the park (cancel.go).
	if err := o.claimPark(ctx, &tx, o.redriveOwner(), redriveClaimLease); err != nil {
		return tx, err
	}
	if path == pathDeadline {
		return tx, o.failParked(ctx, &tx)
	}
	from := tx.State
	tx.Attempt++
	tx.State = eventstore.StateInProgress
	if tx.Kind == string(topics.KindRevert) {
		tx.State = eventstore.StateCompensating
	}
	tx.Version++
	tx.UpdatedAt = o.cfg.now()
	if err := o.store.Transition(ctx, tx, nil); err != nil {
		o.cache.drop(txID)
		return tx, fmt.Errorf("orchestrator: redrive %s: %w", txID, err)
	}
	o.cache.put(&tx)
	o.timeStep(&tx)
	o.stats.retried.Add(1)
	o.emit(Event{TxID: txID, Domain: o.domain.Name, Version: versionOf(&tx), From: from, To: tx.State, Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, At: tx.UpdatedAt})
	return tx, nil
}

// publish sends the command for tx's current span, kind and attempt and
// waits until the broker has it.
func (o *Orchestrator[T]) publish(ctx context.Context, tx *eventstore.Transaction, step Step) error {
	kind := topics.Kind(tx.Kind)
	env := topics.Envelope{
		Type: topics.TypeCommand, Region: o.scope.Region, Cluster: o.scope.Cluster, Service: o.service,
		Domain: o.domain.Name, TxID: tx.TxID, Span: tx.Span, Kind: kind, Endpoint: step.Endpoint,
		IdempotencyKey: topics.IdempotencyKey(tx.TxID, tx.Span, kind), Attempt: tx.Attempt,
		ReplyTo: o.cbTopic, Payload: tx.Payload, SentAt: o.cfg.now(),
	}
	env.ResumeContext = resumeFrom(ctx)
	if kind == topics.KindRevert {
		env.Hints = tx.Hints
		// Only completed spans are compensated (sendRevert checks it),
		// and a step whose outcome is unknown (unknownHint): its
		// compensation says it may not have run, so that a guarded
		// worker makes it a null compensation if it did not.
		env.ActionDone = true
		if v, ok := tx.Hints[unknownHint]; ok {
			env.Hints = userHints(tx.Hints)
			env.ActionDone = v != strconv.Itoa(tx.Span)
		}
	}
	if o.tel.tracer != nil {
		tracePublish(ctx, &env)
	}
	b, err := topics.Encode(&env)
	if err != nil {
		return err
	}
	if o.cfg.fault != nil && o.cfg.fault(FaultLoseCommand, tx.TxID) {
		o.stats.commands.Add(1) // sent, as far as this process knows
		return nil
	}
	rec := &kgo.Record{Topic: topics.CommandTopic(step.Service), Key: []byte(tx.TxID), Value: b}
	if err := o.prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("orchestrator: publish command %s span %d to %s: %w", tx.TxID, tx.Span, rec.Topic, err)
	}
	o.stats.commands.Add(1)
	return nil
}

// decide calls f, turning a panic into a Fail decision.
func (o *Orchestrator[T]) decide(ctx context.Context, f func(context.Context, *Saga[T]) Decision, s *Saga[T]) (d Decision) {
	defer func() {
		if r := recover(); r != nil {
			d = Fail(fmt.Sprintf("event manager panic: %v", r))
		}
	}()
	d = f(ctx, s)
	switch {
	case d.kind == 0:
		d = Fail("event manager returned a zero Decision")
	case d.kind == decideSend && topics.ValidName(d.step.Service) != nil:
		d = Fail(fmt.Sprintf("event manager chose an invalid service name %q", d.step.Service))
	case d.kind == decideSend && (d.step.Endpoint == "" || strings.ContainsAny(d.step.Endpoint, "/#\x00") ||
		!utf8.ValidString(d.step.Endpoint) || len(d.step.Endpoint) > topics.MaxIDBytes):
		d = Fail(fmt.Sprintf("event manager chose an invalid endpoint name %.64q", d.step.Endpoint))
	}
	return d
}

// view builds the Saga a decision function or a caller sees.
func (o *Orchestrator[T]) view(tx *eventstore.Transaction, last *StepResult) (*Saga[T], error) {
	s := &Saga[T]{
		TxID: tx.TxID, Domain: tx.Domain, Version: versionOf(tx), State: tx.State, Span: tx.Span, Kind: tx.Kind,
		Attempt: tx.Attempt, Last: last, Hints: userHints(tx.Hints), Error: tx.Error,
		PauseEvent: tx.PauseEvent, PausedUntil: tx.PausedUntil, TraceID: tx.TraceID,
		CreatedAt: tx.CreatedAt, UpdatedAt: tx.UpdatedAt,
	}
	s.Step.Service, s.Step.Endpoint = parseQualified(tx.Endpoint)
	s.Step.Query = isQuery(tx.Endpoint)
	if len(tx.Payload) > 0 {
		decode := func(b []byte, e *T) error { return msgpack.Unmarshal(b, e) }
		if def, ok := o.definition(tx); ok && def.DecodeEntity != nil {
			decode = def.DecodeEntity
		}
		if err := decode(tx.Payload, &s.Entity); err != nil {
			return nil, fmt.Errorf("orchestrator: decode entity of %s (definition version %d): %w", tx.TxID, versionOf(tx), err)
		}
	}
	s.Completed = make([]CompletedStep, len(tx.Completed))
	for i, c := range tx.Completed {
		svc, ep := parseQualified(c.Endpoint)
		s.Completed[i] = CompletedStep{Span: c.Span, Step: Step{Service: svc, Endpoint: ep, Query: isQuery(c.Endpoint)}}
	}
	return s, nil
}

func (o *Orchestrator[T]) countTerminal(s eventstore.State) {
	switch s {
	case eventstore.StateCompleted:
		o.stats.completed.Add(1)
	case eventstore.StateCompensated:
		o.stats.compensated.Add(1)
	case eventstore.StateCompensationFailed:
		o.stats.compensationFailed.Add(1)
	}
}

// Event is a state change, delivered to listeners.
type Event struct {
	TxID   string
	Domain string
	// Version is the saga's definition version (Saga.Version).
	Version  int
	From, To eventstore.State
	// Span, Kind and Endpoint ("service/endpoint") name the step whose
	// result caused the change or, when none did (start, re-drive), the step
	// the saga is now waiting for.
	Span     int
	Kind     string
	Endpoint string
	// Outcome and Error describe the step result that caused the change,
	// if any.
	Outcome string
	Error   string
	At      time.Time
}

func (o *Orchestrator[T]) emit(e Event) {
	for _, l := range o.cfg.listeners {
		l(e)
	}
	if o.waits.n.Load() > 0 {
		o.waits.wake(e.TxID, e.To)
	}
}

// logger returns the configured logger.
func (o *Orchestrator[T]) logger() *slog.Logger { return o.cfg.logger }

// loopHandler adapts handle, run with ctx (one that outlives Run's, so a
// reply being applied finishes at shutdown), to kafkaloop: a reply the
// store refuses for good (a key it cannot hold) is Permanent, so that it is
// dead-lettered rather than retried for ever.
func loopHandler(ctx context.Context, handle func(context.Context, *kgo.Record) error) kafkaloop.Handler {
	return func(_ context.Context, r *kgo.Record) error {
		err := handle(ctx, r)
		if errors.Is(err, eventstore.ErrPermanent) {
			return kafkaloop.Permanent(err)
		}
		return err
	}
}
