// Package worker runs the saga steps of a service: it registers typed
// endpoints (a forward action and an optional compensation), consumes the
// service's command topic with at-least-once semantics, runs each command's
// handler (through a Guard, the write-protection layer) and replies to the
// saga's callback topic. Records that can never be handled go to the
// dead-letter topic with the reason, and the worker goes on.
//
// Dead letters: a record that is not a valid envelope, is not a command or
// names no callback topic is only dead-lettered (there is no one to tell).
// A command for an endpoint this worker does not have is dead-lettered and
// replied topics.OutcomeRetryable, so that the saga waits in RETRY_PENDING
// and can be re-driven once an instance with the endpoint runs (a rolling
// deploy). A command over WithMaxRecordBytes is dead-lettered and, if it
// decodes, replied topics.OutcomeNonRetryable (it can never succeed). A
// command whose reply can never be produced (its callback topic is missing,
// not writable or invalid, or the reply is too large even without its
// payload) is dead-lettered with ReasonReplyUndeliverable after its handler
// ran; a reply that fails for a transient reason (Kafka unreachable, a
// timeout) keeps the command uncommitted, and the reply is re-sent without
// running the handler again.
//
// Delivery is at-least-once: a command's offset is committed only after its
// reply is durable, so a command may run again after a crash or a
// rebalance; use Step.IdempotencyKey for side effects, or a Guard.
//
// Outcomes: a handler's nil error replies topics.OutcomeOK with the returned
// entity as payload. An error wrapped with Retryable replies
// topics.OutcomeRetryable (the saga is re-driven later), one wrapped with
// NonRetryable replies topics.OutcomeNonRetryable (compensation starts, or
// a compensation terminates the saga). An unwrapped error is non-retryable,
// except one matching context.DeadlineExceeded, which is retryable (see
// IsRetryable). A panic is caught and replied non-retryable with the panic
// value and the stack. A failed reply carries the entity it was given.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/kafkaloop"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Dead-letter reasons: the reason header of a dead-lettered command starts
// with one of them, followed by ": " and details.
const (
	// ReasonUndecodable: the record is not a valid envelope.
	ReasonUndecodable = "undecodable"
	// ReasonOversize: the record is larger than WithMaxRecordBytes.
	ReasonOversize = "oversize"
	// ReasonNotCommand: the envelope is a reply, not a command.
	ReasonNotCommand = "not-a-command"
	// ReasonNoReplyTo: the command names no callback topic.
	ReasonNoReplyTo = "no-reply-to"
	// ReasonUnknownEndpoint: no endpoint of that name is registered. The
	// saga is also replied topics.OutcomeRetryable.
	ReasonUnknownEndpoint = "unknown-endpoint"
	// ReasonReplyUndeliverable: the handler ran but its reply can never be
	// produced (see the package documentation); the details are the
	// produce error.
	ReasonReplyUndeliverable = "reply-undeliverable"
	// ReasonGivenUp: the command kept failing (its guard's store or its
	// reply's broker unavailable) for longer than the consume loop's retry
	// budget, or the store refuses it for good; the details say which. The
	// saga stays in flight: its restore watchdog (or Orchestrator.Restore)
	// sends the step again.
	ReasonGivenUp = "given-up"
)

// shutdownGrace bounds how long a reply produced during shutdown may wait
// for Kafka.
const shutdownGrace = 15 * time.Second

const (
	stateNew = iota
	stateRunning
	stateDone
	stateClosed
)

// Stats counts what a worker did since it was made.
type Stats struct {
	// Processed counts the commands handled and replied to, whatever the
	// outcome (a reply the Guard suppressed counts too). The replies to
	// dead-lettered commands do not count.
	Processed uint64
	// DeadLettered counts the records sent to the dead-letter topic.
	DeadLettered uint64
	// Undeliverable counts the commands whose handler ran but whose reply
	// could never be produced (each also counted in DeadLettered).
	Undeliverable uint64
	// Panics counts handler panics (each also counted in Processed).
	Panics uint64
}

// Worker consumes the command topic of one service and runs the registered
// endpoints. Make one with New, add endpoints with Register, then call Run.
type Worker struct {
	service string
	topic   string
	dlt     string
	cfg     config
	log     *slog.Logger
	// overlapped is cfg.guard when it records a run's outcome while the
	// reply is sent (see guarded); nil otherwise.
	overlapped overlappingGuard

	mu        sync.Mutex
	state     int
	endpoints map[string]endpoint // read-only once Run has started
	cancel    context.CancelFunc
	done      chan struct{} // closed when Run returns

	running     chan struct{}
	runningOnce sync.Once

	// pending keeps the replies whose produce failed for a transient
	// reason, so a retry of the same record re-sends the reply instead of
	// running the handler (or dead-lettering the record) again. A reply
	// goes when its command is settled, released (share groups) or left to
	// another instance with its partition (kafkaloop's Abandoned). pendingN
	// guards the hot path from the map lookup.
	pending  sync.Map // recordID -> *outgoing
	pendingN atomic.Int64

	processed     atomic.Uint64
	deadLettered  atomic.Uint64
	undeliverable atomic.Uint64
	panics        atomic.Uint64

	tel     otelState
	telOnce sync.Once
}

type recordID struct {
	partition int32
	offset    int64
}

// outgoing is a reply to send for a command record.
type outgoing struct {
	rec *kgo.Record
	// notice: the command is already dead-lettered and the reply only tells
	// the saga; a notice that can never be produced is dropped. Otherwise
	// the reply is the handler's, counted in Processed once produced, and
	// the command is dead-lettered if it can never be.
	notice bool
}

// New makes a worker for service, whose commands arrive on
// topics.CommandTopic(service). It fails, reporting each of them, on an
// invalid service name and on options that are nil or out of range.
func New(service string, opts ...Option) (*Worker, error) {
	if err := topics.ValidName(service); err != nil {
		return nil, fmt.Errorf("worker: service: %w", err)
	}
	cfg := config{
		logger:         slog.Default(),
		concurrency:    DefaultConcurrency,
		maxRecordBytes: DefaultMaxRecordBytes,
		group:          topics.WorkerGroup(service),
		guard:          passThrough{},
	}
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("worker: option %d is nil", i))
			continue
		}
		o.apply(&cfg)
	}
	errs = append(errs, cfg.applyFile(service)...)
	for i, b := range cfg.brokers {
		if b == "" {
			errs = append(errs, fmt.Errorf("worker: broker %d is empty", i))
		}
	}
	for i, o := range cfg.kopts {
		if o == nil {
			errs = append(errs, fmt.Errorf("worker: kafka option %d is nil", i))
		}
	}
	if cfg.concurrency < 1 {
		errs = append(errs, fmt.Errorf("worker: concurrency %d < 1", cfg.concurrency))
	}
	if cfg.maxRecordBytes < 1 {
		errs = append(errs, fmt.Errorf("worker: max record bytes %d < 1", cfg.maxRecordBytes))
	}
	if cfg.group == "" {
		errs = append(errs, errors.New("worker: empty group"))
	}
	if cfg.logger == nil {
		errs = append(errs, errors.New("worker: nil logger"))
	}
	if cfg.guard == nil {
		errs = append(errs, errors.New("worker: nil guard"))
	}
	if cfg.groupType == "" {
		cfg.groupType = topics.GroupConsumer
	}
	if !cfg.groupType.Valid() {
		errs = append(errs, fmt.Errorf("worker: group type %q (want %s or %s)", cfg.groupType, topics.GroupConsumer, topics.GroupShare))
	}
	if err := cfg.share.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("worker: share settings: %w", err))
	}
	if err := cfg.membership.Validate(); err != nil {
		for _, e := range strings.Split(err.Error(), "\n") {
			errs = append(errs, fmt.Errorf("worker: %s", membershipOption(e)))
		}
	}
	if cfg.instanceSet && cfg.membership.InstanceID == "" {
		errs = append(errs, errors.New(`worker: WithInstanceID(""): want an instance id (leave the option out for a dynamic member)`))
	}
	if cfg.groupType == topics.GroupShare && (cfg.membership != topics.Membership{}) {
		errs = append(errs, errors.New("worker: WithInstanceID and WithSessionTimeout are for a consumer group; a share group has neither (its records held by a dead instance come back after the record lock, WithShareSettings)"))
	}
	if cfg.groupType == topics.GroupShare && !cfg.groupSet {
		cfg.group += ".share"
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	topic := topics.CommandTopic(service)
	w := &Worker{
		service:   service,
		topic:     topic,
		dlt:       topics.DeadLetterTopic(topic),
		cfg:       cfg,
		log:       cfg.logger.With("service", service, "region", cfg.region, "cluster", cfg.cluster),
		endpoints: make(map[string]endpoint),
		running:   make(chan struct{}),
	}
	if g, ok := cfg.guard.(overlappingGuard); ok && cfg.groupType != topics.GroupShare {
		w.overlapped = g // see guarded
	}
	if err := w.initTelemetry(); err != nil {
		return nil, err
	}
	return w, nil
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

// Service returns the service name the worker was made for.
func (w *Worker) Service() string { return w.service }

// Region returns the region set with WithRegion.
func (w *Worker) Region() string { return w.cfg.region }

// Cluster returns the virtual cluster set with WithCluster.
func (w *Worker) Cluster() string { return w.cfg.cluster }

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	return Stats{
		Processed:     w.processed.Load(),
		DeadLettered:  w.deadLettered.Load(),
		Undeliverable: w.undeliverable.Load(),
		Panics:        w.panics.Load(),
	}
}

// Running returns a channel closed once the worker's consumer has joined its
// group and got its assignment (possibly empty, when there are more
// instances than partitions). It stays open if Run fails before that.
func (w *Worker) Running() <-chan struct{} { return w.running }

// Run creates the command and dead-letter topics if they are missing
// (unless WithoutProvision), joins the consumer group and handles commands
// until ctx ends or Close is called. It then stops polling, lets the
// handlers in flight finish and reply, commits, leaves the group, closes
// its client and returns nil; no goroutine of it is left. A worker runs
// once: a second Run returns ErrStarted, a Run after Close ErrClosed. Run
// returns an error wrapping topics.ErrInstanceFenced when another process
// joined the group with its instance id (WithInstanceID), and one wrapping
// topics.ErrSessionTimeoutRefused when the brokers refuse its session
// timeout (WithSessionTimeout).
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	switch w.state {
	case stateClosed:
		w.mu.Unlock()
		w.closeTelemetry()
		return ErrClosed
	case stateRunning, stateDone:
		w.mu.Unlock()
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	w.state = stateRunning
	w.cancel = cancel
	w.done = make(chan struct{})
	w.mu.Unlock()
	defer func() {
		cancel()
		w.closeTelemetry()
		w.mu.Lock()
		if w.state == stateRunning {
			w.state = stateDone
		}
		w.mu.Unlock()
		close(w.done)
	}()

	if !w.cfg.noProvision {
		if err := w.provision(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	if w.cfg.groupType == topics.GroupShare {
		if err := w.runShare(ctx); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	}
	cl, err := kgo.NewClient(w.clientOpts()...)
	if err != nil {
		return fmt.Errorf("worker: kafka client: %w", err)
	}
	// A static member leaves the group on the way out (a process that
	// dies does not, and keeps its partitions for its restart).
	defer kafkaloop.CloseMember(cl, w.log)

	// Replies and dead letters of the handlers in flight at shutdown get
	// shutdownGrace to become durable; after that (Kafka unreachable) their
	// produce fails, the records stay uncommitted and Run returns.
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer pcancel()
	var (
		graceMu  sync.Mutex
		grace    *time.Timer
		returned bool
	)
	stopGrace := context.AfterFunc(ctx, func() {
		graceMu.Lock()
		defer graceMu.Unlock()
		if !returned {
			grace = time.AfterFunc(shutdownGrace, pcancel)
		}
	})
	defer func() {
		stopGrace()
		graceMu.Lock()
		returned = true
		if grace != nil {
			grace.Stop()
		}
		graceMu.Unlock()
	}()

	err = kafkaloop.Run(ctx, cl, w.loopHandler(pctx, cl), kafkaloop.Options{
		Concurrency: w.cfg.concurrency,
		Logger:      w.log,
		// A command that kept failing past the loop's retry budget, or
		// that the store refuses, is dead-lettered; its saga stays in
		// flight and its restore watchdog re-sends the step later.
		DeadLetter: func(_ context.Context, r *kgo.Record, reason string) error {
			w.dropPending(r)
			return w.deadLetter(pctx, cl, r, ReasonGivenUp+": "+reason)
		},
		// A command whose partition moved is answered by its next owner:
		// the reply kept here for its retry would never be used.
		Abandoned: w.dropPending,
	})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// Close stops a running Run and waits for it to return; a worker closed
// before Run never runs. Close is safe to call more than once and from
// several goroutines.
func (w *Worker) Close() {
	w.mu.Lock()
	w.state = stateClosed
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if done != nil {
		cancel()
		<-done
	}
	w.closeTelemetry()
}

func (w *Worker) baseOpts() []kgo.Opt {
	var opts []kgo.Opt
	if len(w.cfg.brokers) > 0 {
		opts = append(opts, kgo.SeedBrokers(w.cfg.brokers...))
	}
	return append(opts, kgo.ClientID("stacksaga-worker-"+w.service))
}

func (w *Worker) clientOpts() []kgo.Opt {
	opts := w.baseOpts()
	opts = append(opts,
		kgo.ConsumerGroup(w.cfg.group),
		kgo.ConsumeTopics(w.topic),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			w.runningOnce.Do(func() { close(w.running) })
		}),
	)
	opts = append(opts, kafkaloop.ClientOpts()...)
	opts = append(opts, kafkaloop.MembershipOpts(w.cfg.membership)...)
	if w.tel.kafkaOpt != nil {
		opts = append(opts, w.tel.kafkaOpt)
	}
	return append(opts, w.cfg.kopts...)
}

// provision creates the worker's topics with a short-lived client that has
// no consumer (so the group does not join before the topic exists).
func (w *Worker) provision(ctx context.Context) error {
	cl, err := kgo.NewClient(append(w.baseOpts(), kafkaloop.WithoutConsumerOpts(w.cfg.kopts)...)...)
	if err != nil {
		return fmt.Errorf("worker: kafka client: %w", err)
	}
	defer cl.Close()
	if err := topics.Ensure(ctx, kadm.NewClient(cl), []string{w.topic, w.dlt}, w.cfg.provision); err != nil {
		return fmt.Errorf("worker: provision topics: %w", topics.NameBrokerError(err, w.cfg.brokers))
	}
	return nil
}

// handle is the kafkaloop handler: it returns nil once the record's reply
// (or dead letter) is durable.
// Handlers run with hctx, which does not end at shutdown; produces use
// pctx, which ends shutdownGrace after it.
func (w *Worker) handle(hctx, pctx context.Context, cl *kgo.Client, r *kgo.Record) error {
	if w.pendingN.Load() > 0 {
		if v, ok := w.pending.Load(recordID{r.Partition, r.Offset}); ok {
			return w.deliver(pctx, cl, r, v.(*outgoing))
		}
	}
	if n := len(r.Key) + len(r.Value); n > w.cfg.maxRecordBytes {
		reason := fmt.Sprintf("%s: %d bytes > %d", ReasonOversize, n, w.cfg.maxRecordBytes)
		// It can never succeed: tell the saga if the command says where.
		cmd, err := topics.Decode(r.Value)
		if err != nil || cmd.Type != topics.TypeCommand || cmd.ReplyTo == "" {
			return w.reject(pctx, cl, r, reason, "", nil)
		}
		notice := failedReply(cmd, topics.OutcomeNonRetryable,
			fmt.Sprintf("worker: %s: command of %d bytes over the limit of %d", w.service, n, w.cfg.maxRecordBytes))
		notice.Payload = nil // it is what is too large
		return w.reject(pctx, cl, r, reason, cmd.ReplyTo, notice)
	}
	cmd, err := topics.Decode(r.Value)
	switch {
	case err != nil:
		return w.reject(pctx, cl, r, ReasonUndecodable+": "+err.Error(), "", nil)
	case cmd.Type != topics.TypeCommand:
		return w.reject(pctx, cl, r, fmt.Sprintf("%s: type %q", ReasonNotCommand, cmd.Type), "", nil)
	case cmd.ReplyTo == "":
		return w.reject(pctx, cl, r, ReasonNoReplyTo+": command of "+cmd.TxID+" names no callback topic", "", nil)
	}
	ep, ok := w.endpoints[cmd.Endpoint]
	if !ok {
		// Retryable: in a rolling deploy an instance without the endpoint
		// may get the command; the saga waits in RETRY_PENDING and can be
		// re-driven.
		return w.reject(pctx, cl, r, fmt.Sprintf("%s: %q", ReasonUnknownEndpoint, cmd.Endpoint), cmd.ReplyTo,
			failedReply(cmd, topics.OutcomeRetryable, fmt.Sprintf("worker: %s has no endpoint %q", w.service, cmd.Endpoint)))
	}

	if w.tel.tracer != nil {
		return w.handleTraced(hctx, pctx, cl, r, ep, cmd)
	}
	reply, wait, err := w.guarded(hctx, ep, cmd)
	defer wait() // after the reply is sent: the command is committed once its outcome is recorded
	if err != nil {
		return fmt.Errorf("worker: guard: %w", err)
	}
	if reply == nil {
		w.processed.Add(1)
		return nil
	}
	// cmd.ReplyTo is read after Execute: a guard may redirect the reply.
	rec, err := w.replyRecord(r, cmd.ReplyTo, reply)
	if err != nil {
		return err
	}
	return w.deliver(pctx, cl, r, &outgoing{rec: rec})
}

// guarded runs cmd through the guard. wait returns once the guard has
// recorded the outcome; it is a no-op unless the guard overlaps that with
// the reply's sending (overlappingGuard).
//
// A share group never overlaps: it hands out records in no order, so a
// compensation of a step could reach another member while the command of
// a member killed before its record landed waits out its acquisition
// lock; the compensation would find no marker, and the command, coming
// back later, would run the action after its compensation. In a consumer
// group that command precedes the compensation on their partition (same
// key), and the next owner replays it first.
func (w *Worker) guarded(ctx context.Context, ep endpoint, cmd *topics.Envelope) (*topics.Envelope, func(), error) {
	run := func(ctx context.Context) *topics.Envelope { return w.execute(ctx, ep, cmd) }
	if w.overlapped != nil {
		return w.overlapped.ExecuteOverlapped(ctx, cmd, run)
	}
	reply, err := w.cfg.guard.Execute(ctx, cmd, run)
	return reply, noWait, err
}

func noWait() {}

// handleTraced is the end of handle when tracing is on: the delivery runs
// in a span that is a child of the command's sender, the handler's context
// holds it, and the reply carries it back.
func (w *Worker) handleTraced(hctx, pctx context.Context, cl *kgo.Client, r *kgo.Record, ep endpoint, cmd *topics.Envelope) (err error) {
	sctx, span := w.startStep(hctx, cmd)
	hctx = sctx
	var reply *topics.Envelope
	defer func() { w.endStep(span, cmd, reply, sctx.ran, err) }()
	reply, wait, err := w.guarded(hctx, ep, cmd)
	defer wait() // before endStep: the step's span covers the record
	if err != nil {
		return fmt.Errorf("worker: guard: %w", err)
	}
	if reply == nil {
		w.processed.Add(1)
		return nil
	}
	// The reply, fresh or recorded by the guard, continues from this span.
	reply.Trace = telemetry.Inject(hctx)
	rec, err := w.replyRecord(r, cmd.ReplyTo, reply)
	if err != nil {
		return err
	}
	return w.deliver(trace.ContextWithSpan(pctx, span), cl, r, &outgoing{rec: rec})
}

// reject dead-letters r with reason and then, if notice is not nil, sends
// it to replyTo.
func (w *Worker) reject(ctx context.Context, cl *kgo.Client, r *kgo.Record, reason, replyTo string, notice *topics.Envelope) error {
	var rec *kgo.Record
	if notice != nil {
		var err error
		if rec, err = w.replyRecord(r, replyTo, notice); err != nil {
			w.log.Error("worker: cannot encode the reply to a dead-lettered command", "tx", notice.TxID, "err", err)
			rec = nil
		}
	}
	if err := w.deadLetter(ctx, cl, r, reason); err != nil {
		return err
	}
	if rec != nil {
		if err := w.deliver(ctx, cl, r, &outgoing{rec: rec, notice: true}); err != nil {
			return err
		}
	}
	// Dead-lettered for good: a share group rejects it (the classic loop
	// counts it as done).
	return kafkaloop.Rejected(reason)
}

// deliver produces out, the reply for r, and returns nil once it is durable
// or can never be. A transient failure keeps out for the retry of r and
// returns the error. A permanent one (see topics.PermanentProduceError)
// dead-letters r with ReasonReplyUndeliverable, or drops a notice.
func (w *Worker) deliver(ctx context.Context, cl *kgo.Client, r *kgo.Record, out *outgoing) error {
	err := w.produceReply(ctx, cl, out.rec)
	switch {
	case err == nil:
		if !out.notice {
			w.processed.Add(1)
		}
	case !topics.PermanentProduceError(err):
		w.keep(r, out)
		return err
	case out.notice:
		w.log.Warn("worker: cannot reply to a dead-lettered command, dropping the reply", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reply_to", out.rec.Topic, "err", err)
	default:
		if derr := w.deadLetter(ctx, cl, r, ReasonReplyUndeliverable+": "+err.Error()); derr != nil {
			w.keep(r, out)
			return derr
		}
		w.undeliverable.Add(1)
		w.log.Error("worker: reply undeliverable, dead-lettered the command (its handler ran)", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reply_to", out.rec.Topic, "err", err)
		w.dropPending(r)
		return kafkaloop.Rejected(ReasonReplyUndeliverable) // dead-lettered: a share group rejects it
	}
	w.dropPending(r)
	return nil
}

// dropPending forgets the pending reply of r, if any.
func (w *Worker) dropPending(r *kgo.Record) {
	if w.pendingN.Load() > 0 {
		if _, loaded := w.pending.LoadAndDelete(recordID{r.Partition, r.Offset}); loaded {
			w.pendingN.Add(-1)
		}
	}
}

// keep records out as the pending reply of r.
func (w *Worker) keep(r *kgo.Record, out *outgoing) {
	if _, loaded := w.pending.Swap(recordID{r.Partition, r.Offset}, out); !loaded {
		w.pendingN.Add(1)
	}
}

// failedReply builds the reply header of cmd with a failure outcome and
// msg, carrying cmd's payload and hints unchanged.
func failedReply(cmd *topics.Envelope, outcome topics.Outcome, msg string) *topics.Envelope {
	reply := replyHeader(cmd)
	reply.Outcome = outcome
	reply.Error = msg
	reply.Payload = cmd.Payload
	reply.Hints = cmd.Hints
	return reply
}

// replyHeader builds the reply to cmd without outcome, error, payload or
// hints.
func replyHeader(cmd *topics.Envelope) *topics.Envelope {
	return &topics.Envelope{
		Type:           topics.TypeReply,
		Region:         cmd.Region,
		Cluster:        cmd.Cluster,
		Service:        cmd.Service,
		Domain:         cmd.Domain,
		TxID:           cmd.TxID,
		Span:           cmd.Span,
		Kind:           cmd.Kind,
		Endpoint:       cmd.Endpoint,
		IdempotencyKey: cmd.IdempotencyKey,
		Attempt:        cmd.Attempt,
		Trace:          cmd.Trace,
	}
}

// execute runs the handler of cmd and builds the reply; a panic becomes a
// non-retryable reply carrying the panic value and the stack.
func (w *Worker) execute(ctx context.Context, ep endpoint, cmd *topics.Envelope) (reply *topics.Envelope) {
	reply = replyHeader(cmd)
	s := &Step{
		TxID:           cmd.TxID,
		Domain:         cmd.Domain,
		Span:           cmd.Span,
		Kind:           cmd.Kind,
		Endpoint:       cmd.Endpoint,
		Attempt:        cmd.Attempt,
		IdempotencyKey: cmd.IdempotencyKey,
		Trace:          cmd.Trace,
		hints:          cmd.Hints,
		resume:         ResumeContext(cmd.ResumeContext),
	}
	var began time.Time
	if w.tel.handlerDur != nil {
		began = time.Now()
		defer func() { w.recordHandler(ctx, cmd, reply.Outcome, time.Since(began)) }()
	}
	if w.tel.tracer != nil {
		if sc, ok := ctx.Value(ranKey{}).(*stepContext); ok {
			sc.ran = true
		}
	}
	defer func() {
		if v := recover(); v != nil {
			w.panics.Add(1)
			stack := debug.Stack()
			w.log.ErrorContext(ctx, "worker: handler panicked", "endpoint", cmd.Endpoint, "kind", cmd.Kind, "tx", cmd.TxID, "panic", v)
			reply.Outcome = topics.OutcomeNonRetryable
			reply.Error = fmt.Sprintf("worker: panic in endpoint %q (%s): %v\n\n%s", cmd.Endpoint, cmd.Kind, v, stack)
			reply.Payload = cmd.Payload
			reply.Hints = s.hints
		}
	}()
	out, err := ep.run(ctx, s, cmd.Kind, cmd.Payload)
	reply.Hints = s.hints
	switch {
	case err == nil:
		reply.Outcome = topics.OutcomeOK
		reply.Payload = out
		reply.Pause = s.pause
	case IsRetryable(err):
		reply.Outcome = topics.OutcomeRetryable
		reply.Error = err.Error()
		reply.Payload = cmd.Payload
	default:
		reply.Outcome = topics.OutcomeNonRetryable
		reply.Error = err.Error()
		reply.Payload = cmd.Payload
	}
	return reply
}

// replyRecord encodes reply, the reply to the command record r, for the
// callback topic replyTo, keyed by transaction id.
func (w *Worker) replyRecord(r *kgo.Record, replyTo string, reply *topics.Envelope) (*kgo.Record, error) {
	reply.Type = topics.TypeReply
	reply.ReplyTo = ""
	reply.SentAt = time.Now()
	b, err := topics.Encode(reply)
	if err != nil {
		return nil, fmt.Errorf("worker: encode reply: %w", err)
	}
	key := r.Key
	if string(key) != reply.TxID {
		key = []byte(reply.TxID)
	}
	return &kgo.Record{Topic: replyTo, Key: key, Value: b}, nil
}

// produceReply produces rec and waits until it is durable. A reply too
// large for the producer or the broker is replaced by a smaller one without
// payload, so that the saga hears of it instead of the command being
// retried forever: a failure keeps its outcome (the orchestrator does not
// read a failure's payload); an ok reply becomes non-retryable, and for a
// forward step it says ActionDone, so that the orchestrator compensates the
// step that ran instead of only the steps before it.
func (w *Worker) produceReply(ctx context.Context, cl *kgo.Client, rec *kgo.Record) error {
	err := cl.ProduceSync(ctx, rec).FirstErr()
	if err == nil {
		return nil
	}
	if !topics.TooLarge(err) {
		return fmt.Errorf("worker: produce reply to %s: %w", rec.Topic, err)
	}
	reply, derr := topics.Decode(rec.Value)
	if derr != nil {
		return fmt.Errorf("worker: produce reply to %s: %w", rec.Topic, err)
	}
	size := len(rec.Value)
	if reply.Outcome == topics.OutcomeOK {
		reply.Error = fmt.Sprintf("worker: the step succeeded but its reply of %d bytes is too large to produce (%v)", size, err)
		reply.Outcome = topics.OutcomeNonRetryable
		reply.ActionDone = reply.Kind == topics.KindProcess
	} else {
		reply.Error = fmt.Sprintf("%s (reply of %d bytes too large to produce with its payload: %v)", reply.Error, size, err)
	}
	reply.Payload = nil
	b, eerr := topics.Encode(reply)
	if eerr != nil {
		return fmt.Errorf("worker: encode reply: %w", eerr)
	}
	small := &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: b}
	w.log.Warn("worker: reply too large, replying without its payload", "tx", reply.TxID, "endpoint", reply.Endpoint, "bytes", size, "outcome", reply.Outcome)
	if err := cl.ProduceSync(ctx, small).FirstErr(); err != nil {
		return fmt.Errorf("worker: produce reply to %s: %w", rec.Topic, err)
	}
	return nil
}

// deadLetter sends r to the dead-letter topic and waits until it is
// durable. If the record is too large for the dead-letter topic it is sent
// without its value, the reason saying so.
func (w *Worker) deadLetter(ctx context.Context, cl *kgo.Client, r *kgo.Record, reason string) error {
	code, detail, _ := strings.Cut(reason, ": ") // the worker's reasons: "<code>: <detail>"
	reason, err := topics.ProduceDeadLetter(ctx, cl, r, topics.DeadLetterCause{By: topics.DeadLetterByWorker, Code: code, Detail: detail})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.deadLettered.Add(1)
	w.countDeadLetter(ctx, r, reason)
	w.log.WarnContext(ctx, "worker: dead-lettered a command record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
	return nil
}

// loopHandler is the kafkaloop handler of Run and runShare: it handles a
// command (pctx outlives Run's context, for the replies and dead letters
// of the commands being handled at shutdown); a command the guard's store
// refuses for good is Permanent, so that it is dead-lettered.
func (w *Worker) loopHandler(pctx context.Context, cl *kgo.Client) kafkaloop.Handler {
	return func(hctx context.Context, r *kgo.Record) error {
		err := w.handle(hctx, pctx, cl, r)
		if errors.Is(err, eventstore.ErrPermanent) {
			return kafkaloop.Permanent(err)
		}
		return err
	}
}
