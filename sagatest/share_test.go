package sagatest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/sagatest"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Share groups (KIP-932) in the harness: workers and orchestrator on share
// groups, on the in-process broker; every saga ends right, every step runs
// once under STRICT although every command and reply is delivered three
// times and four instances share each command topic's one partition.
func TestShareGroups(t *testing.T) {
	env := sagatest.New(t, sagatest.WithGroupType(topics.GroupShare), sagatest.WorkerInstances(4), sagatest.WithPartitions(1),
		sagatest.WithWriteProtection(writeprotect.Strict), sagatest.DuplicateCommands(2), sagatest.DuplicateReplies(2))
	o := start(env, fixed)
	if o.GroupType() != topics.GroupShare {
		t.Fatalf("orchestrator group type %s", o.GroupType())
	}
	ids, want := run(t, o, 60, 10)
	checkEnd(t, env, o, ids, want, 1)
	env.AssertExactlyOnce()
}

// Acceptance (real Kafka and Cassandra): one partition, four worker
// instances in one share group per service; all four execute steps, every
// saga ends right, and with every command and reply delivered three times
// (duplicates ×2) STRICT runs every step exactly once.
func TestAcceptanceShareWorkers(t *testing.T) {
	n := uniqueNames(t)
	env := realEnv(t, sagatest.WithWriteProtection(writeprotect.Strict), sagatest.WithPartitions(1), sagatest.WorkerInstances(4),
		sagatest.WithWorkerGroupType(n.inventory, topics.GroupShare), sagatest.WithWorkerGroupType(n.payment, topics.GroupShare),
		sagatest.WithWorkerGroupType(n.shipping, topics.GroupShare),
		sagatest.DuplicateCommands(2), sagatest.DuplicateReplies(2))
	began := time.Now()
	o := start(env, n)
	ids, want := run(t, o, 300, 10)
	checkEnd(t, env, o, ids, want, 1)
	if d := env.DuplicateExecutions(); d != 0 {
		t.Errorf("%d duplicate executions under STRICT", d)
	}
	env.AssertExactlyOnce()
	for _, svc := range []string{n.inventory, n.payment, n.shipping} {
		per := env.Service(svc).InstanceExecutions()
		for i, x := range per {
			if x == 0 {
				t.Errorf("%s: instance %d of %d executed no step (%v)", svc, i, len(per), per)
			}
		}
		t.Logf("%s executions per instance: %v", svc, per)
	}
	t.Logf("300 sagas in %v; harness %+v; write protection %+v", time.Since(began).Round(time.Millisecond), env.Stats(), env.WriteProtectionStats())
}

// Acceptance: one saga whose steps are served by share-group workers
// (inventory, shipping) and a consumer-group worker (payment).
func TestAcceptanceShareMixed(t *testing.T) {
	n := uniqueNames(t)
	env := realEnv(t, sagatest.WithWriteProtection(writeprotect.Strict),
		sagatest.WithWorkerGroupType(n.inventory, topics.GroupShare), sagatest.WithWorkerGroupType(n.shipping, topics.GroupShare),
		sagatest.WithWorkerGroupType(n.payment, topics.GroupConsumer), sagatest.DuplicateCommands(1))
	o := start(env, n)
	ids, want := run(t, o, 100, 10)
	checkEnd(t, env, o, ids, want, 1)
	env.AssertExactlyOnce()
}

// Acceptance: the orchestrator domain on a share group with three
// instances (replies of one saga reach any of them, and each is delivered
// twice); 1,000 sagas complete and none is advanced twice: every
// transition is made by exactly one instance (counted by the instances'
// listeners), and each saga's history in the store has exactly one tryout
// row per step (no step applied twice).
func TestAcceptanceShareOrchestrators(t *testing.T) {
	n := uniqueNames(t)
	env := realEnv(t, sagatest.WithWriteProtection(writeprotect.Strict), sagatest.DuplicateReplies(1))
	// The workers and one orchestrator through the harness; two more
	// instances of it join the same share group.
	var mu sync.Mutex
	transitions := map[string]int{} // tx/from/to/span/kind -> count
	listen := orchestrator.WithListener(func(ev orchestrator.Event) {
		mu.Lock()
		transitions[fmt.Sprintf("%s %s>%s %d %s", ev.TxID, ev.From, ev.To, ev.Span, ev.Kind)]++
		mu.Unlock()
	})
	first := startWith(env, n, orchestrator.WithGroupType(topics.GroupShare), listen)
	group := topics.Prefix + "." + n.order + "." + n.domain + ".orchestrator"
	all := []*orchestrator.Orchestrator[Order]{first}
	for range 2 {
		o, err := orchestrator.New(n.order, n.saga(), orchestrator.WithBrokers(env.Brokers()...), orchestrator.WithStore(env.Store()),
			orchestrator.WithGroup(group), orchestrator.WithGroupType(topics.GroupShare), listen,
			orchestrator.WithProvision(topics.Provision{Partitions: sagatest.DefaultPartitions}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- o.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("orchestrator: %v", err)
			}
		})
		<-o.Running()
		all = append(all, o)
	}
	const sagas = 1000
	var ids []string
	want := map[string]eventstore.State{}
	for i := range sagas {
		id, err := all[i%3].Start(t.Context(), Order{ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		want[id] = eventstore.StateCompleted
	}
	checkEnd(t, env, first, ids, want, 1)
	mu.Lock()
	defer mu.Unlock()
	for k, c := range transitions {
		if c != 1 {
			t.Errorf("transition %s made %d times", k, c)
		}
	}
	var applied int64
	for i, o := range all {
		st := o.Stats()
		applied += st.Replies
		t.Logf("instance %d: %+v", i, st)
		if st.Replies == 0 {
			t.Errorf("instance %d applied no reply", i)
		}
	}
	if applied != 3*sagas {
		t.Errorf("%d replies applied, want %d (three steps per saga)", applied, 3*sagas)
	}
	for _, id := range ids {
		tries, err := env.Store().Tryouts(t.Context(), first.Scope(), id)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, tr := range tries {
			k := fmt.Sprintf("%d/%s/%d/%s", tr.Span, tr.Kind, tr.Attempt, tr.Outcome)
			if seen[k] {
				t.Errorf("%s: step %s recorded twice: advanced twice", id, k)
			}
			seen[k] = true
		}
		if len(tries) != 3 {
			t.Errorf("%s: %d tryout rows, want 3", id, len(tries))
		}
	}
}
