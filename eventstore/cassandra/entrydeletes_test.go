package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
)

// deleteProbe records the statements and batches DeleteRecoveryEntry sends
// and holds the first one (the lone delete of a partition) until released.
type deleteProbe struct {
	mu      sync.Mutex
	sends   [][]string
	first   string        // the transaction id whose send is held
	started chan struct{} // closed when the held send begins
	release chan struct{}
}

func newDeleteProbe(first string) *deleteProbe {
	return &deleteProbe{first: first, started: make(chan struct{}), release: make(chan struct{})}
}

func (p *deleteProbe) sent(ids []string) {
	p.mu.Lock()
	p.sends = append(p.sends, slices.Clone(ids))
	p.mu.Unlock()
	if len(ids) == 1 && ids[0] == p.first {
		close(p.started)
		<-p.release
	}
}

func (p *deleteProbe) sizes() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, s := range p.sends {
		out = append(out, len(s))
	}
	return out
}

// waitQueued waits until n deletes queue behind the held one.
func waitQueued(t *testing.T, s *cassandra.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for cassandra.QueuedDeletes(s) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d deletes queued, want %d", cassandra.QueuedDeletes(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func putEntries(t *testing.T, s *cassandra.Store, scope eventstore.Scope, path eventstore.RecoveryPath, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
		if err := s.PutRecoveryEntry(t.Context(), scope, eventstore.RecoveryEntry{RecoveryPath: path, TxID: ids[i], Domain: "d", Status: string(eventstore.StateInProgress)}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func listEntries(t *testing.T, s *cassandra.Store, scope eventstore.Scope, path eventstore.RecoveryPath) []string {
	t.Helper()
	es, err := s.ListRecoveryEntries(t.Context(), scope, path, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range es {
		ids = append(ids, e.TxID)
	}
	return ids
}

// Deletes of one tier-5 partition that arrive while another is in flight
// go out together when it returns, at most 32 per batch, and each lands;
// another partition's deletes do not wait for them.
func TestRecoveryEntryDeletesShareRoundTrips(t *testing.T) {
	cfg := testConfig(t)
	s := newStore(t, cfg)
	scope := storetest.UniqueScope(t)
	day := time.Now().UTC()
	pathA := eventstore.RecoveryPath{Day: day, MinuteOfDay: 7, InstanceID: "i-1", Bucket: 1}
	pathB := eventstore.RecoveryPath{Day: day, MinuteOfDay: 7, InstanceID: "i-1", Bucket: 3}
	idsA := putEntries(t, s, scope, pathA, "a", 70)
	idsB := putEntries(t, s, scope, pathB, "b", 5)
	keep := putEntries(t, s, scope, pathA, "keep", 1) // never deleted: the batches name their rows only

	probe := newDeleteProbe(idsA[0])
	cassandra.SetDeleteHook(s, probe.sent)
	s.ResetStats()
	ctx := t.Context()
	errs := make(chan error, len(idsA)+len(idsB))
	del := func(path eventstore.RecoveryPath, id string) {
		errs <- s.DeleteRecoveryEntry(ctx, scope, path, id)
	}
	go del(pathA, idsA[0])
	<-probe.started
	for _, id := range idsA[1:] {
		go del(pathA, id)
	}
	waitQueued(t, s, len(idsA)-1)
	// pathB is another partition: its deletes are not held behind pathA's.
	var wg sync.WaitGroup
	for _, id := range idsB {
		wg.Go(func() {
			if err := s.DeleteRecoveryEntry(ctx, scope, pathB, id); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := listEntries(t, s, scope, pathB); len(got) != 0 {
		t.Fatalf("bucket B keeps %v after its deletes returned", got)
	}
	if n := cassandra.QueuedDeletes(s); n != len(idsA)-1 {
		t.Fatalf("%d deletes of bucket A queued after bucket B's, want %d", n, len(idsA)-1)
	}
	close(probe.release)
	for range idsA {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := listEntries(t, s, scope, pathA); !slices.Equal(got, keep) {
		t.Fatalf("bucket A holds %v after the deletes, want %v", got, keep)
	}
	// A's lone delete, then its 69 queued ones in batches of 32, 32 and 5;
	// B's five in one to five round trips (they ran concurrently).
	sizes := probe.sizes()
	var a, b []int
	for i, ids := range probe.sends {
		if ids[0][0] == 'a' {
			a = append(a, sizes[i])
		} else {
			b = append(b, sizes[i])
		}
	}
	if !slices.Equal(a, []int{1, 32, 32, 5}) {
		t.Errorf("bucket A went out as %v, want [1 32 32 5]", a)
	}
	sumB := 0
	for _, n := range b {
		sumB += n
	}
	if sumB != len(idsB) {
		t.Errorf("bucket B went out as %v, want %d deletes", b, len(idsB))
	}
	st := s.Stats()
	if got, want := st.Writes+st.Batches, int64(len(a)+len(b)); got != want {
		t.Errorf("%d write round trips for %d deletes, want %d (%+v)", got, len(idsA)+len(idsB), want, st)
	}
	if got := st.Tables[cassandra.TableRecoveryByInstance].Writes; got != int64(len(idsA)+len(idsB)) {
		t.Errorf("%d recovery-entry deletes counted, want %d", got, len(idsA)+len(idsB))
	}
}

// A batch that fails fails every delete it carried; a caller whose context
// ends while its delete waits returns at once.
func TestRecoveryEntryDeletesReportTheirBatch(t *testing.T) {
	cfg := testConfig(t)
	s := newStore(t, cfg)
	scope := storetest.UniqueScope(t)
	path := eventstore.RecoveryPath{Day: time.Now(), MinuteOfDay: 9, InstanceID: "i-2", Bucket: 5}
	ids := putEntries(t, s, scope, path, "a", 6)

	probe := newDeleteProbe(ids[0])
	cassandra.SetDeleteHook(s, probe.sent)
	errs := make(chan error, len(ids))
	go func() { errs <- s.DeleteRecoveryEntry(t.Context(), scope, path, ids[0]) }()
	<-probe.started
	for _, id := range ids[1:4] {
		go func() { errs <- s.DeleteRecoveryEntry(t.Context(), scope, path, id) }()
	}
	waitQueued(t, s, 3)
	ctx, cancel := context.WithCancel(t.Context())
	canceled := make(chan error, 1)
	go func() { canceled <- s.DeleteRecoveryEntry(ctx, scope, path, ids[4]) }()
	waitQueued(t, s, 4)
	cancel()
	if err := <-canceled; !errors.Is(err, context.Canceled) {
		t.Fatalf("a delete whose context ended while queued returned %v, want context.Canceled", err)
	}
	// Close the store under the held delete: it and the batch queued
	// behind it fail, each caller with ErrClosed.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	close(probe.release)
	for range 4 {
		if err := <-errs; !errors.Is(err, eventstore.ErrClosed) {
			t.Errorf("a delete sent after Close returned %v, want ErrClosed", err)
		}
	}
	if got := probe.sizes(); !slices.Equal(got, []int{1, 4}) {
		t.Errorf("sent %v, want [1 4] (the canceled caller's delete stays in its batch)", got)
	}
}
