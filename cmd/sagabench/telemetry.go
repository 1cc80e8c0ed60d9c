package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/telemetry/promexport"
)

// maxTelemetryCost is the telemetry target: turned on, it may cost at most
// this fraction of a cell's throughput.
const maxTelemetryCost = 0.10

// benchTelemetry is what --telemetry turns on for a cell's second
// framework run: the OpenTelemetry SDK as a service would configure it — a
// TracerProvider sampling --telemetry of the sagas (parent based, so the
// workers follow the saga's decision) into a batch processor, and a
// MeterProvider read by the Prometheus exporter. Spans go to an exporter
// that drops them: the figure is the cost of instrumenting, not of a
// network exporter (which runs off the hot path, in the batch processor's
// goroutine).
type benchTelemetry struct {
	tp   *sdktrace.TracerProvider
	prom *promexport.Exporter
	// ratio is the sampled fraction (0: metrics only, no tracer).
	ratio float64
}

func newBenchTelemetry(ratio float64) (*benchTelemetry, error) {
	res := resource.NewSchemaless(semconv.ServiceName("sagabench"))
	prom, err := promexport.New(promexport.WithResource(res))
	if err != nil {
		return nil, err
	}
	return &benchTelemetry{
		tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}), sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)))),
		prom:  prom,
		ratio: ratio,
	}, nil
}

// tracerProvider is nil (no tracing, metrics only) at ratio 0.
func (t *benchTelemetry) tracerProvider() trace.TracerProvider {
	if t == nil || t.ratio == 0 {
		return nil
	}
	return t.tp
}

func (t *benchTelemetry) meterProvider() metric.MeterProvider {
	if t == nil {
		return nil
	}
	return t.prom.MeterProvider()
}

func (t *benchTelemetry) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(t.tp.Shutdown(ctx), t.prom.Shutdown(ctx))
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// measureTelemetry runs spec's framework with telemetry on, alternating
// with runs without it for o.telemetryRounds rounds, each on fresh topics,
// and sets res's telemetry figures: the median round's cost and its
// measure. Round 1's run without telemetry is plain, already measured (the
// cell's reported framework measure: runCell passes the median
// framework/floor round's). Alternating and taking the median keeps a
// noisy machine's drift out of the ratio.
func measureTelemetry(ctx context.Context, o options, spec cellSpec, suffix string, brokers []string, store eventstore.Store, cass *cassandra.Store,
	logger *slog.Logger, plain measure, res *cellResult, progress func(string, ...any)) error {
	type round struct {
		cost float64
		tel  measure
	}
	var rounds []round
	for i := range o.telemetryRounds {
		if i > 0 {
			names := placeorder.DefaultNames().WithSuffix(fmt.Sprintf("%s-plain%d", suffix, i))
			if spec.RealKafka {
				defer deleteTopics(brokers, frameworkTopics(names))
			}
			fw := &framework{spec: spec, brokers: brokers, store: store, cass: cass, names: names, logger: logger}
			m, _, err := fw.run(ctx, o.warmup, o.sagas, o.timeout)
			if err != nil {
				return fmt.Errorf("framework (telemetry round %d, without): %w", i+1, err)
			}
			plain = notUsed(spec, m)
		}
		tel, err := newBenchTelemetry(o.telemetry)
		if err != nil {
			return err
		}
		names := placeorder.DefaultNames().WithSuffix(fmt.Sprintf("%s-tel%d", suffix, i))
		if spec.RealKafka {
			defer deleteTopics(brokers, frameworkTopics(names))
		}
		fw := &framework{spec: spec, brokers: brokers, store: store, cass: cass, names: names, logger: logger, tel: tel}
		tm, _, err := fw.run(ctx, o.warmup, o.sagas, o.timeout)
		_ = tel.close()
		if err != nil {
			return fmt.Errorf("framework with telemetry (round %d): %w", i+1, err)
		}
		tm = notUsed(spec, tm)
		r := round{cost: telemetryCost(plain, tm), tel: tm}
		rounds = append(rounds, r)
		progress("%s: telemetry round %d: %.1f sagas/s without, %.1f with (trace ratio %g): costs %.1f%%",
			spec.Name, i+1, plain.Rate, tm.Rate, o.telemetry, 100*r.cost)
	}
	sort.Slice(rounds, func(a, b int) bool { return rounds[a].cost < rounds[b].cost })
	med := rounds[len(rounds)/2]
	res.Telemetry, res.TelemetryCost = &med.tel, med.cost
	for _, r := range rounds {
		res.TelemetryCosts = append(res.TelemetryCosts, r.cost)
	}
	return nil
}

// telemetryCost is 1 - (sagas/s with telemetry)/(sagas/s without).
func telemetryCost(plain, tel measure) float64 {
	if plain.Rate <= 0 {
		return 0
	}
	return 1 - tel.Rate/plain.Rate
}

// telemetryTargets checks maxTelemetryCost in every cell measured with
// telemetry.
func telemetryTargets(cells []*cellResult) []target {
	var out []target
	for _, c := range cells {
		if c.Telemetry == nil || c.Skipped != "" || c.Error != "" {
			continue
		}
		t := target{
			Name: fmt.Sprintf("%s telemetry cost <= %.0f%%", c.Cell, 100*maxTelemetryCost), Cell: c.Cell,
			Want: maxTelemetryCost, Got: c.TelemetryCost, Met: c.TelemetryCost <= maxTelemetryCost,
		}
		t = t.withRounds(c.TelemetryCosts, true)
		if !t.Met {
			t.Why = fmt.Sprintf("%s cpu-ms/saga with telemetry against %s without: the SDK's spans and instruments "+
				"on a CPU-bound cell; sample fewer sagas (--telemetry 0.1) where the process is CPU-bound",
				num(c.Telemetry.CPUPerSaga, 2), num(c.Framework.CPUPerSaga, 2))
		}
		out = append(out, t)
	}
	return out
}
