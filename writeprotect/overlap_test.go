package writeprotect_test

import (
	"context"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// gatedStore holds every marker write (RELAXED's put, STRICT's commit)
// until open is closed, and says on entered when one arrives.
type gatedStore struct {
	eventstore.Store
	open    chan struct{}
	entered chan struct{}
}

func newGatedStore(s eventstore.Store) *gatedStore {
	return &gatedStore{Store: s, open: make(chan struct{}), entered: make(chan struct{}, 16)}
}

func (g *gatedStore) PutMarker(ctx context.Context, m eventstore.Marker) error {
	g.entered <- struct{}{}
	<-g.open
	return g.Store.PutMarker(ctx, m)
}

func (g *gatedStore) CommitMarker(ctx context.Context, m eventstore.Marker) (bool, eventstore.Marker, error) {
	g.entered <- struct{}{}
	<-g.open
	return g.Store.CommitMarker(ctx, m)
}

// ExecuteOverlapped returns the reply while the outcome's write is still
// held, its wait returns only once the write is done, and then a duplicate
// gets the recorded reply without running; Execute itself still returns
// only after the write.
func TestExecuteOverlapped(t *testing.T) {
	for _, mode := range []writeprotect.Mode{writeprotect.RelaxedWithDedup, writeprotect.Strict} {
		t.Run(string(mode), func(t *testing.T) {
			b := memoryBackend(t)
			gs := newGatedStore(b.store)
			b.store = gs
			g := b.guard(t, mode)
			var h handler
			scope := uniqueScope(t)
			cmd := command(scope, "tx-overlap", 0, topics.KindProcess)
			ctx := context.Background()

			type result struct {
				rep  *topics.Envelope
				wait func()
				err  error
			}
			got := make(chan result, 1)
			go func() {
				rep, wait, err := g.ExecuteOverlapped(ctx, cmd, h.run(cmd))
				got <- result{rep, wait, err}
			}()
			recv(t, gs.entered, "the marker write") // in flight and held
			var r result
			select {
			case r = <-got:
			case <-time.After(time.Minute):
				t.Fatal("ExecuteOverlapped waited for the held marker write")
			}
			if r.err != nil || r.rep == nil || r.rep.Outcome != topics.OutcomeOK || h.runs.Load() != 1 {
				t.Fatalf("reply %+v, err %v, runs %d", r.rep, r.err, h.runs.Load())
			}
			waited := make(chan struct{})
			go func() { r.wait(); close(waited) }()
			select {
			case <-waited:
				t.Fatal("wait returned while the marker write is held")
			case <-time.After(50 * time.Millisecond):
			}
			close(gs.open)
			select {
			case <-waited:
			case <-time.After(time.Minute):
				t.Fatal("wait did not return after the write")
			}
			m, err := b.store.GetMarker(ctx, eventstore.MarkerKey{
				Scope: scope, TxID: cmd.TxID, Span: cmd.Span, Kind: string(cmd.Kind), Site: writeprotect.SitePrefix + cmd.Endpoint,
			})
			if err != nil || m.State != eventstore.MarkerCommitted {
				t.Fatalf("after wait the marker is %+v (%v), want committed", m, err)
			}
			dup := execute(t, g, cmd, h.run(cmd))
			if h.runs.Load() != 1 {
				t.Fatalf("a duplicate after wait ran the step again (%d runs)", h.runs.Load())
			}
			if err := sameReply(dup, r.rep); err != nil {
				t.Fatalf("recorded reply differs: %v", err)
			}

			// Execute is not overlapped: it returns after its write.
			gs2 := newGatedStore(b.store)
			b.store = gs2
			g2 := b.guard(t, mode)
			cmd2 := command(scope, "tx-sync", 0, topics.KindProcess)
			done := make(chan struct{})
			go func() { execute(t, g2, cmd2, h.run(cmd2)); close(done) }()
			gs2.returnsAfterWrite(t, done, "Execute")
		})
	}
}

// With the terminal fence (orchestrator.WithMarkerCleanup) the write is
// not overlapped: ExecuteOverlapped returns after it.
func TestExecuteOverlappedWithFenceWritesFirst(t *testing.T) {
	b := memoryBackend(t)
	gs := newGatedStore(b.store)
	b.store = gs
	g := b.guard(t, writeprotect.RelaxedWithDedup, writeprotect.WithTerminalFence())
	var h handler
	cmd := command(uniqueScope(t), "tx-fenced", 0, topics.KindProcess)
	done := make(chan struct{})
	go func() {
		_, wait, err := g.ExecuteOverlapped(context.Background(), cmd, h.run(cmd))
		if err != nil {
			t.Error(err)
		}
		wait()
		close(done)
	}()
	gs.returnsAfterWrite(t, done, "ExecuteOverlapped with the terminal fence")
}

// returnsAfterWrite checks that what closes done (a call named who) does
// not return while g holds its marker write, and returns once g lets the
// write through.
func (g *gatedStore) returnsAfterWrite(t *testing.T, done <-chan struct{}, who string) {
	t.Helper()
	recv(t, g.entered, who+"'s marker write")
	select {
	case <-done:
		t.Fatalf("%s returned while its marker write is held", who)
	case <-time.After(50 * time.Millisecond):
	}
	close(g.open)
	recv(t, done, who+"'s return")
}

// recv waits for a value on c, failing the test after a minute.
func recv[T any](t *testing.T, c <-chan T, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}
