package writeprotect_test

import (
	"context"
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
// lease's cells: newer than the plain commit written meanwhile, which it
// hides. Here every lease a commit replaced is re-proposed (put back, with
// its remaining TTL) by the next `reproposals` LWTs on the saga's
// partition, before they run.
type reproposingStore struct {
	eventstore.Store
	reproposals atomic.Int64
	done        atomic.Int64

	mu     sync.Mutex
	leases map[eventstore.MarkerKey]eventstore.Marker // leases replaced by a commit
}

func (s *reproposingStore) InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (bool, eventstore.Marker, error) {
	s.mu.Lock()
	for k, l := range s.leases {
		if k.Scope != m.Scope || k.TxID != m.TxID || s.reproposals.Load() <= 0 {
			continue
		}
		if cur, err := s.Store.GetMarker(ctx, k); err == nil && cur.State == eventstore.MarkerCommitted && cur.Owner == l.Owner {
			s.reproposals.Add(-1)
			s.done.Add(1)
			if err := s.Store.PutMarker(ctx, l); err != nil {
				s.mu.Unlock()
				return false, eventstore.Marker{}, err
			}
		}
	}
	s.mu.Unlock()
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

// A STRICT commit hidden by its own lease, re-proposed by an LWT on the
// saga's partition after the commit, is found by the LWT that confirms the
// commit (it finishes the re-proposal before it reads) and written again:
// the step keeps its COMMITTED marker and recorded reply, and a duplicate
// delivered next is skipped. Review finding: the duplicate's own LWT
// re-proposed the lease, found it, waited for it to expire and ran the
// step again ("ran 2 times" in TestAcceptanceStrict, with no lease overrun
// nor commit failure). Hidden again at every rewrite, the commit counts as
// failed, as any commit that cannot be recorded does.
func TestCommitHiddenByItsLease(t *testing.T) {
	for _, tc := range []struct {
		name        string
		reproposals int64
		runs        int64 // after a duplicate delivered once the lease expired
		failures    uint64
	}{
		{"once", 1, 1, 0},
		{"three times", 3, 1, 0},
		{"at every rewrite", 4, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := memoryBackend(t)
			s := &reproposingStore{Store: b.store}
			b.store = s
			g := b.guard(t, writeprotect.Strict)
			dup := b.guard(t, writeprotect.Strict, writeprotect.WithMaxLeaseWait(100*time.Millisecond))
			var h handler
			cmd := command(uniqueScope(t), "tx-hidden", 1, topics.KindProcess)
			s.reproposals.Store(tc.reproposals)
			first := execute(t, g, cmd, h.run(cmd))
			// A copy of the command, delivered next; if it finds a lease,
			// once more after the lease expired.
			again, err := dup.Execute(ctx, cmd, h.run(cmd))
			if err != nil {
				b.expire()
				again = execute(t, dup, cmd, h.run(cmd))
			}
			if h.runs.Load() != tc.runs {
				t.Fatalf("the handler ran %d times, want %d (first try of the copy: %v)", h.runs.Load(), tc.runs, err)
			}
			if first.Outcome != topics.OutcomeOK || s.done.Load() != tc.reproposals {
				t.Fatalf("reply %+v, %d re-proposals", first, s.done.Load())
			}
			if st := g.Stats(); st.ShadowedCommits != 1 || st.CommitFailures != tc.failures || st.Executions != 1 {
				t.Fatalf("stats %+v", st)
			}
			if tc.failures > 0 {
				return
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
	// Without a re-proposal the confirming LWT finds the commit: nothing
	// more is written.
	b := memoryBackend(t)
	cs := &countingStore{Store: b.store}
	b.store = cs
	g := b.guard(t, writeprotect.Strict)
	cmd := command(uniqueScope(t), "tx-plain", 1, topics.KindProcess)
	var h handler
	execute(t, g, cmd, h.run(cmd))
	if got, st := cs.counts(), g.Stats(); got != (stmts{Writes: 1, LWTs: 2}) || st.ShadowedCommits != 0 {
		t.Fatalf("STRICT action: %v, stats %+v", got, st)
	}
}
