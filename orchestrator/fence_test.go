package orchestrator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
)

// stallingStore holds the first Transition to version 2 until release is
// closed: the write of an orchestrator that stalled (a GC pause, a lost
// network) and was replaced meanwhile.
type stallingStore struct {
	eventstore.Store
	once    sync.Once
	stalled chan struct{} // closed when the write is held
	release chan struct{}
	written chan error // the held write's result
}

func (s *stallingStore) Transition(ctx context.Context, tx eventstore.Transaction, tr *eventstore.Tryout) error {
	held := false
	if tx.Version == 2 {
		s.once.Do(func() { held = true })
	}
	if !held {
		return s.Store.Transition(ctx, tx, tr)
	}
	close(s.stalled)
	<-s.release
	err := s.Store.Transition(ctx, tx, tr)
	s.written <- err
	return err
}

// A zombie orchestrator's late write of an older version never overwrites
// the newer state another instance wrote meanwhile: the saga stays
// COMPLETED (issue 10's fenced transitions), on both stores.
func TestZombieWriteCannotUndoNewerState(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		zombieStore := &stallingStore{Store: r.store, stalled: make(chan struct{}), release: make(chan struct{}), written: make(chan error, 1)}
		// Both instances see every reply (split brain: two groups), as a
		// member evicted mid-batch and its successor do.
		zombie, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...),
			orchestrator.WithStore(zombieStore), orchestrator.WithGroup(r.domain+"-zombie"), orchestrator.WithoutRecovery())
		if err != nil {
			t.Fatal(err)
		}
		runOrch(t, zombie)
		// The live instance starts the saga but consumes only once the
		// zombie has applied the first reply and stalled in its write.
		live, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...),
			orchestrator.WithStore(r.store), orchestrator.WithoutRecovery())
		if err != nil {
			t.Fatal(err)
		}
		ids := startConcurrently(t, live, 1)
		select {
		case <-zombieStore.stalled:
		case <-time.After(2 * time.Minute):
			t.Fatal("the zombie never reached its write")
		}
		runOrch(t, live)
		if st := waitTerminal(t, live, ids, time.Minute)[ids[0]]; st != eventstore.StateCompleted {
			t.Fatalf("state %s, want COMPLETED", st)
		}
		done, err := r.store.LoadTransaction(context.Background(), live.Scope(), ids[0])
		if err != nil {
			t.Fatal(err)
		}
		close(zombieStore.release)
		if err := <-zombieStore.written; err != nil {
			t.Fatalf("the zombie's write: %v", err)
		}
		got, err := r.store.LoadTransaction(context.Background(), live.Scope(), ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if got.State != eventstore.StateCompleted || got.Version != done.Version {
			t.Fatalf("after the zombie's write of version 2 the saga is %s version %d; want COMPLETED version %d", got.State, got.Version, done.Version)
		}
	})
}

// A pause's deadline re-invokes the paused step away from the reply path:
// it raises the saga's fence, so a write made from the state before it (a
// reply applied to what an instance cached then) is discarded at any
// version, even the saga's last (issue 35), on both stores.
func TestPauseDeadlineRaisesFence(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.pauseCharge.Store(true)
		r.pauseDeadline.Store(int64(10 * time.Minute))
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)), orchestrator.WithRetryNode())
		ids := startConcurrently(t, o, 1)
		ctx := context.Background()
		waitState(t, o, ids[0], eventstore.StatePaused)
		clock.advance(15 * time.Minute)
		expectAll(t, scanUntil(t, o, clock, time.Minute, ids), eventstore.StateCompleted)
		done, err := r.store.LoadTransaction(ctx, o.Scope(), ids[0])
		if err != nil {
			t.Fatal(err)
		}
		late := done
		late.State, late.Fence, late.Error = eventstore.StateInProgress, 0, "a reply applied to the state before the deadline"
		if err := r.store.Transition(ctx, late, &eventstore.Tryout{Index: int(late.Version), Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
		got, err := r.store.LoadTransaction(ctx, o.Scope(), ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if got.State != eventstore.StateCompleted || got.Error != done.Error || got.Fence != 1 {
			t.Fatalf("after a write of version %d at the fence before the deadline: %s fence %d error %q; want COMPLETED at fence 1",
				late.Version, got.State, got.Fence, got.Error)
		}
	})
}
