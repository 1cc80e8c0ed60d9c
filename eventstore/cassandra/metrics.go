package cassandra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/stacksaga-go/stacksaga/telemetry"
)

// RegisterMetrics reports the store's requests through mp, each with attrs:
// the round trips by kind and the statements by table and kind, read from
// Stats when collected (telemetry.MetricCassandraRoundTrips,
// telemetry.MetricCassandraStatements; ResetStats resets them too), and the
// duration of every request, retries included, as the semantic conventions'
// db.client.operation.duration histogram. A store shared by an
// orchestrator and guards is registered once, by whoever made it.
// Unregister the result to stop.
func (s *Store) RegisterMetrics(mp metric.MeterProvider, attrs ...attribute.KeyValue) (metric.Registration, error) {
	if mp == nil {
		return nil, errors.New("cassandra: RegisterMetrics: nil MeterProvider")
	}
	m := mp.Meter(telemetry.ScopeName + "/eventstore/cassandra")
	roundTrips, err1 := m.Int64ObservableCounter(telemetry.MetricCassandraRoundTrips, metric.WithUnit("{request}"),
		metric.WithDescription("Requests sent to Cassandra (first attempts), by kind: read, write, lwt, batch, other."))
	statements, err2 := m.Int64ObservableCounter(telemetry.MetricCassandraStatements, metric.WithUnit("{statement}"),
		metric.WithDescription("Statements sent to Cassandra per table (batched ones included), by kind: read, write, lwt."))
	dur, err3 := m.Float64Histogram(telemetry.MetricDBOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of Cassandra requests (each attempt)."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("cassandra: metrics: %w", err)
	}
	kind := func(k string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(append(attrs[:len(attrs):len(attrs)], telemetry.AttrRequestKind.String(k))...))
	}
	reads, writes, lwts, batches, other := kind("read"), kind("write"), kind("lwt"), kind("batch"), kind("other")
	tableKind := func(table, k string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(append(attrs[:len(attrs):len(attrs)],
			semconv.DBCollectionName(table), telemetry.AttrRequestKind.String(k))...))
	}
	type tableOpts struct{ reads, writes, lwts metric.ObserveOption }
	perTable := make(map[string]tableOpts, len(tableNames))
	for _, t := range tableNames {
		perTable[t] = tableOpts{tableKind(t, "read"), tableKind(t, "write"), tableKind(t, "lwt")}
	}
	reg, err := m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		st := s.Stats()
		ob.ObserveInt64(roundTrips, st.Reads, reads)
		ob.ObserveInt64(roundTrips, st.Writes, writes)
		ob.ObserveInt64(roundTrips, st.LWTs, lwts)
		ob.ObserveInt64(roundTrips, st.Batches, batches)
		ob.ObserveInt64(roundTrips, st.Other, other)
		for name, ts := range st.Tables {
			o := perTable[name]
			ob.ObserveInt64(statements, ts.Reads, o.reads)
			ob.ObserveInt64(statements, ts.Writes, o.writes)
			ob.ObserveInt64(statements, ts.LWTs, o.lwts)
		}
		return nil
	}, roundTrips, statements)
	if err != nil {
		return nil, fmt.Errorf("cassandra: metrics: %w", err)
	}
	t := &timing{hist: dur, attrs: append([]attribute.KeyValue{semconv.DBSystemNameCassandra}, attrs...)}
	t.opts = telemetry.NewOptions(func(k tableOp) []metric.RecordOption {
		return []metric.RecordOption{metric.WithAttributeSet(t.newSet(k.table, k.op))}
	})
	s.obs.timing.Store(t)
	return &registration{reg: reg, obs: s.obs}, nil
}

// registration also stops the request timing.
type registration struct {
	embedded.Registration
	reg metric.Registration
	obs *observer
}

// Unregister stops the callbacks and the timing.
func (r *registration) Unregister() error {
	r.obs.timing.Store(nil)
	if err := r.reg.Unregister(); err != nil {
		return fmt.Errorf("cassandra: metrics: %w", err)
	}
	return nil
}

// timing records request durations.
type timing struct {
	hist  metric.Float64Histogram
	attrs []attribute.KeyValue
	opts  *telemetry.Options[tableOp, metric.RecordOption]
}

type tableOp struct{ table, op string }

// record records one request of class c that took from start to end.
func (t *timing) record(ctx context.Context, c stmtClass, op string, start, end time.Time, err error) {
	var opts []metric.RecordOption
	if err == nil {
		opts = t.opts.Get(tableOp{c.tableName, op})
	} else {
		base := t.newSet(c.tableName, op)
		opts = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(append(base.ToSlice(), semconv.ErrorTypeKey.String(errorType(err)))...))}
	}
	t.hist.Record(ctx, end.Sub(start).Seconds(), opts...)
}

func (t *timing) newSet(table, op string) attribute.Set {
	kvs := append(t.attrs[:len(t.attrs):len(t.attrs)], semconv.DBOperationName(op))
	if table != "" {
		kvs = append(kvs, semconv.DBCollectionName(table))
	}
	return attribute.NewSet(kvs...)
}

// errorType is the error.type of a failed request: the Cassandra error
// code ("0x2200") of an error the server returned, else what
// telemetry.ErrorType says ("timeout", "_OTHER"…).
func errorType(err error) string {
	var re gocql.RequestError
	if errors.As(err, &re) {
		return fmt.Sprintf("0x%04x", re.Code())
	}
	return telemetry.ErrorType(err)
}

// operation is the db.operation.name of a statement: its first keyword.
func operation(stmt string) string {
	stmt = strings.TrimSpace(stmt)
	if i := strings.IndexAny(stmt, " \t\r\n"); i > 0 {
		stmt = stmt[:i]
	}
	return strings.ToUpper(stmt)
}
