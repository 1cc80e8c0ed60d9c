package writeprotect_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// insertTimingStore records when each conditional insert was sent and
// when its answer came back (real time).
type insertTimingStore struct {
	eventstore.Store
	mu    sync.Mutex
	spans [][2]time.Time
}

func (s *insertTimingStore) InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (bool, eventstore.Marker, error) {
	sent := time.Now()
	applied, existing, err := s.Store.InsertMarker(ctx, m, lease)
	s.mu.Lock()
	s.spans = append(s.spans, [2]time.Time{sent, time.Now()})
	s.mu.Unlock()
	return applied, existing, err
}

func (s *insertTimingStore) first() (sent, answered time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.spans) == 0 {
		return time.Time{}, time.Time{}, false
	}
	return s.spans[0][0], s.spans[0][1], true
}

// sleepUntilFraction sleeps until the wall clock is frac into a second.
func sleepUntilFraction(frac time.Duration) {
	now := time.Now()
	d := frac - now.Sub(now.Truncate(time.Second))
	if d < 0 {
		d += time.Second
	}
	time.Sleep(d)
}

// Issue 14 item 1: Cassandra computes a TTL's expiry from the insert time
// truncated to whole seconds, so a 2s lease taken at x.85 is gone at x+2,
// 1.15s later. A handler that honours its context must never run past
// the lease: two guards, a 2s lease, a handler that takes 1.2s unless its
// context ends first; the lease is taken late in a second. The run must
// still hold its lease when it ends, and the second guard must never run
// the step while the first runs.
func TestStrictLeaseOutlivesHandlerCassandra(t *testing.T) {
	b, _ := cassandraBackend(t)
	checkLeaseOutlivesHandler(t, b)
}

// The same on the memory store on the wall clock, which models Cassandra's
// truncation.
func TestStrictLeaseOutlivesHandlerMemory(t *testing.T) {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	checkLeaseOutlivesHandler(t, &backend{name: "memory", store: s, lease: 2 * time.Second})
}

func checkLeaseOutlivesHandler(t *testing.T, b *backend) {
	if b.lease != 2*time.Second {
		t.Fatalf("lease %v, want 2s", b.lease)
	}
	timing := &insertTimingStore{Store: b.store}
	first := *b
	first.store = timing
	ga := first.guard(t, writeprotect.Strict, writeprotect.WithOwner("a"))
	gb := b.guard(t, writeprotect.Strict, writeprotect.WithOwner("b"))
	scope := uniqueScope(t)

	var cur, maxCur atomic.Int64
	var mu sync.Mutex
	var violations []string
	run := func(cmd *topics.Envelope, who string, started chan<- struct{}) func(context.Context) *topics.Envelope {
		return func(ctx context.Context) *topics.Envelope {
			c := cur.Add(1)
			for m := maxCur.Load(); c > m && !maxCur.CompareAndSwap(m, c); m = maxCur.Load() {
			}
			if started != nil {
				close(started)
			}
			outcome, msg := topics.OutcomeOK, ""
			timer := time.NewTimer(1200 * time.Millisecond)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				outcome, msg = topics.OutcomeRetryable, ctx.Err().Error()
			}
			// The run ends here: its lease must still be its own.
			ended := time.Now()
			m, err := b.store.GetMarker(context.Background(), writeprotect.MarkerKeyFor(cmd))
			if err != nil || m.State != eventstore.MarkerLeased || !strings.HasPrefix(m.Owner, who+"/") {
				mu.Lock()
				violations = append(violations, fmt.Sprintf("%s: run of %s ended at %s holding no lease: marker %s owned by %q, %v",
					b.name, who, ended.Format("15:04:05.000"), m.State, m.Owner, err))
				mu.Unlock()
			}
			cur.Add(-1)
			return &topics.Envelope{Outcome: outcome, Error: msg, Payload: pl(who)}
		}
	}

	conclusive := false
	for attempt := 1; attempt <= 8 && !conclusive; attempt++ {
		cmd := command(scope, fmt.Sprintf("tx-truncated-lease-%d", attempt), 1, topics.KindProcess)
		timing.mu.Lock()
		timing.spans = nil
		timing.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		started := make(chan struct{})
		aDone := make(chan error, 1)
		// Late in a second: the truncation costs most of a second.
		sleepUntilFraction(820 * time.Millisecond)
		go func() {
			_, err := ga.Execute(ctx, cmd, run(cmd, "a", started))
			aDone <- err
		}()
		var aErr error
		ran := false
		select {
		case <-started:
			ran = true
		case aErr = <-aDone:
		}
		var wg sync.WaitGroup
		if ran {
			wg.Go(func() {
				for ctx.Err() == nil {
					if _, err := gb.Execute(ctx, cmd, run(cmd, "b", nil)); err == nil {
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
			aErr = <-aDone
		}
		wg.Wait()
		cancel()
		if ran && aErr != nil {
			t.Fatalf("attempt %d: first guard: %v", attempt, aErr)
		}
		if !ran && !errors.Is(aErr, writeprotect.ErrLeaseExpired) {
			t.Fatalf("attempt %d: first guard did not run: %v", attempt, aErr)
		}
		sent, answered, ok := timing.first()
		// The insert landed in the second it was sent, late in it: with
		// the old arithmetic the run outlives the lease.
		conclusive = ran && ok && sent.Truncate(time.Second).Equal(answered.Truncate(time.Second)) &&
			sent.Sub(sent.Truncate(time.Second)) >= 800*time.Millisecond
		t.Logf("attempt %d: insert sent %s, answered %s, ran %v, conclusive %v", attempt,
			sent.Format("15:04:05.000"), answered.Format("15:04:05.000"), ran, conclusive)
		mu.Lock()
		v := violations
		mu.Unlock()
		if len(v) > 0 || maxCur.Load() > 1 {
			t.Fatalf("attempt %d: the step ran outside its lease (%d runs at once at most):\n%s", attempt, maxCur.Load(), strings.Join(v, "\n"))
		}
	}
	if !conclusive {
		t.Fatal("no attempt took its lease late in a second and within it (inserts too slow?)")
	}
	if st := sumStats(ga, gb); st.LeaseOverruns != 0 || st.LostLeases != 0 {
		t.Fatalf("stats %+v", st)
	}
}
