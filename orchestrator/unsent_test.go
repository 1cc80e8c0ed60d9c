package orchestrator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// TestFailedPublishesInHistory on real Kafka: a command whose worker topic
// does not exist is recorded in the history at each failed publish (the
// Start's, then one per re-drive), with its reason naming the topic and
// that no consumer ever joined the worker's group; the saga's error says
// the same.
func TestFailedPublishesInHistory(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	if brokers == nil {
		return
	}
	u := testenv.UniqueName(t, "unsent")
	svc := "ghost-" + u
	d := orchestrator.Domain[order]{Name: "dom-" + u, OnNext: orchestrator.Sequence[order](orchestrator.Step{Service: svc, Endpoint: "charge"})}
	rcfg, err := recovery.LoadConfig([]byte("stacksaga:\n  cassandra:\n    recovery:\n      retry: { domains: { default: { initial-interval: 0s } } }\n"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := orchestrator.New("orders-"+u, d, orchestrator.WithBrokers(brokers...), orchestrator.WithStore(memory.New()),
		orchestrator.WithRecovery(rcfg), orchestrator.WithDeliveryTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	txID, err := o.Start(ctx, order{ID: "o-1"})
	if err == nil {
		t.Fatal("Start published to a topic that does not exist")
	}
	for range 2 {
		if err := o.Redrive(ctx, txID); err == nil {
			t.Fatal("Redrive published to a topic that does not exist")
		}
	}
	h, err := o.History(ctx, txID)
	if err != nil {
		t.Fatal(err)
	}
	topic := topics.CommandTopic(svc)
	if len(h) != 3 {
		t.Fatalf("history has %d rows, want 3 (the Start's publish and two re-drives): %+v", len(h), h)
	}
	for i, row := range h {
		if row.Outcome != orchestrator.OutcomeUnsent || row.Attempt != i+1 || !strings.Contains(row.Error, topic) ||
			!strings.Contains(row.Error, "no consumer has ever joined group "+topics.WorkerGroup(svc)) {
			t.Errorf("row %d: attempt %d outcome %s error %q", i, row.Attempt, row.Outcome, row.Error)
		}
	}
	s, err := o.Get(ctx, txID)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != eventstore.StateRetryPending || !strings.Contains(s.Error, topic) {
		t.Errorf("saga %s error %q", s.State, s.Error)
	}
}
