package orchestrator_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
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
