package writeprotect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

const (
	retentionKey = "stacksaga.cassandra.write-protection.marker-retention"
	lifetimeKey  = "stacksaga.cassandra.transaction-lifetime"
	year         = 365 * 24 * time.Hour
)

// A marker retention shorter than the transaction lifetime is refused at
// start, naming both keys: recovery re-sends a step while its saga lives,
// and a step re-sent after its marker expired runs again.
func TestMarkerRetentionCoversLifetime(t *testing.T) {
	if writeprotect.DefaultTransactionLifetime != recovery.DefaultTransactionLifetime {
		t.Fatalf("DefaultTransactionLifetime %v, recovery's %v", writeprotect.DefaultTransactionLifetime, recovery.DefaultTransactionLifetime)
	}
	if writeprotect.EnvTransactionLifetime != recovery.EnvTransactionLifetime {
		t.Fatalf("EnvTransactionLifetime %q, recovery's %q", writeprotect.EnvTransactionLifetime, recovery.EnvTransactionLifetime)
	}
	wp := func(body string) []byte { return []byte("stacksaga:\n  cassandra:\n" + body) }
	refused := func(what string, err error, lifetime, retention string) {
		t.Helper()
		want := retentionKey + ": must be at least " + lifetimeKey + " (" + lifetime + "), got " + retention
		if !errors.Is(err, writeprotect.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", what, err, want)
		}
	}
	_, err := writeprotect.LoadConfigWithEnv(wp("    write-protection:\n      marker-retention: 12h\n"), noEnv)
	refused("12h retention, default lifetime", err, "24h0m0s", "12h0m0s")
	_, err = writeprotect.LoadConfigWithEnv(wp("    transaction-lifetime: 72h\n"), noEnv)
	refused("default retention, 72h lifetime", err, "72h0m0s", "48h0m0s")
	_, err = writeprotect.LoadConfigWithEnv(wp("    transaction:\n      lifetime: 36h\n    write-protection:\n      marker-retention: 30h\n"), noEnv)
	refused("30h retention, 36h lifetime (transaction.lifetime)", err, "36h0m0s", "30h0m0s")
	env := map[string]string{writeprotect.EnvTransactionLifetime: "P3D"}
	_, err = writeprotect.LoadConfigWithEnv(wp("    transaction-lifetime: 24h\n"), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	refused("default retention, 3-day lifetime from the environment", err, "72h0m0s", "48h0m0s")
	_, err = writeprotect.LoadConfigWithEnv(wp("    transaction-lifetime: 24h\n    transaction:\n      lifetime: 12h\n"), noEnv)
	if err == nil || !strings.Contains(err.Error(), lifetimeKey+": disagrees with stacksaga.cassandra.transaction.lifetime") {
		t.Errorf("two lifetimes that disagree: %v", err)
	}
	_, err = writeprotect.LoadConfigWithEnv(wp("    transaction-lifetime: soon\n"), noEnv)
	if err == nil || !strings.Contains(err.Error(), lifetimeKey+": writeprotect: invalid duration") {
		t.Errorf("an unparsable lifetime: %v", err)
	}

	for _, body := range []string{
		"    transaction-lifetime: 6h\n    write-protection:\n      marker-retention: 6h\n",
		"    transaction-lifetime: 72h\n    write-protection:\n      marker-retention: 96h\n",
		"    transaction-lifetime: 72h\n    write-protection:\n      marker-retention: -1s\n",
		"    write-protection:\n      marker-retention: 24h\n",
	} {
		if _, err := writeprotect.LoadConfigWithEnv(wp(body), noEnv); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
	c, err := writeprotect.LoadConfigWithEnv(wp("    transaction-lifetime: 6h\n"), noEnv)
	if err != nil || c.TransactionLifetime != 6*time.Hour {
		t.Errorf("transaction-lifetime 6h loaded as %+v, %v", c, err)
	}

	store := memoryBackend(t).store
	_, err = writeprotect.New(store, writeprotect.Config{MarkerRetention: 2 * time.Hour})
	refused("New with a 2h retention", err, "24h0m0s", "2h0m0s")
	if _, err := writeprotect.New(store, writeprotect.Config{MarkerRetention: 2 * time.Hour, TransactionLifetime: 2 * time.Hour}); err != nil {
		t.Errorf("New with a 2h retention and lifetime: %v", err)
	}
	if _, err := writeprotect.New(store, writeprotect.Config{TransactionLifetime: -time.Hour}); err == nil || !strings.Contains(err.Error(), lifetimeKey+": must be positive") {
		t.Errorf("New with a negative lifetime: %v", err)
	}
}

// A marker retention that would end after 2038-01-19T03:14:06Z, counted
// from the clock at start, is refused naming the key: Cassandra refuses
// every write whose TTL ends later, so every commit would fail.
func TestMarkerRetentionEndsBy2038(t *testing.T) {
	at := func(y int) func() time.Time {
		return func() time.Time { return time.Date(y, 1, 2, 3, 4, 5, 0, time.UTC) }
	}
	store := memoryBackend(t).store
	for _, c := range []struct {
		from      int
		retention time.Duration
		ok        bool
	}{
		{2026, 15 * year, false}, {2026, 20 * year, false}, {2030, 8*year + 20*24*time.Hour, false}, {2030, 8*year + 18*24*time.Hour, true},
		{2026, 11 * year, true}, {2030, 8 * year, true}, {2037, 300 * 24 * time.Hour, true}, {2037, 383 * 24 * time.Hour, false},
	} {
		_, err := writeprotect.New(store, writeprotect.Config{MarkerRetention: c.retention}, writeprotect.WithClock(at(c.from)))
		switch {
		case c.ok && err != nil:
			t.Errorf("retention %v from %d: %v", c.retention, c.from, err)
		case !c.ok && (!errors.Is(err, writeprotect.ErrInvalidConfig) || !strings.Contains(err.Error(), retentionKey+": must end by 2038-01-19T03:14:06Z")):
			t.Errorf("retention %v from %d: %v, want %s refused for ending after 2038-01-19T03:14:06Z", c.retention, c.from, err, retentionKey)
		}
	}
	// LoadConfig counts from the wall clock.
	_, err := writeprotect.LoadConfigWithEnv([]byte("stacksaga:\n  cassandra:\n    write-protection:\n      marker-retention: P5475D\n"), noEnv)
	if !errors.Is(err, writeprotect.ErrInvalidConfig) || !strings.Contains(err.Error(), retentionKey+": must end by 2038-01-19T03:14:06Z") ||
		!strings.Contains(err.Error(), "got 131400h0m0s (5475 days)") {
		t.Errorf("marker-retention P5475D: %v", err)
	}
}

// A guard that outlives the point where its retention would end after
// 2038-01-19T03:14:06Z writes its records with the retention cut short to
// end by then, instead of having every one refused (a commit failure, and
// a duplicate that runs again).
func TestRetentionCutAt2038(t *testing.T) {
	clock := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	store := memory.New(memory.WithClock(clock.Now))
	t.Cleanup(func() { _ = store.Close() })
	guards := map[writeprotect.Mode]*writeprotect.Guard{}
	for _, mode := range []writeprotect.Mode{writeprotect.RelaxedWithDedup, writeprotect.Strict} {
		g, err := writeprotect.New(store, writeprotect.Config{MarkerRetention: 7 * year, Domains: map[string]writeprotect.DomainConfig{testDomain: {Mode: mode}}},
			writeprotect.WithClock(clock.Now), writeprotect.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		guards[mode] = g
	}
	clock.Add(2 * year) // 2032: seven years would end in 2039
	for mode, g := range guards {
		scope := uniqueScope(t)
		cmd := command(scope, "tx-"+string(mode), 1, topics.KindProcess)
		var h handler
		for range 2 {
			if _, err := g.Execute(context.Background(), cmd, h.run(cmd)); err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
		}
		if st := g.Stats(); st.CommitFailures != 0 || h.runs.Load() != 1 {
			t.Fatalf("%s: %d commit failures, step ran %d times; want the record written and the duplicate skipped", mode, st.CommitFailures, h.runs.Load())
		}
		m, err := store.GetMarker(context.Background(), writeprotect.MarkerKeyFor(cmd))
		if err != nil {
			t.Fatal(err)
		}
		if end := clock.Now().Add(m.TTL); end.After(eventstore.MaxMarkerExpiry) || end.Before(eventstore.MaxMarkerExpiry.Add(-time.Minute)) {
			t.Fatalf("%s: the record expires at %v, want within a minute before %v", mode, end, eventstore.MaxMarkerExpiry)
		}
	}
}
