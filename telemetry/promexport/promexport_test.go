package promexport_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/metric"

	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/telemetry/promexport"
)

// The handler serves OpenTelemetry instruments under Prometheus names (unit
// suffixes, _total on counters, dots as underscores), parsed by
// Prometheus' own text parser.
func TestHandlerServesPrometheusNames(t *testing.T) {
	exp, err := promexport.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := exp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	m := exp.MeterProvider().Meter("test")
	c, err := m.Int64Counter(telemetry.MetricSagaStarted, metric.WithUnit("{saga}"))
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3, metric.WithAttributes(telemetry.AttrDomain.String("place-order")))
	h, err := m.Float64Histogram(telemetry.MetricStepDuration, metric.WithUnit("s"))
	if err != nil {
		t.Fatal(err)
	}
	h.Record(context.Background(), 0.25)
	srv := httptest.NewServer(exp.Handler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	started := fams["stacksaga_saga_started_total"]
	if started == nil || started.GetMetric()[0].GetCounter().GetValue() != 3 {
		t.Fatalf("stacksaga_saga_started_total: %v", started)
	}
	found := false
	for _, l := range started.GetMetric()[0].GetLabel() {
		found = found || (l.GetName() == "stacksaga_domain" && l.GetValue() == "place-order")
	}
	if !found {
		t.Errorf("labels %v", started.GetMetric()[0].GetLabel())
	}
	if d := fams["stacksaga_step_duration_seconds"]; d == nil || d.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Errorf("stacksaga_step_duration_seconds: %v", d)
	}
	if fams["go_goroutines"] == nil || fams["target_info"] == nil {
		t.Error("runtime metrics or target_info missing")
	}
}
