package writeprotect_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// reproposingStore does on the memory store what Cassandra did under
// TestAcceptanceStrict. All the markers of a saga share one partition,
// hence one Paxos state; an LWT of another step of the saga whose round
// overlapped a STRICT lease's can leave the lease's proposal unfinished,
// and the next LWT on the partition finishes it first, proposing it again
// with its own ballot, which Paxos v1 makes the write timestamp of the
// lease's cells: newer than a plain write that replaced the lease
// meanwhile, which it hides. Here every lease that a plain write (PutMarker)
// replaced is re-proposed (put back, with its remaining TTL) by the next
// `reproposals` LWTs on the saga's partition, before they run. A lease that
// an applied LWT replaced (CommitMarker) is not: that LWT finished the
// lease's round before its own, whose newer ballot is what any later LWT
// finds and re-proposes.
type reproposingStore struct {
	eventstore.Store
	reproposals atomic.Int64
	done        atomic.Int64
	// lwts counts the LWTs that could have re-proposed a lease (the budget
	// was not spent).
	lwts atomic.Int64

	mu     sync.Mutex
	leases map[eventstore.MarkerKey]eventstore.Marker // leases taken, not yet replaced by an LWT
}

// repropose is what an LWT on m's partition does first: it finishes the
// unfinished rounds, putting back every lease a plain write replaced.
func (s *reproposingStore) repropose(ctx context.Context, scope eventstore.Scope, txID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reproposals.Load() > 0 {
		s.lwts.Add(1)
	}
	for k, l := range s.leases {
		if k.Scope != scope || k.TxID != txID || s.reproposals.Load() <= 0 {
			continue
		}
		if cur, err := s.Store.GetMarker(ctx, k); err == nil && cur.State == eventstore.MarkerCommitted && cur.Owner == l.Owner {
			s.reproposals.Add(-1)
			s.done.Add(1)
			if err := s.Store.PutMarker(ctx, l); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *reproposingStore) InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (bool, eventstore.Marker, error) {
	if err := s.repropose(ctx, m.Scope, m.TxID); err != nil {
		return false, eventstore.Marker{}, err
	}
	applied, existing, err := s.Store.InsertMarker(ctx, m, lease)
	if applied && m.State == eventstore.MarkerLeased {
		s.mu.Lock()
		if s.leases == nil {
			s.leases = make(map[eventstore.MarkerKey]eventstore.Marker)
		}
		s.leases[m.MarkerKey] = eventstore.Marker{MarkerKey: m.MarkerKey, State: m.State, Owner: m.Owner, TTL: lease}
		s.mu.Unlock()
	}
	return applied, existing, err
}

func (s *reproposingStore) CommitMarker(ctx context.Context, m eventstore.Marker) (bool, eventstore.Marker, error) {
	if err := s.repropose(ctx, m.Scope, m.TxID); err != nil {
		return false, eventstore.Marker{}, err
	}
	applied, existing, err := s.Store.CommitMarker(ctx, m)
	if applied {
		s.mu.Lock()
		delete(s.leases, m.MarkerKey)
		s.mu.Unlock()
	}
	return applied, existing, err
}

func (s *reproposingStore) DeleteMarkerIf(ctx context.Context, k eventstore.MarkerKey, state eventstore.MarkerState, owner string) (bool, eventstore.Marker, error) {
	if err := s.repropose(ctx, k.Scope, k.TxID); err != nil {
		return false, eventstore.Marker{}, err
	}
	return s.Store.DeleteMarkerIf(ctx, k, state, owner)
}

// A STRICT lease re-proposed by LWTs on the saga's partition cannot hide
// the step's commit: the commit is one conditional LWT (CommitMarker),
// which finishes the lease's round before its own, so the step keeps its
// COMMITTED marker and recorded reply, and a duplicate delivered next is
// skipped. Review finding (when the commit was a plain write): the
// duplicate's own LWT re-proposed the lease over the commit, found it,
// waited for it to expire and ran the step again ("ran 2 times" in
// TestAcceptanceStrict, with no lease overrun nor commit failure). The
// control case shows that the model does hide a plain commit.
func TestCommitHiddenByItsLease(t *testing.T) {
	for _, reproposals := range []int64{1, 3, 4} {
		t.Run(fmt.Sprintf("%d re-proposals", reproposals), func(t *testing.T) {
			ctx := context.Background()
			b := memoryBackend(t)
			s := &reproposingStore{Store: b.store}
			b.store = s
			g := b.guard(t, writeprotect.Strict)
			dup := b.guard(t, writeprotect.Strict, writeprotect.WithMaxLeaseWait(100*time.Millisecond))
			var h handler
			cmd := command(uniqueScope(t), "tx-hidden", 1, topics.KindProcess)
			s.reproposals.Store(reproposals)
			first := execute(t, g, cmd, h.run(cmd))
			// A copy of the command, delivered next; if it finds a lease,
			// once more after the lease expired.
			again, err := dup.Execute(ctx, cmd, h.run(cmd))
			if err != nil {
				b.expire()
				again = execute(t, dup, cmd, h.run(cmd))
			}
			if h.runs.Load() != 1 || err != nil {
				t.Fatalf("the handler ran %d times, want 1 (first try of the copy: %v)", h.runs.Load(), err)
			}
			// The commit and the duplicate's insert could have re-proposed
			// the lease; neither found one replaced by a plain write.
			if first.Outcome != topics.OutcomeOK || s.done.Load() != 0 || s.lwts.Load() < 2 {
				t.Fatalf("reply %+v, %d re-proposals done, %d LWTs that could", first, s.done.Load(), s.lwts.Load())
			}
			if st := g.Stats(); st.ShadowedCommits != 0 || st.CommitFailures != 0 || st.Executions != 1 || st.LostLeases != 0 {
				t.Fatalf("stats %+v", st)
			}
			if err := sameReply(first, again); err != nil {
				t.Fatalf("duplicate: %v", err)
			}
			if st := dup.Stats(); st.DuplicatesSkipped != 1 || st.Executions != 0 || st.LeaseWaits != 0 {
				t.Fatalf("duplicate's stats %+v", st)
			}
			if m, err := b.store.GetMarker(ctx, writeprotect.MarkerKeyFor(cmd)); err != nil || m.State != eventstore.MarkerCommitted || !retained(m) {
				t.Fatalf("marker %+v, %v; want COMMITTED", m, err)
			}
		})
	}
	// Control: a plain write over the lease, as the commit was before, is
	// hidden by the next LWT on the partition, which then finds the lease.
	t.Run("plain commit", func(t *testing.T) {
		ctx := context.Background()
		b := memoryBackend(t)
		s := &reproposingStore{Store: b.store}
		s.reproposals.Store(1)
		k := writeprotect.MarkerKeyFor(command(uniqueScope(t), "tx-plain-commit", 1, topics.KindProcess))
		if applied, _, err := s.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "o"}, 5*time.Second); err != nil || !applied {
			t.Fatalf("lease: %v %v", applied, err)
		}
		if err := s.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		applied, existing, err := s.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "dup"}, 5*time.Second)
		if err != nil || applied || existing.State != eventstore.MarkerLeased || existing.Owner != "o" || s.done.Load() != 1 {
			t.Fatalf("LWT after a plain commit: applied=%v existing=%+v err=%v re-proposals=%d; want the lease re-proposed over the commit",
				applied, existing, err, s.done.Load())
		}
	})
	// Without a re-proposal: the lease and the conditional commit, two
	// LWTs, nothing else.
	b := memoryBackend(t)
	cs := &countingStore{Store: b.store}
	b.store = cs
	g := b.guard(t, writeprotect.Strict)
	cmd := command(uniqueScope(t), "tx-plain", 1, topics.KindProcess)
	var h handler
	execute(t, g, cmd, h.run(cmd))
	if got, st := cs.counts(), g.Stats(); got != (stmts{LWTs: 2}) || st.ShadowedCommits != 0 {
		t.Fatalf("STRICT action: %v, stats %+v", got, st)
	}
}
