package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// keyStore is a memory store that counts the claims of business keys and
// the reads of saga states, and fails the creates while failCreate holds an
// error.
type keyStore struct {
	*memory.Store
	claims, stateReads atomic.Int64
	failCreate         atomic.Pointer[error]
}

func newKeyStore(clock func() time.Time) *keyStore {
	return &keyStore{Store: memory.New(memory.WithClock(clock))}
}

func (s *keyStore) InsertBusinessKey(ctx context.Context, k eventstore.BusinessKey, ttl time.Duration) (bool, eventstore.BusinessKey, error) {
	s.claims.Add(1)
	return s.Store.InsertBusinessKey(ctx, k, ttl)
}

func (s *keyStore) TransactionState(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.State, error) {
	s.stateReads.Add(1)
	return s.Store.TransactionState(ctx, scope, txID)
}

func (s *keyStore) CreateTransaction(ctx context.Context, tx eventstore.Transaction, first *eventstore.Tryout) error {
	if err := s.failCreate.Load(); err != nil {
		return *err
	}
	return s.Store.CreateTransaction(ctx, tx, first)
}

func (s *keyStore) CreateTransactionWatched(ctx context.Context, tx eventstore.Transaction, first *eventstore.Tryout, dog eventstore.RecoveryEntry) error {
	if err := s.failCreate.Load(); err != nil {
		return *err
	}
	return s.Store.CreateTransactionWatched(ctx, tx, first, dog)
}

// keyTestOrch is an orchestrator of the test domain on brokers and store,
// on clock.
func keyTestOrch(t *testing.T, brokers []string, store eventstore.Store, clock *fakeClock, opts ...orchestrator.Option) *orchestrator.Orchestrator[order] {
	t.Helper()
	o := newOrch(t, brokers, testDomain(), append([]orchestrator.Option{orchestrator.WithStore(store), orchestrator.WithClock(clock.now)}, opts...)...)
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// existsOf returns the *ExistsError in err, or fails.
func existsOf(t *testing.T, err error) *orchestrator.ExistsError {
	t.Helper()
	var e *orchestrator.ExistsError
	if !errors.Is(err, orchestrator.ErrExists) || !errors.As(err, &e) || !errors.Is(err, eventstore.ErrExists) {
		t.Fatalf("error %v: want an *ExistsError matching ErrExists and eventstore.ErrExists", err)
	}
	return e
}

// firstSteps counts the commands of txID's first step (span 0, forward).
func firstSteps(r *responder, txID string) int {
	n := 0
	for _, c := range r.commands() {
		if c.TxID == txID && c.Span == 0 && c.Kind == topics.KindProcess {
			n++
		}
	}
	return n
}

// waitDone waits (Wait) for txID to end on o and returns it.
func waitDone(t *testing.T, o *orchestrator.Orchestrator[order], txID string) *orchestrator.Saga[order] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := o.Wait(ctx, txID)
	if err != nil {
		t.Fatalf("Wait %s: %v", txID, err)
	}
	return s
}

// A second Start with the same key, on the same or another instance, gets
// the first saga's id and an ExistsError; the saga runs once, with the
// first Start's entity. Another key is another saga.
func TestBusinessKeySecondStartGetsTheFirstSaga(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	resp := startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	clock := newFakeClock()
	store := newKeyStore(clock.now)
	o1 := keyTestOrch(t, brokers, store, clock)
	o2 := keyTestOrch(t, brokers, store, clock)
	runOrch(t, o1)
	ctx := t.Context()

	id, err := o1.Start(ctx, order{ID: "first"}, orchestrator.WithBusinessKey("order-42"))
	if err != nil || id == "" {
		t.Fatalf("first Start: %q, %v", id, err)
	}
	for i, o := range []*orchestrator.Orchestrator[order]{o1, o2, o1} {
		again, err := o.Start(ctx, order{ID: fmt.Sprint("duplicate-", i)}, orchestrator.WithBusinessKey("order-42"))
		if e := existsOf(t, err); again != id || e.TxID != id || e.Key != "order-42" || e.TookOver {
			t.Fatalf("duplicate %d: %q, %+v; want the first saga %s", i, again, e, id)
		}
	}
	s := waitDone(t, o1, id)
	if s.State != eventstore.StateCompleted || s.Entity.ID != "first" || len(s.Entity.Steps) != 3 {
		t.Fatalf("saga %+v: want the first Start's order, completed", s)
	}
	if n := firstSteps(resp, id); n != 1 {
		t.Errorf("first step sent %d times, want once", n)
	}
	if st1, st2 := o1.Stats(), o2.Stats(); st1.Started != 1 || st2.Started != 0 {
		t.Errorf("started %d and %d sagas, want 1 and 0", st1.Started, st2.Started)
	}
	other, err := o2.Start(ctx, order{ID: "other"}, orchestrator.WithBusinessKey("order-43"))
	if err != nil || other == id {
		t.Fatalf("Start with another key: %q, %v", other, err)
	}
	// The same key in another domain is another saga.
	d := testDomain()
	d.Name = "test-refund"
	ensureTopics(t, brokers, topics.CallbackTopic(d.Name))
	o3 := newOrch(t, brokers, d, orchestrator.WithStore(store), orchestrator.WithClock(clock.now))
	defer o3.Close()
	if refund, err := o3.Start(ctx, order{ID: "refund"}, orchestrator.WithBusinessKey("order-42")); err != nil || refund == id {
		t.Fatalf("Start of another domain with the key: %q, %v", refund, err)
	}
}

// Starts racing with one key on two instances: one saga, one Start that
// started it, every other one told its id.
func TestBusinessKeyRacingStartsMakeOneSaga(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	resp := startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	clock := newFakeClock()
	store := newKeyStore(clock.now)
	o1 := keyTestOrch(t, brokers, store, clock)
	o2 := keyTestOrch(t, brokers, store, clock)
	runOrch(t, o1)
	ids, errs := raceStarts(t, []*orchestrator.Orchestrator[order]{o1, o2}, 16, "race-1")
	id := checkOneSaga(t, ids, errs)
	if s := waitDone(t, o1, id); s.State != eventstore.StateCompleted {
		t.Fatalf("saga %s: %s", id, s.State)
	}
	if n := firstSteps(resp, id); n != 1 {
		t.Errorf("first step sent %d times, want once", n)
	}
}

// raceStarts runs per Starts with key on each of os at once.
func raceStarts(t *testing.T, os []*orchestrator.Orchestrator[order], per int, key string) ([]string, []error) {
	t.Helper()
	n := per * len(os)
	ids, errs := make([]string, n), make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ids[i], errs[i] = os[i%len(os)].Start(context.Background(), order{ID: fmt.Sprint("racer-", i)}, orchestrator.WithBusinessKey(key))
		})
	}
	close(start)
	wg.Wait()
	return ids, errs
}

// checkOneSaga checks the results of raceStarts: every id the same, one nil
// error, ExistsError for the others. It returns the id.
func checkOneSaga(t *testing.T, ids []string, errs []error) string {
	t.Helper()
	started := 0
	for i, err := range errs {
		switch {
		case err == nil:
			started++
		case !errors.Is(err, orchestrator.ErrExists):
			t.Fatalf("Start %d: %v", i, err)
		}
		if ids[i] != ids[0] || ids[i] == "" {
			t.Fatalf("Start %d returned %q, Start 0 %q: want one saga", i, ids[i], ids[0])
		}
	}
	if started != 1 {
		t.Fatalf("%d Starts started the saga, want 1", started)
	}
	return ids[0]
}

// A Start that died between claiming its key and creating the saga
// (FaultAfterClaim): a later Start with the key waits for the saga during
// the grace period, then creates it itself, under the first id, from the
// first Start's order, fenced against a late create of the dead one.
func TestBusinessKeyClaimWithoutSagaIsTakenOver(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	resp := startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	clock := newFakeClock()
	store := newKeyStore(clock.now)
	dead := keyTestOrch(t, brokers, store, clock, orchestrator.WithFaultInjection(func(p orchestrator.FaultPoint, _ string) bool {
		return p == orchestrator.FaultAfterClaim
	}))
	o := keyTestOrch(t, brokers, store, clock)
	runOrch(t, o)
	ctx := t.Context()
	id, err := dead.Start(ctx, order{ID: "first"}, orchestrator.WithBusinessKey("order-7"))
	if err != nil || id == "" {
		t.Fatalf("Start abandoned after its claim: %q, %v", id, err)
	}
	if _, err := o.Get(ctx, id); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Fatalf("the abandoned Start's saga: %v, want none", err)
	}
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		id, err := o.Start(ctx, order{ID: "second"}, orchestrator.WithBusinessKey("order-7"))
		done <- result{id, err}
	}()
	// Within the grace period the claimer may still create the saga: the
	// duplicate looks again (claims counts the abandoned claim and two
	// looks) and does not return.
	waitFor(t, 30*time.Second, "the duplicate to look for the saga twice", func() bool { return store.claims.Load() >= 3 })
	select {
	case r := <-done:
		t.Fatalf("the duplicate returned %q, %v within the grace period", r.id, r.err)
	default:
	}
	clock.advance(orchestrator.DefaultBusinessKeyGrace)
	r := <-done
	if e := existsOf(t, r.err); r.id != id || e.TxID != id || !e.TookOver {
		t.Fatalf("Start after the grace period: %q, %+v; want the first id %s, taken over", r.id, e, id)
	}
	s := waitDone(t, o, id)
	if s.State != eventstore.StateCompleted || s.Entity.ID != "first" {
		t.Fatalf("saga %+v: want the first Start's order, completed", s)
	}
	row, err := store.LoadTransaction(ctx, o.Scope(), id)
	if err != nil || row.Fence != 1 || !row.LifetimeStart.After(row.CreatedAt) {
		t.Fatalf("saga row fence %d, lifetime from %v, created %v (%v): want fence 1, the lifetime from the takeover", row.Fence, row.LifetimeStart, row.CreatedAt, err)
	}
	if n := firstSteps(resp, id); n != 1 {
		t.Errorf("first step sent %d times, want once", n)
	}
	// Later Starts find the saga.
	if again, err := dead.Start(ctx, order{ID: "third"}, orchestrator.WithBusinessKey("order-7")); again != id || existsOf(t, err).TookOver {
		t.Fatalf("Start after the takeover: %q, %v", again, err)
	}
}

// A Start that died after creating its saga (FaultAfterCreate): a later
// Start with the key returns its id at once, and Restore completes it.
func TestBusinessKeyCrashAfterCreate(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	clock := newFakeClock()
	store := newKeyStore(clock.now)
	dead := keyTestOrch(t, brokers, store, clock, orchestrator.WithFaultInjection(func(p orchestrator.FaultPoint, _ string) bool {
		return p == orchestrator.FaultAfterCreate
	}))
	o := keyTestOrch(t, brokers, store, clock)
	runOrch(t, o)
	ctx := t.Context()
	id, err := dead.Start(ctx, order{ID: "first"}, orchestrator.WithBusinessKey("order-8"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := o.Start(ctx, order{ID: "second"}, orchestrator.WithBusinessKey("order-8"))
	if e := existsOf(t, err); again != id || e.TookOver {
		t.Fatalf("Start after the crash: %q, %+v; want %s", again, e, id)
	}
	if err := o.Restore(ctx, id); err != nil {
		t.Fatal(err)
	}
	if s := waitDone(t, o, id); s.State != eventstore.StateCompleted || s.Entity.ID != "first" {
		t.Fatalf("saga %+v", s)
	}
}

// gate is a FaultAfterClaim hook that holds the Start at that point until
// released: a slow claimer.
type gate struct {
	reached chan string
	release chan struct{}
}

func newGate() *gate { return &gate{reached: make(chan string, 1), release: make(chan struct{})} }

func (g *gate) hook(p orchestrator.FaultPoint, txID string) bool {
	if p == orchestrator.FaultAfterClaim {
		g.reached <- txID
		<-g.release
	}
	return false
}

type startResult struct {
	id  string
	err error
}

func startAsync(o *orchestrator.Orchestrator[order], ID, key string) chan startResult {
	c := make(chan startResult, 1)
	go func() {
		id, err := o.Start(context.Background(), order{ID: ID}, orchestrator.WithBusinessKey(key))
		c <- startResult{id, err}
	}()
	return c
}

// A claimer slower than the grace period is taken over. If the taker
// creates the saga first, the slow one's create fails (the memory store
// detects the taken id; Cassandra discards it by the fence) and it sends
// nothing; if the slow one creates it between the taker's read and create,
// it confirms its claim, has lost it and sends nothing, and the taker sends
// the step. Either way the first step goes out once and the saga completes
// once. A slow claimer nobody took over confirms its claim and goes on.
func TestBusinessKeySlowClaimer(t *testing.T) {
	setup := func(t *testing.T) (*responder, *fakeClock, *keyStore, []string) {
		brokers := newCluster(t)
		ensureTopics(t, brokers, allTopics()...)
		resp := startResponder(t, brokers, allTopics()[:2], appendStep(nil))
		clock := newFakeClock()
		return resp, clock, newKeyStore(clock.now), brokers
	}
	t.Run("taker creates first", func(t *testing.T) {
		resp, clock, store, brokers := setup(t)
		g := newGate()
		slow := keyTestOrch(t, brokers, store, clock, orchestrator.WithFaultInjection(g.hook))
		o := keyTestOrch(t, brokers, store, clock)
		runOrch(t, o)
		first := startAsync(slow, "first", "order-s1")
		id := <-g.reached
		clock.advance(orchestrator.DefaultBusinessKeyGrace)
		taker, err := o.Start(t.Context(), order{ID: "second"}, orchestrator.WithBusinessKey("order-s1"))
		if e := existsOf(t, err); taker != id || !e.TookOver {
			t.Fatalf("taker: %q, %+v; want %s taken over", taker, e, id)
		}
		close(g.release)
		r := <-first
		if e := existsOf(t, r.err); r.id != id || e.TookOver {
			t.Fatalf("slow claimer: %q, %+v; want told that the saga exists", r.id, e)
		}
		if s := waitDone(t, o, id); s.State != eventstore.StateCompleted || s.Entity.ID != "first" {
			t.Fatalf("saga %+v", s)
		}
		if n := firstSteps(resp, id); n != 1 {
			t.Errorf("first step sent %d times, want once", n)
		}
	})
	t.Run("slow claimer creates between the taker's read and create", func(t *testing.T) {
		resp, clock, store, brokers := setup(t)
		g1, g2 := newGate(), newGate()
		slow := keyTestOrch(t, brokers, store, clock, orchestrator.WithFaultInjection(g1.hook))
		o := keyTestOrch(t, brokers, store, clock, orchestrator.WithFaultInjection(g2.hook))
		runOrch(t, o)
		first := startAsync(slow, "first", "order-s2")
		id := <-g1.reached
		clock.advance(orchestrator.DefaultBusinessKeyGrace)
		second := startAsync(o, "second", "order-s2")
		if got := <-g2.reached; got != id {
			t.Fatalf("the taker creates %s, want %s", got, id)
		}
		close(g1.release)
		r := <-first
		if e := existsOf(t, r.err); r.id != id || e.TookOver {
			t.Fatalf("slow claimer: %q, %+v; want told that the saga exists", r.id, e)
		}
		close(g2.release)
		r = <-second
		if e := existsOf(t, r.err); r.id != id {
			t.Fatalf("taker: %q, %+v", r.id, e)
		}
		if s := waitDone(t, o, id); s.State != eventstore.StateCompleted || s.Entity.ID != "first" {
			t.Fatalf("saga %+v", s)
		}
		if n := firstSteps(resp, id); n != 1 {
			t.Errorf("first step sent %d times, want once", n)
		}
	})
	t.Run("not taken over", func(t *testing.T) {
		resp, clock, store, brokers := setup(t)
		g := newGate()
		slow := keyTestOrch(t, brokers, store, clock, orchestrator.WithFaultInjection(g.hook))
		runOrch(t, slow)
		first := startAsync(slow, "first", "order-s3")
		id := <-g.reached
		clock.advance(orchestrator.DefaultBusinessKeyGrace)
		close(g.release)
		if r := <-first; r.err != nil || r.id != id {
			t.Fatalf("slow claimer: %q, %v; want its saga started", r.id, r.err)
		}
		if s := waitDone(t, slow, id); s.State != eventstore.StateCompleted {
			t.Fatalf("saga %+v", s)
		}
		// The claim is settled: the duplicate reads no saga row.
		reads := store.stateReads.Load()
		again, err := slow.Start(t.Context(), order{ID: "again"}, orchestrator.WithBusinessKey("order-s3"))
		if existsOf(t, err); again != id || store.stateReads.Load() != reads {
			t.Fatalf("duplicate of a settled claim: %q, %d reads", again, store.stateReads.Load()-reads)
		}
		if n := firstSteps(resp, id); n != 1 {
			t.Errorf("first step sent %d times, want once", n)
		}
	})
}

// A Start whose saga was not created releases its key: the next Start with
// the key starts its own saga at once. So does one whose create may have
// landed but was marked failed.
func TestBusinessKeyReleasedWhenNotCreated(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	clock := newFakeClock()
	store := newKeyStore(clock.now)
	o := keyTestOrch(t, brokers, store, clock)
	runOrch(t, o)
	ctx := t.Context()
	for _, fail := range []error{
		fmt.Errorf("%w: refused", eventstore.ErrInvalid), // never landed
		errors.New("write timeout"),                      // may have landed: marked failed
	} {
		key := "order-r-" + strings.Fields(fail.Error())[0]
		store.failCreate.Store(&fail)
		id, err := o.Start(ctx, order{ID: "failed"}, orchestrator.WithBusinessKey(key))
		store.failCreate.Store(nil)
		if err == nil || id != "" || errors.Is(err, orchestrator.ErrExists) {
			t.Fatalf("Start whose create failed (%v): %q, %v", fail, id, err)
		}
		id, err = o.Start(ctx, order{ID: "retried"}, orchestrator.WithBusinessKey(key))
		if err != nil {
			t.Fatalf("Start after a failed one (%v): %v; want the key released", fail, err)
		}
		if s := waitDone(t, o, id); s.State != eventstore.StateCompleted || s.Entity.ID != "retried" {
			t.Fatalf("saga %+v", s)
		}
	}
}

// Keys are checked; a store without business keys refuses keyed Starts;
// the settings are checked by New; a Start without a key claims nothing.
func TestBusinessKeyValidation(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	clock := newFakeClock()
	store := newKeyStore(clock.now)
	o := keyTestOrch(t, brokers, store, clock, orchestrator.WithoutRecovery())
	ctx := t.Context()
	for _, key := range []string{"", "has space", "tab\t", "é", strings.Repeat("k", orchestrator.MaxBusinessKeyLen+1)} {
		if _, err := o.Start(ctx, order{}, orchestrator.WithBusinessKey(key)); !errors.Is(err, orchestrator.ErrInvalidBusinessKey) {
			t.Errorf("key %q: %v, want ErrInvalidBusinessKey", key, err)
		}
	}
	if store.claims.Load() != 0 {
		t.Fatalf("invalid keys claimed %d times", store.claims.Load())
	}
	for _, key := range []string{strings.Repeat("k", orchestrator.MaxBusinessKeyLen), "3f2504e0-4f89-11d3-9a0c-0305e82c3301", "order/42:a_b.c~!"} {
		if _, err := o.Start(ctx, order{}, orchestrator.WithBusinessKey(key)); err != nil {
			t.Errorf("key %q: %v", key, err)
		}
	}
	for range 3 {
		if _, err := o.Start(ctx, order{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := store.claims.Load(); n != 3 {
		t.Errorf("%d claims for 3 keyed Starts and 3 without a key", n)
	}
	plain := newOrch(t, brokers, testDomain(), orchestrator.WithStore(struct{ eventstore.Store }{store}), orchestrator.WithoutRecovery())
	defer plain.Close()
	if _, err := plain.Start(ctx, order{}, orchestrator.WithBusinessKey("k")); !errors.Is(err, orchestrator.ErrNoBusinessKeys) {
		t.Errorf("keyed Start on a store without business keys: %v", err)
	}
	for name, opts := range map[string][]orchestrator.Option{
		"grace":     {orchestrator.WithBusinessKeyGrace(500 * time.Millisecond)},
		"retention": {orchestrator.WithBusinessKeyGrace(time.Minute), orchestrator.WithBusinessKeyRetention(90 * time.Second)},
	} {
		if _, err := orchestrator.New(svcA, testDomain(), append(opts, orchestrator.WithBrokers(brokers...))...); err == nil {
			t.Errorf("New with a bad business-key %s: no error", name)
		}
	}
}
