package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// KafkaMetrics returns a franz-go option whose hooks report the client's
// metrics through mp: messages produced and fetched per topic, produce
// request latency, bytes written and read, connections opened and closed
// (see the MetricKafka* names). clientID is the messaging.client.id
// attribute that tells the clients of one process apart. The orchestrator
// and the worker add it to their clients when given a MeterProvider; it is
// exported for other franz-go clients of the same service.
//
// It is StackSaga's OpenTelemetry equivalent of franz-go's plugin/kprom:
// the instruments go through the OpenTelemetry metrics API (so any exporter
// works, not only Prometheus) under the semantic conventions' messaging
// names where they exist. franz-go's plugin/kotel meter reports under older
// names (messaging.kafka.*.count) without telling clients apart.
func KafkaMetrics(mp metric.MeterProvider, clientID string) (kgo.Opt, error) {
	if mp == nil {
		return nil, errors.New("telemetry: KafkaMetrics: nil MeterProvider")
	}
	h, err := newKafkaHooks(mp, clientID)
	if err != nil {
		return nil, err
	}
	return kgo.WithHooks(h), nil
}

// ShareKafkaMetrics is KafkaMetrics for a client that consumes in a share
// group (KIP-932). franz-go reports no fetched batches for share fetches,
// so the messages consumed are counted as the client hands them out, one
// per delivery: a record released and delivered again counts again. A
// consumer-group client must use KafkaMetrics, which counts its batches
// (this would count its records twice); a client that only produces may use
// either.
func ShareKafkaMetrics(mp metric.MeterProvider, clientID string) (kgo.Opt, error) {
	if mp == nil {
		return nil, errors.New("telemetry: ShareKafkaMetrics: nil MeterProvider")
	}
	h, err := newKafkaHooks(mp, clientID)
	if err != nil {
		return nil, err
	}
	return kgo.WithHooks(shareKafkaHooks{h}), nil
}

// ShareAckFailures returns a function that counts one failed share-group
// acknowledgement result of the client clientID (MetricKafkaShareAckFailures,
// by topic and error.type): call it for each kgo.ShareAckResult with an
// error that the client's kgo.ShareAckCallback receives (one result covers
// the acknowledgements of one partition in one request). kgo has no hook
// for acknowledgements, so this is a function for that callback rather
// than a kgo option; a share-group worker or orchestrator given a
// MeterProvider counts its failures with it, next to ShareKafkaMetrics.
// Each failure allocates its attribute set; successes are not counted, so
// they cost nothing.
func ShareAckFailures(mp metric.MeterProvider, clientID string) (func(topic string, partition int32, err error), error) {
	if mp == nil {
		return nil, errors.New("telemetry: ShareAckFailures: nil MeterProvider")
	}
	c, err := mp.Meter(ScopeName+"/kafka").Int64Counter(MetricKafkaShareAckFailures, metric.WithUnit("{result}"),
		metric.WithDescription("Share-group acknowledgements a Kafka client could not deliver or the broker refused, one per partition of an acknowledge request, by topic and error type."))
	if err != nil {
		return nil, fmt.Errorf("telemetry: Kafka metrics: %w", err)
	}
	client := semconv.MessagingClientID(clientID)
	return func(topic string, _ int32, err error) {
		c.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(semconv.MessagingSystemKafka, client,
			semconv.MessagingDestinationName(topic), semconv.MessagingOperationTypeSettle, semconv.ErrorTypeKey.String(ErrorType(err)))))
	}, nil
}

// shareKafkaHooks adds to kafkaHooks the count of the records a share
// client polls (its fetches call no HookFetchBatchRead).
type shareKafkaHooks struct{ *kafkaHooks }

var _ kgo.HookFetchRecordUnbuffered = shareKafkaHooks{}

// OnFetchRecordUnbuffered counts a record handed to the application
// (polled); a record dropped unpolled (the client closing) was not consumed.
func (h shareKafkaHooks) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if polled {
		h.consumed.Add(context.Background(), 1, h.topics.Get(topicOp{r.Topic, "receive"})...)
	}
}

// newKafkaHooks creates KafkaMetrics' instruments and hooks.
func newKafkaHooks(mp metric.MeterProvider, clientID string) (*kafkaHooks, error) {
	m := mp.Meter(ScopeName + "/kafka")
	h := &kafkaHooks{}
	var errs []error
	var err error
	h.sent, err = m.Int64Counter(MetricKafkaSent, metric.WithUnit("{message}"),
		metric.WithDescription("Messages produced by a Kafka client, by topic."))
	errs = append(errs, err)
	h.consumed, err = m.Int64Counter(MetricKafkaConsumed, metric.WithUnit("{message}"),
		metric.WithDescription("Messages fetched by a Kafka client, by topic."))
	errs = append(errs, err)
	h.opDur, err = m.Float64Histogram(MetricKafkaOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of a Kafka client's produce requests, from write to response."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	errs = append(errs, err)
	h.io, err = m.Int64Counter(MetricKafkaIO, metric.WithUnit("By"),
		metric.WithDescription("Bytes a Kafka client wrote to (transmit) and read from (receive) brokers."))
	errs = append(errs, err)
	h.connects, err = m.Int64Counter(MetricKafkaConnects, metric.WithUnit("{connection}"),
		metric.WithDescription("Broker connections a Kafka client opened; failures carry error.type."))
	errs = append(errs, err)
	h.disconnects, err = m.Int64Counter(MetricKafkaDisconnects, metric.WithUnit("{connection}"),
		metric.WithDescription("Broker connections a Kafka client closed."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: Kafka metrics: %w", err)
	}
	client := semconv.MessagingClientID(clientID)
	h.client = addOpts(attribute.NewSet(semconv.MessagingSystemKafka, client))
	h.tx = addOpts(attribute.NewSet(semconv.MessagingSystemKafka, client, semconv.NetworkIODirectionTransmit))
	h.rx = addOpts(attribute.NewSet(semconv.MessagingSystemKafka, client, semconv.NetworkIODirectionReceive))
	h.sendSet = attribute.NewSet(semconv.MessagingSystemKafka, client, semconv.MessagingOperationName("send"), semconv.MessagingOperationTypeSend)
	h.send = []metric.RecordOption{metric.WithAttributeSet(h.sendSet)}
	h.clientKV = client
	h.topics = NewOptions(h.topicOpts)
	return h, nil
}

// kafkaHooks implements the kgo hooks behind KafkaMetrics.
type kafkaHooks struct {
	sent, consumed, io, connects, disconnects metric.Int64Counter
	opDur                                     metric.Float64Histogram

	clientKV attribute.KeyValue
	sendSet  attribute.Set
	// The options of the fixed attribute sets, made once, as the slices
	// the instruments' variadic parameters take: making the option, or
	// passing it alone (its slice escapes), allocates on every call.
	client, tx, rx []metric.AddOption
	send           []metric.RecordOption
	topics         *Options[topicOp, metric.AddOption]
}

// addOpts is the option slice of an Add with the attributes set.
func addOpts(set attribute.Set) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(set)}
}

type topicOp struct{ topic, op string }

var (
	_ kgo.HookBrokerConnect       = (*kafkaHooks)(nil)
	_ kgo.HookBrokerDisconnect    = (*kafkaHooks)(nil)
	_ kgo.HookBrokerE2E           = (*kafkaHooks)(nil)
	_ kgo.HookProduceBatchWritten = (*kafkaHooks)(nil)
	_ kgo.HookFetchBatchRead      = (*kafkaHooks)(nil)
)

// produceKey is the Kafka API key of Produce requests.
const produceKey = 0

// topicOpts are the options of a topic's send or receive counts.
func (h *kafkaHooks) topicOpts(k topicOp) []metric.AddOption {
	typ := semconv.MessagingOperationTypeSend
	if k.op == "receive" {
		typ = semconv.MessagingOperationTypeReceive
	}
	return addOpts(attribute.NewSet(semconv.MessagingSystemKafka, h.clientKV, semconv.MessagingDestinationName(k.topic),
		semconv.MessagingOperationName(k.op), typ))
}

// OnBrokerConnect counts a connection opened, or failed.
func (h *kafkaHooks) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.connects.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(
			semconv.MessagingSystemKafka, h.clientKV, semconv.ErrorTypeKey.String(ErrorType(err)))))
		return
	}
	h.connects.Add(context.Background(), 1, h.client...)
}

// OnBrokerDisconnect counts a connection closed.
func (h *kafkaHooks) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) {
	h.disconnects.Add(context.Background(), 1, h.client...)
}

// OnBrokerE2E counts the bytes of a request and its response, and times
// produce requests.
func (h *kafkaHooks) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	ctx := context.Background()
	if e2e.BytesWritten > 0 {
		h.io.Add(ctx, int64(e2e.BytesWritten), h.tx...)
	}
	if e2e.BytesRead > 0 {
		h.io.Add(ctx, int64(e2e.BytesRead), h.rx...)
	}
	if key != produceKey {
		return
	}
	opts := h.send
	if err := e2e.Err(); err != nil {
		opts = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(append(h.sendSet.ToSlice(), semconv.ErrorTypeKey.String(ErrorType(err)))...))}
	}
	h.opDur.Record(ctx, e2e.DurationE2E().Seconds(), opts...)
}

// OnProduceBatchWritten counts the records of a batch the broker accepted.
func (h *kafkaHooks) OnProduceBatchWritten(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.ProduceBatchMetrics) {
	h.sent.Add(context.Background(), int64(m.NumRecords), h.topics.Get(topicOp{topic, "send"})...)
}

// OnFetchBatchRead counts the records of a fetched batch.
func (h *kafkaHooks) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	h.consumed.Add(context.Background(), int64(m.NumRecords), h.topics.Get(topicOp{topic, "receive"})...)
}

// ErrorType is the error.type attribute value of err: a Kafka error's
// name, "timeout" for deadlines, "canceled", or the semantic conventions'
// "_OTHER".
func ErrorType(err error) string {
	var ke *kerr.Error
	var ne net.Error
	switch {
	case errors.As(err, &ke):
		return ke.Message
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}
