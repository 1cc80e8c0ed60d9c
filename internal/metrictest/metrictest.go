// Package metrictest reads OpenTelemetry metrics in tests: every metric of a
// manual reader by name, and the sum of a metric's points that carry given
// attributes.
package metrictest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Collect reads every metric of r by name, failing t if it cannot.
func Collect(t testing.TB, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// Total sums the data points of m (a histogram's counts) whose attributes
// include match.
func Total(m metricdata.Metrics, match ...attribute.KeyValue) float64 {
	has := func(set attribute.Set) bool {
		for _, kv := range match {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	var n float64
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes) {
				n += float64(p.Value)
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes) {
				n += float64(p.Count)
			}
		}
	}
	return n
}
