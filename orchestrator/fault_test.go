package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// A saga whose next command can never be published (no such topic) is
// parked in RETRY_PENDING; it does not stall the sagas behind it.
func TestUnpublishableStepParksInsteadOfStalling(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	seq := orchestrator.Sequence[order](threeSteps...)
	d := orchestrator.Domain[order]{Name: domainName, OnNext: func(ctx context.Context, s *orchestrator.Saga[order]) orchestrator.Decision {
		if s.Entity.ID == "poison" && len(s.Completed) == 1 {
			return orchestrator.Send("nosuch-svc", "x")
		}
		return seq(ctx, s)
	}}
	o := newOrch(t, brokers, d)
	runOrch(t, o)
	poison, err := o.Start(context.Background(), order{ID: "poison"})
	if err != nil {
		t.Fatal(err)
	}
	ids := startN(t, o, 20)
	for id, st := range waitTerminal(t, o, ids, 60*time.Second) {
		if st != eventstore.StateCompleted {
			t.Errorf("%s: %s", id, st)
		}
	}
	waitFor(t, 60*time.Second, "the poison saga parked", func() bool {
		s, _ := o.Get(context.Background(), poison)
		return s.State == eventstore.StateRetryPending
	})
	s, _ := o.Get(context.Background(), poison)
	if !strings.Contains(s.Error, "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Errorf("parked saga's error %q does not say why", s.Error)
	}
}

// An invalid decision (bad service name) fails the saga into compensation.
func TestInvalidDecisionFails(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	seq := orchestrator.Sequence[order](threeSteps...)
	d := orchestrator.Domain[order]{Name: domainName, OnNext: func(ctx context.Context, s *orchestrator.Saga[order]) orchestrator.Decision {
		if len(s.Completed) == 1 {
			return orchestrator.Send("bad service!", "x")
		}
		return seq(ctx, s)
	}}
	o := newOrch(t, brokers, d)
	runOrch(t, o)
	ids := startN(t, o, 1)
	if st := waitTerminal(t, o, ids, 30*time.Second)[ids[0]]; st != eventstore.StateCompensated {
		t.Fatalf("state %s, want COMPENSATED", st)
	}
	s, _ := o.Get(context.Background(), ids[0])
	if !strings.Contains(s.Error, "invalid service name") {
		t.Errorf("error %q", s.Error)
	}
}

// Two virtual clusters of one service share the domain's callback topic:
// each keeps its own replies and ignores the other's.
func TestClustersShareTheCallbackTopic(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	blue := newOrch(t, brokers, testDomain(), orchestrator.WithCluster("blue"))
	green := newOrch(t, brokers, testDomain(), orchestrator.WithCluster("green"))
	runOrch(t, blue)
	runOrch(t, green)
	blueIDs, greenIDs := startN(t, blue, 20), startN(t, green, 20)
	for _, st := range waitTerminal(t, blue, blueIDs, 60*time.Second) {
		if st != eventstore.StateCompleted {
			t.Fatalf("blue saga %s", st)
		}
	}
	for _, st := range waitTerminal(t, green, greenIDs, 60*time.Second) {
		if st != eventstore.StateCompleted {
			t.Fatalf("green saga %s", st)
		}
	}
	waitFor(t, 10*time.Second, "each saw the other's replies", func() bool {
		return blue.Stats().ForeignReplies == 60 && green.Stats().ForeignReplies == 60
	})
	if blue.Stats().DeadLettered+green.Stats().DeadLettered != 0 {
		t.Errorf("replies dead-lettered: %+v %+v", blue.Stats(), green.Stats())
	}
}

// A first command that cannot be published parks the saga, and Redrive
// sends it once the topic exists.
func TestStartPublishFailureParks(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	d := orchestrator.Domain[order]{Name: domainName, OnNext: orchestrator.Sequence[order](orchestrator.Step{Service: "late-svc", Endpoint: "x"})}
	o := newOrch(t, brokers, d)
	runOrch(t, o)
	id, err := o.Start(context.Background(), order{ID: "1"})
	if err == nil || id == "" {
		t.Fatalf("Start = %q, %v; want an id and an error", id, err)
	}
	s, _ := o.Get(context.Background(), id)
	if s.State != eventstore.StateRetryPending {
		t.Fatalf("state %s, want RETRY_PENDING", s.State)
	}
	ensureTopics(t, brokers, topics.CommandTopic("late-svc"))
	startResponder(t, brokers, []string{topics.CommandTopic("late-svc")}, appendStep(nil))
	if err := o.Redrive(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if st := waitTerminal(t, o, []string{id}, 30*time.Second)[id]; st != eventstore.StateCompleted {
		t.Fatalf("state %s after redrive", st)
	}
}

// Run returns soon after its context ends even when commands cannot reach
// the broker.
func TestShutdownIsBoundedWhenProduceFails(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	adm := kadmClient(t, brokers)
	td, err := adm.ListTopics(context.Background(), topics.CommandTopic(svcB))
	if err != nil {
		t.Fatal(err)
	}
	bID := td[topics.CommandTopic(svcB)].ID
	var armed atomic.Bool
	var killed atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !armed.Load() {
			return nil, nil, false
		}
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == topics.CommandTopic(svcB) || tp.TopicID == bID {
				killed.Add(1)
				return nil, fmt.Errorf("injected"), true
			}
		}
		return nil, nil, false
	})
	o := newOrch(t, brokers, testDomain(), orchestrator.WithShutdownGrace(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	<-o.Running()
	armed.Store(true)
	startN(t, o, 1) // the reply of step 0 publishes to svcB, which fails
	waitFor(t, 20*time.Second, "svcB produce attempts", func() bool { return killed.Load() > 0 })
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return 20s after its context ended")
	}
}

// Close stops a running orchestrator and waits for Run.
func TestCloseStopsRun(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	o := newOrch(t, brokers, testDomain())
	done := make(chan error, 1)
	go func() { done <- o.Run(context.Background()) }()
	<-o.Running()
	if err := o.Run(context.Background()); !errors.Is(err, orchestrator.ErrStarted) {
		t.Errorf("second Run: %v, want ErrStarted", err)
	}
	o.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not stop Run")
	}
	if _, err := o.Start(context.Background(), order{}); !errors.Is(err, orchestrator.ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
	o.Close()
}

// An orchestrator that is made but not run holds no partitions of the
// callback topic.
func TestIdleOrchestratorHoldsNoPartitions(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	idle := newOrch(t, brokers, testDomain())
	defer idle.Close()
	if _, err := idle.Start(context.Background(), order{}); err != nil { // producing alone joins nothing
		t.Fatal(err)
	}
	o := newOrch(t, brokers, testDomain(), orchestrator.WithStore(idle.Store()))
	runOrch(t, o)
	ids := startN(t, o, 30)
	for _, st := range waitTerminal(t, o, ids, 30*time.Second) {
		if st != eventstore.StateCompleted {
			t.Fatalf("saga %s", st)
		}
	}
}

// OnNextRevert may only compensate completed steps below the cursor; a
// decision that would compensate a step twice terminates the saga.
func TestCompensateTwiceTerminates(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	r := startResponder(t, brokers, allTopics()[:2], appendStep(func(cmd *topics.Envelope) (topics.Outcome, string) {
		if cmd.Kind == topics.KindProcess && cmd.Span == 2 {
			return topics.OutcomeNonRetryable, "declined"
		}
		return topics.OutcomeOK, ""
	}))
	d := testDomain()
	d.OnNextRevert = func(_ context.Context, s *orchestrator.Saga[order]) orchestrator.Decision {
		return orchestrator.Compensate(s.Completed[1]) // always the same step
	}
	o := newOrch(t, brokers, d)
	runOrch(t, o)
	ids := startN(t, o, 1)
	if st := waitTerminal(t, o, ids, 30*time.Second)[ids[0]]; st != eventstore.StateCompensationFailed {
		t.Fatalf("state %s, want COMPENSATION_FAILED", st)
	}
	n := 0
	for _, c := range r.commands() {
		if c.Kind == topics.KindRevert {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d compensations sent, want 1", n)
	}
	s, _ := o.Get(context.Background(), ids[0])
	if !strings.Contains(s.Error, "not a completed step below") {
		t.Errorf("error %q", s.Error)
	}
}

func kadmClient(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}
