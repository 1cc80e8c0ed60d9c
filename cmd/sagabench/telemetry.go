package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
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
// goroutine). A second processor counts the spans and their attributes,
// for the telemetry floor (sdkFloor).
type benchTelemetry struct {
	tp   *sdktrace.TracerProvider
	prom *promexport.Exporter
	// spans counts the spans that ended.
	spans *spanCounter
	// ratio is the sampled fraction (0: metrics only, no tracer).
	ratio float64
}

func newBenchTelemetry(ratio float64) (*benchTelemetry, error) {
	res := resource.NewSchemaless(semconv.ServiceName("sagabench"))
	prom, err := promexport.New(promexport.WithResource(res))
	if err != nil {
		return nil, err
	}
	spans := &spanCounter{}
	return &benchTelemetry{
		tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}), sdktrace.WithSpanProcessor(spans), sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)))),
		prom:  prom,
		spans: spans,
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

// spanCounter is a span processor that counts the spans that end, the root
// spans among them (one per traced saga) and their attributes. It counts
// as spans end, not as the batch processor exports them: that one drops
// spans when its queue is full (as it would in a service), which would make
// the counts depend on the machine's load.
type spanCounter struct{ spans, roots, attrs atomic.Int64 }

func (c *spanCounter) OnEnd(s sdktrace.ReadOnlySpan) {
	c.spans.Add(1)
	c.attrs.Add(int64(len(s.Attributes())))
	if !s.Parent().IsValid() {
		c.roots.Add(1)
	}
}

func (*spanCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (*spanCounter) Shutdown(context.Context) error                  { return nil }
func (*spanCounter) ForceFlush(context.Context) error                { return nil }

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// measureTelemetry runs spec's framework without and with telemetry on,
// o.telemetryRounds pairs of runs, each on fresh topics, the order
// alternating (without first in round 1, with first in round 2, ...) so that
// a machine's drift does not count against one side; then the SDK's floor
// (sdkFloor) once. It sets res's telemetry figures: the median round's
// cost and measures, every round's cost, and the floor.
func measureTelemetry(ctx context.Context, o options, spec cellSpec, suffix string, brokers []string, kopts []kgo.Opt, store eventstore.Store, cass *cassandra.Store,
	logger *slog.Logger, res *cellResult, progress func(string, ...any)) error {
	type round struct {
		cost               float64
		plain, tel         measure
		spans, roots, attr int64
	}
	var rounds []round
	// run is one run of the framework: plain (tel nil) or instrumented.
	run := func(i int, tel *benchTelemetry) (measure, error) {
		kind := "plain"
		if tel != nil {
			kind = "tel"
		}
		names := placeorder.DefaultNames().WithSuffix(fmt.Sprintf("%s-%s%d", suffix, kind, i))
		if spec.RealKafka {
			defer deleteTopics(brokers, kopts, frameworkTopics(names))
		}
		fw := &framework{spec: spec, brokers: brokers, kafkaOpts: kopts, store: store, cass: cass, names: names, logger: logger, tel: tel}
		m, _, err := fw.run(ctx, o.warmup, o.sagas, o.timeout)
		return notUsed(spec, m), err
	}
	for i := range o.telemetryRounds {
		var r round
		runTel := func() error {
			tel, err := newBenchTelemetry(o.telemetry)
			if err != nil {
				return err
			}
			r.tel, err = run(i, tel)
			cerr := tel.close()
			if err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("framework with telemetry (round %d): %w", i+1, err)
			}
			r.spans, r.roots, r.attr = tel.spans.spans.Load(), tel.spans.roots.Load(), tel.spans.attrs.Load()
			return nil
		}
		runPlain := func() (err error) {
			if r.plain, err = run(i, nil); err != nil {
				return fmt.Errorf("framework (telemetry round %d, without): %w", i+1, err)
			}
			return nil
		}
		if err := inTurn(i, runPlain, runTel); err != nil {
			return err
		}
		r.cost = telemetryCost(r.plain, r.tel)
		rounds = append(rounds, r)
		progress("%s: telemetry round %d: %.1f sagas/s without, %.1f with (trace ratio %g): costs %.1f%%",
			spec.Name, i+1, r.plain.Rate, r.tel.Rate, o.telemetry, 100*r.cost)
	}
	sort.Slice(rounds, func(a, b int) bool { return rounds[a].cost < rounds[b].cost })
	med := rounds[len(rounds)/2]
	res.Telemetry, res.TelemetryPlain, res.TelemetryCost = &med.tel, &med.plain, med.cost
	for _, r := range rounds {
		res.TelemetryCosts = append(res.TelemetryCosts, r.cost)
	}
	if med.roots == 0 {
		return nil // metrics only: no span to floor
	}
	fl := &sdkFloor{SpansPerSaga: float64(med.spans) / float64(med.roots), AttrsPerSpan: float64(med.attr) / float64(med.spans)}
	// In this process as the runs left it: the store's sagas (the
	// in-memory store's heap) stay live, so the garbage collector scans
	// what it scanned while the framework ran.
	err := fl.measure(ctx, o.telemetry, spec.Concurrency, o.sagas)
	runtime.KeepAlive(store)
	if err != nil {
		return fmt.Errorf("telemetry floor: %w", err)
	}
	if d := boundCPU(med.plain) + fl.CPUPerSaga; d > 0 {
		fl.Share = fl.CPUPerSaga / d
	}
	res.TelemetryFloor = fl
	progress("%s: telemetry floor: the SDK's %.1f spans per traced saga (%.1f attributes each) alone cost %.3f cpu-ms/saga, %.1f%% of the throughput (%d sagas, %d garbage collections)",
		spec.Name, fl.SpansPerSaga, fl.AttrsPerSpan, fl.CPUPerSaga, 100*fl.Share, fl.Sagas, fl.GCCycles)
	if fl.GCCycles < floorGCCycles {
		progress("%s: telemetry floor: only %d garbage collections in %d sagas: its GC share is a guess", spec.Name, fl.GCCycles, fl.Sagas)
	}
	return nil
}

// boundCPU is the CPU per saga, in milliseconds, that bounds a CPU-bound
// cell: this process's and the local broker's and Cassandra's (when the
// cell uses them).
func boundCPU(m measure) float64 {
	return m.CPUPerSaga + max(m.KafkaCPUPerSaga, 0) + max(m.CassandraCPUPerSaga, 0)
}

// sdkFloor is the least tracing can cost a saga: the OpenTelemetry SDK's own
// work for as many spans as the framework's traced sagas had, with as many
// attributes each, their trace context carried from span to span through
// the W3C propagator as over the saga's Kafka hops — measured by a loop
// without the framework, with the TracerProvider and sampling the
// telemetry runs use.
type sdkFloor struct {
	// SpansPerSaga is per traced saga (spans over root spans).
	SpansPerSaga float64 `json:"spans_per_traced_saga"`
	AttrsPerSpan float64 `json:"attributes_per_span"`
	// CPUPerSaga is the loop's CPU time per saga, in milliseconds.
	CPUPerSaga float64 `json:"cpu_ms_per_saga"`
	// Sagas is how many the loop ran, GCCycles the garbage collections
	// during it (fewer than floorGCCycles only when it stopped at its
	// limit of sagas), Spans and Roots the spans it ended and the root
	// spans among them (the sagas the sampler kept).
	Sagas    int    `json:"sagas"`
	GCCycles uint64 `json:"gc_cycles"`
	Spans    int64  `json:"spans"`
	Roots    int64  `json:"root_spans"`
	// Share is the fraction of a CPU-bound cell's throughput that CPU
	// costs: CPUPerSaga / (boundCPU of the cell's run without telemetry
	// + CPUPerSaga).
	Share float64 `json:"throughput_share"`
}

// measure runs the spans of at least n sagas at concurrency conc, each
// saga's root span sampled at ratio (the others follow it, as the
// framework's parent-based sampler makes them), and sets f's CPU per saga
// and what the loop ran and ended.
func (f *sdkFloor) measure(ctx context.Context, ratio float64, conc, n int) error {
	tel, err := newBenchTelemetry(ratio)
	if err != nil {
		return err
	}
	tr := tel.tp.Tracer("sagabench/floor")
	spans := max(int(math.Round(f.SpansPerSaga)), 1)
	// The saga's attributes, as many in all as the framework's spans
	// carried (8.6 a span: some spans get 8, some 9): a few strings and
	// integers, and on each span the saga's id, different for every saga.
	total := max(int(math.Round(f.AttrsPerSpan*float64(spans))), spans)
	perSpan := make([]int, spans)
	for s := range spans {
		perSpan[s] = share(float64(total)/float64(spans), s)
	}
	base := make([]attribute.KeyValue, 0, slices.Max(perSpan))
	for j := range cap(base) {
		if j%3 == 2 {
			base = append(base, attribute.Int(fmt.Sprintf("sagabench.floor.i%d", j), j))
		} else {
			base = append(base, attribute.String(fmt.Sprintf("sagabench.floor.s%d", j), "place-order"))
		}
	}
	prop := propagation.TraceContext{}
	saga := func(i int) {
		// The start span, then each next span a child of the previous one
		// through a carrier, as a record's headers carry it.
		c, span := tr.Start(ctx, "saga start", trace.WithSpanKind(trace.SpanKindProducer))
		if !span.IsRecording() {
			// A saga the sampler left out: as in the framework, no other
			// span, only its context (sampled out) carried over each hop.
			span.End()
			for range spans - 1 {
				carrier := propagation.MapCarrier{}
				prop.Inject(c, carrier)
				c = prop.Extract(ctx, carrier)
			}
			return
		}
		attrs := make([]attribute.KeyValue, 0, cap(base))
		id := attribute.String("sagabench.floor.tx", fmt.Sprintf("tx-%d", i))
		for s := range spans {
			attrs = append(append(attrs[:0], base[:perSpan[s]-1]...), id)
			span.SetAttributes(attrs...)
			if s == spans-1 {
				span.End()
				break
			}
			carrier := propagation.MapCarrier{}
			prop.Inject(c, carrier)
			span.End()
			c, span = tr.Start(prop.Extract(ctx, carrier), "step", trace.WithSpanKind(trace.SpanKindConsumer))
		}
	}
	// At least n sagas, and on until the garbage collector has run
	// floorGCCycles times (at most 50n sagas): a cycle's cost lands on the
	// sagas around it, so a run of fewer cycles would charge one cycle, or
	// none, to all of them. The collections are counted every 64 sagas.
	var next, ran atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	gc0 := gcCycles()
	limit := int64(50 * n)
	more := func() (int, bool) {
		if stop.Load() || ctx.Err() != nil {
			return 0, false
		}
		i := next.Add(1)
		if i > int64(n) && (i > limit || i%64 == 0 && gcCycles()-gc0 >= floorGCCycles) {
			stop.Store(true)
			return 0, false
		}
		return int(i), true
	}
	m := startMeter()
	for range max(conc, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, ok := more(); ok; i, ok = more() {
				saga(i)
				ran.Add(1)
			}
		}()
	}
	wg.Wait()
	f.Sagas, f.GCCycles = int(ran.Load()), gcCycles()-gc0
	cerr := tel.close() // the batch processor's last export counts too
	f.CPUPerSaga = m.stop(make([]time.Duration, f.Sagas)).CPUPerSaga
	f.Spans, f.Roots = tel.spans.spans.Load(), tel.spans.roots.Load()
	if err := ctx.Err(); err != nil {
		return err
	}
	return cerr
}

// floorGCCycles is how many garbage collections the telemetry floor's loop
// lasts at least.
const floorGCCycles = 4

// gcCycles is how many garbage collections this process has completed.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
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
			plain := c.telemetryPlain()
			measured := fmt.Sprintf("%s cpu-ms/saga with telemetry against %s without", num(c.Telemetry.CPUPerSaga, 2), num(plain.CPUPerSaga, 2))
			const sampleFewer = "sample fewer sagas (--telemetry 0.1) where the process is CPU-bound"
			t.Why = measured + ": the SDK's spans and instruments on a CPU-bound cell; " + sampleFewer
			if f := c.TelemetryFloor; f != nil && f.Share > maxTelemetryCost {
				t.Why = fmt.Sprintf("out of reach at this sampling: the OpenTelemetry SDK alone, with no framework, "+
					"costs %s cpu-ms per saga for its %s spans per traced saga (%s attributes each, the trace context carried from span to span), "+
					"%s%% of the throughput of a cell bound by its %s cpu-ms per saga; the framework took %s; %s",
					num(f.CPUPerSaga, 3), num(f.SpansPerSaga, 1), num(f.AttrsPerSpan, 1), num(100*f.Share, 1), num(boundCPU(plain), 2),
					measured, sampleFewer)
			}
		}
		out = append(out, t)
	}
	return out
}
