package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys LogHandler adds.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogHandler wraps h so that every record logged with a context holding a
// valid span (slog.InfoContext(ctx, …), Logger.Log(ctx, …)) carries the
// span's trace id and span id as the attributes "trace_id" and "span_id",
// which log backends use to join logs to traces. Records without such a
// context pass through unchanged. The context a worker hands a step handler,
// and the contexts the orchestrator logs with while it applies a reply,
// hold the step's span (see ExampleLogHandler):
//
// Under WithGroup the ids land in the group, like any attribute added then.
func LogHandler(h slog.Handler) slog.Handler {
	if lh, ok := h.(*logHandler); ok {
		return lh
	}
	return &logHandler{h: h}
}

type logHandler struct{ h slog.Handler }

// Enabled reports whether the wrapped handler handles level.
func (l *logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

// Handle adds the trace and span ids of ctx's span, if any, and passes r on.
func (l *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r = r.Clone()
			r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
		}
	}
	return l.h.Handle(ctx, r)
}

// WithAttrs wraps the wrapped handler's WithAttrs.
func (l *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{h: l.h.WithAttrs(attrs)}
}

// WithGroup wraps the wrapped handler's WithGroup.
func (l *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{h: l.h.WithGroup(name)}
}
