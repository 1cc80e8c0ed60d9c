package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/metrictest"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

var _ worker.MetricsRegisterer = (*writeprotect.Guard)(nil)

// A worker with a MeterProvider reports handler latency by endpoint and
// outcome, commands processed, dead letters by reason, its guard's
// duplicates and its Kafka client's messages; the callbacks stop with Run.
func TestWorkerMetrics(t *testing.T) {
	e := newKfake(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	g, err := writeprotect.New(memory.New(), writeprotect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	w := e.newWorker(worker.WithMeterProvider(mp), worker.WithGuard(g))
	registerPayment(t, w)
	if err := worker.Register(w, worker.Endpoint[Order]{
		Name: "flaky",
		Process: func(_ context.Context, s *worker.Step, o Order) (Order, error) {
			if s.Attempt == 1 {
				return o, worker.Retryable(errors.New("gateway timeout"))
			}
			return o, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	stop := e.start(w)

	ok := e.cmd("tx-ok", "charge", 0, topics.KindProcess, Order{ID: "o1", Amount: 10})
	e.send(ok, ok) // the second is a duplicate the guard skips
	e.send(e.cmd("tx-bad", "charge", 0, topics.KindProcess, Order{ID: "o2", Amount: -1}))
	e.send(e.cmd("tx-unknown", "nope", 0, topics.KindProcess, Order{ID: "o3"}))
	e.sendRaw(&kgo.Record{Key: []byte("junk"), Value: []byte("not msgpack")})
	// A retryable failure is recorded; its duplicate re-sends it; the next
	// attempt supersedes it.
	flaky := e.cmd("tx-flaky", "flaky", 0, topics.KindProcess, Order{ID: "o4"})
	e.send(flaky, flaky)
	e.waitFor("replies and dead letters", func(rs []*topics.Envelope, dlts []*kgo.Record) bool {
		return len(rs) >= 6 && len(dlts) >= 2
	})
	again := *flaky
	again.Attempt = 2
	e.send(&again)
	e.waitFor("the second attempt's reply", func(rs []*topics.Envelope, _ []*kgo.Record) bool {
		return len(rs) >= 7
	})
	waitStats(t, w, worker.Stats{Processed: 6, DeadLettered: 2})

	ms := metrictest.Collect(t, reader)
	svc := telemetry.AttrService.String(service)
	for _, c := range []struct {
		name  string
		match []attribute.KeyValue
		want  float64
	}{
		{telemetry.MetricHandlerDuration, []attribute.KeyValue{svc, telemetry.AttrEndpoint.String("charge"), telemetry.AttrStepKind.String("process"), telemetry.AttrOutcome.String("ok")}, 1},
		{telemetry.MetricHandlerDuration, []attribute.KeyValue{telemetry.AttrOutcome.String("non_retryable")}, 1},
		{telemetry.MetricCommandsProcessed, []attribute.KeyValue{svc}, 6},
		{telemetry.MetricHandlerPanics, nil, 0},
		{telemetry.MetricGuardExecutions, []attribute.KeyValue{svc}, 4},
		{telemetry.MetricGuardDuplicatesSkipped, []attribute.KeyValue{svc}, 2},
		{telemetry.MetricGuardRetryablesRecorded, []attribute.KeyValue{svc}, 1},
		{telemetry.MetricGuardSuperseded, []attribute.KeyValue{svc}, 1},
		{telemetry.MetricGuardLostLeases, []attribute.KeyValue{svc}, 0},
		{telemetry.MetricDeadLettered, []attribute.KeyValue{telemetry.AttrComponent.String("worker"), telemetry.AttrDeadLetterReason.String(worker.ReasonUndecodable)}, 1},
		{telemetry.MetricDeadLettered, []attribute.KeyValue{telemetry.AttrDeadLetterReason.String(worker.ReasonUnknownEndpoint)}, 1},
	} {
		if got := metrictest.Total(ms[c.name], c.match...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.match, got, c.want)
		}
	}
	// The 8 commands; 7 replies (the duplicates' too) and 2 dead letters.
	// kgo calls its produce hook on a goroutine of its own after the
	// produce's promise: wait for the counts themselves.
	var consumed, sent, connects float64
	kafkaCounts := func() bool {
		km := metrictest.Collect(t, reader)
		consumed = metrictest.Total(km[telemetry.MetricKafkaConsumed])
		sent = metrictest.Total(km[telemetry.MetricKafkaSent])
		connects = metrictest.Total(km[telemetry.MetricKafkaConnects])
		return consumed >= 8 && sent >= 9 && connects > 0
	}
	for deadline := time.Now().Add(30 * time.Second); !kafkaCounts(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Kafka client counts: %s %v, %s %v, %s %v; want at least 8, 9 and 1",
				telemetry.MetricKafkaConsumed, consumed, telemetry.MetricKafkaSent, sent, telemetry.MetricKafkaConnects, connects)
		}
	}

	stop()
	ms = metrictest.Collect(t, reader)
	for _, name := range []string{telemetry.MetricCommandsProcessed, telemetry.MetricGuardDuplicatesSkipped} {
		if m, ok := ms[name]; ok && metrictest.Total(m) != 0 {
			t.Errorf("%s still reported after Run returned", name)
		}
	}
}

// A worker with a TracerProvider runs each delivery in a span that is a
// child of the span in the command's trace context; the handler's context
// holds it and the reply carries it back.
func TestWorkerTraceContext(t *testing.T) {
	e := newKfake(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	w := e.newWorker(worker.WithTracerProvider(tp))
	handled := make(chan trace.SpanContext, 1)
	if err := worker.Register(w, worker.Endpoint[Order]{Name: "trace", Process: func(ctx context.Context, _ *worker.Step, o Order) (Order, error) {
		handled <- trace.SpanContextFromContext(ctx)
		return o, nil
	}}); err != nil {
		t.Fatal(err)
	}
	e.start(w)

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cmd := e.cmd("tx-trace", "trace", 2, topics.KindProcess, Order{ID: "o"})
	cmd.Trace = map[string]string{"traceparent": parent}
	e.send(cmd)
	rep := e.reply("tx-trace", 2, topics.KindProcess)
	var inHandler trace.SpanContext
	select {
	case inHandler = <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("handler not called")
	}
	var spans tracetest.SpanStubs
	waitForCond(t, "the worker span", func() bool { spans = exp.GetSpans(); return len(spans) == 1 })
	s := spans[0]
	if s.Name != "process trace" || s.SpanKind != trace.SpanKindConsumer {
		t.Errorf("span %q kind %v", s.Name, s.SpanKind)
	}
	if s.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent.SpanID().String() != "00f067aa0ba902b7" || !s.Parent.IsRemote() {
		t.Errorf("span parent %v, want the command's traceparent", s.Parent)
	}
	if inHandler.SpanID() != s.SpanContext.SpanID() {
		t.Errorf("handler's span %v, want the worker span %v", inHandler.SpanID(), s.SpanContext.SpanID())
	}
	want := telemetry.TraceParent(s.SpanContext)
	if rep.Trace["traceparent"] != want {
		t.Errorf("reply traceparent %q, want the worker span's %q", rep.Trace["traceparent"], want)
	}
	attrs := map[attribute.Key]string{}
	for _, kv := range s.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	for k, v := range map[attribute.Key]string{
		telemetry.AttrTxID: "tx-trace", telemetry.AttrStepSpan: "2", telemetry.AttrOutcome: "ok", telemetry.AttrDuplicate: "",
		"messaging.destination.name": commandTopic, "messaging.system": "kafka",
	} {
		if attrs[k] != v {
			t.Errorf("span attribute %s = %q, want %q", k, attrs[k], v)
		}
	}
}

// Without a TracerProvider the worker leaves trace context alone: the
// reply carries the command's, as it always did.
func TestWorkerTelemetryOff(t *testing.T) {
	e := newKfake(t)
	w := e.newWorker()
	registerPayment(t, w)
	e.start(w)
	cmd := e.cmd("tx-off", "charge", 0, topics.KindProcess, Order{ID: "o", Amount: 1})
	cmd.Trace = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	e.send(cmd)
	if rep := e.reply("tx-off", 0, topics.KindProcess); rep.Trace["traceparent"] != cmd.Trace["traceparent"] || len(rep.Trace) != 1 {
		t.Fatalf("reply trace %v, want the command's %v", rep.Trace, cmd.Trace)
	}
}

func waitForCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A command of a saga whose trace is not sampled gets no span, and the
// reply carries the sender's context unchanged.
func TestWorkerFollowsUnsampledSaga(t *testing.T) {
	e := newKfake(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	w := e.newWorker(worker.WithTracerProvider(tp))
	registerPayment(t, w)
	e.start(w)
	const unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	cmd := e.cmd("tx-unsampled", "charge", 0, topics.KindProcess, Order{ID: "o", Amount: 1})
	cmd.Trace = map[string]string{"traceparent": unsampled}
	e.send(cmd)
	if rep := e.reply("tx-unsampled", 0, topics.KindProcess); rep.Trace["traceparent"] != unsampled {
		t.Fatalf("reply trace %v, want the unsampled %s", rep.Trace, unsampled)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans for an unsampled saga", n)
	}
}
