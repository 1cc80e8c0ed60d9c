package writeprotect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// cassandraBackend gives a test a Cassandra store on a fresh keyspace
// (dropped at the end) with the schema applied. Leases expire in real
// time, so the scenarios use a short one.
func cassandraBackend(t testing.TB) (*backend, *cassandra.Store) {
	t.Helper()
	hosts, keyspace := testenv.CassandraKeyspace(t)
	cfg := cassandra.Config{
		ContactPoints:  hosts,
		Keyspace:       keyspace,
		Replication:    cassandra.SimpleReplication(1),
		RequestTimeout: 20 * time.Second, // LWTs on a small shared machine
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cassandra.ApplySchemaWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s, err := cassandra.New(ctx, cfg, cassandra.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &backend{name: "cassandra", store: s, lease: 2 * time.Second}, s
}

func TestCassandra(t *testing.T) {
	b, _ := cassandraBackend(t)
	runScenarios(t, scale{concurrentTxs: 10, instances: 4, raceTxs: 20}, func(*testing.T) *backend { return b })
}

// cassandraCounter reads the store's own statement counters.
type cassandraCounter struct{ s *cassandra.Store }

func (c cassandraCounter) reset() { c.s.ResetStats() }
func (c cassandraCounter) counts() stmts {
	st := c.s.Stats()
	return stmts{Reads: st.Reads, Writes: st.Writes + st.Batches, LWTs: st.LWTs}
}

// The statements per step of the package documentation, as Cassandra
// counts them.
func TestStatementsCassandra(t *testing.T) {
	b, s := cassandraBackend(t)
	checkStatements(t, b, cassandraCounter{s})
}

// On the real node: a marker retention ending after 2038-01-19T03:14:06Z
// is refused at start naming the key (the node refuses such a TTL, so
// every commit would fail and a sequential duplicate run again); the
// longest one accepted at start, computed from the clock, records
// outcomes that the node keeps, in both modes.
func TestCassandraMarkerRetentionEndsBy2038(t *testing.T) {
	b, s := cassandraBackend(t)
	ctx := t.Context()
	scope := uniqueScope(t)

	// The node itself refuses a TTL ending after the limit.
	past := time.Until(eventstore.MaxMarkerExpiry) + 24*time.Hour
	k := eventstore.MarkerKey{Scope: scope, TxID: "tx-node", Kind: "process", Site: "worker:charge"}
	if err := s.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", TTL: past}); err == nil {
		t.Fatalf("a marker put with a TTL of %v (ending after %v) was accepted", past, eventstore.MaxMarkerExpiry)
	}

	for _, r := range []time.Duration{15 * year, 20 * year} {
		_, err := writeprotect.New(b.store, writeprotect.Config{MarkerRetention: r}, writeprotect.WithLogger(quietLogger()))
		if !errors.Is(err, writeprotect.ErrInvalidConfig) || !strings.Contains(err.Error(), retentionKey+": must end by 2038-01-19T03:14:06Z") {
			t.Errorf("New with a retention of %v: %v, want %s refused for ending after 2038-01-19T03:14:06Z", r, err, retentionKey)
		}
	}

	longest := eventstore.MaxMarkerExpiry.Sub(time.Now().Truncate(time.Second)) - time.Second
	for _, mode := range []writeprotect.Mode{writeprotect.RelaxedWithDedup, writeprotect.Strict} {
		g, err := writeprotect.New(b.store, writeprotect.Config{MarkerRetention: longest, DefaultLease: b.lease, Domains: map[string]writeprotect.DomainConfig{testDomain: {Mode: mode}}},
			writeprotect.WithLogger(quietLogger()))
		if err != nil {
			t.Fatalf("%s: New with the longest retention (%v): %v", mode, longest, err)
		}
		cmd := command(scope, "tx-"+string(mode), 1, topics.KindProcess)
		var h handler
		for range 2 {
			if _, err := g.Execute(ctx, cmd, h.run(cmd)); err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
		}
		if st := g.Stats(); st.CommitFailures != 0 || h.runs.Load() != 1 {
			t.Fatalf("%s: %d commit failures, step ran %d times; want the record kept and the duplicate skipped", mode, st.CommitFailures, h.runs.Load())
		}
		m, err := s.GetMarker(ctx, writeprotect.MarkerKeyFor(cmd))
		if err != nil {
			t.Fatal(err)
		}
		if end := time.Now().Add(m.TTL); end.After(eventstore.MaxMarkerExpiry.Add(time.Second)) || end.Before(eventstore.MaxMarkerExpiry.Add(-time.Minute)) {
			t.Fatalf("%s: the record expires at %v, want within a minute before %v", mode, end, eventstore.MaxMarkerExpiry)
		}
	}
}

// On the real node: a step re-sent after its marker expired runs again,
// so a marker retention shorter than the transaction lifetime (within
// which recovery re-sends steps) is refused at start, naming both keys;
// the default retention records outcomes that outlive the lifetime.
func TestCassandraMarkerRetentionCoversLifetime(t *testing.T) {
	b, s := cassandraBackend(t)
	ctx := t.Context()
	scope := uniqueScope(t)
	g := b.guard(t, writeprotect.RelaxedWithDedup)
	cmd := command(scope, "tx-expired", 1, topics.KindProcess)
	var h handler
	if _, err := g.Execute(ctx, cmd, h.run(cmd)); err != nil {
		t.Fatal(err)
	}
	key := writeprotect.MarkerKeyFor(cmd)
	m, err := s.GetMarker(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if m.TTL <= writeprotect.DefaultTransactionLifetime {
		t.Fatalf("a record of the default retention lives %v, not beyond the transaction lifetime (%v)", m.TTL, writeprotect.DefaultTransactionLifetime)
	}
	// The record as a one-second retention would have written it: once it
	// expired, the step re-sent runs again.
	m.TTL = time.Second
	if err := s.PutMarker(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the record expired", func() bool {
		_, err := s.GetMarker(ctx, key)
		return errors.Is(err, eventstore.ErrNotFound)
	})
	if _, err := g.Execute(ctx, cmd, h.run(cmd)); err != nil {
		t.Fatal(err)
	}
	if n := h.runs.Load(); n != 2 {
		t.Fatalf("the step re-sent after its record expired ran %d times in all, want 2 (it runs again)", n)
	}

	_, err = writeprotect.New(b.store, writeprotect.Config{MarkerRetention: 2 * time.Hour}, writeprotect.WithLogger(quietLogger()))
	if want := retentionKey + ": must be at least " + lifetimeKey + " (24h0m0s), got 2h0m0s"; !errors.Is(err, writeprotect.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
		t.Fatalf("New with a 2h retention and the default lifetime: %v, want %q", err, want)
	}
}

// resendStore records the last marker delete a guard sent, so that a test
// can send it again as the driver does when it retries a write whose
// answer was lost (a plain write with a fresh timestamp).
type resendStore struct {
	eventstore.Store
	resend func() error
}

func (s *resendStore) DeleteMarker(ctx context.Context, key eventstore.MarkerKey) error {
	s.resend = func() error { return s.Store.DeleteMarker(context.Background(), key) }
	return s.Store.DeleteMarker(ctx, key)
}

func (s *resendStore) DeleteMarkerIf(ctx context.Context, key eventstore.MarkerKey, state eventstore.MarkerState, owner string) (bool, eventstore.Marker, error) {
	s.resend = func() error {
		_, _, err := s.Store.DeleteMarkerIf(context.Background(), key, state, owner)
		return err
	}
	return s.Store.DeleteMarkerIf(ctx, key, state, owner)
}

// On the real node: the marker a fenced execution created (its STRICT
// lease, or a compensation's COMPENSATED_EMPTY) is deleted so that its
// own delete, sent again after another execution took the step's marker,
// leaves that marker alone: the delete is conditional on the marker's
// state and owner (a plain delete re-sent with a fresh timestamp removes
// whatever marker is there, see eventstore/cassandra's
// TestMarkerWritesBesideLWTs).
func TestCassandraFencedDeleteResent(t *testing.T) {
	b, s := cassandraBackend(t)
	ctx := t.Context()
	rs := &resendStore{Store: s}
	b.store = rs
	g := b.guard(t, writeprotect.Strict, writeprotect.WithTerminalFence())
	for _, kind := range []topics.Kind{topics.KindProcess, topics.KindRevert} {
		scope := uniqueScope(t)
		tx := "tx-fenced-" + string(kind)
		if err := s.CreateTransaction(ctx, eventstore.Transaction{Scope: scope, TxID: tx, State: eventstore.StateCompleted}, nil); err != nil {
			t.Fatal(err)
		}
		cmd := command(scope, tx, 1, kind)
		var h handler
		rs.resend = nil
		if rep, err := g.Execute(ctx, cmd, h.run(cmd)); err != nil || rep != nil || h.runs.Load() != 0 {
			t.Fatalf("%s of an ended saga: reply %v, err %v, %d runs; want it fenced", kind, rep, err, h.runs.Load())
		}
		if rs.resend == nil {
			t.Fatalf("%s: the fenced execution deleted no marker", kind)
		}
		key := writeprotect.MarkerKeyFor(cmd)
		key.Kind = string(topics.KindProcess) // a compensation's barrier writes on its action's key
		if _, err := s.GetMarker(ctx, key); !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("%s: marker left by the fenced execution: %v", kind, err)
		}
		applied, _, err := s.InsertMarker(ctx, eventstore.Marker{MarkerKey: key, State: eventstore.MarkerLeased, Owner: "another-execution"}, time.Minute)
		if err != nil || !applied {
			t.Fatalf("%s: another execution's lease: applied=%v err=%v", kind, applied, err)
		}
		if err := rs.resend(); err != nil {
			t.Fatal(err)
		}
		if m, err := s.GetMarker(ctx, key); err != nil || m.Owner != "another-execution" {
			t.Fatalf("%s: another execution's lease after the fenced execution's delete was sent again: %+v (%v), want it kept", kind, m, err)
		}
	}
}
