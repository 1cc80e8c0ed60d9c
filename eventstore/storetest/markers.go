package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

func markerKey(scope eventstore.Scope, txID string, span int, kind, site string) eventstore.MarkerKey {
	return eventstore.MarkerKey{Scope: scope, TxID: txID, Span: span, Kind: kind, Site: site}
}

func testMarkerLease(t *testing.T, e *env) {
	ctx := t.Context()
	k := markerKey(e.scope, "tx-lease", 1, "process", "worker:payment-service")
	lease := eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "pod-a#1"}
	applied, _, err := e.store.InsertMarker(ctx, lease, 30*time.Second)
	must(t, err, "InsertMarker")
	if !applied {
		t.Fatal("first InsertMarker not applied")
	}
	applied, existing, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "pod-b#1"}, 30*time.Second)
	must(t, err, "second InsertMarker")
	if applied {
		t.Fatal("second InsertMarker applied over a live lease")
	}
	if existing.Owner != "pod-a#1" || existing.State != eventstore.MarkerLeased || existing.MarkerKey != k {
		t.Fatalf("existing marker %+v, want pod-a#1's lease", existing)
	}
	if existing.TTL <= 0 || existing.TTL > 30*time.Second {
		t.Fatalf("existing lease TTL %v, want in (0, 30s]", existing.TTL)
	}
	got, err := e.store.GetMarker(ctx, k)
	must(t, err, "GetMarker")
	if got.Owner != "pod-a#1" || got.State != eventstore.MarkerLeased || got.TTL <= 0 || got.TTL > 30*time.Second || got.TTL%time.Second != 0 {
		t.Fatalf("GetMarker %+v, want pod-a#1's lease with a TTL of whole seconds in (0, 30s]", got)
	}
	if got.UpdatedAt.IsZero() {
		t.Fatal("GetMarker: UpdatedAt not set by the store")
	}

	// Commit: permanent, with the reply.
	commit := eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "pod-a#1", Reply: []byte("reply-bytes"), UpdatedAt: base}
	must(t, e.store.PutMarker(ctx, commit), "PutMarker")
	got, err = e.store.GetMarker(ctx, k)
	must(t, err, "GetMarker after commit")
	if got.State != eventstore.MarkerCommitted || got.TTL != 0 || string(got.Reply) != "reply-bytes" || !got.UpdatedAt.Equal(base) {
		t.Fatalf("committed marker %+v, want COMMITTED, TTL 0, the reply and UpdatedAt %v", got, base)
	}
	applied, existing, err = e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "pod-c#1"}, 30*time.Second)
	must(t, err, "InsertMarker over a committed marker")
	if applied || existing.State != eventstore.MarkerCommitted || existing.TTL != 0 || string(existing.Reply) != "reply-bytes" {
		t.Fatalf("InsertMarker over committed marker: applied=%v existing=%+v", applied, existing)
	}
}

func testMarkerPermanentInsert(t *testing.T, e *env) {
	ctx := t.Context()
	k := markerKey(e.scope, "tx-perm", 0, "revert", "worker:inventory-service")
	m := eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCompensatedEmpty, Owner: "pod-a"}
	applied, _, err := e.store.InsertMarker(ctx, m, 0)
	must(t, err, "InsertMarker without lease")
	if !applied {
		t.Fatal("InsertMarker without lease not applied")
	}
	got, err := e.store.GetMarker(ctx, k)
	must(t, err, "GetMarker")
	if got.TTL != 0 || got.State != eventstore.MarkerCompensatedEmpty {
		t.Fatalf("permanent marker %+v, want COMPENSATED_EMPTY with TTL 0", got)
	}
	applied, existing, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "pod-b"}, 5*time.Second)
	must(t, err, "InsertMarker over a permanent marker")
	if applied || existing.State != eventstore.MarkerCompensatedEmpty || existing.TTL != 0 {
		t.Fatalf("InsertMarker over a permanent marker: applied=%v existing=%+v", applied, existing)
	}
}

func testMarkerDelete(t *testing.T, e *env) {
	ctx := t.Context()
	k := markerKey(e.scope, "tx-del", 3, "process", "orchestrator")
	_, err := e.store.GetMarker(ctx, k)
	mustIs(t, err, eventstore.ErrNotFound, "GetMarker before insert")
	applied, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "a"}, time.Minute)
	must(t, err, "InsertMarker")
	if !applied {
		t.Fatal("InsertMarker not applied")
	}
	must(t, e.store.DeleteMarker(ctx, k), "DeleteMarker")
	must(t, e.store.DeleteMarker(ctx, k), "DeleteMarker twice")
	_, err = e.store.GetMarker(ctx, k)
	mustIs(t, err, eventstore.ErrNotFound, "GetMarker after DeleteMarker")
	applied, _, err = e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "b"}, time.Minute)
	must(t, err, "InsertMarker after DeleteMarker")
	if !applied {
		t.Fatal("InsertMarker after DeleteMarker not applied")
	}
}

func testMarkersPartitionDelete(t *testing.T, e *env) {
	ctx := t.Context()
	const tx = "tx-markers"
	keys := []eventstore.MarkerKey{
		markerKey(e.scope, tx, 2, "process", "worker:b"),
		markerKey(e.scope, tx, 0, "revert", "worker:a"),
		markerKey(e.scope, tx, 0, "process", "worker:a"),
		markerKey(e.scope, tx, 1, "process", "worker:b"),
		markerKey(e.scope, tx, 0, "process", "orchestrator"),
		markerKey(e.scope, tx, 10, "process", "worker:c"),
	}
	for i, k := range keys {
		if i%2 == 0 {
			must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o"}), "PutMarker")
			continue
		}
		applied, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "o"}, time.Minute)
		must(t, err, "InsertMarker")
		if !applied {
			t.Fatalf("InsertMarker %+v not applied", k)
		}
	}
	neighbour := markerKey(e.scope, "tx-neighbour", 0, "process", "worker:a")
	must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: neighbour, State: eventstore.MarkerCommitted, Owner: "n"}), "PutMarker neighbour")

	list, err := e.store.ListMarkers(ctx, e.scope, tx)
	must(t, err, "ListMarkers")
	var order []string
	for _, m := range list {
		order = append(order, fmt.Sprintf("%d/%s/%s", m.Span, m.Kind, m.Site))
	}
	want := "[0/process/orchestrator 0/process/worker:a 0/revert/worker:a 1/process/worker:b 2/process/worker:b 10/process/worker:c]"
	if fmt.Sprint(order) != want {
		t.Fatalf("ListMarkers order %v, want %s", order, want)
	}

	must(t, e.store.DeleteMarkers(ctx, e.scope, tx), "DeleteMarkers")
	list, err = e.store.ListMarkers(ctx, e.scope, tx)
	must(t, err, "ListMarkers after DeleteMarkers")
	if len(list) != 0 {
		t.Fatalf("markers left after the partition delete: %+v", list)
	}
	for _, k := range keys {
		if _, err := e.store.GetMarker(ctx, k); !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("GetMarker %+v after DeleteMarkers: %v, want ErrNotFound", k, err)
		}
	}
	if _, err := e.store.GetMarker(ctx, neighbour); err != nil {
		t.Fatalf("DeleteMarkers removed another saga's marker: %v", err)
	}
	// A late duplicate after the saga ended can lease again.
	applied, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: keys[0], State: eventstore.MarkerLeased, Owner: "late"}, time.Minute)
	must(t, err, "InsertMarker after DeleteMarkers")
	if !applied {
		t.Fatal("InsertMarker after DeleteMarkers not applied")
	}
}

func testConcurrentInsert(t *testing.T, e *env) {
	ctx := t.Context()
	k := markerKey(e.scope, "tx-race", 4, "process", "worker:payment-service")
	n := e.f.Concurrency
	type result struct {
		applied  bool
		existing eventstore.Marker
		err      error
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			m := eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: fmt.Sprintf("owner-%d", i)}
			applied, existing, err := e.store.InsertMarker(ctx, m, time.Minute)
			results[i] = result{applied, existing, err}
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("goroutine %d: InsertMarker: %v", i, r.err)
		}
		if r.applied {
			if winner >= 0 {
				t.Fatalf("goroutines %d and %d both applied the conditional insert", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("none of %d goroutines applied the conditional insert", n)
	}
	wantOwner := fmt.Sprintf("owner-%d", winner)
	for i, r := range results {
		if i != winner && r.existing.Owner != wantOwner {
			t.Fatalf("goroutine %d saw existing owner %q, want the winner %q", i, r.existing.Owner, wantOwner)
		}
	}
	got, err := e.store.GetMarker(ctx, k)
	must(t, err, "GetMarker")
	if got.Owner != wantOwner {
		t.Fatalf("stored owner %q, want the winner %q", got.Owner, wantOwner)
	}
}

func testMarkerTTLExpiry(t *testing.T, e *env) {
	ctx := t.Context()
	const tx = "tx-ttl"
	k := markerKey(e.scope, tx, 0, "process", "worker:a")
	perm := markerKey(e.scope, tx, 1, "process", "worker:a")
	must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: perm, State: eventstore.MarkerCommitted, Owner: "p"}), "PutMarker")
	// Inserted on a whole second, the lease lasts its full TTL (see
	// testMarkerTTLFromWholeSecond for inserts within a second).
	e.advanceToFraction(0)
	// 1.2s is rounded up to a 2s lease.
	applied, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "crashed-pod"}, 1200*time.Millisecond)
	must(t, err, "InsertMarker")
	if !applied {
		t.Fatal("InsertMarker not applied")
	}
	if got, err := e.store.GetMarker(ctx, k); err == nil {
		if got.TTL <= 0 || got.TTL > 2*time.Second {
			t.Fatalf("fresh lease TTL %v, want in (0, 2s]", got.TTL)
		}
	} else if e.f.Advance != nil || !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("GetMarker of a fresh lease: %v", err)
	}
	if e.f.Advance != nil {
		e.f.Advance(1500 * time.Millisecond)
		got, err := e.store.GetMarker(ctx, k)
		must(t, err, "GetMarker 1.5s into a lease of 1.2s (rounded up to 2s)")
		if got.TTL != time.Second {
			t.Fatalf("TTL 1.5s into a 2s lease: %v, want 1s (rounded up)", got.TTL)
		}
	}
	e.eventually(t, "lease expired", 500*time.Millisecond, func() bool {
		_, err := e.store.GetMarker(ctx, k)
		if err != nil && !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("GetMarker: %v", err)
		}
		return err != nil
	})
	list, err := e.store.ListMarkers(ctx, e.scope, tx)
	must(t, err, "ListMarkers")
	if len(list) != 1 || list[0].Span != 1 {
		t.Fatalf("ListMarkers after expiry %+v, want only the permanent marker", list)
	}
	applied, _, err = e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "next-pod"}, time.Minute)
	must(t, err, "InsertMarker after expiry")
	if !applied {
		t.Fatal("InsertMarker after the lease expired not applied")
	}
	if _, err := e.store.GetMarker(ctx, perm); err != nil {
		t.Fatalf("permanent marker gone: %v", err)
	}
}

// advanceToFraction moves a virtual clock forward to the next instant that
// is frac into a second (now, if it is); without one it does nothing.
func (e *env) advanceToFraction(frac time.Duration) {
	if e.f.Advance == nil {
		return
	}
	now := e.f.Now()
	if d := (frac - now.Sub(now.Truncate(time.Second)) + time.Second) % time.Second; d > 0 {
		e.f.Advance(d)
	}
}

// testMarkerTTLFromWholeSecond: a marker inserted with a TTL at time t
// expires at t truncated to whole seconds plus the TTL, as Cassandra
// computes it (the insert's time in whole seconds plus the TTL): a 2s
// lease inserted at x.9 is gone at x+2, 1.1s later. A guard relies on
// this to bound its handler's deadline, so a store that expires later than
// Cassandra would hide a guard that trusts the full TTL.
func testMarkerTTLFromWholeSecond(t *testing.T, e *env) {
	ctx := t.Context()
	const lease = 2 * time.Second
	insert := func(k eventstore.MarkerKey) {
		t.Helper()
		applied, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "o"}, lease)
		must(t, err, "InsertMarker")
		if !applied {
			t.Fatal("InsertMarker not applied")
		}
	}
	get := func(k eventstore.MarkerKey) (eventstore.Marker, bool) {
		t.Helper()
		m, err := e.store.GetMarker(ctx, k)
		if errors.Is(err, eventstore.ErrNotFound) {
			return m, false
		}
		must(t, err, "GetMarker")
		return m, true
	}

	if e.f.Advance != nil {
		// Inserted at x.9: alive at x+1.95 with 1s left (rounded up),
		// gone at x+2.05.
		late := markerKey(e.scope, "tx-ttl-late", 0, "process", "worker:a")
		e.advanceToFraction(900 * time.Millisecond)
		insert(late)
		e.f.Advance(1050 * time.Millisecond)
		if m, ok := get(late); !ok || m.TTL != time.Second {
			t.Fatalf("2s lease inserted at x.9, read at x+1.95: %+v (found %v), want alive with TTL 1s", m, ok)
		}
		e.f.Advance(100 * time.Millisecond)
		if m, ok := get(late); ok {
			t.Fatalf("2s lease inserted at x.9 still alive at x+2.05 (TTL %v): its expiry must count from x", m.TTL)
		}
		// Inserted on a whole second: alive for the full TTL.
		whole := markerKey(e.scope, "tx-ttl-whole", 0, "process", "worker:a")
		e.advanceToFraction(0)
		insert(whole)
		e.f.Advance(lease - time.Nanosecond)
		if _, ok := get(whole); !ok {
			t.Fatal("2s lease inserted at x.0 gone before x+2")
		}
		e.f.Advance(time.Nanosecond)
		if _, ok := get(whole); ok {
			t.Fatal("2s lease inserted at x.0 alive at x+2")
		}
		return
	}

	// Real time: insert at about x.6 and watch the marker until it is
	// gone. It must be alive for any read answered before x+2, and gone
	// for any read sent at x+2 or later (where exact expiry would keep it
	// until x+2.6). An insert answered in a later second than it was sent
	// says nothing (its server time is unknown): try again.
	for attempt := 1; attempt <= 5; attempt++ {
		k := markerKey(e.scope, fmt.Sprintf("tx-ttl-real-%d", attempt), 0, "process", "worker:a")
		now := e.f.Now()
		if d := (600*time.Millisecond - now.Sub(now.Truncate(time.Second)) + time.Second) % time.Second; d > 0 {
			time.Sleep(d)
		}
		sent := e.f.Now()
		insert(k)
		answered := e.f.Now()
		if !sent.Truncate(time.Second).Equal(answered.Truncate(time.Second)) {
			t.Logf("attempt %d: insert sent at %s answered at %s, in the next second; trying again", attempt,
				sent.Format("15:04:05.000"), answered.Format("15:04:05.000"))
			continue
		}
		expiry := sent.Truncate(time.Second).Add(lease)
		for {
			readSent := e.f.Now()
			m, ok := get(k)
			readAnswered := e.f.Now()
			switch {
			case ok && !readSent.Before(expiry):
				t.Fatalf("2s lease inserted at %s still alive at %s (TTL %v): it must expire at %s, its insert second plus its TTL",
					sent.Format("15:04:05.000"), readSent.Format("15:04:05.000"), m.TTL, expiry.Format("15:04:05.000"))
			case !ok && readAnswered.Before(expiry):
				t.Fatalf("2s lease inserted at %s gone at %s, before %s", sent.Format("15:04:05.000"),
					readAnswered.Format("15:04:05.000"), expiry.Format("15:04:05.000"))
			case !ok:
				return
			}
			if t.Context().Err() != nil || e.f.Now().Sub(sent) > e.f.Timeout {
				t.Fatalf("lease inserted at %s still alive after %v", sent.Format("15:04:05.000"), e.f.Timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Fatal("no insert was answered in the second it was sent (inserts too slow?)")
}

// testPutMarkerTTL: a marker put with a TTL (a committed marker's
// retention) expires; one put without stays.
func testPutMarkerTTL(t *testing.T, e *env) {
	ctx := t.Context()
	const tx = "tx-put-ttl"
	k := markerKey(e.scope, tx, 0, "process", "worker:a")
	perm := markerKey(e.scope, tx, 1, "process", "worker:a")
	must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: perm, State: eventstore.MarkerCommitted, Owner: "p"}), "PutMarker permanent")
	e.advanceToFraction(0)
	must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", Reply: []byte("r"), TTL: 1500 * time.Millisecond}), "PutMarker with a TTL")
	got, err := e.store.GetMarker(ctx, k)
	must(t, err, "GetMarker of a fresh marker with a TTL")
	if got.State != eventstore.MarkerCommitted || string(got.Reply) != "r" {
		t.Fatalf("marker read back %+v", got)
	}
	e.advance(2500 * time.Millisecond)
	e.eventually(t, "marker with a TTL expired", 500*time.Millisecond, func() bool {
		_, err := e.store.GetMarker(ctx, k)
		if err != nil && !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("GetMarker: %v", err)
		}
		return err != nil
	})
	if _, err := e.store.GetMarker(ctx, perm); err != nil {
		t.Fatalf("the permanent marker: %v", err)
	}
}

// testCommitMarker: CommitMarker replaces its owner's live lease, and only
// that, with the committed marker, which then outlives the lease's TTL;
// anything else (another owner's lease, no marker, an expired lease, a
// committed or compensated-empty marker) is left alone and reported.
func testCommitMarker(t *testing.T, e *env) {
	ctx := t.Context()
	const tx = "tx-commit"
	k := markerKey(e.scope, tx, 1, "process", "worker:payment-service")
	other := markerKey(e.scope, tx, 2, "process", "worker:payment-service")
	// The leases live 5s: on a loaded CI box with Cassandra the four LWTs
	// between the inserts and the owner's commit took over a second.
	const lease = 5 * time.Second
	e.advanceToFraction(0)
	for _, key := range []eventstore.MarkerKey{k, other} {
		applied, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: key, State: eventstore.MarkerLeased, Owner: "pod-a#1"}, lease)
		must(t, err, "InsertMarker")
		if !applied {
			t.Fatal("InsertMarker not applied")
		}
	}
	commit := eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "pod-a#1", Reply: []byte("reply"), TTL: time.Hour, UpdatedAt: base}

	// Another owner's commit is refused and reports the lease.
	wrong := commit
	wrong.Owner = "pod-b#1"
	applied, existing, err := e.store.CommitMarker(ctx, wrong)
	must(t, err, "CommitMarker by another owner")
	if applied || existing.State != eventstore.MarkerLeased || existing.Owner != "pod-a#1" {
		t.Fatalf("CommitMarker by another owner: applied=%v existing=%+v, want refused with pod-a#1's lease", applied, existing)
	}
	// No marker at all: refused, nothing found, nothing written.
	none := commit
	none.MarkerKey = markerKey(e.scope, tx, 3, "process", "worker:payment-service")
	applied, existing, err = e.store.CommitMarker(ctx, none)
	must(t, err, "CommitMarker without a lease")
	if applied || existing.State != "" {
		t.Fatalf("CommitMarker without a lease: applied=%v existing=%+v, want refused with no marker", applied, existing)
	}
	_, err = e.store.GetMarker(ctx, none.MarkerKey)
	mustIs(t, err, eventstore.ErrNotFound, "GetMarker after a refused CommitMarker")

	// The owner's commit replaces its lease.
	applied, _, err = e.store.CommitMarker(ctx, commit)
	must(t, err, "CommitMarker")
	if !applied {
		t.Fatal("CommitMarker of the owner's live lease not applied")
	}
	check := func(what string) {
		t.Helper()
		got, err := e.store.GetMarker(ctx, k)
		must(t, err, "GetMarker "+what)
		if got.State != eventstore.MarkerCommitted || got.Owner != "pod-a#1" || string(got.Reply) != "reply" || !got.UpdatedAt.Equal(base) ||
			got.TTL <= time.Hour-time.Minute || got.TTL > time.Hour {
			t.Fatalf("committed marker %s: %+v, want COMMITTED by pod-a#1 with the reply, UpdatedAt %v and a TTL of about 1h", what, got, base)
		}
	}
	check("after CommitMarker")
	// A second commit (another try) finds the commit: refused, reported.
	applied, existing, err = e.store.CommitMarker(ctx, commit)
	must(t, err, "CommitMarker again")
	if applied || existing.State != eventstore.MarkerCommitted || existing.Owner != "pod-a#1" {
		t.Fatalf("CommitMarker over the commit: applied=%v existing=%+v", applied, existing)
	}

	// Past the lease's TTL the commit is still there (its own TTL), the
	// other lease is gone and can no longer be committed.
	e.advance(lease + 500*time.Millisecond)
	e.eventually(t, "the uncommitted lease expired", 500*time.Millisecond, func() bool {
		_, err := e.store.GetMarker(ctx, other)
		if err != nil && !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("GetMarker: %v", err)
		}
		return err != nil
	})
	check("after its lease's TTL")
	list, err := e.store.ListMarkers(ctx, e.scope, tx)
	must(t, err, "ListMarkers")
	if len(list) != 1 || list[0].MarkerKey != k || list[0].State != eventstore.MarkerCommitted {
		t.Fatalf("ListMarkers %+v, want only the commit", list)
	}
	late := commit
	late.MarkerKey = other
	applied, existing, err = e.store.CommitMarker(ctx, late)
	must(t, err, "CommitMarker of an expired lease")
	if applied || existing.State != "" {
		t.Fatalf("CommitMarker of an expired lease: applied=%v existing=%+v, want refused with no marker", applied, existing)
	}
	applied, existing, err = e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "pod-c#1"}, time.Minute)
	must(t, err, "InsertMarker over the commit")
	if applied || existing.State != eventstore.MarkerCommitted || string(existing.Reply) != "reply" {
		t.Fatalf("InsertMarker over the commit: applied=%v existing=%+v", applied, existing)
	}

	// A compensation recorded empty is not committed over.
	empty := markerKey(e.scope, tx, 4, "process", "worker:payment-service")
	applied, _, err = e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: empty, State: eventstore.MarkerCompensatedEmpty, Owner: "pod-a#1"}, time.Hour)
	must(t, err, "InsertMarker COMPENSATED_EMPTY")
	if !applied {
		t.Fatal("InsertMarker COMPENSATED_EMPTY not applied")
	}
	over := commit
	over.MarkerKey = empty
	applied, existing, err = e.store.CommitMarker(ctx, over)
	must(t, err, "CommitMarker over COMPENSATED_EMPTY")
	if applied || existing.State != eventstore.MarkerCompensatedEmpty {
		t.Fatalf("CommitMarker over COMPENSATED_EMPTY: applied=%v existing=%+v", applied, existing)
	}

	// A permanent commit (TTL 0).
	perm := markerKey(e.scope, tx, 5, "revert", "worker:payment-service")
	applied, _, err = e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: perm, State: eventstore.MarkerLeased, Owner: "pod-a#2"}, time.Minute)
	must(t, err, "InsertMarker")
	if !applied {
		t.Fatal("InsertMarker not applied")
	}
	applied, _, err = e.store.CommitMarker(ctx, eventstore.Marker{MarkerKey: perm, State: eventstore.MarkerCommitted, Owner: "pod-a#2"})
	must(t, err, "CommitMarker without TTL")
	if got, err := e.store.GetMarker(ctx, perm); !applied || err != nil || got.State != eventstore.MarkerCommitted || got.TTL != 0 {
		t.Fatalf("permanent commit: applied=%v marker %+v, %v", applied, got, err)
	}
}

// testDeleteMarkerIf: DeleteMarkerIf deletes a marker only in the state
// and of the owner it names, and reports what it found otherwise.
func testDeleteMarkerIf(t *testing.T, e *env) {
	ctx := t.Context()
	k := markerKey(e.scope, "tx-delete-if", 1, "process", "worker:payment-service")
	must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "pod-a#1", Reply: []byte("r"), TTL: time.Hour}), "PutMarker")
	for _, c := range []struct {
		state eventstore.MarkerState
		owner string
	}{{eventstore.MarkerLeased, "pod-a#1"}, {eventstore.MarkerCommitted, "pod-b#1"}} {
		applied, existing, err := e.store.DeleteMarkerIf(ctx, k, c.state, c.owner)
		must(t, err, "DeleteMarkerIf")
		if applied || existing.State != eventstore.MarkerCommitted || existing.Owner != "pod-a#1" {
			t.Fatalf("DeleteMarkerIf(%s, %s): applied=%v existing=%+v, want refused with pod-a#1's commit", c.state, c.owner, applied, existing)
		}
		if _, err := e.store.GetMarker(ctx, k); err != nil {
			t.Fatalf("refused DeleteMarkerIf deleted the marker: %v", err)
		}
	}
	applied, _, err := e.store.DeleteMarkerIf(ctx, k, eventstore.MarkerCommitted, "pod-a#1")
	must(t, err, "DeleteMarkerIf")
	if !applied {
		t.Fatal("DeleteMarkerIf of the matching marker not applied")
	}
	_, err = e.store.GetMarker(ctx, k)
	mustIs(t, err, eventstore.ErrNotFound, "GetMarker after DeleteMarkerIf")
	applied, existing, err := e.store.DeleteMarkerIf(ctx, k, eventstore.MarkerCommitted, "pod-a#1")
	must(t, err, "DeleteMarkerIf of no marker")
	if applied || existing.State != "" {
		t.Fatalf("DeleteMarkerIf of no marker: applied=%v existing=%+v", applied, existing)
	}
	applied, _, err = e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "pod-c#1"}, time.Minute)
	must(t, err, "InsertMarker after DeleteMarkerIf")
	if !applied {
		t.Fatal("InsertMarker after DeleteMarkerIf not applied")
	}
}

// testMarkerTTLReported: a refused InsertMarker reports the remaining TTL
// of the marker it found, as GetMarker does, whatever wrote it: a lease, a
// record inserted with a TTL, a commit of a lease and a put, each with a
// retention TTL; a marker written without one reports 0 (permanent).
func testMarkerTTLReported(t *testing.T, e *env) {
	ctx := t.Context()
	const tx = "tx-ttl-reported"
	const retention = time.Hour
	key := func(span int) eventstore.MarkerKey { return markerKey(e.scope, tx, span, "process", "worker:a") }
	insert := func(k eventstore.MarkerKey, state eventstore.MarkerState, ttl time.Duration) {
		t.Helper()
		applied, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: state, Owner: "o"}, ttl)
		must(t, err, "InsertMarker")
		if !applied {
			t.Fatal("InsertMarker not applied")
		}
	}
	cases := []struct {
		name  string
		write func(k eventstore.MarkerKey)
		ttl   time.Duration // 0: permanent
	}{
		{"lease", func(k eventstore.MarkerKey) { insert(k, eventstore.MarkerLeased, retention) }, retention},
		{"compensated empty inserted with a TTL", func(k eventstore.MarkerKey) { insert(k, eventstore.MarkerCompensatedEmpty, retention) }, retention},
		{"lease committed with a TTL", func(k eventstore.MarkerKey) {
			insert(k, eventstore.MarkerLeased, time.Minute)
			applied, _, err := e.store.CommitMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", Reply: []byte("r"), TTL: retention})
			must(t, err, "CommitMarker")
			if !applied {
				t.Fatal("CommitMarker not applied")
			}
		}, retention},
		{"put with a TTL", func(k eventstore.MarkerKey) {
			must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", Reply: []byte("r"), TTL: retention}), "PutMarker")
		}, retention},
		{"put over a lease with a TTL", func(k eventstore.MarkerKey) {
			insert(k, eventstore.MarkerLeased, time.Minute)
			must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", Reply: []byte("r"), TTL: retention}), "PutMarker")
		}, retention},
		{"permanent put over a lease", func(k eventstore.MarkerKey) {
			insert(k, eventstore.MarkerLeased, time.Minute)
			must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", Reply: []byte("r")}), "PutMarker")
		}, 0},
		{"permanent commit", func(k eventstore.MarkerKey) {
			insert(k, eventstore.MarkerLeased, time.Minute)
			applied, _, err := e.store.CommitMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", Reply: []byte("r")})
			must(t, err, "CommitMarker")
			if !applied {
				t.Fatal("CommitMarker not applied")
			}
		}, 0},
	}
	for i, c := range cases {
		k := key(i)
		c.write(k)
		applied, existing, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "other"}, 5*time.Second)
		must(t, err, "InsertMarker over "+c.name)
		if applied {
			t.Fatalf("%s: InsertMarker applied over it", c.name)
		}
		got, err := e.store.GetMarker(ctx, k)
		must(t, err, "GetMarker "+c.name)
		if c.ttl == 0 {
			if existing.TTL != 0 || got.TTL != 0 {
				t.Errorf("%s: refused InsertMarker reports TTL %v, GetMarker %v, want 0 (permanent) for both", c.name, existing.TTL, got.TTL)
			}
			continue
		}
		// Both read within a minute of the write: within a minute of the
		// TTL, in whole seconds, and within a few seconds of each other.
		for what, ttl := range map[string]time.Duration{"refused InsertMarker": existing.TTL, "GetMarker": got.TTL} {
			if ttl <= c.ttl-time.Minute || ttl > c.ttl || ttl%time.Second != 0 {
				t.Errorf("%s: %s reports TTL %v, want whole seconds in (%v, %v]", c.name, what, ttl, c.ttl-time.Minute, c.ttl)
			}
		}
		if d := existing.TTL - got.TTL; d < -5*time.Second || d > 5*time.Second {
			t.Errorf("%s: refused InsertMarker reports TTL %v, GetMarker %v: they disagree", c.name, existing.TTL, got.TTL)
		}
	}
}

// testMarkerExpiryLimit: a marker whose TTL would end after
// eventstore.MaxMarkerExpiry (2038-01-19T03:14:06Z, the latest expiry
// Cassandra stores in its default storage compatibility mode) is refused
// with ErrInvalid by every write that takes a TTL, and nothing is written;
// one ending a day before it is written.
func testMarkerExpiryLimit(t *testing.T, e *env) {
	ctx := t.Context()
	const tx = "tx-expiry-limit"
	now := e.f.Now()
	within := eventstore.MaxMarkerExpiry.Sub(now) - 24*time.Hour
	past := eventstore.MaxMarkerExpiry.Sub(now) + 24*time.Hour
	if within <= 0 {
		t.Fatalf("the clock (%v) is within a day of %v: this check needs an earlier clock", now, eventstore.MaxMarkerExpiry)
	}
	refused := func(what string, k eventstore.MarkerKey, err error) {
		t.Helper()
		if !errors.Is(err, eventstore.ErrInvalid) || !strings.Contains(err.Error(), "2038-01-19T03:14:06Z") {
			t.Fatalf("%s with a TTL of %v (ending after %v): error %v, want ErrInvalid naming 2038-01-19T03:14:06Z", what, past, eventstore.MaxMarkerExpiry, err)
		}
		if m, err := e.store.GetMarker(ctx, k); !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("%s refused, but GetMarker finds %+v (%v)", what, m, err)
		}
	}
	k := markerKey(e.scope, tx, 0, "process", "worker:a")
	_, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCompensatedEmpty, Owner: "o"}, past)
	refused("InsertMarker", k, err)
	err = e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", TTL: past})
	refused("PutMarker", k, err)
	applied, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "o"}, time.Minute)
	must(t, err, "InsertMarker")
	if !applied {
		t.Fatal("InsertMarker not applied")
	}
	_, _, err = e.store.CommitMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", TTL: past})
	if !errors.Is(err, eventstore.ErrInvalid) || !strings.Contains(err.Error(), "2038-01-19T03:14:06Z") {
		t.Fatalf("CommitMarker with a TTL of %v: error %v, want ErrInvalid naming 2038-01-19T03:14:06Z", past, err)
	}
	if m, err := e.store.GetMarker(ctx, k); err != nil || m.State != eventstore.MarkerLeased {
		t.Fatalf("CommitMarker refused, but the lease is now %+v (%v)", m, err)
	}

	for i, write := range []func(k eventstore.MarkerKey) error{
		func(k eventstore.MarkerKey) error {
			_, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCompensatedEmpty, Owner: "o"}, within)
			return err
		},
		func(k eventstore.MarkerKey) error {
			return e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", TTL: within})
		},
		func(k eventstore.MarkerKey) error {
			if _, _, err := e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "o"}, time.Minute); err != nil {
				return err
			}
			_, _, err := e.store.CommitMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", TTL: within})
			return err
		},
	} {
		k := markerKey(e.scope, tx, i+1, "process", "worker:a")
		must(t, write(k), fmt.Sprintf("write %d with a TTL of %v", i, within))
		m, err := e.store.GetMarker(ctx, k)
		must(t, err, "GetMarker")
		if m.TTL <= within-time.Minute || m.TTL > within+time.Second {
			t.Fatalf("write %d with a TTL of %v reads TTL %v", i, within, m.TTL)
		}
	}
}
