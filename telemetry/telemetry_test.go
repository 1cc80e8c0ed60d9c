package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/telemetry"
)

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestTraceParentRoundTrip(t *testing.T) {
	sc := telemetry.ParseTraceParent(tp)
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("ParseTraceParent: %+v", sc)
	}
	if got := telemetry.TraceParent(sc); got != tp {
		t.Fatalf("TraceParent %q, want %q", got, tp)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if telemetry.ParseTraceParent(bad).IsValid() {
			t.Errorf("ParseTraceParent(%q) is valid", bad)
		}
	}
	if telemetry.TraceParent(trace.SpanContext{}) != "" {
		t.Error("TraceParent of an invalid span context")
	}
}

func TestInjectExtract(t *testing.T) {
	if c := telemetry.Inject(context.Background()); c != nil {
		t.Fatalf("Inject without a span: %v", c)
	}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), telemetry.ParseTraceParent(tp))
	m, err := baggage.NewMember("tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := baggage.New(m)
	ctx = baggage.ContextWithBaggage(ctx, b)
	c := telemetry.Inject(ctx)
	if c["traceparent"] != tp || c["baggage"] != "tenant=acme" {
		t.Fatalf("Inject: %v", c)
	}
	back := telemetry.Extract(context.Background(), c)
	if got := trace.SpanContextFromContext(back); telemetry.TraceParent(got) != tp {
		t.Fatalf("Extract: %v", got)
	}
	if baggage.FromContext(back).Member("tenant").Value() != "acme" {
		t.Fatal("baggage lost")
	}
	if telemetry.Extract(ctx, nil) != ctx {
		t.Fatal("Extract of an empty carrier changed the context")
	}
	// Without baggage, the fast path: traceparent (and tracestate) only.
	plain := telemetry.Inject(trace.ContextWithRemoteSpanContext(context.Background(), telemetry.ParseTraceParent(tp)))
	if len(plain) != 1 || plain["traceparent"] != tp {
		t.Fatalf("Inject without baggage: %v", plain)
	}
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("svc", "pay")
	if telemetry.LogHandler(log.Handler()) != log.Handler() {
		t.Error("LogHandler wrapped twice")
	}
	tr := sdktrace.NewTracerProvider().Tracer("test")
	ctx, span := tr.Start(context.Background(), "step")
	log.InfoContext(ctx, "in span", "n", 1)
	span.End()
	log.Info("no context")
	log.InfoContext(context.Background(), "no span")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	sc := span.SpanContext()
	if rec["trace_id"] != sc.TraceID().String() || rec["span_id"] != sc.SpanID().String() || rec["svc"] != "pay" || rec["n"] != 1.0 {
		t.Fatalf("record in a span: %v", rec)
	}
	for _, l := range lines[1:] {
		if strings.Contains(l, "trace_id") || strings.Contains(l, "span_id") {
			t.Errorf("record without a span carries ids: %s", l)
		}
	}
}
