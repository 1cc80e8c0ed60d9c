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
	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// decisionLog records, per saga, which definition versions' decision
// functions were asked about it.
type decisionLog struct {
	mu sync.Mutex
	m  map[string]map[int]bool
}

func (l *decisionLog) note(txID string, v int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]map[int]bool{}
	}
	if l.m[txID] == nil {
		l.m[txID] = map[int]bool{}
	}
	l.m[txID][v] = true
}

func (l *decisionLog) versions(txID string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var vs []int
	for v := range l.m[txID] {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// versionedDefs are two versions of one domain: v1 runs reserve, charge,
// ship (the domain as it was before versions: OnNext alone); v2 screens
// first and then runs the same three. A saga whose entity ID starts with
// "pause" pauses after its first step (both versions); each version's
// OnNextRevert compensates in reverse as the default does. Every decision
// is logged with the version that made it.
func versionedDefs(log *decisionLog, n versionNames) (v1, v2 orchestrator.Definition[order]) {
	logged := func(v int, f func(context.Context, *orchestrator.Saga[order]) orchestrator.Decision) func(context.Context, *orchestrator.Saga[order]) orchestrator.Decision {
		return func(ctx context.Context, s *orchestrator.Saga[order]) orchestrator.Decision {
			log.note(s.TxID, v)
			return f(ctx, s)
		}
	}
	pausing := func(steps ...orchestrator.Step) func(context.Context, *orchestrator.Saga[order]) orchestrator.Decision {
		seq := orchestrator.Sequence[order](steps...)
		return func(ctx context.Context, s *orchestrator.Saga[order]) orchestrator.Decision {
			if strings.HasPrefix(s.Entity.ID, "pause") && len(s.Completed) == 1 && s.Resume == nil {
				return orchestrator.Pause("approval", 0)
			}
			return seq(ctx, s)
		}
	}
	screen := orchestrator.Step{Service: n.svcB, Endpoint: "screen"}
	steps := []orchestrator.Step{{Service: n.svcA, Endpoint: "reserve"}, {Service: n.svcB, Endpoint: "charge"}, {Service: n.svcA, Endpoint: "ship"}}
	v1 = orchestrator.Definition[order]{Version: 1,
		OnNext:       logged(1, pausing(steps...)),
		OnNextRevert: logged(1, orchestrator.ReverseCompensation[order])}
	v2 = orchestrator.Definition[order]{Version: 2,
		OnNext:       logged(2, pausing(append([]orchestrator.Step{screen}, steps...)...)),
		OnNextRevert: logged(2, orchestrator.ReverseCompensation[order])}
	return v1, v2
}

// TestVersionedDefinitionsAcrossSwitch (issue 40.3): sagas started by an
// orchestrator that knows only version 1 of the domain (the domain as it
// was before versions) are in flight when it is replaced by one that
// registers versions 1 and 2: a step in flight, a PAUSED saga, a
// RETRY_PENDING one. New sagas start with version 2; every saga ends by
// the steps of its own version, completing or compensating (a failure at
// "ship"), through the replies that arrive after the switch, a resume and
// a re-drive, and no decision of a saga is ever asked of another version.
// An orchestrator that registers version 2 alone refuses to run while the
// version 1 sagas are in flight, naming the version and their count.
func TestVersionedDefinitionsAcrossSwitch(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	testVersionSwitch(t, brokers, store, versionNames{orch: svcA, domain: domainName, svcA: svcA, svcB: svcB})
}

// TestVersionedDefinitionsAcrossSwitchReal is
// TestVersionedDefinitionsAcrossSwitch on real Kafka, on each store (the
// Cassandra store keeps the version in its definition_version column).
func TestVersionedDefinitionsAcrossSwitchReal(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		brokers := testenv.KafkaBrokers(t)
		u := testenv.UniqueName(t, "ver")
		n := versionNames{orch: "orch-" + u, domain: "order-" + u, svcA: "stock-" + u, svcB: "pay-" + u}
		ensureTopics(t, brokers, n.topics()...)
		store := newStore(t, kind)
		t.Cleanup(func() { _ = store.Close() })
		testVersionSwitch(t, brokers, store, n)
	})
}

// versionNames are the names of a version switch test: the orchestrator's
// service, the domain and the two workers' services.
type versionNames struct{ orch, domain, svcA, svcB string }

func (n versionNames) topics() []string {
	return []string{topics.CommandTopic(n.svcA), topics.CommandTopic(n.svcB),
		topics.CallbackTopic(n.domain), topics.DeadLetterTopic(topics.CallbackTopic(n.domain))}
}

func testVersionSwitch(t *testing.T, brokers []string, store eventstore.Store, n versionNames) {
	var log decisionLog
	v1, v2 := versionedDefs(&log, n)
	newOrch := func(t *testing.T, brokers []string, d orchestrator.Domain[order], opts ...orchestrator.Option) *orchestrator.Orchestrator[order] {
		t.Helper()
		o, err := orchestrator.New(n.orch, d, append([]orchestrator.Option{orchestrator.WithBrokers(brokers...)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	domainName := n.domain

	// The workers: before the switch they hold every "charge" command
	// (the step in flight across it), and fail the first attempt of a
	// "retry" saga's charge retryably; a saga whose ID starts with "fail"
	// fails non-retryably at "ship".
	var mu sync.Mutex
	var held []*topics.Envelope
	switched := false
	work := appendStep(func(cmd *topics.Envelope) (topics.Outcome, string) {
		if cmd.Kind == topics.KindProcess && cmd.Endpoint == "ship" && strings.Contains(string(cmd.Payload), "fail") {
			return topics.OutcomeNonRetryable, "cannot ship"
		}
		return topics.OutcomeOK, ""
	})
	isRetry := func(cmd *topics.Envelope) bool { return strings.Contains(string(cmd.Payload), "retry") }
	startResponder(t, brokers, n.topics()[:2], func(cmd *topics.Envelope) *topics.Envelope {
		mu.Lock()
		defer mu.Unlock()
		if !switched && cmd.Kind == topics.KindProcess && cmd.Endpoint == "charge" {
			if isRetry(cmd) && cmd.Attempt == 1 {
				return reply(cmd, topics.OutcomeRetryable, nil, "card network busy")
			}
			held = append(held, cmd)
			return nil
		}
		return work(cmd)
	})

	// Before: the domain as it was, without versions.
	old := newOrch(t, brokers, orchestrator.Domain[order]{Name: domainName, OnNext: v1.OnNext, OnNextRevert: v1.OnNextRevert},
		orchestrator.WithStore(store))
	stopOld := runOrch(t, old)
	ctx := context.Background()
	var before []string
	for _, id := range []string{"ok-1", "ok-2", "fail-1", "fail-2", "pause-ok", "pause-fail", "retry-ok"} {
		txID, err := old.Start(ctx, order{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, txID)
	}
	// Wait for the switch point: the charges of ok-* and fail-* held, the
	// pause-* sagas PAUSED, retry-ok RETRY_PENDING (or, re-driven by its
	// in-process timer, its second charge held).
	waitFor(t, 30*time.Second, "the sagas in flight at the switch", func() bool {
		mu.Lock()
		n := len(held)
		mu.Unlock()
		paused := 0
		for _, id := range before[4:6] {
			if s, err := old.Get(ctx, id); err == nil && s.State == eventstore.StatePaused {
				paused++
			}
		}
		return n >= 4 && paused == 2
	})
	waitFor(t, 30*time.Second, "retry-ok parked or re-driven", func() bool {
		s, err := old.Get(ctx, before[6])
		return err == nil && (s.State == eventstore.StateRetryPending || s.Attempt > 1)
	})
	stopOld()
	for _, id := range before {
		s, err := old.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Version != 1 || s.State.Terminal() {
			t.Fatalf("%s before the switch: version %d state %s, want 1 and in flight", id, s.Version, s.State)
		}
	}

	// Removing version 1 now is refused, naming it and its sagas.
	only2, err := orchestrator.New(n.orch, orchestrator.Domain[order]{Name: domainName, Versions: []orchestrator.Definition[order]{v2}},
		orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	err = only2.Run(ctx)
	var vf *orchestrator.VersionInFlightError
	if !errors.As(err, &vf) || !errors.Is(err, orchestrator.ErrVersionInFlight) || vf.InFlight[1] != len(before) || len(vf.InFlight) != 1 {
		t.Fatalf("Run with version 1 removed: %v, want a VersionInFlightError with %d sagas of version 1", err, len(before))
	}
	if msg := err.Error(); !strings.Contains(msg, "version 1 has 7 saga(s) in flight") {
		t.Errorf("error %q does not name the version and the count", msg)
	}

	// The switch: versions 1 and 2, new sagas start with 2.
	o := newOrch(t, brokers, orchestrator.Domain[order]{Name: domainName, Versions: []orchestrator.Definition[order]{v2, v1}},
		orchestrator.WithStore(store))
	if o.StartVersion() != 2 || !slices.Equal(o.Versions(), []int{1, 2}) {
		t.Fatalf("start version %d, versions %v; want 2, [1 2]", o.StartVersion(), o.Versions())
	}
	runOrch(t, o)
	var after []string
	for _, id := range []string{"ok-3", "fail-3", "pause-ok-2"} {
		txID, err := o.Start(ctx, order{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		after = append(after, txID)
	}
	mu.Lock()
	switched = true
	release := held
	held = nil
	mu.Unlock()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, cmd := range release {
		b, _ := topics.Encode(work(cmd))
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: cmd.ReplyTo, Key: []byte(cmd.TxID), Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range before[4:6] {
		if _, err := o.Resume(ctx, id, topics.IdempotencyKey(id, 0, topics.KindProcess), nil); err != nil {
			t.Fatalf("resume %s: %v", id, err)
		}
	}
	if err := o.Redrive(ctx, before[6]); err != nil && !errors.Is(err, orchestrator.ErrNotRetryPending) {
		t.Fatalf("redrive: %v", err)
	}
	waitFor(t, 30*time.Second, "the new pause-ok-2 to pause", func() bool {
		s, err := o.Get(ctx, after[2])
		return err == nil && s.State == eventstore.StatePaused
	})
	if _, err := o.Resume(ctx, after[2], topics.IdempotencyKey(after[2], 0, topics.KindProcess), nil); err != nil {
		t.Fatal(err)
	}

	v1Steps := []string{"process:reserve", "process:charge", "process:ship"}
	v1Comp := []string{"process:reserve", "process:charge", "revert:charge", "revert:reserve"}
	v2Steps := []string{"process:screen", "process:reserve", "process:charge", "process:ship"}
	v2Comp := []string{"process:screen", "process:reserve", "process:charge", "revert:charge", "revert:reserve", "revert:screen"}
	want := map[string]struct {
		version int
		state   eventstore.State
		steps   []string
	}{
		before[0]: {1, eventstore.StateCompleted, v1Steps},
		before[1]: {1, eventstore.StateCompleted, v1Steps},
		before[2]: {1, eventstore.StateCompensated, v1Comp},
		before[3]: {1, eventstore.StateCompensated, v1Comp},
		before[4]: {1, eventstore.StateCompleted, v1Steps},
		before[5]: {1, eventstore.StateCompensated, v1Comp},
		before[6]: {1, eventstore.StateCompleted, v1Steps},
		after[0]:  {2, eventstore.StateCompleted, v2Steps},
		after[1]:  {2, eventstore.StateCompensated, v2Comp},
		after[2]:  {2, eventstore.StateCompleted, v2Steps},
	}
	ids := append(slices.Clone(before), after...)
	waitTerminal(t, o, ids, 120*time.Second)
	for _, id := range ids {
		s, err := o.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		w := want[id]
		if s.Version != w.version || s.State != w.state || !slices.Equal(s.Entity.Steps, w.steps) {
			t.Errorf("%s (%s): version %d, %s, steps %v; want version %d, %s, steps %v", id, s.Entity.ID, s.Version, s.State, s.Entity.Steps, w.version, w.state, w.steps)
		}
		if got := log.versions(id); !slices.Equal(got, []int{w.version}) {
			t.Errorf("%s (%s): decided by versions %v, want only %d", id, s.Entity.ID, got, w.version)
		}
		tx, err := store.LoadTransaction(ctx, o.Scope(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tx.Definition != w.version {
			t.Errorf("%s: stored definition %d, want %d", id, tx.Definition, w.version)
		}
	}
	if n, err := o.InFlight(ctx); err != nil || len(n) != 0 {
		t.Errorf("InFlight after every saga ended: %v, %v; want none", n, err)
	}
	if st := o.Stats(); st.UnknownVersion != 0 {
		t.Errorf("UnknownVersion %d, want 0", st.UnknownVersion)
	}
}

// TestVersionOptions: New refuses definitions it could not drive by, and
// WithStartVersion picks the version new sagas start with.
func TestVersionOptions(t *testing.T) {
	closedBroker := testenv.ClosedAddr(t)
	noop := func(context.Context, *orchestrator.Saga[order]) orchestrator.Decision { return orchestrator.Complete() }
	for name, c := range map[string]struct {
		d    orchestrator.Domain[order]
		opts []orchestrator.Option
		want string
	}{
		"both":      {orchestrator.Domain[order]{Name: domainName, OnNext: noop, Versions: []orchestrator.Definition[order]{{Version: 1, OnNext: noop}}}, nil, "both OnNext"},
		"zero":      {orchestrator.Domain[order]{Name: domainName, Versions: []orchestrator.Definition[order]{{Version: 0, OnNext: noop}}}, nil, "version 0"},
		"twice":     {orchestrator.Domain[order]{Name: domainName, Versions: []orchestrator.Definition[order]{{Version: 2, OnNext: noop}, {Version: 2, OnNext: noop}}}, nil, "registered twice"},
		"no OnNext": {orchestrator.Domain[order]{Name: domainName, Versions: []orchestrator.Definition[order]{{Version: 3}}}, nil, "version 3: OnNext is nil"},
		"start":     {orchestrator.Domain[order]{Name: domainName, Versions: []orchestrator.Definition[order]{{Version: 1, OnNext: noop}}}, []orchestrator.Option{orchestrator.WithStartVersion(2)}, "WithStartVersion(2)"},
	} {
		_, err := orchestrator.New(svcA, c.d, append([]orchestrator.Option{orchestrator.WithBrokers(closedBroker)}, c.opts...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New: %v, want an error containing %q", name, err, c.want)
		}
	}
	o, err := orchestrator.New(svcA, orchestrator.Domain[order]{Name: domainName, Versions: []orchestrator.Definition[order]{{Version: 1, OnNext: noop}, {Version: 4, OnNext: noop}}},
		orchestrator.WithBrokers(closedBroker), orchestrator.WithStartVersion(1))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.StartVersion() != 1 || !slices.Equal(o.Versions(), []int{1, 4}) {
		t.Fatalf("start version %d, versions %v; want 1, [1 4]", o.StartVersion(), o.Versions())
	}
}

// TestVersionDecodeEntity: a version's DecodeEntity migrates the stored
// entity of its sagas (an older layout) into today's type for Get and the
// decisions; the sagas of other versions decode as usual.
func TestVersionDecodeEntity(t *testing.T) {
	type orderV1 struct{ Ref string } // the entity as version 1 wrote it
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	noop := func(context.Context, *orchestrator.Saga[order]) orchestrator.Decision { return orchestrator.Complete() }
	o, err := orchestrator.New(svcA, orchestrator.Domain[order]{Name: domainName, Versions: []orchestrator.Definition[order]{
		{Version: 1, OnNext: noop, DecodeEntity: func(b []byte, into *order) error {
			var old orderV1
			if err := msgpack.Unmarshal(b, &old); err != nil {
				return err
			}
			*into = order{ID: "v1:" + old.Ref}
			return nil
		}},
		{Version: 2, OnNext: noop},
	}}, orchestrator.WithBrokers(testenv.ClosedAddr(t)), orchestrator.WithStore(store), orchestrator.WithoutRecovery())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx := context.Background()
	now := time.Now()
	for _, c := range []struct {
		id      string
		def     int
		entity  any
		wantID  string
		wantVer int
	}{
		{"tx-v1", 1, orderV1{Ref: "A-1"}, "v1:A-1", 1},
		{"tx-v0", 0, orderV1{Ref: "A-0"}, "v1:A-0", 1}, // written before versions: version 1
		{"tx-v2", 2, order{ID: "B-2"}, "B-2", 2},
	} {
		b, err := msgpack.Marshal(c.entity)
		if err != nil {
			t.Fatal(err)
		}
		tx := eventstore.Transaction{Scope: o.Scope(), TxID: c.id, Domain: domainName, State: eventstore.StateInProgress, Version: 1,
			Definition: c.def, Payload: b, CreatedAt: now, UpdatedAt: now}
		if err := store.CreateTransaction(ctx, tx, nil); err != nil {
			t.Fatal(err)
		}
		s, err := o.Get(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Entity.ID != c.wantID || s.Version != c.wantVer {
			t.Errorf("%s: entity %+v version %d, want ID %q version %d", c.id, s.Entity, s.Version, c.wantID, c.wantVer)
		}
	}
}

// TestUnknownVersionLeftAlone: during a rolling deploy an instance that
// registers only version 1 gets the reply of a saga a newer instance
// started with version 2: it leaves the saga as it is (it would drive it
// by another version's steps) and counts it.
func TestUnknownVersionLeftAlone(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	var log decisionLog
	v1, v2 := versionedDefs(&log, versionNames{orch: svcA, domain: domainName, svcA: svcA, svcB: svcB})
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	old := newOrch(t, brokers, orchestrator.Domain[order]{Name: domainName, Versions: []orchestrator.Definition[order]{v1}}, orchestrator.WithStore(store))
	runOrch(t, old)
	// The newer instance only starts sagas (it has not reached Run): the
	// replies go to the old one.
	newer := newOrch(t, brokers, orchestrator.Domain[order]{Name: domainName, Versions: []orchestrator.Definition[order]{v1, v2}}, orchestrator.WithStore(store))
	t.Cleanup(func() { _ = newer.Close() })
	ctx := context.Background()
	id, err := newer.Start(ctx, order{ID: "new"})
	if err != nil {
		t.Fatal(err)
	}
	waitStats(t, old, "the version 2 reply left alone", func(st orchestrator.Stats) bool { return st.UnknownVersion == 1 })
	s, err := old.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != 2 || s.State != eventstore.StateStarted || s.Span != 0 || len(s.Completed) != 0 {
		t.Fatalf("saga after its reply reached an instance without its version: version %d %s span %d completed %v; want version 2 STARTED at span 0, nothing completed",
			s.Version, s.State, s.Span, s.Completed)
	}
	if got := log.versions(id); !slices.Equal(got, []int{2}) {
		t.Fatalf("decided by versions %v, want only 2 (its start)", got)
	}
	if st := old.Stats(); st.Replies != 0 {
		t.Fatalf("old instance applied %d replies, want 0", st.Replies)
	}
}
