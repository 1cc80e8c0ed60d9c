package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/telemetry"
)

// A logger whose records carry the trace and span ids of the context they
// are logged with: the handler a service sets as its default.
func ExampleLogHandler() {
	dropTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: dropTime})))
	// slog.SetDefault(logger) in a service; here a step's context:
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	logger.InfoContext(ctx, "charged", "amount", 1999)
	logger.Info("no span")
	// Output:
	// {"level":"INFO","msg":"charged","amount":1999,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}
	// {"level":"INFO","msg":"no span"}
}

// The attributes of a finished step, set on its span in one call.
func ExampleSpanAttrs() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	_, span := tp.Tracer("example").Start(context.Background(), "step")

	a := telemetry.NewSpanAttrs(span)
	a.Add(telemetry.AttrTxID.String("01a22bf0-8258-8001-b874-19ca7520035d"), telemetry.AttrAttempt.Int(2))
	a.SetOn(span) // a must not be touched after this
	span.End()

	for _, kv := range rec.Ended()[0].Attributes() {
		fmt.Println(kv.Key, kv.Value.String())
	}
	// Output:
	// stacksaga.tx_id 01a22bf0-8258-8001-b874-19ca7520035d
	// stacksaga.step.attempt 2
}
