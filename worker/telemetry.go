package worker

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

	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
)

// WithTracerProvider makes the worker trace every step attempt through tp:
// a span per command handled ("process <endpoint>" or "revert <endpoint>"),
// a child of the orchestrator span that sent the command (its W3C trace
// context travels in the envelope), whose context the handler's ctx holds
// (for the handler's own spans and for telemetry.LogHandler) and the reply
// carries back. Default: no tracing, at no cost. A nil tp leaves tracing
// off.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return option(func(c *config) { c.tracerProvider = tp })
}

// WithMeterProvider makes the worker report its metrics through mp: the
// handler latency by endpoint, kind and outcome, the commands processed,
// panics, dead letters by reason, the Kafka client metrics
// (telemetry.KafkaMetrics; with a share group telemetry.ShareKafkaMetrics
// and the failed acknowledgements, telemetry.ShareAckFailures) and, when
// its Guard reports metrics (it has a RegisterMetrics method, as
// writeprotect.Guard does), the guard's duplicates skipped, lease waits and
// the like. Default: no metrics, at no
// cost. A nil mp leaves metrics off.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return option(func(c *config) { c.meterProvider = mp })
}

// MetricsRegisterer is implemented by a Guard that reports metrics (as
// writeprotect.Guard does): a worker with a MeterProvider registers it once,
// with the worker's service as attribute, and unregisters it when Run
// returns.
type MetricsRegisterer interface {
	RegisterMetrics(mp metric.MeterProvider, attrs ...attribute.KeyValue) (metric.Registration, error)
}

// otelState is a worker's instrumentation: a nil tracer means tracing is
// off, a nil handlerDur that metrics are off.
type otelState struct {
	tracer trace.Tracer
	// spanBase describes the consumer on every span.
	spanBase []attribute.KeyValue

	handlerDur   metric.Float64Histogram
	deadLettered metric.Int64Counter
	regs         []metric.Registration
	service      attribute.KeyValue
	stepOpts     *telemetry.Options[stepKey, metric.RecordOption]
	names        *telemetry.Memo[nameKey, string] // -> "<kind> <endpoint>"
	kafkaOpt     kgo.Opt
	// shareAckFailed counts a share-group client's failed
	// acknowledgements (telemetry.ShareAckFailures); nil without metrics
	// or in a consumer group.
	shareAckFailed func(topic string, partition int32, err error)
}

type stepKey struct {
	endpoint string
	kind     topics.Kind
	outcome  topics.Outcome
}

// initTelemetry creates the tracer and the instruments.
func (w *Worker) initTelemetry() error {
	w.tel.service = telemetry.AttrService.String(w.service)
	if tp := w.cfg.tracerProvider; tp != nil {
		w.tel.tracer = tp.Tracer(telemetry.ScopeName + "/worker")
		w.tel.names = telemetry.NewMemo(func(k nameKey) string { return string(k.kind) + " " + k.endpoint })
		w.tel.spanBase = []attribute.KeyValue{
			semconv.MessagingSystemKafka, semconv.MessagingOperationTypeProcess, semconv.MessagingDestinationName(w.topic),
		}
	}
	mp := w.cfg.meterProvider
	if mp == nil {
		return nil
	}
	m := mp.Meter(telemetry.ScopeName + "/worker")
	w.tel.stepOpts = telemetry.NewOptions(w.tel.stepOptsOf)
	var errs []error
	var err error
	w.tel.handlerDur, err = m.Float64Histogram(telemetry.MetricHandlerDuration, metric.WithUnit("s"),
		metric.WithDescription("Time a step handler ran, by endpoint, kind and outcome."),
		metric.WithExplicitBucketBoundaries(telemetry.DurationBuckets()...))
	errs = append(errs, err)
	w.tel.deadLettered, err = m.Int64Counter(telemetry.MetricDeadLettered, metric.WithUnit("{record}"),
		metric.WithDescription("Records sent to a dead-letter topic, by reason."))
	errs = append(errs, err)
	processed, err := m.Int64ObservableCounter(telemetry.MetricCommandsProcessed, metric.WithUnit("{command}"),
		metric.WithDescription("Commands handled and replied to."))
	errs = append(errs, err)
	panics, err := m.Int64ObservableCounter(telemetry.MetricHandlerPanics, metric.WithUnit("{panic}"),
		metric.WithDescription("Step handler panics."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker: metrics: %w", err)
	}
	onService := metric.WithAttributeSet(attribute.NewSet(w.tel.service))
	reg, err := m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		st := w.Stats()
		ob.ObserveInt64(processed, int64(st.Processed), onService)
		ob.ObserveInt64(panics, int64(st.Panics), onService)
		return nil
	}, processed, panics)
	if err != nil {
		return fmt.Errorf("worker: metrics: %w", err)
	}
	w.tel.regs = append(w.tel.regs, reg)
	if g, ok := w.cfg.guard.(MetricsRegisterer); ok {
		reg, err := g.RegisterMetrics(mp, w.tel.service)
		if err != nil {
			w.closeTelemetry()
			return fmt.Errorf("worker: guard metrics: %w", err)
		}
		w.tel.regs = append(w.tel.regs, reg)
	}
	kafkaMetrics := telemetry.KafkaMetrics
	if w.cfg.groupType == topics.GroupShare {
		kafkaMetrics = telemetry.ShareKafkaMetrics
	}
	w.tel.kafkaOpt, err = kafkaMetrics(mp, "stacksaga-worker-"+w.service)
	if err == nil && w.cfg.groupType == topics.GroupShare {
		w.tel.shareAckFailed, err = telemetry.ShareAckFailures(mp, "stacksaga-worker-"+w.service)
	}
	if err != nil {
		w.closeTelemetry()
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// closeTelemetry unregisters the metric callbacks.
func (w *Worker) closeTelemetry() {
	w.telOnce.Do(func() {
		for _, r := range w.tel.regs {
			_ = r.Unregister()
		}
	})
}

// recordHandler records how long the handler of cmd ran and its outcome.
func (w *Worker) recordHandler(ctx context.Context, cmd *topics.Envelope, outcome topics.Outcome, d time.Duration) {
	opts := w.tel.stepOpts.Get(stepKey{cmd.Endpoint, cmd.Kind, outcome})
	w.tel.handlerDur.Record(ctx, d.Seconds(), opts...)
}

// stepOptsOf are the options of a handler's duration: service, endpoint,
// kind and outcome.
func (t *otelState) stepOptsOf(k stepKey) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(t.service, telemetry.AttrEndpoint.String(k.endpoint),
		telemetry.AttrStepKind.String(string(k.kind)), telemetry.AttrOutcome.String(string(k.outcome))))}
}

// countDeadLetter counts a record dead-lettered with reason, by the reason's
// code (the Reason* constant it starts with).
func (w *Worker) countDeadLetter(ctx context.Context, r *kgo.Record, reason string) {
	if w.tel.deadLettered == nil {
		return
	}
	code, _, _ := strings.Cut(reason, ":")
	w.tel.deadLettered.Add(ctx, 1, metric.WithAttributes(w.tel.service,
		telemetry.AttrComponent.String("worker"), telemetry.AttrDeadLetterReason.String(code),
		semconv.MessagingDestinationName(r.Topic)))
}

// ranKey is the context key under which a stepContext finds itself.
type ranKey struct{}

// stepContext is the context of one traced delivery: it holds the step's
// span (in its parent) and the flag execute sets when the handler ran.
type stepContext struct {
	context.Context
	ran bool
}

// Value returns c itself for ranKey.
func (c *stepContext) Value(key any) any {
	if key == (ranKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// startStep starts the span of one delivery of cmd, a child of the span
// that sent the command. Its attributes are set once, by endStep.
//
// A command of a saga whose trace is not sampled gets no span: the SDK
// would only make a non-recording one (a parent-based sampler follows the
// saga's decision), so the delivery keeps the sender's context, which the
// reply carries back unchanged.
func (w *Worker) startStep(ctx context.Context, cmd *topics.Envelope) (*stepContext, trace.Span) {
	parent := telemetry.Extract(ctx, cmd.Trace)
	if sc := trace.SpanContextFromContext(parent); sc.IsValid() && !sc.IsSampled() {
		return &stepContext{Context: parent}, trace.SpanFromContext(parent)
	}
	ctx, span := w.tel.tracer.Start(parent, w.spanName(cmd.Kind, cmd.Endpoint), consumerSpan...)
	return &stepContext{Context: ctx}, span
}

// spanName is "<kind> <endpoint>", made once per pair.
func (w *Worker) spanName(kind topics.Kind, endpoint string) string {
	return w.tel.names.Get(nameKey{kind, endpoint})
}

// consumerSpan is the start option of step spans, made once: building it
// per span allocates.
var consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

type nameKey struct {
	kind     topics.Kind
	endpoint string
}

// endStep describes the delivery of cmd and what became of it on span,
// and ends it: the step, its outcome, and stacksaga.step.duplicate when the
// guard answered without running the handler. The attributes are set in
// one call at the end (from a pooled buffer, see telemetry.SpanAttrs), and
// only on a recording span: the SDK then copies them once, and a span
// sampled out costs no attributes. Few of them: each
// one costs the SDK some work on every span; the service is the resource's
// service.name.
func (w *Worker) endStep(span trace.Span, cmd *topics.Envelope, reply *topics.Envelope, ran bool, err error) {
	if span.IsRecording() {
		outcome := "suppressed"
		if reply != nil {
			outcome = string(reply.Outcome)
		}
		attrs := telemetry.NewSpanAttrs(span)
		attrs.Add(w.tel.spanBase...)
		attrs.Add(
			telemetry.AttrTxID.String(cmd.TxID), telemetry.AttrEndpoint.String(cmd.Endpoint),
			telemetry.AttrStepKind.String(string(cmd.Kind)), telemetry.AttrStepSpan.Int(cmd.Span), telemetry.AttrAttempt.Int(cmd.Attempt))
		if err == nil {
			attrs.Add(telemetry.AttrOutcome.String(outcome))
			if !ran {
				attrs.Add(telemetry.AttrDuplicate.Bool(true))
			}
		}
		attrs.SetOn(span)
	}
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case ran && reply != nil && reply.Outcome != topics.OutcomeOK:
		span.SetStatus(codes.Error, reply.Error)
	}
	span.End()
}
