package telemetry

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// propagator is the W3C trace context and baggage: what StackSaga writes
// into an envelope's Trace map and reads back. It does not depend on the
// global propagator (otel.SetTextMapPropagator), whose default propagates
// nothing.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Propagator returns the propagator of StackSaga's envelopes: W3C
// traceparent and tracestate, and W3C baggage.
func Propagator() propagation.TextMapPropagator { return propagator }

// Inject returns the trace context of ctx (its span's traceparent, the
// tracestate and the baggage) as a carrier for topics.Envelope.Trace, or nil
// when ctx carries neither a valid span context nor baggage.
func Inject(ctx context.Context) map[string]string {
	if baggage.FromContext(ctx).Len() == 0 {
		// The common case, without the propagator's generic work.
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsValid() {
			return nil
		}
		c := map[string]string{"traceparent": TraceParent(sc)}
		if sc.TraceState().Len() > 0 {
			c["tracestate"] = sc.TraceState().String()
		}
		return c
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	if len(c) == 0 {
		return nil
	}
	return c
}

// Extract returns ctx with the remote span context and baggage read from
// carrier (an envelope's Trace map). A nil or empty carrier returns ctx.
func Extract(ctx context.Context, carrier map[string]string) context.Context {
	if len(carrier) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(carrier))
}

// TraceParent returns the W3C traceparent header value of sc
// ("00-<trace id>-<span id>-<flags>"), or "" when sc is not valid.
func TraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [55]byte // version, trace id, span id and flags, dash-separated
	tid, sid := sc.TraceID(), sc.SpanID()
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & trace.FlagsSampled)})
	return string(b[:])
}

// ParseTraceParent returns the remote span context a W3C traceparent value
// describes; the result is not valid when tp is empty or malformed.
func ParseTraceParent(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}
