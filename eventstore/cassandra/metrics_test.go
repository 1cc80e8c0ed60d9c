package cassandra

import (
	"context"
	"errors"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/stacksaga-go/stacksaga/telemetry"
)

// RegisterMetrics reports the round trips by kind and the statements by
// table from the observer's counters, and times every request, until it is
// unregistered.
func TestRegisterMetrics(t *testing.T) {
	s := &Store{obs: newObserver()}
	st := newStatements("ks")
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	reg, err := s.RegisterMetrics(mp, attribute.String("stacksaga.service", "order-service"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Unix(100, 0)
	s.obs.ObserveQuery(ctx, gocql.ObservedQuery{Statement: st.selectTx, Start: t0, End: t0.Add(3 * time.Millisecond)})
	s.obs.ObserveQuery(ctx, gocql.ObservedQuery{Statement: st.selectTx, Start: t0, End: t0.Add(time.Millisecond), Attempt: 1, Err: errors.New("timeout")})
	s.obs.ObserveQuery(ctx, gocql.ObservedQuery{Statement: st.insertMarkerIfNotExists, Start: t0, End: t0.Add(5 * time.Millisecond)})
	s.obs.ObserveBatch(ctx, gocql.ObservedBatch{Statements: []string{st.upsertTx, st.insertTryout}, Start: t0, End: t0.Add(2 * time.Millisecond)})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if v, _ := p.Attributes.Value("stacksaga.service"); v.AsString() != "order-service" {
						t.Errorf("%s point without the registration's attributes: %v", m.Name, p.Attributes)
					}
					k, _ := p.Attributes.Value(telemetry.AttrRequestKind)
					table, _ := p.Attributes.Value("db.collection.name")
					got[m.Name+"/"+table.AsString()+"/"+k.AsString()] += float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					op, _ := p.Attributes.Value("db.operation.name")
					table, _ := p.Attributes.Value("db.collection.name")
					et, _ := p.Attributes.Value("error.type")
					got[m.Name+"/"+table.AsString()+"/"+op.AsString()+"/"+et.AsString()] += float64(p.Count)
				}
			}
		}
	}
	for k, want := range map[string]float64{
		telemetry.MetricCassandraRoundTrips + "//read":                         1,
		telemetry.MetricCassandraRoundTrips + "//lwt":                          1,
		telemetry.MetricCassandraRoundTrips + "//batch":                        1,
		telemetry.MetricCassandraRoundTrips + "//write":                        0,
		telemetry.MetricCassandraStatements + "/es_transaction/read":           1,
		telemetry.MetricCassandraStatements + "/es_transaction/write":          1,
		telemetry.MetricCassandraStatements + "/es_execution_markers/lwt":      1,
		telemetry.MetricCassandraStatements + "/es_transaction_tryout/write":   1,
		telemetry.MetricDBOperationDuration + "/es_transaction/SELECT/":        1,
		telemetry.MetricDBOperationDuration + "/es_transaction/SELECT/timeout": 0,
		telemetry.MetricDBOperationDuration + "/es_transaction/SELECT/_OTHER":  1,
		telemetry.MetricDBOperationDuration + "/es_execution_markers/INSERT/":  1,
		telemetry.MetricDBOperationDuration + "//BATCH/":                       1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if s.obs.timing.Load() != nil {
		t.Fatal("timing still on after Unregister")
	}
}
