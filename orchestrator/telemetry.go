package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
)

// WithTracerProvider makes the orchestrator trace its sagas through tp: one
// trace per saga, rooted at Start (or under the span in Start's context),
// with a span per transition (applying a reply, re-driving, restoring,
// resuming), the W3C trace context carried to the workers in every command
// and the trace id kept on the saga row (see package telemetry). Default:
// no tracing, at no cost. A nil tp leaves tracing off.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optFunc(func(c *config) { c.tracerProvider = tp })
}

// WithMeterProvider makes the orchestrator report its metrics through mp:
// the sagas started, finished (by state) and in flight, the step latency by
// endpoint and outcome, retries, restores, replies, dead letters and the
// Starts that failed after a create that may have landed, by result (see
// the telemetry.Metric* names), and the Kafka client metrics of its
// producer and consumer (telemetry.KafkaMetrics; with a share group
// telemetry.ShareKafkaMetrics and the consumer's failed acknowledgements,
// telemetry.ShareAckFailures). Counters are read from
// Stats when collected, so they cost nothing per saga. Default: no
// metrics, at no cost. A nil mp leaves metrics off.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optFunc(func(c *config) { c.meterProvider = mp })
}

// otelState is an orchestrator's instrumentation. A nil tracer means
// tracing is off; a nil stepDur means metrics are off.
type otelState struct {
	tracer trace.Tracer

	stepDur      metric.Float64Histogram
	deadLettered metric.Int64Counter
	reg          metric.Registration
	base         []attribute.KeyValue // service and domain
	stepOpts     *telemetry.Options[stepKey, metric.RecordOption]
	names        *telemetry.Memo[string, string] // op -> "<domain> <op>"
	kafkaOpt     kgo.Opt
	// shareAckFailed counts the share-group consumer's failed
	// acknowledgements (telemetry.ShareAckFailures); nil without metrics
	// or in a consumer group.
	shareAckFailed func(topic string, partition int32, err error)
}

type stepKey struct{ endpoint, kind, outcome string }

// initTelemetry creates the tracer and the instruments.
func (o *Orchestrator[T]) initTelemetry() error {
	o.tel.base = []attribute.KeyValue{telemetry.AttrService.String(o.service), telemetry.AttrDomain.String(o.domain.Name)}
	if tp := o.cfg.tracerProvider; tp != nil {
		o.tel.tracer = tp.Tracer(telemetry.ScopeName + "/orchestrator")
		o.tel.names = telemetry.NewMemo(func(op string) string { return o.domain.Name + " " + op })
	}
	mp := o.cfg.meterProvider
	if mp == nil {
		return nil
	}
	m := mp.Meter(telemetry.ScopeName + "/orchestrator")
	o.tel.stepOpts = telemetry.NewOptions(o.tel.stepOptsOf)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	started := counter(telemetry.MetricSagaStarted, "{saga}", "Sagas started.")
	finished := counter(telemetry.MetricSagaFinished, "{saga}", "Sagas that reached a terminal state, by state.")
	disabled := counter(telemetry.MetricSagaDisabled, "{saga}", "Sagas frozen as DISABLED for outliving their transaction lifetime.")
	retried := counter(telemetry.MetricStepRetried, "{step}", "Steps re-driven from RETRY_PENDING.")
	restored := counter(telemetry.MetricStepRestored, "{step}", "Steps re-sent by restore pickups and Restore.")
	exhausted := counter(telemetry.MetricStepExhausted, "{step}", "Steps that failed after their retry policy's last attempt.")
	commands := counter(telemetry.MetricCommandsPublished, "{command}", "Commands published.")
	replies := counter(telemetry.MetricRepliesReceived, "{reply}", "Replies read from the callback topic, by what was done with them.")
	startFailed := counter(telemetry.MetricSagaStartFailed, "{saga}", "Start calls whose create failed but may have landed, by what became of the saga.")
	inFlight, err := m.Int64ObservableUpDownCounter(telemetry.MetricSagaInFlight, metric.WithUnit("{saga}"),
		metric.WithDescription("Sagas started and not yet finished nor disabled, as this instance counts them."))
	errs = append(errs, err)
	o.tel.stepDur, err = m.Float64Histogram(telemetry.MetricStepDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from a step's command being sent to its reply being applied."),
		metric.WithExplicitBucketBoundaries(telemetry.DurationBuckets()...))
	errs = append(errs, err)
	o.tel.deadLettered, err = m.Int64Counter(telemetry.MetricDeadLettered, metric.WithUnit("{record}"),
		metric.WithDescription("Records sent to a dead-letter topic, by reason."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("orchestrator: metrics: %w", err)
	}
	base := attribute.NewSet(o.tel.base...)
	withState := func(s eventstore.State) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(append(o.tel.base[:2:2], telemetry.AttrSagaState.String(string(s)))...))
	}
	withReply := func(r string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(append(o.tel.base[:2:2], telemetry.AttrReplyResult.String(r))...))
	}
	onBase := metric.WithAttributeSet(base)
	completed, compensated, compFailed := withState(eventstore.StateCompleted), withState(eventstore.StateCompensated), withState(eventstore.StateCompensationFailed)
	terminated := withState(eventstore.StateTerminated)
	applied, stale, foreign := withReply(telemetry.ReplyApplied), withReply(telemetry.ReplyStale), withReply(telemetry.ReplyForeign)
	withStart := func(r string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(append(o.tel.base[:2:2], telemetry.AttrStartResult.String(r))...))
	}
	marked, restorable, unwatched := withStart(telemetry.StartMarked), withStart(telemetry.StartRestorable), withStart(telemetry.StartUnwatched)
	o.tel.reg, err = m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		st := o.Stats()
		ob.ObserveInt64(started, st.Started, onBase)
		ob.ObserveInt64(finished, st.Completed, completed)
		ob.ObserveInt64(finished, st.Compensated, compensated)
		ob.ObserveInt64(finished, st.CompensationFailed, compFailed)
		ob.ObserveInt64(finished, st.Terminated, terminated)
		ob.ObserveInt64(disabled, st.Disabled, onBase)
		// A terminated DISABLED saga left the gauge when it was disabled.
		ended := st.Completed + st.Compensated + st.CompensationFailed + st.Terminated - o.stats.terminatedDisabled.Load()
		ob.ObserveInt64(inFlight, st.Started-ended-st.Disabled, onBase)
		ob.ObserveInt64(retried, st.Retried, onBase)
		ob.ObserveInt64(restored, st.Restored, onBase)
		ob.ObserveInt64(exhausted, st.Exhausted, onBase)
		ob.ObserveInt64(commands, st.Commands, onBase)
		ob.ObserveInt64(replies, st.Replies, applied)
		ob.ObserveInt64(replies, st.StaleReplies, stale)
		ob.ObserveInt64(replies, st.ForeignReplies, foreign)
		ob.ObserveInt64(startFailed, o.stats.startsMarked.Load(), marked)
		ob.ObserveInt64(startFailed, o.stats.startsRestorable.Load(), restorable)
		ob.ObserveInt64(startFailed, o.stats.startsUnwatched.Load(), unwatched)
		return nil
	}, started, finished, disabled, inFlight, retried, restored, exhausted, commands, replies, startFailed)
	if err != nil {
		return fmt.Errorf("orchestrator: metrics: %w", err)
	}
	kafkaMetrics := telemetry.KafkaMetrics // every client's: the producer, the reply consumer
	if o.cfg.groupType == topics.GroupShare {
		kafkaMetrics = telemetry.ShareKafkaMetrics
	}
	o.tel.kafkaOpt, err = kafkaMetrics(mp, "stacksaga-orchestrator-"+o.service+"-"+o.domain.Name)
	if err == nil && o.cfg.groupType == topics.GroupShare {
		o.tel.shareAckFailed, err = telemetry.ShareAckFailures(mp, "stacksaga-orchestrator-"+o.service+"-"+o.domain.Name)
	}
	if err != nil {
		o.tel.reg.Unregister()
		return fmt.Errorf("orchestrator: %w", err)
	}
	return nil
}

// closeTelemetry unregisters the metric callback.
func (o *Orchestrator[T]) closeTelemetry() {
	if o.tel.reg != nil {
		_ = o.tel.reg.Unregister()
	}
}

// recordStep records the latency of step, whose command was sent at sent
// and whose reply was applied at now.
func (o *Orchestrator[T]) recordStep(ctx context.Context, step stepKey, sent, now time.Time) {
	o.tel.stepDur.Record(ctx, now.Sub(sent).Seconds(), o.tel.stepOpts.Get(step)...)
}

// stepOptsOf are the options of a step's latency: service, domain,
// endpoint, kind and outcome.
func (t *otelState) stepOptsOf(k stepKey) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(append(t.base[:2:2],
		telemetry.AttrEndpoint.String(strings.TrimSuffix(k.endpoint, querySuffix)),
		telemetry.AttrStepKind.String(k.kind), telemetry.AttrOutcome.String(k.outcome))...))}
}

// countDeadLetter counts a record dead-lettered with the reason code.
func (o *Orchestrator[T]) countDeadLetter(ctx context.Context, r *kgo.Record, code string) {
	if o.tel.deadLettered == nil {
		return
	}
	o.tel.deadLettered.Add(ctx, 1, metric.WithAttributes(append(o.tel.base[:2:2],
		telemetry.AttrComponent.String("orchestrator"),
		telemetry.AttrDeadLetterReason.String(code),
		semconv.MessagingDestinationName(r.Topic))...))
}

// Start options of the spans without attributes at their start, made once:
// building them per span allocates.
var (
	producerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
	consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
)

// startSpan starts an orchestrator span for op under ctx's span, with the
// options opts (producerSpan or consumerSpan). It is called only when
// tracing is on. Spans carry few attributes: each one costs the SDK some
// work on every span (see the README's overhead figures); the service is
// the resource's service.name and the domain is in the span's name.
func (o *Orchestrator[T]) startSpan(ctx context.Context, op string, opts []trace.SpanStartOption) (context.Context, trace.Span) {
	return o.tel.tracer.Start(ctx, o.spanName(op), opts...)
}

// spanName is "<domain> <op>", made once per op.
func (o *Orchestrator[T]) spanName(op string) string { return o.tel.names.Get(op) }

// sagaSpan starts a span for op on tx when tracing is on: a child of the
// saga's root span (tx.TraceParent), so that actions no message started
// (re-drives, restores, resumes, deadlines) stay in the saga's trace, with
// a link to the span of ctx, if any. With tracing off it returns ctx and
// nil.
func (o *Orchestrator[T]) sagaSpan(ctx context.Context, op string, tx *eventstore.Transaction) (context.Context, trace.Span) {
	if o.tel.tracer == nil {
		return ctx, nil
	}
	var opts []trace.SpanStartOption
	parent := ctx
	if sc := telemetry.ParseTraceParent(tx.TraceParent); sc.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(ctx, sc)
		if !sc.IsSampled() {
			return followUnsampled(parent)
		}
		if caller := trace.SpanContextFromContext(ctx); caller.IsValid() && caller.TraceID() != sc.TraceID() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller}))
		}
	}
	opts = append(opts, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		append(stepAttrs(tx), telemetry.AttrSagaStateFrom.String(string(tx.State)))...))
	return o.tel.tracer.Start(parent, o.spanName(op), opts...)
}

// stepAttrs names tx's saga and current step on a span.
func stepAttrs(tx *eventstore.Transaction, more ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{
		telemetry.AttrTxID.String(tx.TxID),
		telemetry.AttrEndpoint.String(strings.TrimSuffix(tx.Endpoint, querySuffix)),
		telemetry.AttrStepKind.String(tx.Kind), telemetry.AttrStepSpan.Int(tx.Span), telemetry.AttrAttempt.Int(tx.Attempt),
	}, more...)
}

// endSpan ends span (nil when tracing is off) with tx's state and err.
func endSpan(span trace.Span, tx *eventstore.Transaction, err error) {
	if span == nil {
		return
	}
	if tx != nil && tx.State != "" {
		span.SetAttributes(telemetry.AttrSagaState.String(string(tx.State)))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// replySpan starts the span that applies the reply env to tx: a child of
// the worker's span that sent it (or of the saga's root span when the reply
// carries no trace context). Its attributes are set once, by endReply.
func (o *Orchestrator[T]) replySpan(ctx context.Context, env *topics.Envelope, tx *eventstore.Transaction) (context.Context, trace.Span) {
	parent := ctx
	if len(env.Trace) > 0 {
		parent = telemetry.Extract(ctx, env.Trace)
	} else if sc := telemetry.ParseTraceParent(tx.TraceParent); sc.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	if sc := trace.SpanContextFromContext(parent); sc.IsValid() && !sc.IsSampled() {
		return followUnsampled(parent)
	}
	return o.startSpan(parent, "reply", consumerSpan)
}

// followUnsampled is the span of an action in a saga whose trace is not
// sampled: none. The SDK would only make a non-recording span (a parent
// based sampler follows the saga's decision), so the action keeps the
// remote parent in ctx, whose context it propagates unchanged, and costs no
// span.
func followUnsampled(ctx context.Context) (context.Context, trace.Span) {
	return ctx, trace.SpanFromContext(ctx)
}

// stepRef names the step a reply answers, taken before the reply is
// applied (applying it moves the saga on).
type stepRef struct {
	txID, endpoint, kind, outcome string
	span, attempt                 int
}

func refOf(tx *eventstore.Transaction, env *topics.Envelope) stepRef {
	return stepRef{txID: tx.TxID, endpoint: tx.Endpoint, kind: tx.Kind, outcome: string(env.Outcome), span: tx.Span, attempt: tx.Attempt}
}

// endReply describes the step ref, whose reply was read from topic, and
// what applying it did to the saga (now tx) on span, and ends it. The
// attributes are set in one call at the end (from a pooled buffer, see
// telemetry.SpanAttrs), and only on a recording span:
// the SDK then copies them once, and a span sampled out costs no
// attributes.
func endReply(span trace.Span, topic string, ref stepRef, tx *eventstore.Transaction, err error) {
	if span.IsRecording() {
		attrs := telemetry.NewSpanAttrs(span)
		attrs.Add(
			telemetry.AttrTxID.String(ref.txID), telemetry.AttrEndpoint.String(strings.TrimSuffix(ref.endpoint, querySuffix)),
			telemetry.AttrStepKind.String(ref.kind), telemetry.AttrStepSpan.Int(ref.span), telemetry.AttrAttempt.Int(ref.attempt),
			telemetry.AttrOutcome.String(ref.outcome), telemetry.AttrSagaState.String(string(tx.State)),
			semconv.MessagingSystemKafka, semconv.MessagingOperationTypeProcess, semconv.MessagingDestinationName(topic))
		attrs.SetOn(span)
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// tracePublish puts the trace context of ctx's span, the one that sends
// the command, into env. It is called only when tracing is on.
func tracePublish(ctx context.Context, env *topics.Envelope) {
	env.Trace = telemetry.Inject(ctx)
}
