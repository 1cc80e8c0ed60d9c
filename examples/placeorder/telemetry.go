package placeorder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/telemetry/promexport"
)

// EnvMetricsAddr is the default of the example services' --metrics-addr.
const EnvMetricsAddr = "METRICS_ADDR"

// Telemetry is the OpenTelemetry setup of an example service. Each part is
// nil when it is off.
type Telemetry struct {
	// TracerProvider exports spans over OTLP/HTTP.
	TracerProvider trace.TracerProvider
	// MeterProvider is served at /metrics.
	MeterProvider metric.MeterProvider
	// MetricsURL is where /metrics is served.
	MetricsURL string

	shutdown []func(context.Context) error
}

// SetupTelemetry turns on what an example service is asked for, and makes
// the default slog logger stamp records with trace and span ids
// (telemetry.LogHandler):
//
//   - traces, exported over OTLP/HTTP, when OTEL_EXPORTER_OTLP_ENDPOINT (or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, e.g. to
//     http://127.0.0.1:4318, the Jaeger of `docker compose --profile
//     observability up`; the exporter reads the other OTEL_EXPORTER_OTLP_*
//     variables too;
//   - metrics, served for Prometheus at http://metricsAddr/metrics, when
//     metricsAddr is not empty.
//
// Close flushes and stops what it started.
func SetupTelemetry(ctx context.Context, service, metricsAddr string) (*Telemetry, error) {
	slog.SetDefault(slog.New(telemetry.LogHandler(slog.NewTextHandler(os.Stderr, nil))))
	t := &Telemetry{}
	res := resource.NewSchemaless(semconv.ServiceName(service))
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.TracerProvider = tp
		t.shutdown = append(t.shutdown, tp.Shutdown)
	}
	if metricsAddr != "" {
		prom, err := promexport.New(promexport.WithResource(res))
		if err != nil {
			_ = t.Close()
			return nil, err
		}
		t.shutdown = append(t.shutdown, prom.Shutdown)
		ln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", prom.Handler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.shutdown = append(t.shutdown, srv.Shutdown)
		t.MeterProvider = prom.MeterProvider()
		t.MetricsURL = "http://" + ln.Addr().String() + "/metrics"
	}
	return t, nil
}

// Close flushes the spans and stops the metrics server.
func (t *Telemetry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for i := len(t.shutdown) - 1; i >= 0; i-- {
		errs = append(errs, t.shutdown[i](ctx))
	}
	return errors.Join(errs...)
}
