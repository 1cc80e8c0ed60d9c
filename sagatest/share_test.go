package sagatest_test

import (
	"testing"
	"time"

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
