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
	if tp, ok := carrier["traceparent"]; ok && len(carrier) == 1 {
		// The common case: what Inject writes without baggage nor
		// tracestate, read without the propagator's generic work.
		if sc, ok := parseTraceParent00(tp); ok {
			if !sc.IsValid() {
				return ctx
			}
			return trace.ContextWithRemoteSpanContext(ctx, sc)
		}
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
	if sc, ok := parseTraceParent00(tp); ok {
		return sc
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}

// parseTraceParent00 reads tp as propagation.TraceContext does when tp has
// the shape of a version-00 traceparent (55 characters, dashes in place):
// ok is true and sc is the remote span context, or not valid when the hex
// or the flags are not allowed. For any other shape ok is false and the
// propagator decides (FuzzParseTraceParent checks that both agree).
func parseTraceParent00(tp string) (sc trace.SpanContext, ok bool) {
	if len(tp) != 55 || tp[0] != '0' || tp[1] != '0' || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}, false
	}
	var scc trace.SpanContextConfig
	var flags [1]byte
	if !lowerHex(scc.TraceID[:], tp[3:35]) || !lowerHex(scc.SpanID[:], tp[36:52]) || !lowerHex(flags[:], tp[53:55]) || flags[0] > 3 {
		return trace.SpanContext{}, true
	}
	scc.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	scc.Remote = true
	if sc = trace.NewSpanContext(scc); !sc.IsValid() {
		return trace.SpanContext{}, true
	}
	return sc, true
}

// lowerHex decodes src, lower-case hex of len(dst) bytes, into dst; it
// reports false on any other character (the specification disallows
// upper case).
func lowerHex(dst []byte, src string) bool {
	for i := range dst {
		hi, lo := hexVal(src[2*i]), hexVal(src[2*i+1])
		if hi|lo > 0xf {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

// hexVal is the value of the lower-case hex digit c, or 0xff.
func hexVal(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 0xff
}
