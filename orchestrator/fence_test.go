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
