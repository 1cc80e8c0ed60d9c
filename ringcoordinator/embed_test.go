package ringcoordinator_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
)

// A Connector is the recovery engine's range source.
var _ recovery.RangeSource = (*ringcoordinator.Connector)(nil)

// TestConnectorRangesPlugIntoRecovery runs an embedded master and slave
// (memory transport, 1s cycle) and a connector whose Ranges feed a
// recovery.Engine: the engine does not scan before the connector holds a
// range, and scans once it does.
func TestConnectorRangesPlugIntoRecovery(t *testing.T) {
	const cycle = time.Second
	tp := ringcoordinator.NewMemoryTransport()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { cancel(); <-done }()

	master, err := ringcoordinator.NewMaster(ringcoordinator.WithTransport(tp), ringcoordinator.WithCycle(cycle))
	if err != nil {
		t.Fatal(err)
	}
	slave, err := ringcoordinator.NewSlave(ringcoordinator.WithTransport(tp), ringcoordinator.WithMaster(master.Addr()),
		ringcoordinator.WithCycle(cycle))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := ringcoordinator.NewConnector(ringcoordinator.WithTransport(tp), ringcoordinator.WithMaster(master.Addr()),
		ringcoordinator.WithCycle(cycle))
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New()
	scope := eventstore.Scope{Region: "default", Cluster: "default", Service: "order-service"}
	cfg := recovery.DefaultConfig()
	cfg.Interval = time.Second
	redrive := recovery.RedriverFunc(func(context.Context, eventstore.RecoveryEntry) error { return nil })
	engine, err := recovery.NewEngine(store, scope, redrive, cfg, recovery.WithRanges(conn.Ranges()))
	if err != nil {
		t.Fatal(err)
	}
	res, err := engine.Scan(ctx)
	if err != nil || !res.NoRange {
		t.Fatalf("scan before any range: %+v %v, want NoRange", res, err)
	}

	go func() {
		defer close(done)
		errs := make(chan error, 3)
		go func() { errs <- master.Run(ctx) }()
		go func() { errs <- slave.Run(ctx) }()
		go func() { errs <- conn.Run(ctx) }()
		for range 3 {
			if err := <-errs; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if r, _, ok := conn.Range(time.Now()); ok {
			if r != ringcoordinator.FullRing {
				t.Fatalf("the only node holds %v, want the whole ring", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no range within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, err = engine.Scan(ctx)
	if err != nil || res.NoRange || !res.Node0 {
		t.Fatalf("scan with the whole ring: %+v %v, want a scan as Node-0", res, err)
	}
}

// How a service embeds the coordinator: a master and a slave in one
// process (the seed's embedded topology) and a retry node whose connector
// feeds its recovery engine (with an orchestrator:
// orchestrator.WithRetryNode(recovery.WithRanges(conn.Ranges()))).
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	token := ringcoordinator.WithToken(os.Getenv(ringcoordinator.EnvToken)) // the same on every node
	master, err := ringcoordinator.NewMaster(ringcoordinator.WithListen("127.0.0.1:7070"), token,
		ringcoordinator.WithScope("us-central", "us-central-c1"))
	if err != nil {
		panic(err)
	}
	slave, err := ringcoordinator.NewSlave(ringcoordinator.WithListen("127.0.0.1:7071"), token,
		ringcoordinator.WithMaster(master.Addr()), ringcoordinator.WithScope("us-central", "us-central-c1"))
	if err != nil {
		panic(err)
	}
	go func() { _ = master.Run(ctx) }()
	go func() { _ = slave.Run(ctx) }()

	conn, err := ringcoordinator.NewConnector(ringcoordinator.WithMaster("127.0.0.1:7070"), token,
		ringcoordinator.WithScope("us-central", "us-central-c1"))
	if err != nil {
		panic(err)
	}
	go func() { _ = conn.Run(ctx) }()
	_ = recovery.WithRanges(conn.Ranges()) // the engine scans only what conn holds now
}
