package telemetry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestSpanAttrsReuseKeepsEachSpansOwn: with the SDK the buffer is pooled,
// and reusing it for the next span leaves every exported span with exactly
// the attributes it was given.
func TestSpanAttrsReuseKeepsEachSpansOwn(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	const n = 50
	for i := range n {
		_, span := tr.Start(context.Background(), fmt.Sprint("s", i))
		if !copiesAttrs(span) {
			t.Fatalf("an SDK span (%T) is not recognised as copying its attributes", span)
		}
		a := NewSpanAttrs(span)
		if !a.pooled || len(a.kv) != 0 {
			t.Fatalf("span %d: buffer pooled=%v len=%d, want a pooled empty one", i, a.pooled, len(a.kv))
		}
		a.Add(AttrTxID.String(fmt.Sprint("tx-", i)), AttrAttempt.Int(i))
		if i%2 == 0 { // buffers of different lengths go back to the pool
			a.Add(AttrDuplicate.Bool(true))
		}
		a.SetOn(span)
		span.End()
	}
	spans := exp.GetSpans()
	if len(spans) != n {
		t.Fatalf("%d spans exported, want %d", len(spans), n)
	}
	for i, s := range spans {
		want := map[attribute.Key]attribute.Value{AttrTxID: attribute.StringValue(fmt.Sprint("tx-", i)), AttrAttempt: attribute.IntValue(i)}
		if i%2 == 0 {
			want[AttrDuplicate] = attribute.BoolValue(true)
		}
		if len(s.Attributes) != len(want) {
			t.Errorf("span %s: attributes %v, want %v", s.Name, s.Attributes, want)
			continue
		}
		for _, kv := range s.Attributes {
			if w, ok := want[kv.Key]; !ok || w != kv.Value {
				t.Errorf("span %s: attribute %s=%v, want %v", s.Name, kv.Key, kv.Value.String(), w.String())
			}
		}
	}
}

// keepingSpan is a span implementation that keeps the slice SetAttributes
// is given, as an implementation other than the SDK's may.
type keepingSpan struct {
	noop.Span
	kept []attribute.KeyValue
}

func (s *keepingSpan) SetAttributes(kv ...attribute.KeyValue) { s.kept = kv }
func (s *keepingSpan) IsRecording() bool                      { return true }

// TestSpanAttrsNotPooledForOtherSpans: a span that is not the SDK's gets a
// buffer of its own, which it may keep: a later span's attributes do not
// overwrite it.
func TestSpanAttrsNotPooledForOtherSpans(t *testing.T) {
	first, second := &keepingSpan{}, &keepingSpan{}
	for _, s := range []trace.Span{first, second, noop.Span{}} {
		if copiesAttrs(s) {
			t.Fatalf("%T is taken for an SDK span", s)
		}
	}
	a := NewSpanAttrs(first)
	a.Add(AttrTxID.String("tx-1"))
	a.SetOn(first)
	b := NewSpanAttrs(second)
	b.Add(AttrTxID.String("tx-2"))
	b.SetOn(second)
	if a.pooled || b.pooled {
		t.Fatal("a buffer for a non-SDK span came from the pool")
	}
	if len(first.kept) != 1 || first.kept[0].Value.AsString() != "tx-1" {
		t.Errorf("the first span kept %v, want its own tx-1", first.kept)
	}
	if copiesAttrs(nil) {
		t.Error("a nil span is taken for an SDK span")
	}
}

// TestSpanAttrsAllocatesNothing: describing an SDK span from the pooled
// buffer allocates nothing on our side (the span allows no attributes here,
// so the SDK keeps none either), where a fresh buffer costs two
// allocations. The race detector drops a quarter of what is put in a
// sync.Pool on purpose, so with it the bound is looser but still below a
// fresh buffer's.
func TestSpanAttrsAllocatesNothing(t *testing.T) {
	limit := 0.5
	if raceEnabled {
		limit = 1.5
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{AttributeCountLimit: 0}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	_, span := tp.Tracer("t").Start(context.Background(), "s")
	if !copiesAttrs(span) {
		t.Fatalf("an SDK span (%T) is not recognised", span)
	}
	allocs := testing.AllocsPerRun(200, func() {
		a := NewSpanAttrs(span)
		a.Add(AttrTxID.String("tx"), AttrEndpoint.String("charge"), AttrAttempt.Int(1))
		a.SetOn(span)
	})
	t.Logf("%.2f allocations per described span (race detector: %v)", allocs, raceEnabled)
	if allocs > limit {
		t.Errorf("%.2f allocations per described span, want at most %.1f", allocs, limit)
	}
}

// TestKafkaHooksAllocateNothing: the Kafka client metrics recorded on every
// request and batch allocate nothing per call once a topic's attribute set
// is made (each Add or Record used to allocate its variadic option slice).
func TestKafkaHooksAllocateNothing(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	h, err := newKafkaHooks(mp, "c1")
	if err != nil {
		t.Fatal(err)
	}
	e2e := kgo.BrokerE2E{BytesWritten: 100, BytesRead: 50, WriteWait: time.Millisecond, TimeToWrite: time.Millisecond, ReadWait: time.Millisecond, TimeToRead: time.Millisecond}
	run := func() {
		h.OnBrokerE2E(kgo.BrokerMetadata{}, produceKey, e2e)
		h.OnProduceBatchWritten(kgo.BrokerMetadata{}, "orders", 0, kgo.ProduceBatchMetrics{NumRecords: 2})
		h.OnFetchBatchRead(kgo.BrokerMetadata{}, "orders", 0, kgo.FetchBatchMetrics{NumRecords: 3})
	}
	run() // makes the topic's sets
	allocs := testing.AllocsPerRun(200, run)
	if allocs > 0.5 {
		t.Errorf("%.2f allocations per request and batch recorded, want none", allocs)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range s.DataPoints {
					sums[m.Name] += dp.Value
				}
			}
		}
	}
	runs := int64(1 + 200 + 1) // AllocsPerRun runs once more to warm up
	if sums[MetricKafkaSent] != 2*runs || sums[MetricKafkaConsumed] != 3*runs {
		t.Errorf("sent %d consumed %d, want %d and %d", sums[MetricKafkaSent], sums[MetricKafkaConsumed], 2*runs, 3*runs)
	}
}
