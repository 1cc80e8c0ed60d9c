package orchestrator_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/metrictest"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
)

// A share-group orchestrator takes share-group options among its Kafka
// options (its own acknowledgement callback, a fetch limit): they go to
// its share consumer, not to its producer, which kgo would refuse them
// on (a client without a group), and the user's callback replaces the
// orchestrator's.
func TestShareGroupOptionsGoToTheConsumer(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	var acks atomic.Int64
	o := newOrch(t, brokers, testDomain(), orchestrator.WithGroupType(topics.GroupShare),
		orchestrator.WithKafkaOpts(kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) { acks.Add(int64(len(rs))) }),
			kgo.ShareMaxRecords(16)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-o.Running():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	ids := startN(t, o, 3)
	expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
	// The replies were accepted, so acknowledged: the user's callback saw
	// the results (it runs after the acknowledgement's response).
	deadline := time.Now().Add(30 * time.Second)
	for acks.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the user's ShareAckCallback saw no acknowledgement in 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A share-group orchestrator whose reply outlives its acquisition lock:
// the broker refuses the late accept, the orchestrator logs it at WARN and
// counts it (telemetry.MetricKafkaShareAckFailures, error.type
// INVALID_RECORD_STATE on the callback topic), and the reply, delivered
// again, is found already applied (the saga moved on: a stale reply), so
// the saga completes with every step run once. Its client cannot renew
// locks here (it caps ShareAcknowledge at v1), and a slow claim (the
// store's first InsertMarker of a reply claim waits 3 locks) holds the
// reply's handler past its 1s lock; the loop does not poll while a poll's
// record is in hand, so the record sits available when the accept comes.
func TestKafkaShareLateAcceptFailsAndIsCounted(t *testing.T) {
	const lock = time.Second // scripts/services lets a group go down to 1s
	r := newRig(t, "memory")
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	capped := kversion.Stable()
	capped.SetMaxKeyVersion(int16(kmsg.ShareAcknowledge), 1)
	var logs testenv.LockedBuffer
	slow := &slowClaimStore{Store: r.store, delay: 3 * lock}
	o, _ := r.startOrchestrator(orchestrator.WithStore(slow), orchestrator.WithGroupType(topics.GroupShare),
		orchestrator.WithShareSettings(topics.ShareSettings{RecordLock: lock}), orchestrator.WithKafkaOpts(kgo.MaxVersions(capped)),
		orchestrator.WithMeterProvider(mp), orchestrator.WithoutRecovery(),
		orchestrator.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	ids := startConcurrently(t, o, 1)
	expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
	if !slow.delayed.Load() {
		t.Fatal("no reply claim was delayed")
	}
	for span, step := range []string{"reserve", "charge", "ship"} {
		if n := r.runsOf(ids[0], span, topics.KindProcess); n != 1 {
			t.Errorf("%s ran %d times, want once", step, n)
		}
	}
	client := attribute.String("messaging.client.id", "stacksaga-orchestrator-orders-"+r.domain)
	refused := attribute.String("error.type", "INVALID_RECORD_STATE")
	waitFor(t, 30*time.Second, "the refused accept counted", func() bool {
		return metrictest.Total(metrictest.Collect(t, reader)[telemetry.MetricKafkaShareAckFailures], client,
			attribute.String("messaging.destination.name", o.CallbackTopic()), refused) >= 1
	})
	// The redelivery is applied by nobody: its saga had moved on.
	waitFor(t, 30*time.Second, "the redelivered reply found stale", func() bool { return o.Stats().StaleReplies >= 1 })
	if st := o.Stats(); st.Replies != 3 {
		t.Errorf("%d replies applied, want 3 (the redelivery is stale)", st.Replies)
	}
	got := logs.String()
	if !strings.Contains(got, "kafkaloop: share acknowledgements failed") || !strings.Contains(got, "topic="+o.CallbackTopic()) ||
		!strings.Contains(got, "INVALID_RECORD_STATE") || !strings.Contains(got, "is delivered again") {
		t.Errorf("logged %q, want the refused accept at Warn with its topic, error and effect", got)
	}
}

// slowClaimStore makes the first reply claim (an InsertMarker whose key
// is a reply claim's) wait delay before it goes to the store.
type slowClaimStore struct {
	eventstore.Store
	delay   time.Duration
	delayed atomic.Bool
}

func (s *slowClaimStore) InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (bool, eventstore.Marker, error) {
	if strings.HasPrefix(m.Kind, "reply:") && s.delayed.CompareAndSwap(false, true) {
		time.Sleep(s.delay)
	}
	return s.Store.InsertMarker(ctx, m, lease)
}
