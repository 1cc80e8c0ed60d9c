package orchestrator_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// twoInstances runs two orchestrators of the test domain, a and b, on one
// memory store, consuming the callback topic as one group of type gt, and
// starts sagas on a one at a time until b has applied a reply of at least
// one of them. It returns the sagas, all COMPLETED, and b's stop.
func twoInstances(t *testing.T, brokers []string, gt topics.GroupType) (a, b *orchestrator.Orchestrator[order], ids []string, stopB func()) {
	t.Helper()
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	opts := []orchestrator.Option{orchestrator.WithStore(store), orchestrator.WithoutRecovery(), orchestrator.WithGroupType(gt)}
	a = newOrch(t, brokers, testDomain(), opts...)
	b = newOrch(t, brokers, testDomain(), opts...)
	runOrch(t, a)
	stopB = runOrch(t, b)
	deadline := time.Now().Add(time.Minute)
	for b.Stats().Replies == 0 || len(ids) < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("after %d sagas started on a, b has applied no reply (stats a %+v, b %+v)", len(ids), a.Stats(), b.Stats())
		}
		id, err := a.Start(context.Background(), order{ID: "o"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		expectAll(t, waitTerminal(t, a, []string{id}, 30*time.Second), eventstore.StateCompleted)
	}
	waitStats(t, a, "every saga counted completed by a or b", func(st orchestrator.Stats) bool {
		return st.Completed+b.Stats().Completed == int64(len(ids))
	})
	return a, b, ids, stopB
}

// A saga started on one instance and run by another (which owns its
// callback partition) ends; the starting instance then takes the
// partition over, and a duplicate of the saga's first reply reaches it. It
// must find the reply stale: re-publishing the saga's remaining commands
// from a state it cached at Start, and counting a second completion,
// would replay a finished saga.
func TestDuplicateReplyOnNewOwnerDoesNotReplayEndedSaga(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	resp := startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	a, _, ids, stopB := twoInstances(t, brokers, topics.GroupConsumer)
	stopB() // a owns every callback partition from now on
	base := a.Stats()

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var dups []*kgo.Record
	for _, cmd := range resp.commands() {
		if cmd.Span == 0 && cmd.Kind == topics.KindProcess {
			b, err := topics.Encode(reply(cmd, topics.OutcomeOK, nil, ""))
			if err != nil {
				t.Fatal(err)
			}
			dups = append(dups, &kgo.Record{Topic: topics.CallbackTopic(domainName), Key: []byte(cmd.TxID), Value: b})
		}
	}
	if len(dups) != len(ids) {
		t.Fatalf("%d first commands for %d sagas", len(dups), len(ids))
	}
	if err := cl.ProduceSync(context.Background(), dups...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	n := int64(len(dups))
	waitStats(t, a, "the duplicates handled", func(st orchestrator.Stats) bool {
		return st.Replies+st.StaleReplies >= base.Replies+base.StaleReplies+n
	})
	if st := a.Stats(); st.StaleReplies != base.StaleReplies+n || st.Commands != base.Commands || st.Completed != base.Completed {
		t.Fatalf("after %d duplicate first replies: stats %+v, before %+v; want every duplicate stale, no command re-published, no second completion", n, st, base)
	}
}

// Sagas started on one instance and run by another leave nothing in
// either instance's state cache once they end, in both group types.
func TestEndedSagasLeaveNothingCachedOnAnyInstance(t *testing.T) {
	for _, gt := range []topics.GroupType{topics.GroupConsumer, topics.GroupShare} {
		t.Run(string(gt), func(t *testing.T) {
			brokers := newCluster(t)
			ensureTopics(t, brokers, allTopics()...)
			startResponder(t, brokers, allTopics()[:2], appendStep(nil))
			a, b, ids, _ := twoInstances(t, brokers, gt)
			if na, nb := orchestrator.CachedSagas(a), orchestrator.CachedSagas(b); na != 0 || nb != 0 {
				t.Fatalf("%d sagas ended; the instance that started them caches %d, the other %d", len(ids), na, nb)
			}
		})
	}
}

// countingLoads is a store that counts its saga reads.
type countingLoads struct {
	eventstore.Store
	loads atomic.Int64
}

func (s *countingLoads) LoadTransaction(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.Transaction, error) {
	s.loads.Add(1)
	return s.Store.LoadTransaction(ctx, scope, txID)
}

// An instance that owns every callback partition applies each reply from
// its cache, reading no saga row, once its partitions are known (a saga
// started before that costs one read, at its first reply: its partition
// may have been another instance's, which may have run it on); an
// instance whose replies come on other partitions than Kafka's default
// partitioner gives (here: round robin) reads every one and still
// completes its sagas.
func TestStateCacheSavesEveryReadOnlyWherePartitionsAreKnown(t *testing.T) {
	const n = 20
	for _, c := range []struct {
		name string
		opts []kgo.Opt
		// wantLoads judges the reads of the sagas started before the
		// first assignment is surely in (early) and after (late).
		wantLoads func(early, late int64) bool
	}{
		{"default-partitioner", nil, func(early, late int64) bool { return early <= n && late == 0 }},
		{"round-robin", []kgo.Opt{kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}, func(early, late int64) bool { return late > 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			brokers := newCluster(t)
			ensureTopics(t, brokers, allTopics()...)
			startResponderWith(t, brokers, allTopics()[:2], appendStep(nil), c.opts...)
			store := &countingLoads{Store: memory.New()}
			defer store.Close()
			o := newOrch(t, brokers, testDomain(), orchestrator.WithStore(store), orchestrator.WithoutRecovery())
			runOrch(t, o)
			// Sagas started before the instance has its partitions, then
			// (their replies came, so it has them) sagas started after.
			var loads [2]int64
			for round := range int64(2) {
				for range n {
					if _, err := o.Start(context.Background(), order{ID: "o"}); err != nil {
						t.Fatal(err)
					}
				}
				waitStats(t, o, "every saga completed", func(st orchestrator.Stats) bool { return st.Completed == (round+1)*n })
				loads[round] = store.loads.Load()
			}
			early, late := loads[0], loads[1]-loads[0]
			if st := o.Stats(); !c.wantLoads(early, late) || orchestrator.CachedSagas(o) != 0 {
				t.Fatalf("%d saga reads for the first %d sagas, %d for the next %d (stats %+v), %d sagas still cached", early, n, late, n, st, orchestrator.CachedSagas(o))
			}
		})
	}
}

// An instance that the group gives no callback partition (more instances
// than partitions) caches nothing of the sagas it starts once its first
// assignment, empty, has come.
func TestInstanceWithoutPartitionsCachesNothing(t *testing.T) {
	brokers := newCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := topics.Ensure(ctx, kadm.NewClient(cl), allTopics(), topics.Provision{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	store := memory.New()
	defer store.Close()
	opts := []orchestrator.Option{orchestrator.WithStore(store), orchestrator.WithoutRecovery()}
	a := newOrch(t, brokers, testDomain(), opts...)
	runOrch(t, a)
	if _, err := a.Start(ctx, order{ID: "first"}); err != nil { // a owns the partition once this completes
		t.Fatal(err)
	}
	waitStats(t, a, "a's first saga", func(st orchestrator.Stats) bool { return st.Completed == 1 })
	b := newOrch(t, brokers, testDomain(), opts...)
	runOrch(t, b)
	const n = 10
	for range n {
		if _, err := b.Start(ctx, order{ID: "o"}); err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, a, "b's sagas completed", func(st orchestrator.Stats) bool { return st.Completed+b.Stats().Completed == n+1 })
	waitFor(t, 30*time.Second, "b to cache nothing", func() bool { return orchestrator.CachedSagas(b) == 0 })
	if st := b.Stats(); st.Replies != 0 {
		t.Fatalf("b, without partitions, applied %d replies", st.Replies)
	}
}

// A saga that outlived its transaction lifetime may have been disabled by
// a retry node elsewhere, without a reply this instance would see: its
// cached state is not trusted then, so a late reply finds it disabled
// (stale) instead of driving the saga on from the cache.
func TestCachedStateOfAnExpiredSagaIsNotTrusted(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	var mu sync.Mutex
	var held *topics.Envelope
	startResponder(t, brokers, allTopics()[:2], func(cmd *topics.Envelope) *topics.Envelope {
		if cmd.Span == 1 {
			mu.Lock()
			defer mu.Unlock()
			held = reply(cmd, topics.OutcomeOK, nil, "") // the reply comes late
			return nil
		}
		return reply(cmd, topics.OutcomeOK, nil, "")
	})
	store := memory.New()
	defer store.Close()
	clock := newFakeClock()
	cfg := recoveryCfg(t)
	cfg.TransactionLifetime = time.Hour
	o := newOrch(t, brokers, testDomain(), orchestrator.WithStore(store), orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg))
	runOrch(t, o)
	ctx := context.Background()
	txID, err := o.Start(ctx, order{ID: "o"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the second command", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return held != nil
	})
	// The first step's reply is applied once the saga is persisted at the
	// second step (the command is published before that): wait for it, or
	// its persist races with the disable below and it is the reply the
	// stats count.
	waitStats(t, o, "the first reply applied", func(st orchestrator.Stats) bool { return st.Replies >= 1 })
	// A retry node elsewhere disables the saga once its lifetime is over.
	clock.advance(2 * time.Hour)
	tx, err := store.LoadTransaction(ctx, o.Scope(), txID)
	if err != nil {
		t.Fatal(err)
	}
	tx.State, tx.Version, tx.UpdatedAt = eventstore.StateDisabled, tx.Version+1, clock.now()
	if err := store.Transition(ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	base := o.Stats()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mu.Lock()
	b, _ := topics.Encode(held)
	mu.Unlock()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.CallbackTopic(domainName), Key: []byte(txID), Value: b}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitStats(t, o, "the late reply handled", func(st orchestrator.Stats) bool {
		return st.Replies+st.StaleReplies > base.Replies+base.StaleReplies
	})
	if st := o.Stats(); st.StaleReplies != base.StaleReplies+1 || st.Commands != base.Commands {
		t.Fatalf("stats %+v, before the late reply %+v: want it stale, no command published", st, base)
	}
	if s, err := o.Get(ctx, txID); err != nil || s.State != eventstore.StateDisabled {
		t.Fatalf("saga %v (%v), want DISABLED", s, err)
	}
}
