package writeprotect_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// slowLeaseStore makes a STRICT guard's conditional insert slow, as a
// store retrying an LWT whose outcome was unknown is: after the insert it
// calls delay. It has no eventstore.StateReader, so the fence reads the
// saga's row with LoadTransaction.
type slowLeaseStore struct {
	eventstore.Store
	delay func(ctx context.Context)
	slow  atomic.Bool
}

func (s *slowLeaseStore) InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (bool, eventstore.Marker, error) {
	applied, existing, err := s.Store.InsertMarker(ctx, m, lease)
	if s.slow.Load() {
		s.delay(ctx)
	}
	return applied, existing, err
}

// A STRICT lease taken so late that the handler's deadline has passed (on
// the guard's clock, or in real time) is released without running the
// step; Execute returns ErrLeaseExpired and the retry runs it.
func TestLateLeaseIsReleased(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, g *writeprotect.Guard, store eventstore.Store, s *slowLeaseStore, cmd *topics.Envelope) {
		t.Helper()
		var h handler
		s.slow.Store(true)
		_, err := g.Execute(ctx, cmd, h.run(cmd))
		s.slow.Store(false)
		if !errors.Is(err, writeprotect.ErrLeaseExpired) {
			t.Fatalf("Execute with a late lease: %v, want ErrLeaseExpired", err)
		}
		if h.runs.Load() != 0 {
			t.Fatal("the handler ran with a dead context")
		}
		if _, err := store.GetMarker(ctx, writeprotect.MarkerKeyFor(cmd)); !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("the late lease was not released: %v", err)
		}
		if st := g.Stats(); st.LateLeases != 1 || st.Executions != 0 {
			t.Fatalf("stats %+v", st)
		}
		if rep := execute(t, g, cmd, h.run(cmd)); rep.Outcome != topics.OutcomeOK || h.runs.Load() != 1 {
			t.Fatalf("retry: reply %+v, runs %d", rep, h.runs.Load())
		}
	}

	t.Run("GuardClock", func(t *testing.T) {
		b := memoryBackend(t)
		// 4s of the 5s lease pass while the lease is taken: the lease
		// still lives, but the handler's deadline (3s into it) is gone.
		s := &slowLeaseStore{Store: b.store, delay: func(context.Context) { b.clock.Add(4 * time.Second) }}
		b.store = s
		g := b.guard(t, writeprotect.Strict)
		check(t, g, s.Store, s, command(uniqueScope(t), "tx-late", 1, topics.KindProcess))
	})

	t.Run("RealDeadline", func(t *testing.T) {
		// The guard's clock stands still; real time passes the
		// handler's deadline (300ms into a 2s lease: a second lost to
		// whole-second TTLs, 500ms of clock skew, 200ms for the commit)
		// during the insert.
		store := memory.New()
		t.Cleanup(func() { _ = store.Close() })
		s := &slowLeaseStore{Store: store, delay: func(context.Context) { time.Sleep(600 * time.Millisecond) }}
		frozen := newFakeClock()
		g, err := writeprotect.New(s, writeprotect.Config{DefaultMode: writeprotect.Strict, DefaultLease: 2 * time.Second},
			writeprotect.WithClock(frozen.Now), writeprotect.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		check(t, g, store, s, command(uniqueScope(t), "tx-late-real", 1, topics.KindProcess))
	})

	t.Run("CanceledMeanwhile", func(t *testing.T) {
		b := memoryBackend(t)
		cctx, cancel := context.WithCancel(ctx)
		s := &slowLeaseStore{Store: b.store, delay: func(context.Context) { cancel() }}
		b.store = s
		g := b.guard(t, writeprotect.Strict, writeprotect.WithoutTerminalFence())
		cmd := command(uniqueScope(t), "tx-late-cancel", 1, topics.KindProcess)
		var h handler
		s.slow.Store(true)
		if _, err := g.Execute(cctx, cmd, h.run(cmd)); !errors.Is(err, context.Canceled) {
			t.Fatalf("Execute canceled while taking the lease: %v", err)
		}
		if h.runs.Load() != 0 {
			t.Fatal("the handler ran with a canceled context")
		}
		if _, err := s.Store.GetMarker(ctx, writeprotect.MarkerKeyFor(cmd)); !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("the lease was not released: %v", err)
		}
	})
}

// A STRICT guard waiting for another execution's lease polls with plain
// reads, not with the conditional insert (an LWT per try would contend
// with the holder's commit); it inserts again only once the lease is gone,
// and not at all when the holder commits.
func TestStrictWaitPollsWithReads(t *testing.T) {
	ctx := context.Background()
	t.Run("AbandonedLease", func(t *testing.T) {
		b := memoryBackend(t)
		cmd := command(uniqueScope(t), "tx-poll", 1, topics.KindProcess)
		if ok, _, err := b.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: writeprotect.MarkerKeyFor(cmd), State: eventstore.MarkerLeased, Owner: "crashed/1"}, b.lease); !ok || err != nil {
			t.Fatal(ok, err)
		}
		cs := &countingStore{Store: b.store}
		waiting := *b
		waiting.store = cs
		g := waiting.guard(t, writeprotect.Strict)
		var h handler
		done := make(chan *topics.Envelope)
		go func() { done <- execute(t, g, cmd, h.run(cmd)) }()
		waitUntil(t, 10*time.Second, "several polls", func() bool { return cs.reads.Load() >= 5 })
		if n := cs.lwts.Load(); n != 1 {
			t.Fatalf("%d conditional inserts while the lease lived, want 1", n)
		}
		b.expire()
		if rep := <-done; rep.Outcome != topics.OutcomeOK || h.runs.Load() != 1 {
			t.Fatalf("reply %+v, runs %d", rep, h.runs.Load())
		}
		if n := cs.lwts.Load(); n != 3 {
			t.Fatalf("%d conditional inserts, want 3 (one more once the lease expired, one confirming the commit)", n)
		}
	})
	t.Run("HolderCommits", func(t *testing.T) {
		b := memoryBackend(t)
		holder := b.guard(t, writeprotect.Strict)
		cs := &countingStore{Store: b.store}
		waiting := *b
		waiting.store = cs
		g := waiting.guard(t, writeprotect.Strict)
		h := handler{block: make(chan struct{}), started: make(chan *topics.Envelope, 1)}
		cmd := command(uniqueScope(t), "tx-poll-commit", 1, topics.KindProcess)
		var wg sync.WaitGroup
		var r1, r2 *topics.Envelope
		wg.Go(func() { r1 = execute(t, holder, cmd, h.run(cmd)) })
		<-h.started
		wg.Go(func() { r2 = execute(t, g, cmd, h.run(cmd)) })
		waitUntil(t, 10*time.Second, "several polls", func() bool { return cs.reads.Load() >= 3 })
		close(h.block)
		wg.Wait()
		if err := sameReply(r1, r2); err != nil {
			t.Fatal(err)
		}
		if got := cs.counts(); got.LWTs != 1 || got.Writes != 0 || h.runs.Load() != 1 {
			t.Fatalf("waiting guard sent %v (runs %d), want 1 LWT and reads only", got, h.runs.Load())
		}
	})
}

// A STRICT step that overruns its lease does not write its outcome over
// what was recorded meanwhile (review finding: the commit is a plain
// write). Its compensation, recorded empty after the lease expired, stays:
// a later duplicate of the action is refused as hanging.
func TestOverrunDoesNotOverwriteNullCompensation(t *testing.T) {
	b := memoryBackend(t)
	ga, gr := b.guard(t, writeprotect.Strict), b.guard(t, writeprotect.Strict)
	scope := uniqueScope(t)
	proc := command(scope, "tx-overrun", 1, topics.KindProcess)
	rev := command(scope, "tx-overrun", 1, topics.KindRevert)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan *topics.Envelope)
	go func() {
		rep, _ := ga.Execute(context.Background(), proc, func(context.Context) *topics.Envelope {
			close(started)
			<-release // ignores its context
			return &topics.Envelope{Outcome: topics.OutcomeOK, Payload: pl("charged")}
		})
		done <- rep
	}()
	<-started
	b.expire()
	var h handler
	if rr := execute(t, gr, rev, h.run(rev)); rr.Outcome != topics.OutcomeOK || gr.Stats().NullCompensations != 1 {
		t.Fatalf("compensation %+v, stats %+v; want a null compensation", rr, gr.Stats())
	}
	close(release)
	if rep := <-done; rep == nil || rep.Outcome != topics.OutcomeOK {
		t.Fatalf("overrunning action's reply %+v", rep)
	}
	m, err := b.store.GetMarker(context.Background(), writeprotect.MarkerKeyFor(proc))
	if err != nil || m.State != eventstore.MarkerCompensatedEmpty {
		t.Fatalf("action marker %+v, %v; want COMPENSATED_EMPTY kept", m, err)
	}
	if st := ga.Stats(); st.LeaseOverruns != 1 || st.LostLeases != 1 {
		t.Fatalf("stats %+v", st)
	}
	if r := execute(t, ga, proc, h.run(proc)); r.Error != writeprotect.ErrHanging.Error() || h.runs.Load() != 0 {
		t.Fatalf("duplicate action %+v, runs %d; want refused as hanging", r, h.runs.Load())
	}
}

// An overrunning STRICT step whose lease another instance took over
// neither overwrites that instance's commit nor deletes its lease.
func TestOverrunLeavesTheTakeoverAlone(t *testing.T) {
	ctx := context.Background()
	for _, outcome := range []topics.Outcome{topics.OutcomeOK, topics.OutcomeRetryable} {
		t.Run(string(outcome), func(t *testing.T) {
			b := memoryBackend(t)
			slow, other := b.guard(t, writeprotect.Strict, writeprotect.WithOwner("slow")), b.guard(t, writeprotect.Strict, writeprotect.WithOwner("other"))
			cmd := command(uniqueScope(t), "tx-takeover", 1, topics.KindProcess)
			started, release := make(chan struct{}), make(chan struct{})
			done := make(chan *topics.Envelope)
			go func() {
				rep, _ := slow.Execute(ctx, cmd, func(context.Context) *topics.Envelope {
					close(started)
					<-release
					return &topics.Envelope{Outcome: outcome, Payload: pl("slow")}
				})
				done <- rep
			}()
			<-started
			b.expire()
			h := handler{block: make(chan struct{}), started: make(chan *topics.Envelope, 1)}
			otherDone := make(chan *topics.Envelope)
			go func() { otherDone <- execute(t, other, cmd, h.run(cmd)) }()
			<-h.started // the other instance holds the lease now
			close(release)
			<-done
			m, err := b.store.GetMarker(ctx, writeprotect.MarkerKeyFor(cmd))
			if err != nil || m.State != eventstore.MarkerLeased || m.Owner[:len("other/")] != "other/" {
				t.Fatalf("marker %+v, %v; want the other instance's lease", m, err)
			}
			close(h.block)
			r := <-otherDone
			m, err = b.store.GetMarker(ctx, writeprotect.MarkerKeyFor(cmd))
			if err != nil || m.State != eventstore.MarkerCommitted {
				t.Fatalf("marker %+v, %v", m, err)
			}
			if rec, err := topics.Decode(m.Reply); err != nil || str(rec.Payload) != str(r.Payload) {
				t.Fatalf("recorded reply %+v (%v), want the other instance's %q", rec, err, str(r.Payload))
			}
			if st := slow.Stats(); st.LostLeases != 1 || st.LeaseOverruns != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// fenceStore counts how the fence reads the saga: the whole row
// (LoadTransaction) or its state alone (eventstore.StateReader, through
// stateFenceStore).
type fenceStore struct {
	eventstore.Store
	loads, states atomic.Int64
}

func (f *fenceStore) LoadTransaction(ctx context.Context, s eventstore.Scope, tx string) (eventstore.Transaction, error) {
	f.loads.Add(1)
	return f.Store.LoadTransaction(ctx, s, tx)
}

type stateFenceStore struct{ *fenceStore }

func (f stateFenceStore) TransactionState(ctx context.Context, s eventstore.Scope, tx string) (eventstore.State, error) {
	f.states.Add(1)
	return f.Store.(eventstore.StateReader).TransactionState(ctx, s, tx)
}

// The terminal fence (WithTerminalFence) reads the saga's state alone when
// the store can, and the whole row otherwise; both fence. Without the
// option nothing is read.
func TestFenceReadsStateWhenItCan(t *testing.T) {
	ctx := context.Background()
	for _, withState := range []bool{true, false} {
		b := memoryBackend(t)
		fs := &fenceStore{Store: b.store}
		var store writeprotect.Store = fs
		if withState {
			store = stateFenceStore{fs}
		}
		g, err := writeprotect.New(store, writeprotect.Config{DefaultMode: writeprotect.Strict},
			writeprotect.WithClock(b.clock.Now), writeprotect.WithLogger(quietLogger()), writeprotect.WithTerminalFence())
		if err != nil {
			t.Fatal(err)
		}
		scope := uniqueScope(t)
		if err := b.store.CreateTransaction(ctx, eventstore.Transaction{Scope: scope, TxID: "tx-f", State: eventstore.StateCompensated}, nil); err != nil {
			t.Fatal(err)
		}
		var h handler
		cmd := command(scope, "tx-f", 1, topics.KindProcess)
		if rep, err := g.Execute(ctx, cmd, h.run(cmd)); rep != nil || err != nil || h.runs.Load() != 0 {
			t.Fatalf("state reader %v: reply %+v, err %v, runs %d; want fenced", withState, rep, err, h.runs.Load())
		}
		wantLoads, wantStates := int64(1), int64(0)
		if withState {
			wantLoads, wantStates = 0, 1
		}
		if fs.loads.Load() != wantLoads || fs.states.Load() != wantStates {
			t.Fatalf("state reader %v: %d LoadTransaction, %d TransactionState; want %d and %d",
				withState, fs.loads.Load(), fs.states.Load(), wantLoads, wantStates)
		}
		// The default guard reads neither: with the markers kept, a
		// command without a marker is a first delivery.
		open, err := writeprotect.New(store, writeprotect.Config{DefaultMode: writeprotect.Strict},
			writeprotect.WithClock(b.clock.Now), writeprotect.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := open.Execute(ctx, cmd, h.run(cmd)); rep == nil || err != nil || h.runs.Load() != 1 {
			t.Fatalf("state reader %v, fence off: reply %+v, err %v, runs %d; want a run", withState, rep, err, h.runs.Load())
		}
		if fs.loads.Load() != wantLoads || fs.states.Load() != wantStates {
			t.Fatalf("state reader %v, fence off: the saga was read", withState)
		}
	}
}
