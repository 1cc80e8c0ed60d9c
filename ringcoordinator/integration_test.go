package ringcoordinator

import (
	"context"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// TestIntegrationRSocket runs the coordinator over real RSocket on
// loopback (free ports picked at bind time): a master in this process, 2
// slaves as child processes, 4 connectors, plus a connector of another
// region, one of another virtual cluster and a slave of another virtual
// cluster, all pointed at the same master, with a 2s cycle.
//
//   - steady state: a minute is covered by the 4 nodes' ranges;
//   - a slave is SIGKILLed: its nodes hold no range of it past the minute
//     of the kill, and the next cycle covers the ring from the other slave;
//   - the master is stopped: the nodes keep their ranges until their
//     minutes end, then hold none; restarted on the same address,
//     everything resumes;
//   - the foreign nodes never receive anything;
//   - from the nodes' own records, no two ever held overlapping ranges at
//     the same instant.
func TestIntegrationRSocket(t *testing.T) {
	testenv.Long(t, "integration test over RSocket (about 30s)")
	t.Cleanup(func() { checkNoLeaks(t) })
	const cycle = 2 * time.Second
	tp := RSocketTransport{KeepAlive: 500 * time.Millisecond, KeepAliveLifetime: 3 * time.Second}.withAuth(testToken, nil)
	newMaster := func(addr string) (*Master, *runner) {
		m, err := NewMaster(WithTransport(tp), WithListen(addr), WithCycle(cycle), WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		return m, run(m.Run)
	}
	m, mr := newMaster("127.0.0.1:0")
	masterAddr := m.Addr()

	s1 := startSlaveProc(t, masterAddr, "", cycle)
	s2 := startSlaveProc(t, masterAddr, "", cycle)
	foreignSlave := startSlaveProc(t, masterAddr, DefaultRegion+"/other-cluster", cycle)
	waitFor(t, 20*time.Second, "both slaves registered", func() bool { return len(m.Assignment(time.Now()).Slaves) == 2 })

	var nodes []*node
	for range 4 {
		nodes = append(nodes, startConnector(t, tp, masterAddr, cycle, 0))
	}
	foreign := []*node{
		startConnector(t, tp, masterAddr, cycle, 0, WithScope("asia-south", DefaultCluster)),
		startConnector(t, tp, masterAddr, cycle, 0, WithScope(DefaultRegion, "other-cluster")),
	}

	// Steady state.
	start := time.Now()
	m1 := waitCovered(t, nodes, start, 30*time.Second, "a minute covered by the 4 nodes", func(hs []Holding) bool { return len(hs) == 4 })
	checkNoOverlap(t, nodes)
	t.Logf("steady: minute %v covered by 4 nodes", m1)

	onS1 := 0
	for _, h := range minuteRanges(nodes, m1) {
		if h.SlaveID == s1.id {
			onS1++
		}
	}
	if onS1 == 0 || onS1 == 4 {
		t.Fatalf("%d of 4 nodes on slave 1 in minute %v, want the round robin to spread them", onS1, m1)
	}

	// SIGKILL slave 1, a quarter into a cycle (away from the publish
	// instant at its middle).
	waitPhase(cycle, 0.25)
	s1.kill()
	killed := cycleStart(time.Now(), cycle)
	m2 := waitCovered(t, nodes, killed, 30*time.Second, "the ring covered from slave 2 alone", func(hs []Holding) bool {
		return holdingsFrom(hs, s2.id)
	})
	for _, r := range records(nodes) {
		if r.h.SlaveID == s1.id && r.h.ValidForMinute.After(killed) {
			t.Fatalf("a node holds a range of killed slave 1 for minute %v (killed during %v)", r.h.ValidForMinute, killed)
		}
		if r.h.SlaveID == s1.id && r.to.After(killed.Add(cycle)) {
			t.Fatalf("a node held slave 1's range until %v, past the end of the kill's minute %v", r.to, killed.Add(cycle))
		}
	}
	checkNoOverlap(t, nodes)
	t.Logf("slave killed during %v; minute %v covered from slave 2", killed, m2)

	// Stop the master a quarter into a cycle: the nodes finish the
	// minutes already published, then hold nothing.
	waitPhase(cycle, 0.25)
	mr.stop(t)
	stopped := cycleStart(time.Now(), cycle)
	lastValid := stopped.Add(cycle) // the next minute was not published yet
	time.Sleep(time.Until(lastValid.Add(cycle / 4)))
	for i, n := range nodes {
		if r, _, ok := n.c.Range(time.Now()); ok {
			t.Fatalf("node %d still holds %v at %v with the master gone since %v", i, r, time.Now(), stopped)
		}
	}
	for _, r := range records(nodes) {
		if r.to.After(lastValid) {
			t.Fatalf("a node held %v until %v, after the last minute published before the master stopped", r.h.Range, r.to)
		}
	}

	// Restart the master on the same address: all resumes.
	m, mr = newMaster(masterAddr)
	defer mr.stop(t)
	m3 := waitCovered(t, nodes, lastValid, 30*time.Second, "the ring covered after the master's restart", func(hs []Holding) bool { return len(hs) == 4 })
	t.Logf("master stopped during %v, restarted; minute %v covered", stopped, m3)
	checkNoOverlap(t, nodes)

	// Foreign nodes never got anything, nor did the foreign slave.
	for i, n := range foreign {
		if h := n.c.History(); len(h) != 0 {
			t.Fatalf("foreign node %d received %+v", i, h)
		}
	}
	a, err := FetchAssignment(context.Background(), masterAddr, WithTransport(tp))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range a.Slaves {
		if s.ID == foreignSlave.id {
			t.Fatalf("the master registered the foreign slave: %+v", a.Slaves)
		}
	}
	fv, err := fetchStatus(context.Background(), tp, foreignSlave.addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(fv.Minutes) != 0 || fv.Connected {
		t.Fatalf("foreign slave's view %+v, want no slice and not registered", fv)
	}
	// The merged view names each node of the current minutes.
	seen := map[string]bool{}
	for _, mm := range a.Minutes {
		for _, s := range mm.Slices {
			for _, n := range s.Nodes {
				seen[n.NodeID] = true
			}
		}
	}
	if len(seen) == 0 {
		t.Fatalf("FetchAssignment names no node: %+v", a)
	}
}
