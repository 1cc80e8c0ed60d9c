package orchestrator_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/metrictest"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
)

// countingStore counts the creates that reach the store.
type countingStore struct {
	eventstore.Store
	creates atomic.Int64
}

func (s *countingStore) CreateTransaction(ctx context.Context, tx eventstore.Transaction, first *eventstore.Tryout) error {
	s.creates.Add(1)
	return s.Store.CreateTransaction(ctx, tx, first)
}

func (s *countingStore) CreateTransactionWatched(ctx context.Context, tx eventstore.Transaction, first *eventstore.Tryout, dog eventstore.RecoveryEntry) error {
	s.creates.Add(1)
	return s.Store.(eventstore.WatchedCreator).CreateTransactionWatched(ctx, tx, first, dog)
}

// A Start whose context has already ended writes nothing: no saga and no
// failed-start row, so no phantom COMPENSATED saga names a Start that never
// reached the store.
func TestStartWithEndedContextWritesNothing(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, topics.CommandTopic("stock"))
	mem := memory.New()
	defer mem.Close()
	store := &countingStore{Store: mem}
	o, err := orchestrator.New("orders", orchestrator.Domain[order]{Name: "ended-ctx", OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: "stock", Endpoint: "reserve"})},
		orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	// A first Start provisions the topics, so that the second reaches
	// the create.
	if _, err := o.Start(t.Context(), order{ID: "o1"}); err != nil || store.creates.Load() != 1 {
		t.Fatalf("Start with a live context: %v, %d creates", err, store.creates.Load())
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	txID, err := o.Start(ctx, order{ID: "o2"})
	if txID != "" || !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with an ended context = %q, %v; want no id and context.Canceled", txID, err)
	}
	if n := store.creates.Load(); n != 1 {
		t.Fatalf("%d creates reached the store, want only the first Start's", n)
	}
	if st := o.Stats(); st.Started != 1 || st.FailedStarts != 0 {
		t.Fatalf("Stats %+v: want one saga started, no failed start", st)
	}
}

// A create that fails but may have landed, without recovery and with the
// store refusing the mark too, leaves a saga that nothing restores: Start
// fails, and Stats and the start_failed metric count it as unwatched (not
// as marked), so an operator can alert on it.
func TestFailedStartUnwatchedIsCounted(t *testing.T) {
	brokers := newCluster(t)
	mem := memory.New()
	defer mem.Close()
	ps := &partialStore{Store: mem, partialMode: partialMode{plain: true, markFails: true}}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	dom := orchestrator.Domain[order]{Name: "unwatched", OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: "stock", Endpoint: "reserve"})}
	o, err := orchestrator.New("orders", dom, orchestrator.WithBrokers(brokers...), orchestrator.WithStore(ps),
		orchestrator.WithoutRecovery(), orchestrator.WithMeterProvider(mp),
		orchestrator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if txID, err := o.Start(t.Context(), order{ID: "o1"}); txID != "" || err == nil || !strings.Contains(err.Error(), "coordinator lost mid-batch") {
		t.Fatalf("Start = %q, %v; want the create's error and no id", txID, err)
	}
	failed := ps.failedOnce(t)
	if tx, err := mem.LoadTransaction(t.Context(), o.Scope(), failed); err != nil || tx.State != eventstore.StateStarted {
		t.Fatalf("the saga whose create landed: %+v, %v; want it STARTED (the mark was refused)", tx, err)
	}
	st := o.Stats()
	if st.FailedStarts != 1 || st.FailedStartsUnmarked != 1 || st.FailedStartsUnwatched != 1 || st.Started != 0 {
		t.Fatalf("Stats %+v: want one failed start, unmarked and unwatched, none started", st)
	}
	ms := metrictest.Collect(t, reader)
	result := func(r string) []attribute.KeyValue {
		return []attribute.KeyValue{telemetry.AttrDomain.String(dom.Name), telemetry.AttrStartResult.String(r)}
	}
	for r, want := range map[string]float64{telemetry.StartUnwatched: 1, telemetry.StartMarked: 0, telemetry.StartRestorable: 0} {
		if got := metrictest.Total(ms[telemetry.MetricSagaStartFailed], result(r)...); got != want {
			t.Errorf("%s{%s} = %v, want %v", telemetry.MetricSagaStartFailed, r, got, want)
		}
	}
}
