package orchestrator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// heldLastStep is a responder that holds its reply to the last step (span
// 2) until release is closed.
func heldLastStep(release chan struct{}) respondFunc {
	next := appendStep(nil)
	return func(cmd *topics.Envelope) *topics.Envelope {
		if cmd.Span == 2 {
			<-release
		}
		return next(cmd)
	}
}

// Wait returns the saga once it ends on this instance, woken by its
// terminal transition: with reads an hour apart, nothing else could end it.
func TestWaitWakesOnOwnTransition(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	release := make(chan struct{})
	resp := startResponder(t, brokers, allTopics()[:2], heldLastStep(release))
	clock := newFakeClock()
	store := newKeyStore(clock.now)
	o := keyTestOrch(t, brokers, store, clock, orchestrator.WithWaitPolls(time.Hour, time.Hour))
	runOrch(t, o)
	id, err := o.Start(t.Context(), order{ID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the last step's command", func() bool {
		for _, c := range resp.commands() {
			if c.TxID == id && c.Span == 2 {
				return true
			}
		}
		return false
	})
	reads := store.stateReads.Load()
	done := make(chan *orchestrator.Saga[order], 1)
	go func() {
		s, err := o.Wait(context.Background(), id)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		done <- s
	}()
	waitFor(t, 30*time.Second, "Wait's first read", func() bool { return store.stateReads.Load() > reads })
	close(release)
	select {
	case s := <-done:
		if s == nil || s.State != eventstore.StateCompleted || len(s.Entity.Steps) != 3 {
			t.Fatalf("Wait returned %+v", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not return after the saga completed")
	}
	if n := store.stateReads.Load() - reads; n != 2 {
		t.Errorf("Wait read the state %d times, want twice (at once, and when woken)", n)
	}
}

// Wait on an instance that does not move the saga (another one applies its
// replies) reads it with a backoff and returns it once it ended.
func TestWaitOnSagaMovedElsewhere(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	startResponder(t, brokers, allTopics()[:2], appendStep(nil))
	clock := newFakeClock()
	store := newKeyStore(clock.now)
	mover := keyTestOrch(t, brokers, store, clock)
	runOrch(t, mover)
	watcher := keyTestOrch(t, brokers, store, clock, orchestrator.WithWaitPolls(10*time.Millisecond, 50*time.Millisecond))
	id, err := mover.Start(t.Context(), order{ID: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	if s := waitDone(t, watcher, id); s.State != eventstore.StateCompleted || s.Entity.ID != "elsewhere" {
		t.Fatalf("Wait returned %+v", s)
	}
	if watcher.Stats().Replies != 0 {
		t.Fatal("the watcher applied replies: the test proves nothing")
	}
}

// Wait ends with its context, having read the saga at growing intervals
// (200 ms, 400 ms, 800 ms...), not in a busy loop; an unknown saga fails at
// once.
func TestWaitHonoursContext(t *testing.T) {
	brokers := newCluster(t)
	ensureTopics(t, brokers, allTopics()...)
	release := make(chan struct{})
	defer close(release)
	startResponder(t, brokers, allTopics()[:2], heldLastStep(release))
	clock := newFakeClock()
	store := newKeyStore(clock.now)
	o := keyTestOrch(t, brokers, store, clock)
	runOrch(t, o)
	id, err := o.Start(t.Context(), order{ID: "held"})
	if err != nil {
		t.Fatal(err)
	}
	reads := store.stateReads.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	began := time.Now()
	s, err := o.Wait(ctx, id)
	if s != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline: %+v, %v", s, err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Wait returned %v after a 1.5s deadline", took)
	}
	// Reads at 0, 0.2, 0.6 and 1.4 s.
	if n := store.stateReads.Load() - reads; n < 2 || n > 4 {
		t.Errorf("Wait read the state %d times in 1.5s, want 2 to 4", n)
	}
	if _, err := o.Wait(t.Context(), "no-such-saga"); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Errorf("Wait of an unknown saga: %v, want ErrNotFound", err)
	}
}
