package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/telemetry/promexport"
)

// demoTelemetry is what --telemetry turns on: an SDK TracerProvider whose
// batch processor exports to an in-process exporter that counts spans, and
// a MeterProvider exported to Prometheus, served at /metrics when
// --metrics-addr is set.
type demoTelemetry struct {
	tp    *sdktrace.TracerProvider
	spans *countingExporter
	prom  *promexport.Exporter
	srv   *http.Server
	// metricsURL is the address /metrics is served at ("" without
	// --metrics-addr).
	metricsURL string
	// ratio is --trace-ratio.
	ratio float64
}

func newDemoTelemetry(opts options) (*demoTelemetry, error) {
	res := resource.NewSchemaless(semconv.ServiceName("sagademo"))
	prom, err := promexport.New(promexport.WithResource(res))
	if err != nil {
		return nil, err
	}
	spans := &countingExporter{}
	t := &demoTelemetry{
		tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.traceRatio)))),
		spans: spans,
		prom:  prom,
		ratio: opts.traceRatio,
	}
	if opts.metricsAddr != "" {
		ln, err := net.Listen("tcp", opts.metricsAddr)
		if err != nil {
			_ = t.close()
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", prom.Handler())
		t.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		t.metricsURL = "http://" + ln.Addr().String() + "/metrics"
		go func() { _ = t.srv.Serve(ln) }()
	}
	return t, nil
}

// tracerProvider is nil (tracing off, metrics only) with --trace-ratio 0.
func (t *demoTelemetry) tracerProvider() trace.TracerProvider {
	if t.ratio == 0 {
		return nil
	}
	return t.tp
}
func (t *demoTelemetry) meterProvider() metric.MeterProvider { return t.prom.MeterProvider() }

// exported flushes the batch processor and returns the spans exported so
// far.
func (t *demoTelemetry) exported(ctx context.Context) int64 {
	_ = t.tp.ForceFlush(ctx)
	return t.spans.n.Load()
}

func (t *demoTelemetry) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if t.srv != nil {
		errs = append(errs, t.srv.Shutdown(ctx))
	}
	errs = append(errs, t.tp.Shutdown(ctx), t.prom.Shutdown(ctx))
	return errors.Join(errs...)
}

// countingExporter is an in-process span exporter that only counts: the
// demo measures what instrumenting costs, not a network exporter.
type countingExporter struct{ n atomic.Int64 }

// ExportSpans counts spans.
func (c *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.n.Add(int64(len(spans)))
	return nil
}

// Shutdown does nothing.
func (c *countingExporter) Shutdown(context.Context) error { return nil }
