package telemetry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/stacksaga-go/stacksaga/internal/metrictest"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
)

// A share-group client counts every record it consumes exactly once with
// ShareKafkaMetrics (records of several partitions, over polls that do
// not line up with the fetches); with KafkaMetrics, made for
// consumer-group clients, it would count none, as franz-go reports no
// fetched batches for share fetches.
func TestShareKafkaMetricsCountsEachRecord(t *testing.T) {
	const topic, n = "share-metrics", 500
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for i := range n {
		prod.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, share := range []bool{true, false} {
		t.Run(fmt.Sprintf("share=%v", share), func(t *testing.T) {
			group := fmt.Sprintf("sg-metrics-%v", share)
			if err := topics.ConfigureShareGroup(ctx, prod, group, topics.ShareSettings{}); err != nil {
				t.Fatal(err)
			}
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			metrics := telemetry.KafkaMetrics
			if share {
				metrics = telemetry.ShareKafkaMetrics
			}
			hook, err := metrics(mp, "c")
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
				kgo.ShareMaxRecords(64), hook)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			got := 0
			for got < n && ctx.Err() == nil {
				fs := cl.PollRecords(ctx, 37)
				fs.EachRecord(func(r *kgo.Record) {
					got++
					r.Ack(kgo.AckAccept)
				})
			}
			if got != n {
				t.Fatalf("consumed %d records, want %d", got, n)
			}
			want := float64(n)
			if !share {
				want = 0
			}
			ms := metrictest.Collect(t, reader)
			if c := metrictest.Total(ms[telemetry.MetricKafkaConsumed]); c != want {
				t.Errorf("%s = %v, want %v", telemetry.MetricKafkaConsumed, c, want)
			}
		})
	}
}

// ShareAckFailures counts each failed acknowledgement result it is given,
// by topic and error type.
func TestShareAckFailuresCounts(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	count, err := telemetry.ShareAckFailures(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), "c")
	if err != nil {
		t.Fatal(err)
	}
	count("t", 0, kerr.InvalidRecordState)
	count("t", 1, kerr.InvalidRecordState)
	count("u", 0, context.DeadlineExceeded)
	m := metrictest.Collect(t, reader)[telemetry.MetricKafkaShareAckFailures]
	for _, c := range []struct {
		topic, errType string
		want           float64
	}{{"t", "INVALID_RECORD_STATE", 2}, {"u", "timeout", 1}, {"u", "INVALID_RECORD_STATE", 0}} {
		got := metrictest.Total(m, semconv.MessagingDestinationName(c.topic), semconv.ErrorTypeKey.String(c.errType),
			semconv.MessagingClientID("c"), semconv.MessagingOperationTypeSettle)
		if got != c.want {
			t.Errorf("%s %s: %v failures, want %v", c.topic, c.errType, got, c.want)
		}
	}
	if _, err := telemetry.ShareAckFailures(nil, "c"); err == nil {
		t.Error("nil MeterProvider accepted")
	}
}
