package orchestrator_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/worker"
)

// BenchmarkSagaEmbedded runs whole three-step place-order sagas on an
// in-process kfake broker and the in-memory store, 256 in flight. It
// reports sagas/s.
func BenchmarkSagaEmbedded(b *testing.B) { benchSagaEmbedded(b, nil, nil) }

// BenchmarkSagaEmbeddedTelemetry is BenchmarkSagaEmbedded with tracing
// (every saga sampled, spans batched to an exporter that drops them) and
// metrics on, in the orchestrator and the workers: compare its ns/op and
// allocs/op with BenchmarkSagaEmbedded's.
func BenchmarkSagaEmbeddedTelemetry(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	benchSagaEmbedded(b, tp, mp)
}

// discardSpans is a span exporter that drops everything.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

func benchSagaEmbedded(b *testing.B, tp trace.TracerProvider, mp metric.MeterProvider) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithCancel(context.Background())
	var stopped sync.WaitGroup
	defer func() { cancel(); stopped.Wait() }() // before the cluster closes
	for svc, reg := range map[string]func(*worker.Worker, placeorder.Observer) error{
		placeorder.InventoryService: placeorder.RegisterInventory,
		placeorder.PaymentService:   placeorder.RegisterPayment,
		placeorder.ShippingService:  placeorder.RegisterShipping,
	} {
		w, err := worker.New(svc, worker.WithBrokers(brokers...), worker.WithConcurrency(256),
			worker.WithTracerProvider(tp), worker.WithMeterProvider(mp))
		if err != nil {
			b.Fatal(err)
		}
		if err := reg(w, nil); err != nil {
			b.Fatal(err)
		}
		stopped.Add(1)
		go func() { defer stopped.Done(); _ = w.Run(ctx) }()
		<-w.Running()
	}
	const inFlight = 256
	slots := make(chan struct{}, inFlight)
	var done atomic.Int64
	o, err := orchestrator.New(placeorder.OrderService, placeorder.Saga(), orchestrator.WithBrokers(brokers...),
		orchestrator.WithTracerProvider(tp), orchestrator.WithMeterProvider(mp),
		orchestrator.WithListener(func(e orchestrator.Event) {
			if e.To.Terminal() {
				done.Add(1)
				<-slots
			}
		}))
	if err != nil {
		b.Fatal(err)
	}
	stopped.Add(1)
	go func() { defer stopped.Done(); _ = o.Run(ctx) }()
	<-o.Running()

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		slots <- struct{}{}
		go func() {
			if _, err := o.Start(ctx, placeorder.Order{OrderID: "o", Item: "book", Quantity: 1, Amount: 1}); err != nil {
				b.Error(err)
			}
		}()
	}
	for range inFlight {
		slots <- struct{}{}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sagas/s")
	if got := o.Stats().Completed; got != int64(b.N) {
		b.Fatalf("%d of %d sagas completed", got, b.N)
	}
}
