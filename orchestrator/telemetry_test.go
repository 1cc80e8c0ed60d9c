package orchestrator_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/metrictest"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
)

func attrsOf(kvs []attribute.KeyValue) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

// A traced saga stays in one trace through a retry: Start is a child of the
// caller's span, every command carries the trace context of the span that
// sent it, each reply span is a child of the span the reply names, and the
// re-drive, which no message starts, continues from the traceparent on the
// saga row. The metrics count the saga, its steps by outcome, the retry and
// the dead letters by reason.
func TestOrchestratorTelemetry(t *testing.T) {
	brokers := newCluster(t)
	const svc = "otel-svc"
	dom := orchestrator.Domain[order]{Name: "otel-dom", OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: svc, Endpoint: "a"}, orchestrator.Step{Service: svc, Endpoint: "b"})}
	ensureTopics(t, brokers, topics.CommandTopic(svc), topics.CallbackTopic(dom.Name), topics.DeadLetterTopic(topics.CallbackTopic(dom.Name)))
	resp := startResponder(t, brokers, []string{topics.CommandTopic(svc)}, func(cmd *topics.Envelope) *topics.Envelope {
		if cmd.Endpoint == "b" && cmd.Attempt == 1 {
			return reply(cmd, topics.OutcomeRetryable, nil, "busy")
		}
		return reply(cmd, topics.OutcomeOK, nil, "")
	})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	store := memory.New()
	defer store.Close()
	o, err := orchestrator.New("otel-orders", dom, orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store),
		orchestrator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		orchestrator.WithoutRecovery(), orchestrator.WithTracerProvider(tp), orchestrator.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	stop := runOrch(t, o)

	ctx, caller := tp.Tracer("test").Start(context.Background(), "POST /orders")
	txID, err := o.Start(ctx, order{ID: "o1"})
	caller.End()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "RETRY_PENDING", func() bool {
		s, err := o.Get(context.Background(), txID)
		return err == nil && s.State == eventstore.StateRetryPending
	})
	// A re-drive from a context with a span of another trace (an admin's
	// request): the saga's trace goes on, with a link to the caller.
	adminCtx, admin := tp.Tracer("test").Start(context.Background(), "POST /admin/redrive")
	if err := o.Redrive(adminCtx, txID); err != nil {
		t.Fatal(err)
	}
	admin.End()
	if got := waitTerminal(t, o, []string{txID}, 30*time.Second); got[txID] != eventstore.StateCompleted {
		t.Fatalf("state %s", got[txID])
	}
	// Dead letters: a record that is no envelope, and a reply for no saga.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ghost := reply(resp.commands()[0], topics.OutcomeOK, nil, "")
	ghost.TxID = "01a22ee3-21c6-8001-b41a-3554da6f373f"
	b, _ := topics.Encode(ghost)
	cb := topics.CallbackTopic(dom.Name)
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: cb, Value: []byte("junk")}, &kgo.Record{Topic: cb, Key: []byte(ghost.TxID), Value: b}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "two dead letters", func() bool { return o.Stats().DeadLettered == 2 })

	ms := metrictest.Collect(t, reader)
	stop()

	// Traces.
	saga, err := o.Get(context.Background(), txID)
	if err != nil {
		t.Fatal(err)
	}
	if saga.TraceID != caller.SpanContext().TraceID().String() {
		t.Fatalf("saga TraceID %q, want the caller's trace %s", saga.TraceID, caller.SpanContext().TraceID())
	}
	for _, c := range resp.commands() {
		if c.TxID == txID && c.Trace["traceparent"] == "" {
			t.Errorf("command %s attempt %d carries no traceparent", c.Endpoint, c.Attempt)
		}
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	var start, redrive tracetest.SpanStub
	var replies []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		byID[s.SpanContext.SpanID()] = s
		switch s.Name {
		case "otel-dom start":
			start = s
		case "otel-dom redrive":
			redrive = s
		case "otel-dom reply":
			replies = append(replies, s)
		}
		if s.Name != "POST /admin/redrive" && s.SpanContext.TraceID().String() != saga.TraceID {
			t.Errorf("span %q in trace %s, want %s", s.Name, s.SpanContext.TraceID(), saga.TraceID)
		}
	}
	if start.Parent.SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("start span's parent %v, want the caller %v", start.Parent.SpanID(), caller.SpanContext().SpanID())
	}
	if redrive.Parent.SpanID() != start.SpanContext.SpanID() || len(redrive.Links) != 1 || redrive.Links[0].SpanContext.SpanID() != admin.SpanContext().SpanID() {
		t.Errorf("redrive span: parent %v (want the start span %v), links %v", redrive.Parent.SpanID(), start.SpanContext.SpanID(), redrive.Links)
	}
	// Replies: a (sent by start), b attempt 1 (sent by a's reply span), b
	// attempt 2 (sent by the re-drive); each reply span is a child of the
	// span that sent the command (the responder copies the command's trace
	// context into its reply, as a worker without tracing does).
	if len(replies) != 3 {
		t.Fatalf("%d reply spans, want 3", len(replies))
	}
	byStep := map[string]tracetest.SpanStub{}
	for _, r := range replies {
		a := attrsOf(r.Attributes)
		byStep[a[telemetry.AttrEndpoint]+"/"+a[telemetry.AttrAttempt]] = r
		if r.SpanKind != trace.SpanKindConsumer {
			t.Errorf("reply span kind %v", r.SpanKind)
		}
	}
	for step, sender := range map[string]tracetest.SpanStub{
		svc + "/a/1": start, svc + "/b/1": byStep[svc+"/a/1"], svc + "/b/2": redrive,
	} {
		if r, ok := byStep[step]; !ok || r.Parent.SpanID() != sender.SpanContext.SpanID() {
			t.Errorf("reply span of %s: parent %v, want its sender %q %v", step, r.Parent.SpanID(), sender.Name, sender.SpanContext.SpanID())
		}
	}

	// Metrics.
	dk := telemetry.AttrDomain.String(dom.Name)
	for _, c := range []struct {
		name  string
		match []attribute.KeyValue
		want  float64
	}{
		{telemetry.MetricSagaStarted, []attribute.KeyValue{dk, telemetry.AttrService.String("otel-orders")}, 1},
		{telemetry.MetricSagaFinished, []attribute.KeyValue{dk, telemetry.AttrSagaState.String("COMPLETED")}, 1},
		{telemetry.MetricSagaFinished, []attribute.KeyValue{telemetry.AttrSagaState.String("COMPENSATED")}, 0},
		{telemetry.MetricSagaInFlight, []attribute.KeyValue{dk}, 0},
		{telemetry.MetricStepRetried, []attribute.KeyValue{dk}, 1},
		{telemetry.MetricStepDuration, []attribute.KeyValue{telemetry.AttrEndpoint.String(svc + "/b"), telemetry.AttrOutcome.String("retryable")}, 1},
		{telemetry.MetricStepDuration, []attribute.KeyValue{telemetry.AttrOutcome.String("ok")}, 2},
		{telemetry.MetricCommandsPublished, nil, 3},
		{telemetry.MetricRepliesReceived, []attribute.KeyValue{telemetry.AttrReplyResult.String(telemetry.ReplyApplied)}, 3},
		{telemetry.MetricDeadLettered, []attribute.KeyValue{telemetry.AttrComponent.String("orchestrator"), telemetry.AttrDeadLetterReason.String("undecodable")}, 1},
		{telemetry.MetricDeadLettered, []attribute.KeyValue{telemetry.AttrDeadLetterReason.String("unknown-transaction")}, 1},
	} {
		if got := metrictest.Total(ms[c.name], c.match...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.match, got, c.want)
		}
	}
	if metrictest.Total(ms[telemetry.MetricKafkaSent]) < 3 || metrictest.Total(ms[telemetry.MetricKafkaConsumed]) < 3 {
		t.Errorf("Kafka client metrics: sent %v consumed %v", metrictest.Total(ms[telemetry.MetricKafkaSent]), metrictest.Total(ms[telemetry.MetricKafkaConsumed]))
	}
	// Closed, the orchestrator no longer reports.
	if got := metrictest.Total(metrictest.Collect(t, reader)[telemetry.MetricSagaStarted]); got != 0 {
		t.Errorf("%s reported after close: %v", telemetry.MetricSagaStarted, got)
	}
}

// Without providers nothing is traced: no trace context in commands, no
// trace id on the saga.
func TestOrchestratorTelemetryOff(t *testing.T) {
	brokers := newCluster(t)
	const svc = "off-svc"
	dom := orchestrator.Domain[order]{Name: "off-dom", OnNext: orchestrator.Sequence[order](orchestrator.Step{Service: svc, Endpoint: "a"})}
	ensureTopics(t, brokers, topics.CommandTopic(svc), topics.CallbackTopic(dom.Name))
	resp := startResponder(t, brokers, []string{topics.CommandTopic(svc)}, func(cmd *topics.Envelope) *topics.Envelope {
		return reply(cmd, topics.OutcomeOK, nil, "")
	})
	o, err := orchestrator.New("off-orders", dom, orchestrator.WithBrokers(brokers...), orchestrator.WithoutRecovery())
	if err != nil {
		t.Fatal(err)
	}
	runOrch(t, o)
	txID, err := o.Start(context.Background(), order{ID: "o"})
	if err != nil {
		t.Fatal(err)
	}
	waitTerminal(t, o, []string{txID}, 30*time.Second)
	row, err := o.Store().LoadTransaction(context.Background(), o.Scope(), txID)
	if err != nil {
		t.Fatal(err)
	}
	if row.TraceID != "" || row.TraceParent != "" {
		t.Errorf("row trace %q %q", row.TraceID, row.TraceParent)
	}
	for _, c := range resp.commands() {
		if c.Trace != nil {
			t.Errorf("command carries trace context %v", c.Trace)
		}
	}
}

// A saga the sampler leaves out is traced nowhere: no span, no trace id on
// the row, but its commands carry the unsampled trace context (flags 00),
// so that the workers follow the decision.
func TestOrchestratorUnsampledSaga(t *testing.T) {
	brokers := newCluster(t)
	const svc = "uns-svc"
	dom := orchestrator.Domain[order]{Name: "uns-dom", OnNext: orchestrator.Sequence[order](orchestrator.Step{Service: svc, Endpoint: "a"}, orchestrator.Step{Service: svc, Endpoint: "b"})}
	ensureTopics(t, brokers, topics.CommandTopic(svc), topics.CallbackTopic(dom.Name))
	resp := startResponder(t, brokers, []string{topics.CommandTopic(svc)}, func(cmd *topics.Envelope) *topics.Envelope {
		return reply(cmd, topics.OutcomeOK, nil, "")
	})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	o, err := orchestrator.New("uns-orders", dom, orchestrator.WithBrokers(brokers...), orchestrator.WithoutRecovery(), orchestrator.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	runOrch(t, o)
	txID, err := o.Start(context.Background(), order{ID: "o"})
	if err != nil {
		t.Fatal(err)
	}
	waitTerminal(t, o, []string{txID}, 30*time.Second)
	row, err := o.Store().LoadTransaction(context.Background(), o.Scope(), txID)
	if err != nil {
		t.Fatal(err)
	}
	sc := telemetry.ParseTraceParent(row.TraceParent)
	if row.TraceID != "" || !sc.IsValid() || sc.IsSampled() {
		t.Fatalf("row TraceID %q TraceParent %q", row.TraceID, row.TraceParent)
	}
	cmds := resp.commands()
	if len(cmds) != 2 {
		t.Fatalf("%d commands", len(cmds))
	}
	for _, c := range cmds {
		if got := telemetry.ParseTraceParent(c.Trace["traceparent"]); got.TraceID() != sc.TraceID() || got.IsSampled() {
			t.Errorf("command %s trace %v, want the saga's unsampled trace", c.Endpoint, c.Trace)
		}
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans for an unsampled saga", n)
	}
}

// failingTransitions is a store whose Transition into state fails, before
// writing anything, the first n times.
type failingTransitions struct {
	eventstore.Store
	state eventstore.State
	left  atomic.Int32
}

func (s *failingTransitions) Transition(ctx context.Context, tx eventstore.Transaction, tryout *eventstore.Tryout) error {
	if tx.State == s.state && s.left.Add(-1) >= 0 {
		return errors.New("store unavailable")
	}
	return s.Store.Transition(ctx, tx, tryout)
}

// A reply whose transition fails transiently is retried; the step latency is
// recorded once, when the reply is applied, so that the histogram's count
// agrees with the replies counted applied.
func TestStepDurationCountsAppliedRepliesOnly(t *testing.T) {
	brokers := newCluster(t)
	const svc = "dur-svc"
	dom := orchestrator.Domain[order]{Name: "dur-dom", OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: svc, Endpoint: "a"}, orchestrator.Step{Service: svc, Endpoint: "b"})}
	ensureTopics(t, brokers, topics.CommandTopic(svc), topics.CallbackTopic(dom.Name), topics.DeadLetterTopic(topics.CallbackTopic(dom.Name)))
	startResponder(t, brokers, []string{topics.CommandTopic(svc)}, func(cmd *topics.Envelope) *topics.Envelope {
		return reply(cmd, topics.OutcomeOK, nil, "")
	})
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	store := &failingTransitions{Store: memory.New(), state: eventstore.StateCompleted}
	store.left.Store(2)
	defer store.Close()
	o, err := orchestrator.New("dur-orders", dom, orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store),
		orchestrator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		orchestrator.WithoutRecovery(), orchestrator.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	stop := runOrch(t, o)
	txID, err := o.Start(context.Background(), order{ID: "o1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := waitTerminal(t, o, []string{txID}, 30*time.Second); got[txID] != eventstore.StateCompleted {
		t.Fatalf("state %s", got[txID])
	}
	waitStats(t, o, "two replies applied", func(st orchestrator.Stats) bool { return st.Replies == 2 })
	ms := metrictest.Collect(t, reader)
	stop()
	if store.left.Load() >= 0 {
		t.Fatalf("the COMPLETED transition failed %d times, want 2", 2-store.left.Load())
	}
	applied := metrictest.Total(ms[telemetry.MetricRepliesReceived], telemetry.AttrReplyResult.String(telemetry.ReplyApplied))
	steps := metrictest.Total(ms[telemetry.MetricStepDuration])
	last := metrictest.Total(ms[telemetry.MetricStepDuration], telemetry.AttrEndpoint.String(svc+"/b"))
	if applied != 2 || steps != applied || last != 1 {
		t.Fatalf("%s counts %v steps (%v of b), %s counts %v applied; want 2, 1 and 2", telemetry.MetricStepDuration, steps, last, telemetry.MetricRepliesReceived, applied)
	}
}

// A terminated saga is finished: the finished counter reports it under
// TERMINATED and it leaves the in-flight gauge.
func TestTerminatedSagaLeavesInFlight(t *testing.T) {
	brokers := newCluster(t)
	const svc = "term-otel-svc"
	dom := orchestrator.Domain[order]{Name: "term-otel-dom", OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: svc, Endpoint: "a"}, orchestrator.Step{Service: svc, Endpoint: "b"})}
	ensureTopics(t, brokers, topics.CommandTopic(svc), topics.CallbackTopic(dom.Name))
	var sawB atomic.Bool
	startResponder(t, brokers, []string{topics.CommandTopic(svc)}, func(cmd *topics.Envelope) *topics.Envelope {
		if cmd.Endpoint == "b" {
			sawB.Store(true)
			return nil // b never answers: the saga waits for it
		}
		return reply(cmd, topics.OutcomeOK, nil, "")
	})
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	o, err := orchestrator.New("term-otel-orders", dom, orchestrator.WithBrokers(brokers...), orchestrator.WithoutRecovery(),
		orchestrator.WithMeterProvider(mp), orchestrator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	stop := runOrch(t, o)
	defer stop()
	txID, err := o.Start(context.Background(), order{ID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "step b's command", sawB.Load)
	if err := o.Terminate(context.Background(), txID, "operator stop"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the saga TERMINATED", func() bool {
		s, err := o.Get(context.Background(), txID)
		return err == nil && s.State == eventstore.StateTerminated
	})
	ms := metrictest.Collect(t, reader)
	dk := telemetry.AttrDomain.String(dom.Name)
	if got := metrictest.Total(ms[telemetry.MetricSagaFinished], dk, telemetry.AttrSagaState.String("TERMINATED")); got != 1 {
		t.Errorf("%s{TERMINATED} = %v, want 1", telemetry.MetricSagaFinished, got)
	}
	if got := metrictest.Total(ms[telemetry.MetricSagaInFlight], dk); got != 0 {
		t.Errorf("%s = %v, want 0 once the saga is terminated", telemetry.MetricSagaInFlight, got)
	}
}
