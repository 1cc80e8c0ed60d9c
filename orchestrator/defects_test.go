package orchestrator_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Regression tests for the core defects of issue 14 (items 2, 3, 5 and 6;
// items 1 and 4 are tested in writeprotect, topics and kafkaloop).

// runWorker runs w until the test ends.
func runWorker(t *testing.T, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Running():
	case err := <-done:
		t.Fatalf("worker Run: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("worker did not start")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker Run: %v", err)
		}
	})
}

// reverts records the compensations run, per saga, in call order.
type reverts struct {
	mu  sync.Mutex
	got map[string][]string
}

func (r *reverts) handler(name string, process func(order) order) func(context.Context, *worker.Step, order) (order, error) {
	return func(_ context.Context, s *worker.Step, in order) (order, error) {
		if s.Kind == topics.KindRevert {
			r.mu.Lock()
			r.got[s.TxID] = append(r.got[s.TxID], name)
			r.mu.Unlock()
			return in, nil
		}
		if process != nil {
			in = process(in)
		}
		in.Steps = append(in.Steps, name)
		return in, nil
	}
}

func (r *reverts) of(txID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got[txID])
}

// Item 2: a step that ran and succeeded but whose reply is too large to
// produce must be compensated itself, not only the steps before it.
func TestTooLargeReplyCompensatesTheStepThatRan(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	rv := &reverts{got: map[string][]string{}}
	for svc, eps := range map[string][]string{svcA: {"reserve", "ship"}, svcB: {"charge"}} {
		w, err := worker.New(svc, worker.WithBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range eps {
			var process func(order) order
			if ep == "charge" {
				// The charge happens, then the entity grows past what
				// Kafka takes (1 MiB by default).
				process = func(o order) order { o.ID = strings.Repeat("x", 2<<20); return o }
			}
			if err := worker.Register(w, worker.Endpoint[order]{Name: ep, Process: rv.handler(ep, process), Revert: rv.handler(ep, nil)}); err != nil {
				t.Fatal(err)
			}
		}
		runWorker(t, w)
	}
	o := newOrch(t, brokers, testDomain())
	runOrch(t, o)
	ids := startN(t, o, 1)
	if st := waitTerminal(t, o, ids, time.Minute)[ids[0]]; st != eventstore.StateCompensated {
		t.Fatalf("state %s, want COMPENSATED", st)
	}
	// The revert is the last thing before the terminal state is persisted,
	// so it has been recorded by now.
	if got, want := rv.of(ids[0]), []string{"charge", "reserve"}; !slices.Equal(got, want) {
		t.Errorf("compensations %v, want %v: the charge that ran is not refunded", got, want)
	}
	s, err := o.Get(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Error, "too large") {
		t.Errorf("saga error %q does not say why", s.Error)
	}
}

// Item 3: a callback record too large to dead-letter with its headers is
// dead-lettered without its value instead of being retried for ever in
// front of every saga behind it.
func TestDeadLetterNearTheSizeLimit(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	const limit = 64 << 10
	o := newOrch(t, brokers, testDomain(), orchestrator.WithKafkaOpts(kgo.ProducerBatchMaxBytes(limit)))
	runOrch(t, o)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(limit),
		kgo.ConsumeTopics(topics.DeadLetterTopic(o.CallbackTopic())))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The largest undecodable record the same limit lets through: the
	// dead-letter headers push it over.
	var sent bool
	for size := limit - 100; size > limit-400 && !sent; size -= 10 {
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: o.CallbackTopic(), Key: []byte("k"), Value: []byte(strings.Repeat("\xc1", size))}).FirstErr()
		if err == nil {
			sent = true
		} else if !topics.TooLarge(err) {
			t.Fatal(err)
		}
	}
	if !sent {
		t.Fatal("could not produce a record near the limit")
	}
	ids := startN(t, o, 3)
	expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
	fs := cl.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatal(err)
	}
	recs := fs.Records()
	if len(recs) != 1 {
		t.Fatalf("%d dead letters, want 1", len(recs))
	}
	if r := topics.DeadLetterReason(recs[0]); len(recs[0].Value) != 0 || !strings.Contains(r, "dropped") || !strings.Contains(r, "malformed") {
		t.Errorf("dead letter: %d value bytes, reason %q", len(recs[0].Value), r)
	}
}

// Item 6: a delivery timeout whose last error is UNKNOWN_TOPIC_OR_PARTITION
// is a passing metadata gap, not a missing topic: the saga must not be
// parked, and completes once the topic appears.
func TestDeliveryTimeoutIsTransient(t *testing.T) {
	brokers := newCluster(t)
	const late = "svc-late"
	ensureTopics(t, brokers, allTopics()...)
	first := startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	d := orchestrator.Domain[order]{Name: domainName, OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: svcA, Endpoint: "reserve"},
		orchestrator.Step{Service: late, Endpoint: "charge"},
	)}
	log := &stateLog{}
	o := newOrch(t, brokers, d,
		orchestrator.WithDeliveryTimeout(time.Second),
		orchestrator.WithKafkaOpts(kgo.UnknownTopicRetries(-1)),
		orchestrator.WithListener(log.record))
	runOrch(t, o)
	ids := startN(t, o, 1)
	// Let the second command time out on the missing topic a few times.
	waitFor(t, time.Minute, "the first command", func() bool { return len(first.commands()) > 0 })
	time.Sleep(2500 * time.Millisecond)
	ensureTopics(t, brokers, topics.CommandTopic(late))
	startResponder(t, brokers, []string{topics.CommandTopic(late)}, appendStep(nil))
	if st := waitTerminal(t, o, ids, time.Minute)[ids[0]]; st != eventstore.StateCompleted {
		t.Fatalf("state %s, want COMPLETED", st)
	}
	if states := log.of(ids[0]); slices.Contains(states, eventstore.StateRetryPending) {
		t.Errorf("saga went through %v: a delivery timeout was judged permanent", states)
	}
}

// Item 5: on a fresh cluster, a saga started before Run (the callback topic
// not yet created by anyone) must not be lost: Start makes the callback
// topic, the worker's reply lands there, and Run applies it.
func TestStartBeforeRunOnFreshTopics(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	u := testenv.UniqueName(t, "fresh")
	domain, svc := "order-"+u, "stock-"+u
	w, err := worker.New(svc, worker.WithBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	rv := &reverts{got: map[string][]string{}}
	if err := worker.Register(w, worker.Endpoint[order]{Name: "reserve", Process: rv.handler("reserve", nil)}); err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	o, err := orchestrator.New("orders", orchestrator.Domain[order]{Name: domain, OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: svc, Endpoint: "reserve"})}, orchestrator.WithBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := o.Start(ctx, order{ID: "early"})
	if err != nil {
		t.Fatal(err)
	}
	// The worker replies before anyone consumes the callback topic.
	waitFor(t, time.Minute, "the worker's reply (or its dead letter)", func() bool {
		st := w.Stats()
		return st.Processed+st.DeadLettered > 0
	})
	if st := w.Stats(); st.Undeliverable != 0 || st.DeadLettered != 0 {
		t.Fatalf("worker stats %+v: the reply was not delivered", st)
	}
	runOrch(t, o)
	if st := waitTerminal(t, o, []string{id}, time.Minute)[id]; st != eventstore.StateCompleted {
		t.Fatalf("state %s, want COMPLETED", st)
	}
}

// Item 5, the other half: without provisioning, Start refuses to start a
// saga whose replies would have nowhere to go.
func TestStartWithoutCallbackTopicFails(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()[:2]...)
	o := newOrch(t, brokers, testDomain(), orchestrator.WithoutProvision())
	defer o.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := o.Start(ctx, order{ID: "x"}); !errors.Is(err, orchestrator.ErrNoCallbackTopic) {
		t.Fatalf("Start = %v, want ErrNoCallbackTopic", err)
	}
	ensureTopics(t, brokers, allTopics()[2:]...)
	if _, err := o.Start(ctx, order{ID: "y"}); err != nil {
		t.Fatalf("Start after the topic exists: %v", err)
	}
}

// A saga whose command was lost (here: dropped by the worker) stays in
// flight; Restore re-sends its current step and it completes. Restore
// refuses a terminal saga.
func TestRestoreResendsTheStepInFlight(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	var mu sync.Mutex
	dropped := map[string]bool{}
	ok := appendStep(nil)
	startResponder(t, brokers, allTopics()[:2], func(cmd *topics.Envelope) *topics.Envelope {
		mu.Lock()
		defer mu.Unlock()
		if cmd.Span == 1 && !dropped[cmd.TxID] {
			dropped[cmd.TxID] = true
			return nil // lost
		}
		return ok(cmd)
	})
	o := newOrch(t, brokers, testDomain())
	runOrch(t, o)
	ids := startN(t, o, 1)
	waitFor(t, time.Minute, "the lost command", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return dropped[ids[0]]
	})
	// A reply's transition publishes the next command before it persists
	// the saga (see sendAndPersist), so the command can be dropped before
	// the row says IN_PROGRESS at span 1: wait for the row itself, which
	// must get there (nothing answers the lost command, so it stays).
	waitFor(t, time.Minute, "the stranded saga IN_PROGRESS at span 1", func() bool {
		s, err := o.Get(context.Background(), ids[0])
		return err == nil && s.State == eventstore.StateInProgress && s.Span == 1
	})
	if err := o.Restore(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	if st := waitTerminal(t, o, ids, time.Minute)[ids[0]]; st != eventstore.StateCompleted {
		t.Fatalf("state %s, want COMPLETED", st)
	}
	if err := o.Restore(context.Background(), ids[0]); !errors.Is(err, orchestrator.ErrNotInFlight) {
		t.Errorf("Restore of a completed saga = %v, want ErrNotInFlight", err)
	}
}

// Item 4: records whose transaction id Cassandra cannot store (not valid
// UTF-8, or over 64 KiB) are dead-lettered with a reason, by the
// orchestrator and by the worker, and the sagas behind them complete.
func TestUnstorableTxIDsAreDeadLettered(t *testing.T) {
	r := newRig(t, "cassandra")
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	o, _ := r.startOrchestrator()
	cl, err := r.client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bad := []string{"\xff\xfe-not-utf8", strings.Repeat("k", 70<<10)}
	targets := map[string]topics.Type{topics.CallbackTopic(r.domain): topics.TypeReply, topics.CommandTopic(r.svcPay): topics.TypeCommand}
	for tp, typ := range targets {
		for _, id := range bad {
			env := topics.Envelope{Type: typ, Region: o.Scope().Region, Cluster: o.Scope().Cluster, Service: o.Service(),
				Domain: r.domain, TxID: id, Kind: topics.KindProcess, Endpoint: "charge", Attempt: 1,
				IdempotencyKey: "k", ReplyTo: topics.CallbackTopic(r.domain), Outcome: topics.OutcomeOK}
			b, err := topics.Encode(&env)
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: tp, Key: []byte("poison"), Value: b}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids := startConcurrently(t, o, 10)
	expectAll(t, waitTerminal(t, o, ids, 2*time.Minute), eventstore.StateCompleted)
	for tp := range targets {
		dlt := topics.DeadLetterTopic(tp)
		c, err := r.client(kgo.ConsumeTopics(dlt), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for len(recs) < len(bad) && ctx.Err() == nil {
			fs := c.PollFetches(ctx)
			recs = append(recs, fs.Records()...)
		}
		c.Close()
		if len(recs) != len(bad) {
			t.Fatalf("%s: %d dead letters, want %d", dlt, len(recs), len(bad))
		}
		for _, rec := range recs {
			if reason := topics.DeadLetterReason(rec); !strings.Contains(reason, "malformed") {
				t.Errorf("%s: reason %q does not say why", dlt, reason)
			}
		}
	}
}
