package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

const (
	domainName = "test-order"
	svcA       = "svc-a"
	svcB       = "svc-b"
)

var threeSteps = []orchestrator.Step{
	{Service: svcA, Endpoint: "reserve"},
	{Service: svcB, Endpoint: "charge"},
	{Service: svcA, Endpoint: "ship"},
}

func testDomain() orchestrator.Domain[order] {
	return orchestrator.Domain[order]{Name: domainName, OnNext: orchestrator.Sequence[order](threeSteps...)}
}

func allTopics() []string {
	return []string{
		topics.CommandTopic(svcA), topics.CommandTopic(svcB),
		topics.CallbackTopic(domainName), topics.DeadLetterTopic(topics.CallbackTopic(domainName)),
	}
}

// appendStep is a responder that records the endpoint in the entity and
// replies with outcome decided by decide (nil: ok).
func appendStep(decide func(cmd *topics.Envelope) (topics.Outcome, string)) respondFunc {
	return func(cmd *topics.Envelope) *topics.Envelope {
		var o order
		if err := msgpack.Unmarshal(cmd.Payload, &o); err != nil {
			panic(err)
		}
		outcome, msg := topics.OutcomeOK, ""
		if decide != nil {
			outcome, msg = decide(cmd)
		}
		if outcome == topics.OutcomeOK {
			o.Steps = append(o.Steps, string(cmd.Kind)+":"+cmd.Endpoint)
		}
		b, _ := msgpack.Marshal(&o)
		return reply(cmd, outcome, b, msg)
	}
}

func newOrch(t *testing.T, brokers []string, d orchestrator.Domain[order], opts ...orchestrator.Option) *orchestrator.Orchestrator[order] {
	t.Helper()
	o, err := orchestrator.New(svcA, d, append([]orchestrator.Option{orchestrator.WithBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func startN(t *testing.T, o *orchestrator.Orchestrator[order], n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, err := o.Start(context.Background(), order{ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

func TestSagaCompletes(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	states := &stateLog{}
	o := newOrch(t, brokers, testDomain(), orchestrator.WithListener(states.record))
	runOrch(t, o)
	ids := startN(t, o, 20)
	for id, st := range waitTerminal(t, o, ids, 30*time.Second) {
		if st != eventstore.StateCompleted {
			t.Errorf("%s: state %s, want COMPLETED", id, st)
		}
	}
	s, err := o.Get(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"process:reserve", "process:charge", "process:ship"}
	if !slices.Equal(s.Entity.Steps, want) {
		t.Errorf("entity steps %v, want %v", s.Entity.Steps, want)
	}
	h, err := o.History(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 3 {
		t.Fatalf("history has %d tryouts, want 3: %+v", len(h), h)
	}
	for i, tr := range h {
		if tr.Span != i || tr.Outcome != "ok" || tr.Kind != "process" {
			t.Errorf("tryout %d = %+v", i, tr)
		}
		if i > 0 && tr.Index <= h[i-1].Index {
			t.Errorf("tryout indexes not ascending: %d then %d", h[i-1].Index, tr.Index)
		}
	}
	got := states.of(ids[0])
	wantStates := []eventstore.State{eventstore.StateStarted, eventstore.StateInProgress, eventstore.StateInProgress, eventstore.StateCompleted}
	if !slices.Equal(got, wantStates) {
		t.Errorf("state changes %v, want %v", got, wantStates)
	}
	waitStats(t, o, "20 completed", func(st orchestrator.Stats) bool { return st.Completed == 20 })
	if st := o.Stats(); st.Completed != 20 || st.Started != 20 || st.Commands != 60 {
		t.Errorf("stats %+v", st)
	}
}

func TestNonRetryableCompensatesInReverse(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	r := startResponder(t, brokers, allTopics()[:2], appendStep(func(cmd *topics.Envelope) (topics.Outcome, string) {
		if cmd.Endpoint == "ship" && cmd.Kind == topics.KindProcess {
			return topics.OutcomeNonRetryable, "address unknown"
		}
		return topics.OutcomeOK, ""
	}))
	states := &stateLog{}
	o := newOrch(t, brokers, testDomain(), orchestrator.WithListener(states.record))
	runOrch(t, o)
	ids := startN(t, o, 10)
	for id, st := range waitTerminal(t, o, ids, 30*time.Second) {
		if st != eventstore.StateCompensated {
			t.Errorf("%s: state %s, want COMPENSATED", id, st)
		}
	}
	// Per saga, reverts ran for charge (span 1) then reserve (span 0).
	reverts := map[string][]string{}
	for _, c := range r.commands() {
		if c.Kind == topics.KindRevert {
			reverts[c.TxID] = append(reverts[c.TxID], fmt.Sprintf("%d:%s", c.Span, c.Endpoint))
			if c.IdempotencyKey != topics.IdempotencyKey(c.TxID, c.Span, topics.KindRevert) {
				t.Errorf("revert idempotency key %q", c.IdempotencyKey)
			}
		}
	}
	for _, id := range ids {
		if want := []string{"1:charge", "0:reserve"}; !slices.Equal(reverts[id], want) {
			t.Errorf("%s: reverts %v, want %v", id, reverts[id], want)
		}
	}
	s, _ := o.Get(context.Background(), ids[0])
	if want := []string{"process:reserve", "process:charge", "revert:charge", "revert:reserve"}; !slices.Equal(s.Entity.Steps, want) {
		t.Errorf("entity steps %v, want %v", s.Entity.Steps, want)
	}
	if !strings.Contains(s.Error, "address unknown") {
		t.Errorf("saga error %q does not carry the failure", s.Error)
	}
	got := states.of(ids[0])
	want := []eventstore.State{eventstore.StateStarted, eventstore.StateInProgress, eventstore.StateInProgress,
		eventstore.StateFailed, eventstore.StateCompensating, eventstore.StateCompensating, eventstore.StateCompensated}
	if !slices.Equal(got, want) {
		t.Errorf("state changes %v, want %v", got, want)
	}
}

func TestQueryStepIsNotCompensated(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	r := startResponder(t, brokers, allTopics()[:2], appendStep(func(cmd *topics.Envelope) (topics.Outcome, string) {
		if cmd.Endpoint == "ship" && cmd.Kind == topics.KindProcess {
			return topics.OutcomeNonRetryable, "no"
		}
		return topics.OutcomeOK, ""
	}))
	d := orchestrator.Domain[order]{Name: domainName, OnNext: orchestrator.Sequence[order](
		orchestrator.Step{Service: svcA, Endpoint: "reserve"},
		orchestrator.Step{Service: svcB, Endpoint: "lookup", Query: true},
		orchestrator.Step{Service: svcA, Endpoint: "ship"},
	)}
	o := newOrch(t, brokers, d)
	runOrch(t, o)
	ids := startN(t, o, 3)
	waitTerminal(t, o, ids, 30*time.Second)
	for _, c := range r.commands() {
		if c.Kind == topics.KindRevert && c.Endpoint == "lookup" {
			t.Fatalf("query step was compensated: %+v", c)
		}
	}
	waitStats(t, o, "3 compensated", func(st orchestrator.Stats) bool { return st.Compensated >= 3 })
	if st := o.Stats(); st.Compensated != 3 {
		t.Errorf("compensated %d, want 3", st.Compensated)
	}
	// History names the query step without the internal suffix.
	h, err := o.History(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(h) < 2 || h[1].Endpoint != svcB+"/lookup" || !h[1].Query || h[0].Query {
		t.Errorf("history %+v: want the lookup step as %s/lookup with Query set", h, svcB)
	}
}

func TestFailingCompensationTerminates(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(func(cmd *topics.Envelope) (topics.Outcome, string) {
		switch {
		case cmd.Endpoint == "ship" && cmd.Kind == topics.KindProcess:
			return topics.OutcomeNonRetryable, "ship failed"
		case cmd.Endpoint == "charge" && cmd.Kind == topics.KindRevert:
			return topics.OutcomeNonRetryable, "refund refused"
		}
		return topics.OutcomeOK, ""
	}))
	store := memory.New()
	o := newOrch(t, brokers, testDomain(), orchestrator.WithStore(store))
	runOrch(t, o)
	ids := startN(t, o, 5)
	for id, st := range waitTerminal(t, o, ids, 30*time.Second) {
		if st != eventstore.StateCompensationFailed {
			t.Errorf("%s: %s, want COMPENSATION_FAILED", id, st)
		}
	}
	frozen, err := store.ListFrozen(context.Background(), o.Scope(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(frozen) != 5 {
		t.Fatalf("%d frozen sagas, want 5", len(frozen))
	}
	if !strings.Contains(frozen[0].Reason, "refund refused") {
		t.Errorf("frozen reason %q", frozen[0].Reason)
	}
}

func TestRetryableParksAndRedrives(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(func(cmd *topics.Envelope) (topics.Outcome, string) {
		if cmd.Endpoint == "charge" && cmd.Attempt == 1 {
			return topics.OutcomeRetryable, "gateway timeout"
		}
		return topics.OutcomeOK, ""
	}))
	o := newOrch(t, brokers, testDomain())
	runOrch(t, o)
	ids := startN(t, o, 4)
	waitFor(t, 30*time.Second, "retry-pending", func() bool {
		for _, id := range ids {
			s, _ := o.Get(context.Background(), id)
			if s.State != eventstore.StateRetryPending {
				return false
			}
		}
		return true
	})
	s, _ := o.Get(context.Background(), ids[0])
	if want := []string{"process:reserve"}; !slices.Equal(s.Entity.Steps, want) {
		t.Errorf("snapshot before the step: %v, want %v", s.Entity.Steps, want)
	}
	if err := o.Redrive(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := o.Redrive(context.Background(), ids[0]); !errors.Is(err, orchestrator.ErrNotRetryPending) {
		t.Errorf("second redrive: %v, want ErrNotRetryPending", err)
	}
	for _, id := range ids[1:] {
		if err := o.Redrive(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	for id, st := range waitTerminal(t, o, ids, 30*time.Second) {
		if st != eventstore.StateCompleted {
			t.Errorf("%s: %s", id, st)
		}
	}
	h, _ := o.History(context.Background(), ids[0])
	var outcomes []string
	for _, tr := range h {
		outcomes = append(outcomes, fmt.Sprintf("%s#%d:%s", tr.Endpoint, tr.Attempt, tr.Outcome))
	}
	want := []string{"svc-a/reserve#1:ok", "svc-b/charge#1:retryable", "svc-b/charge#2:ok", "svc-a/ship#1:ok"}
	if !slices.Equal(outcomes, want) {
		t.Errorf("history %v, want %v", outcomes, want)
	}
}

func TestDuplicateRepliesAdvanceOnce(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	// Every reply is sent three times.
	var prod *kgo.Client
	r := startResponder(t, brokers, allTopics()[:2], func(cmd *topics.Envelope) *topics.Envelope {
		rep := appendStep(nil)(cmd)
		b, _ := topics.Encode(rep)
		for range 2 {
			prod.Produce(context.Background(), &kgo.Record{Topic: cmd.ReplyTo, Key: []byte(cmd.TxID), Value: b}, nil)
		}
		return rep
	})
	prod = r.cl
	o := newOrch(t, brokers, testDomain())
	runOrch(t, o)
	ids := startN(t, o, 10)
	waitTerminal(t, o, ids, 30*time.Second)
	waitFor(t, 10*time.Second, "all duplicate replies seen", func() bool { return o.Stats().StaleReplies == 60 })
	if n := len(r.commands()); n != 30 {
		t.Errorf("%d commands sent, want 30 (a duplicate reply must not advance the saga)", n)
	}
	s, _ := o.Get(context.Background(), ids[0])
	if len(s.Entity.Steps) != 3 {
		t.Errorf("steps %v", s.Entity.Steps)
	}
}

func TestMalformedReplyIsDeadLettered(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	o := newOrch(t, brokers, testDomain())
	runOrch(t, o)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics.DeadLetterTopic(o.CallbackTopic())))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: o.CallbackTopic(), Key: []byte("x"), Value: []byte("not msgpack")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ids := startN(t, o, 1)
	waitTerminal(t, o, ids, 30*time.Second)
	fs := cl.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatal(err)
	}
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Value) != "not msgpack" {
		t.Fatalf("dead letters: %v", recs)
	}
	if reason := topics.DeadLetterReason(recs[0]); !strings.Contains(reason, "malformed") {
		t.Errorf("reason %q", reason)
	}
	waitStats(t, o, "the dead letter counted", func(st orchestrator.Stats) bool { return st.DeadLettered >= 1 })
	if o.Stats().DeadLettered != 1 {
		t.Errorf("dead-lettered %d", o.Stats().DeadLettered)
	}
}

func TestRestartResumes(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	// Charges are answered only after the first orchestrator has stopped.
	var mu sync.Mutex
	var held []*topics.Envelope
	r := startResponder(t, brokers, allTopics()[:2], func(cmd *topics.Envelope) *topics.Envelope {
		if cmd.Endpoint == "charge" {
			mu.Lock()
			defer mu.Unlock()
			held = append(held, appendStep(nil)(cmd))
			return nil
		}
		return appendStep(nil)(cmd)
	})
	store := memory.New()
	o1 := newOrch(t, brokers, testDomain(), orchestrator.WithStore(store))
	stop := runOrch(t, o1)
	ids := startN(t, o1, 10)
	waitFor(t, 30*time.Second, "charges in flight", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(held) == len(ids)
	})
	stop()
	mu.Lock()
	for _, rep := range held {
		b, _ := topics.Encode(rep)
		if err := r.cl.ProduceSync(context.Background(), &kgo.Record{Topic: o1.CallbackTopic(), Key: []byte(rep.TxID), Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Unlock()
	o2 := newOrch(t, brokers, testDomain(), orchestrator.WithStore(store))
	runOrch(t, o2)
	for id, st := range waitTerminal(t, o2, ids, 30*time.Second) {
		if st != eventstore.StateCompleted {
			t.Errorf("%s: %s", id, st)
		}
	}
}

func TestRunLeavesNoGoroutines(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	before := runtime.NumGoroutine()
	o := newOrch(t, brokers, testDomain())
	stop := runOrch(t, o)
	stop()
	waitFor(t, 10*time.Second, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= before })
}

func TestNewValidates(t *testing.T) {
	_, err := orchestrator.New("bad name!", orchestrator.Domain[order]{Name: ""}, orchestrator.WithBrokers("x:1"))
	if err == nil {
		t.Fatal("want error")
	}
	for _, want := range []string{"service", "domain name", "OnNext"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	_, err = orchestrator.New(svcA, testDomain(), orchestrator.WithBrokers("x:1"), orchestrator.WithRegion("us-central"))
	if !errors.Is(err, orchestrator.ErrUnknownRegion) {
		t.Errorf("custom region without resolver: %v", err)
	}
	o, err := orchestrator.New(svcA, testDomain(), orchestrator.WithBrokers("x:1"), orchestrator.WithRegion("us-central"),
		orchestrator.WithRegionResolver(orchestrator.RegionMap{"us-central": 42}))
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	o.Close()
}

func TestTxIDCarriesRegion(t *testing.T) {
	seen := map[string]bool{}
	for _, code := range []uint16{1, 42, 4095} {
		id, err := orchestrator.NewTxID(time.Now(), code)
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatal("duplicate id")
		}
		seen[id] = true
		got, err := orchestrator.RegionCodeOf(id)
		if err != nil || got != code {
			t.Errorf("RegionCodeOf(%s) = %d, %v; want %d", id, got, err, code)
		}
	}
	if _, err := orchestrator.NewTxID(time.Now(), 4096); err == nil {
		t.Error("code 4096 accepted")
	}
	if _, err := orchestrator.RegionCodeOf("6ba7b810-9dad-11d1-80b4-00c04fd430c8"); err == nil {
		t.Error("v1 uuid accepted")
	}
}

// Values a compensation puts in the revert hint store reach the later
// compensations of the same saga.
func TestRevertHintsReachLaterCompensations(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	base := appendStep(func(cmd *topics.Envelope) (topics.Outcome, string) {
		if cmd.Endpoint == "ship" && cmd.Kind == topics.KindProcess {
			return topics.OutcomeNonRetryable, "no"
		}
		return topics.OutcomeOK, ""
	})
	r := startResponder(t, brokers, allTopics()[:2], func(cmd *topics.Envelope) *topics.Envelope {
		rep := base(cmd)
		if cmd.Kind == topics.KindRevert && cmd.Endpoint == "charge" {
			rep.Hints = map[string]string{"refund-id": "r-" + cmd.TxID}
		}
		return rep
	})
	o := newOrch(t, brokers, testDomain())
	runOrch(t, o)
	ids := startN(t, o, 3)
	waitTerminal(t, o, ids, 30*time.Second)
	seen := 0
	for _, c := range r.commands() {
		if c.Kind == topics.KindRevert && c.Endpoint == "reserve" {
			if got := c.Hints["refund-id"]; got != "r-"+c.TxID {
				t.Errorf("%s: reserve's compensation saw hints %v", c.TxID, c.Hints)
			}
			seen++
		}
	}
	if seen != 3 {
		t.Fatalf("%d reserve compensations, want 3", seen)
	}
	s, _ := o.Get(context.Background(), ids[0])
	if s.Hints["refund-id"] == "" {
		t.Errorf("saga hints %v not persisted", s.Hints)
	}
}

// stateLog records the states each saga went through, from listener events.
type stateLog struct {
	mu     sync.Mutex
	states map[string][]eventstore.State
}

func (l *stateLog) record(e orchestrator.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.states == nil {
		l.states = make(map[string][]eventstore.State)
	}
	l.states[e.TxID] = append(l.states[e.TxID], e.To)
}

func (l *stateLog) of(txID string) []eventstore.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]eventstore.State(nil), l.states[txID]...)
}
