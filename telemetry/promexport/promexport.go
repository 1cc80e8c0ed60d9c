// Package promexport serves StackSaga's OpenTelemetry metrics to Prometheus:
// New makes a MeterProvider whose reader is OpenTelemetry's Prometheus
// exporter, and Handler serves what it collects at /metrics in the
// Prometheus text (or protobuf) exposition format.
//
//	exp, err := promexport.New()
//	…
//	defer exp.Shutdown(ctx)
//	o, err := orchestrator.New(service, domain, orchestrator.WithMeterProvider(exp.MeterProvider()), …)
//	mux.Handle("GET /metrics", exp.Handler())
//
// It is a package of its own so that importing the orchestrator or the
// worker does not link the Prometheus client: services that export their
// metrics otherwise (OTLP) never pull it in.
package promexport

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// Exporter is a MeterProvider exported to Prometheus.
type Exporter struct {
	reg     *prometheus.Registry
	mp      *sdkmetric.MeterProvider
	handler http.Handler
}

// Option configures New.
type Option func(*config)

type config struct {
	res     *resource.Resource
	runtime bool
	reg     *prometheus.Registry
}

// WithResource sets the resource of the MeterProvider (service.name and
// friends, exported as Prometheus' target_info). Default: the SDK's
// default resource, which reads OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES.
func WithResource(r *resource.Resource) Option { return func(c *config) { c.res = r } }

// WithoutRuntimeMetrics leaves out the Go runtime and process collectors
// (go_*, process_*), which are served by default.
func WithoutRuntimeMetrics() Option { return func(c *config) { c.runtime = false } }

// WithRegistry collects into reg instead of a new registry, so that the
// handler also serves the collectors the caller registers there.
func WithRegistry(reg *prometheus.Registry) Option { return func(c *config) { c.reg = reg } }

// New returns a MeterProvider exported to Prometheus through a registry of
// its own (see WithRegistry).
func New(opts ...Option) (*Exporter, error) {
	cfg := config{runtime: true}
	for _, o := range opts {
		o(&cfg)
	}
	reg := cfg.reg
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if cfg.runtime {
		if err := errors.Join(
			reg.Register(collectors.NewGoCollector()),
			reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
		); err != nil {
			return nil, fmt.Errorf("promexport: runtime collectors: %w", err)
		}
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("promexport: %w", err)
	}
	mpOpts := []sdkmetric.Option{sdkmetric.WithReader(exp)}
	if cfg.res != nil {
		mpOpts = append(mpOpts, sdkmetric.WithResource(cfg.res))
	}
	return &Exporter{
		reg:     reg,
		mp:      sdkmetric.NewMeterProvider(mpOpts...),
		handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}),
	}, nil
}

// MeterProvider returns the provider to hand to the orchestrator, the
// worker and the store.
func (e *Exporter) MeterProvider() metric.MeterProvider { return e.mp }

// SDK returns the SDK MeterProvider itself (to force a flush, add views…).
func (e *Exporter) SDK() *sdkmetric.MeterProvider { return e.mp }

// Registry returns the Prometheus registry the exporter collects into.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// Handler serves the metrics (GET /metrics).
func (e *Exporter) Handler() http.Handler { return e.handler }

// Shutdown shuts the MeterProvider down: its instruments stop recording
// and the handler serves no more of them.
func (e *Exporter) Shutdown(ctx context.Context) error {
	if err := e.mp.Shutdown(ctx); err != nil {
		return fmt.Errorf("promexport: shutdown: %w", err)
	}
	return nil
}
