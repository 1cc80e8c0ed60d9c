package writeprotect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Leases too short to leave the handler any time once a second is lost to
// Cassandra's whole-second TTLs (issue 14 item 1), and leases longer than
// a consumer can wait for (item 3), are refused at load, naming the key and
// the bound.
func TestLeaseBoundsAtLoad(t *testing.T) {
	const prefix = "stacksaga.cassandra.write-protection."
	for _, tc := range []struct {
		name, yaml, env, key, bound string
	}{
		{"default too short", "default-lease-duration: 1s", "", "default-lease-duration", "at least 2s"},
		{"default too short, sub-second", "default-lease-duration: 500ms", "", "default-lease-duration", "at least 2s"},
		{"domain too short", "domains:\n        d:\n          mode: STRICT\n          lease-duration: 1s", "", "domains.d.lease-duration", "at least 2s"},
		{"default too long", "default-lease-duration: 6m", "", "default-lease-duration", "at most 5m0s"},
		{"domain too long", "domains:\n        d:\n          lease-duration: PT1H", "", "domains.d.lease-duration", "at most 5m0s"},
		{"env too short", "default-mode: STRICT", "1s", "default-lease-duration", "at least 2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			if tc.env != "" {
				env[writeprotect.EnvDefaultLease] = tc.env
			}
			doc := "stacksaga:\n  cassandra:\n    write-protection:\n      " + tc.yaml + "\n"
			_, err := writeprotect.LoadConfigWithEnv([]byte(doc), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if !errors.Is(err, writeprotect.ErrInvalidConfig) || !strings.Contains(err.Error(), prefix+tc.key+": ") ||
				!strings.Contains(err.Error(), tc.bound) {
				t.Fatalf("LoadConfig(%q): %v; want an error naming %s and %q", tc.yaml, err, prefix+tc.key, tc.bound)
			}
		})
	}
	for _, ok := range []string{"2s", "1500ms", "5m", "PT5M"} {
		doc := "stacksaga:\n  cassandra:\n    write-protection:\n      default-lease-duration: " + ok + "\n"
		if _, err := writeprotect.LoadConfigWithEnv([]byte(doc), nil); err != nil {
			t.Errorf("lease %s refused: %v", ok, err)
		}
	}
	if writeprotect.MinLease != 2*time.Second || writeprotect.MaxLease != 5*time.Minute {
		t.Fatalf("MinLease %v, MaxLease %v", writeprotect.MinLease, writeprotect.MaxLease)
	}
}

// A guard whose clock-skew margin leaves a configured lease no time to run
// refuses it in New, naming the key and the minimum for that margin.
func TestClockSkewRaisesMinimumLease(t *testing.T) {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	cfg := writeprotect.Config{DefaultLease: 5 * time.Second, Domains: map[string]writeprotect.DomainConfig{"d": {Mode: writeprotect.Strict, Lease: 2 * time.Second}}}
	if _, err := writeprotect.New(s, cfg); err != nil {
		t.Fatalf("default skew: %v", err)
	}
	_, err := writeprotect.New(s, cfg, writeprotect.WithClockSkew(time.Second))
	if !errors.Is(err, writeprotect.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "stacksaga.cassandra.write-protection.domains.d.lease-duration: ") ||
		!strings.Contains(err.Error(), "at least 3s") {
		t.Fatalf("New with a 1s skew and a 2s lease: %v; want the key and a 3s minimum", err)
	}
	if _, err := writeprotect.New(s, cfg, writeprotect.WithClockSkew(-time.Second)); err == nil {
		t.Fatal("negative skew accepted")
	}
	if _, err := writeprotect.New(s, cfg, writeprotect.WithMaxLeaseWait(0)); err == nil {
		t.Fatal("zero max lease wait accepted")
	}
}

// Issue 14, check of item 3: a duplicate waiting for another execution's
// lease waits inside the worker's poll loop, with rebalances blocked. The
// wait is bounded in real time (WithMaxLeaseWait), whatever the lease, and
// ends with ErrLeaseHeld; the command is retried later. The guard's clock
// stands still here, so only that bound can end the wait.
func TestMaxLeaseWait(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []topics.Kind{topics.KindProcess, topics.KindRevert} {
		t.Run(string(kind), func(t *testing.T) {
			b := memoryBackend(t)
			b.lease = 5 * time.Minute
			g := b.guard(t, writeprotect.Strict, writeprotect.WithMaxLeaseWait(300*time.Millisecond))
			scope := uniqueScope(t)
			// A live lease on the action: its own command, or the
			// compensation's barrier, waits for it.
			proc := command(scope, "tx-max-wait", 1, topics.KindProcess)
			if ok, _, err := b.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: writeprotect.MarkerKeyFor(proc), State: eventstore.MarkerLeased, Owner: "other/1"}, b.lease); !ok || err != nil {
				t.Fatal(ok, err)
			}
			cmd := command(scope, "tx-max-wait", 1, kind)
			cmd.ActionDone = kind == topics.KindRevert
			var h handler
			begin := time.Now()
			_, err := g.Execute(ctx, cmd, h.run(cmd))
			took := time.Since(begin)
			if !errors.Is(err, writeprotect.ErrLeaseHeld) || !strings.Contains(err.Error(), "owner other/1") {
				t.Fatalf("Execute: %v, want ErrLeaseHeld naming the owner", err)
			}
			if took < 300*time.Millisecond || took > 10*time.Second {
				t.Fatalf("gave up after %v, want just over the 300ms maximum", took)
			}
			if h.runs.Load() != 0 || g.Stats().LeaseHeld != 1 || g.Stats().LeaseWaits != 1 {
				t.Fatalf("runs %d, stats %+v", h.runs.Load(), g.Stats())
			}
		})
	}
}

// Without WithMaxLeaseWait the wait is bounded by DefaultMaxLeaseWait
// (10s), not by the lease (here 5 minutes, on a clock that stands still).
func TestDefaultMaxLeaseWait(t *testing.T) {
	if writeprotect.DefaultMaxLeaseWait != 10*time.Second {
		t.Fatalf("DefaultMaxLeaseWait %v", writeprotect.DefaultMaxLeaseWait)
	}
	b := memoryBackend(t)
	b.lease = 5 * time.Minute
	g := b.guard(t, writeprotect.Strict, writeprotect.WithBackoff(10*time.Millisecond, 250*time.Millisecond))
	cmd := command(uniqueScope(t), "tx-default-wait", 1, topics.KindProcess)
	if ok, _, err := b.store.InsertMarker(context.Background(), eventstore.Marker{MarkerKey: writeprotect.MarkerKeyFor(cmd), State: eventstore.MarkerLeased, Owner: "other/1"}, b.lease); !ok || err != nil {
		t.Fatal(ok, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var h handler
	begin := time.Now()
	_, err := g.Execute(ctx, cmd, h.run(cmd))
	if took := time.Since(begin); !errors.Is(err, writeprotect.ErrLeaseHeld) || took < writeprotect.DefaultMaxLeaseWait || took > 30*time.Second {
		t.Fatalf("Execute: %v after %v; want ErrLeaseHeld after about %v", err, took, writeprotect.DefaultMaxLeaseWait)
	}
}
