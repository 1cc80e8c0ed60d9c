package orchestrator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Issue 9's acceptance: a ring coordinator (a master and two slaves over
// real RSocket on loopback) hands four retry nodes disjoint slices of the
// token ring; 2,000 sagas stranded by 20 orchestrator instances (so their
// watchdogs spread over 20 directory instances) on real Kafka and Cassandra
// are each restored and completed with every business step run exactly
// once, and no two nodes held overlapping ranges in any minute.
func TestRetryNodesShareTheRing(t *testing.T) {
	r := newRig(t, "cassandra")
	r.guarded = true
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	cfg := recovery.DefaultConfig()
	cfg.Interval = time.Second
	cfg.Restore.DefaultDelayWindows = 2
	cfg.LookbackDays = 1
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 20, 100
	var all []string
	for range writers {
		w, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...), orchestrator.WithStore(r.store),
			orchestrator.WithRecovery(cfg), orchestrator.WithFaultInjection(func(p orchestrator.FaultPoint, _ string) bool {
				return p == orchestrator.FaultAfterCreate
			}))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, startConcurrently(t, w, perWriter)...)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The coordinator.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	runNode := func(run func(context.Context) error) {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	cyc := ringcoordinator.WithCycle(2 * time.Second)
	tok := ringcoordinator.WithToken("orchestrator-ring-test-token")
	m, err := ringcoordinator.NewMaster(ringcoordinator.WithListen("127.0.0.1:0"), cyc, tok)
	if err != nil {
		t.Fatal(err)
	}
	runNode(m.Run)
	for range 2 {
		s, err := ringcoordinator.NewSlave(ringcoordinator.WithListen("127.0.0.1:0"), ringcoordinator.WithMaster(m.Addr()), cyc, tok)
		if err != nil {
			t.Fatal(err)
		}
		runNode(s.Run)
	}
	// Four retry nodes, each fed its range by a connector.
	var conns []*ringcoordinator.Connector
	var nodes []*orchestrator.Orchestrator[order]
	for range 4 {
		c, err := ringcoordinator.NewConnector(ringcoordinator.WithMaster(m.Addr()), cyc, tok)
		if err != nil {
			t.Fatal(err)
		}
		runNode(c.Run)
		conns = append(conns, c)
		o, _ := r.startOrchestrator(orchestrator.WithRecovery(cfg),
			orchestrator.WithRetryNode(recovery.WithRanges(c.Ranges()), recovery.WithScanEvery(250*time.Millisecond)))
		nodes = append(nodes, o)
	}
	expectAll(t, waitTerminal(t, nodes[0], all, 4*time.Minute), eventstore.StateCompleted)
	for _, id := range all {
		for span := range 3 {
			if n := r.runsOf(id, span, topics.KindProcess); n != 1 {
				t.Errorf("%s: span %d ran %d times, want exactly once", id, span, n)
			}
		}
	}
	var restored int64
	for i, o := range nodes {
		st := o.Stats()
		restored += st.Restored
		t.Logf("retry node %d: restored %d, engine %+v", i, st.Restored, fmt.Sprint(o.RecoveryEngine().Totals()))
	}
	if restored < int64(len(all)) {
		t.Errorf("restored %d steps for %d stranded sagas", restored, len(all))
	}
	// No two nodes held overlapping ranges while both were active.
	type held struct {
		node     int
		from, to time.Time
		r        eventstore.TokenRange
	}
	var hs []held
	for i, c := range conns {
		for _, h := range c.History() {
			if !h.Dropped {
				hs = append(hs, held{i, h.ActiveFrom(), h.ActiveUntil, h.Range.TokenRange()})
			}
		}
	}
	used := map[int]bool{}
	for i, a := range hs {
		used[a.node] = true
		for _, b := range hs[i+1:] {
			if a.node != b.node && a.from.Before(b.to) && b.from.Before(a.to) && ringcoordinator.Overlaps(a.r, b.r) {
				t.Errorf("nodes %d and %d held overlapping ranges %v and %v at the same time", a.node, b.node, a.r, b.r)
			}
		}
	}
	if len(used) < 2 {
		t.Errorf("only %d of 4 retry nodes ever held a range", len(used))
	}
}
