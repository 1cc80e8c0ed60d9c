package orchestrator_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/worker"
)

// TestNothingPrintsTheSecret plants the Kafka SASL password of the real
// SASL_SSL listener and runs sagas through it (completed, compensated and
// retried ones) with every log at Debug, traces and metrics recorded, and a
// second orchestrator given a wrong password: the password appears in no
// log line, no error, no metric, no span and no Trace Window answer.
func TestNothingPrintsTheSecret(t *testing.T) {
	k := testenv.KafkaSASLSSL(t)
	secret := k.Password
	if len(secret) < 8 {
		t.Fatalf("the planted secret %q is too short to scan for", secret)
	}
	logs := &testenv.LockedBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	r := newRigOn(t, "memory", k.Brokers, secureKafka(k, secret)...)
	r.retryChargeOnce.Store(true)
	r.failShip.Store(true) // orders whose ID ends in 0 compensate
	wopts := []worker.Option{worker.WithLogger(logger), worker.WithTracerProvider(tp), worker.WithMeterProvider(mp)}
	r.startWorker(r.svcStock, wopts...)
	r.startWorker(r.svcPay, wopts...)
	clock := newFakeClock()
	o, _ := r.startOrchestrator(orchestrator.WithLogger(logger), orchestrator.WithTracerProvider(tp),
		orchestrator.WithMeterProvider(mp), orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)),
		orchestrator.WithRetryNode())
	ids := startConcurrently(t, o, 20)
	scanUntil(t, o, clock, time.Minute, ids)

	var errs []string
	bad, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(k.Brokers...),
		orchestrator.WithKafkaOpts(secureKafka(k, secret+"-wrong")...), orchestrator.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := bad.Run(ctx); err != nil {
		errs = append(errs, err.Error())
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	tw, err := tracewindow.New(r.store, o.Scope(), tracewindow.WithAnonymousReads(), tracewindow.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	var pages strings.Builder
	for _, id := range ids {
		rec := httptest.NewRecorder()
		tw.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/api/sagas/"+id, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("Trace Window of %s: %d %s", id, rec.Code, rec.Body)
		}
		pages.WriteString(rec.Body.String())
	}
	var states []string
	for _, id := range ids {
		tx, err := r.store.LoadTransaction(context.Background(), o.Scope(), id)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, string(tx.State))
	}
	if !strings.Contains(strings.Join(states, " "), string(eventstore.StateCompensated)) || o.Stats().Retried == 0 {
		t.Fatalf("the run did not cover compensation and retries: states %v, stats %+v", states, o.Stats())
	}
	if len(errs) == 0 || !strings.Contains(strings.ToLower(errs[0]), "sasl") {
		t.Fatalf("the wrong password gave %q, want the broker's SASL refusal", errs)
	}
	for what, text := range map[string]string{
		"logs":               logs.String(),
		"errors":             strings.Join(errs, "\n"),
		"metrics":            fmt.Sprintf("%+v", rm),
		"spans":              fmt.Sprintf("%+v", spans.GetSpans()),
		"Trace Window pages": pages.String(),
	} {
		if text == "" && what != "errors" {
			t.Errorf("no %s recorded: the scan would prove nothing", what)
		}
		if i := strings.Index(text, secret); i >= 0 {
			t.Errorf("the %s contain the secret: …%s…", what, text[max(0, i-200):min(len(text), i+len(secret)+50)])
		}
	}
}
