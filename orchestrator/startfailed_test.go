package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
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
		orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store), orchestrator.WithoutRecovery())
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

// Each result of a Start whose create failed but may have landed is
// counted, in Stats and in the start_failed metric by result: marked (the
// saga marked COMPENSATED), restorable (not marked, its watchdog written)
// and unwatched (neither: with recovery, its watchdog write failed; without
// recovery there is none).
func TestFailedStartsAreCounted(t *testing.T) {
	cases := []struct {
		name     string
		mode     partialMode
		recovery bool
		result   string
	}{
		{"Marked", partialMode{watched: true, landAll: true}, true, telemetry.StartMarked},
		{"Restorable", partialMode{watched: true, markFails: true}, true, telemetry.StartRestorable},
		{"UnwatchedWithRecovery", partialMode{watched: true, markFails: true, dogFails: true}, true, telemetry.StartUnwatched},
		{"UnwatchedWithoutRecovery", partialMode{plain: true, markFails: true}, false, telemetry.StartUnwatched},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			brokers := newCluster(t)
			ensureTopics(t, brokers, topics.CommandTopic("stock"))
			mem := memory.New()
			defer mem.Close()
			ps := &partialStore{Store: mem, partialMode: c.mode}
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			dom := orchestrator.Domain[order]{Name: "failed-starts", OnNext: orchestrator.Sequence[order](
				orchestrator.Step{Service: "stock", Endpoint: "reserve"})}
			// A fake clock keeps both Starts in one recovery window.
			opts := []orchestrator.Option{orchestrator.WithBrokers(brokers...), orchestrator.WithStore(ps), orchestrator.WithClock(newFakeClock().now),
				orchestrator.WithMeterProvider(mp), orchestrator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
			if c.recovery {
				opts = append(opts, orchestrator.WithRecovery(recoveryCfg(t)))
			} else {
				opts = append(opts, orchestrator.WithoutRecovery())
			}
			o, err := orchestrator.New("orders", dom, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			// With recovery the first saga of the window's bucket writes its
			// watchdog first, and its create succeeds; the second goes
			// through the batch, which fails.
			starts := 1
			if c.mode.watched {
				starts = 2
			}
			for i := range starts {
				txID, err := o.Start(t.Context(), order{ID: fmt.Sprint(i)})
				if i < starts-1 {
					if err != nil {
						t.Fatalf("Start %d: %v", i, err)
					}
					continue
				}
				if txID != "" || err == nil || !strings.Contains(err.Error(), "coordinator lost mid-batch") {
					t.Fatalf("Start = %q, %v; want the create's error and no id", txID, err)
				}
			}
			failed := ps.failedOnce(t)
			wantState := eventstore.StateStarted // the mark was refused
			if c.result == telemetry.StartMarked {
				wantState = eventstore.StateCompensated
			}
			if tx, err := mem.LoadTransaction(t.Context(), o.Scope(), failed); err != nil || tx.State != wantState {
				t.Fatalf("the saga whose create landed: %+v, %v; want it %s", tx, err, wantState)
			}
			want := map[string]int64{telemetry.StartMarked: 0, telemetry.StartRestorable: 0, telemetry.StartUnwatched: 0}
			want[c.result] = 1
			st := o.Stats()
			if st.FailedStarts != 1 || st.FailedStartsUnmarked != want[telemetry.StartRestorable]+want[telemetry.StartUnwatched] ||
				st.FailedStartsUnwatched != want[telemetry.StartUnwatched] || st.Started != int64(starts-1) {
				t.Fatalf("Stats %+v: want one failed start, %s", st, c.result)
			}
			ms := metrictest.Collect(t, reader)
			for r, n := range want {
				match := []attribute.KeyValue{telemetry.AttrDomain.String(dom.Name), telemetry.AttrStartResult.String(r)}
				if got := metrictest.Total(ms[telemetry.MetricSagaStartFailed], match...); got != float64(n) {
					t.Errorf("%s{%s} = %v, want %v", telemetry.MetricSagaStartFailed, r, got, n)
				}
			}
		})
	}
}
