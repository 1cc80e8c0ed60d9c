package cassandra_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
)

// TestMarkerWritesBesideLWTs checks, on the real node, how the marker
// partition's plain writes (PutMarker, DeleteMarker, DeleteMarkers: no
// lightweight transaction) mix with its LWTs (InsertMarker IF NOT EXISTS,
// CommitMarker, DeleteMarkerIf), whose write timestamps come from their
// Paxos ballots, not from the plain writes' clock:
//
//   - one after the other (each sent once the previous one answered), every
//     mix is applied in order, with the default server-side timestamps and
//     with client-side ones: the node stamps plain writes and ballots
//     from one monotonic clock, and a client on a clock that agrees with it
//     stamps later;
//   - a plain write sent again with a fresh timestamp (what the driver does
//     when it retries a write whose answer was lost) overrides an LWT
//     applied in between: a re-sent delete removes another execution's
//     lease. The guards therefore delete markers only with DeleteMarkerIf,
//     whose re-send is refused by its condition;
//   - a plain write stamped by a clock ahead of the node's (a client
//     timestamp, or an explicit USING TIMESTAMP from a skewed clock)
//     hides an LWT insert made after it: the insert reports applied, and
//     no one can read it. That is why marker writes are not given explicit
//     timestamps.
func TestMarkerWritesBesideLWTs(t *testing.T) {
	cfg := testConfig(t)
	for _, gen := range []string{cassandra.ServerTimestamps, cassandra.ClientTimestamps} {
		c := cfg
		c.TimestampGenerator = gen
		s := newStore(t, c)
		ctx := t.Context()
		scope := storetest.UniqueScope(t)
		const rounds = 30
		for i := range rounds {
			tx := fmt.Sprintf("tx-%s-%d", gen, i)
			k := eventstore.MarkerKey{Scope: scope, TxID: tx, Span: 1, Kind: "process", Site: "worker:charge"}
			lease := func(owner string) {
				t.Helper()
				applied, existing, err := s.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: owner}, time.Minute)
				if err != nil || !applied {
					t.Fatalf("%s round %d: lease of %s: applied=%v existing=%+v err=%v", gen, i, owner, applied, existing, err)
				}
			}
			expect := func(what string, state eventstore.MarkerState, owner string) {
				t.Helper()
				m, err := s.GetMarker(ctx, k)
				switch {
				case state == "" && !errors.Is(err, eventstore.ErrNotFound):
					t.Fatalf("%s round %d: after %s: marker %+v (%v), want none", gen, i, what, m, err)
				case state != "" && (err != nil || m.State != state || m.Owner != owner):
					t.Fatalf("%s round %d: after %s: marker %+v (%v), want %s of %s", gen, i, what, m, err, state, owner)
				}
			}
			// LWT, plain delete, LWT.
			lease("a")
			if err := s.DeleteMarker(ctx, k); err != nil {
				t.Fatal(err)
			}
			expect("a plain delete of an LWT lease", "", "")
			lease("b")
			expect("an LWT insert after a plain delete", eventstore.MarkerLeased, "b")
			// LWT, plain put, LWT delete, plain put.
			put := eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "b", Reply: []byte("r"), TTL: time.Hour}
			if err := s.PutMarker(ctx, put); err != nil {
				t.Fatal(err)
			}
			expect("a plain put over an LWT lease", eventstore.MarkerCommitted, "b")
			if applied, _, err := s.DeleteMarkerIf(ctx, k, eventstore.MarkerCommitted, "b"); err != nil || !applied {
				t.Fatalf("%s round %d: DeleteMarkerIf of a plain put: applied=%v err=%v", gen, i, applied, err)
			}
			expect("an LWT delete of a plain put", "", "")
			put.Owner = "c"
			if err := s.PutMarker(ctx, put); err != nil {
				t.Fatal(err)
			}
			expect("a plain put after an LWT delete", eventstore.MarkerCommitted, "c")
			// Plain partition delete, LWT.
			if err := s.DeleteMarkers(ctx, scope, tx); err != nil {
				t.Fatal(err)
			}
			expect("a partition delete", "", "")
			lease("d")
			expect("an LWT insert after a partition delete", eventstore.MarkerLeased, "d")
		}
	}

	s := newStore(t, cfg)
	ctx := t.Context()
	scope := storetest.UniqueScope(t)
	k := eventstore.MarkerKey{Scope: scope, TxID: "tx-resend", Span: 1, Kind: "process", Site: "worker:charge"}
	insert := func(owner string) bool {
		t.Helper()
		applied, _, err := s.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: owner}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return applied
	}
	// A re-sent plain delete removes the lease taken after its first send.
	insert("a")
	if err := s.DeleteMarker(ctx, k); err != nil {
		t.Fatal(err)
	}
	if !insert("b") {
		t.Fatal("lease of b not applied after a's delete")
	}
	if err := s.DeleteMarker(ctx, k); err != nil { // the re-send
		t.Fatal(err)
	}
	if _, err := s.GetMarker(ctx, k); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("b's lease survived a re-sent plain delete (%v): the node no longer behaves as this test documents", err)
	}
	// A re-sent conditional delete does not.
	insert("a")
	if applied, _, err := s.DeleteMarkerIf(ctx, k, eventstore.MarkerLeased, "a"); err != nil || !applied {
		t.Fatalf("DeleteMarkerIf of a's lease: applied=%v err=%v", applied, err)
	}
	insert("b")
	if applied, existing, err := s.DeleteMarkerIf(ctx, k, eventstore.MarkerLeased, "a"); err != nil || applied || existing.Owner != "b" {
		t.Fatalf("re-sent DeleteMarkerIf of a's lease: applied=%v existing=%+v err=%v, want refused by b's lease", applied, existing, err)
	}
	if m, err := s.GetMarker(ctx, k); err != nil || m.Owner != "b" {
		t.Fatalf("b's lease after a re-sent DeleteMarkerIf: %+v (%v)", m, err)
	}

	// A plain delete stamped a few seconds ahead of the node's clock hides
	// the LWT insert that follows it.
	cl := gocql.NewCluster(cfg.ContactPoints...)
	cl.Keyspace = cfg.Keyspace
	session, err := cl.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	ahead := eventstore.MarkerKey{Scope: scope, TxID: "tx-ahead", Span: 1, Kind: "process", Site: "worker:charge"}
	if err := session.Query(`DELETE FROM es_execution_markers USING TIMESTAMP ? WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ? AND span = ? AND kind = ? AND site = ?`,
		time.Now().Add(5*time.Second).UnixMicro(), ahead.Region, ahead.Cluster, ahead.Service, ahead.TxID, ahead.Span, ahead.Kind, ahead.Site).ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	applied, _, err := s.InsertMarker(ctx, eventstore.Marker{MarkerKey: ahead, State: eventstore.MarkerLeased, Owner: "e"}, time.Minute)
	if err != nil || !applied {
		t.Fatalf("LWT insert after a delete stamped ahead: applied=%v err=%v", applied, err)
	}
	if m, err := s.GetMarker(ctx, ahead); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("the LWT insert after a delete stamped 5s ahead is visible (%+v, %v): the node no longer behaves as this test documents", m, err)
	}
}
