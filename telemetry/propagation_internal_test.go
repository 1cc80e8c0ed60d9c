package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// viaPropagator is what the W3C propagator reads from a carrier holding
// only traceparent tp.
func viaPropagator(tp string) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}

// traceParentCases are the seeds of FuzzParseTraceParent and the cases of
// TestParseTraceParentMatchesPropagator: the fast path's edges.
var traceParentCases = []string{
	"",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-04",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff",
	"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
	"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
	"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-extra",
	"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
	"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-701",
	"garbage",
}

// TestParseTraceParentMatchesPropagator: ParseTraceParent and Extract's
// fast path read every case as the W3C propagator does.
func TestParseTraceParentMatchesPropagator(t *testing.T) {
	for _, tp := range traceParentCases {
		checkTraceParent(t, tp)
	}
}

// FuzzParseTraceParent checks the fast path against the propagator on any
// input.
func FuzzParseTraceParent(f *testing.F) {
	for _, tp := range traceParentCases {
		f.Add(tp)
	}
	f.Fuzz(checkTraceParent)
}

func checkTraceParent(t *testing.T, tp string) {
	want := viaPropagator(tp)
	if got := ParseTraceParent(tp); !got.Equal(want) {
		t.Errorf("ParseTraceParent(%q) = %+v, propagator %+v", tp, got, want)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), map[string]string{"traceparent": tp}))
	if !got.Equal(want) {
		t.Errorf("Extract(traceparent %q) = %+v, propagator %+v", tp, got, want)
	}
}
