package orchestrator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/topics"
)

// gateOrch is an orchestrator registering version 1 only, at a fixed
// clock, on the memory store and a closed loopback port (nothing is sent).
func gateOrch(t *testing.T, now time.Time, opts ...Option) *Orchestrator[struct{}] {
	t.Helper()
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	d := Domain[struct{}]{Name: "gate-orders", Versions: []Definition[struct{}]{{Version: 1,
		OnNext: Sequence[struct{}](Step{Service: "stock", Endpoint: "reserve"})}}}
	o, err := New("orders", d, append([]Option{WithBrokers("127.0.0.1:1"), WithStore(store), WithClock(func() time.Time { return now })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// Every path that writes a saga goes through the gate, which checks, by
// path: the saga's version is registered (where the path decides), the
// attempt's reply claim is held (in a share group), and the step's
// remaining time is taken (where the path keeps it).
func TestGateOverEveryWritePath(t *testing.T) {
	now := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	cases := []struct {
		path                      writePath
		decides, claim, keepsTime bool
	}{
		{pathReply, true, true, false},
		{pathShareReply, true, true, false},
		{pathStepTimer, true, true, false},
		{pathTimerRecord, true, false, false},
		{pathRedrive, false, false, false},
		{pathDeadline, true, false, false},
		{pathCancel, true, true, true},
		{pathTerminate, false, true, false},
		{pathRestore, false, false, false},
		{pathResume, true, false, false},
	}
	if len(cases) != int(numPaths) {
		t.Fatalf("%d paths in the table, %d in the gate", len(cases), numPaths)
	}
	cg := gateOrch(t, now)
	share := gateOrch(t, now, WithGroupType(topics.GroupShare))
	saga := func(def int) eventstore.Transaction {
		return eventstore.Transaction{TxID: "t1", Domain: "gate-orders", State: eventstore.StateInProgress, Span: 0,
			Kind: string(topics.KindProcess), Endpoint: "stock/reserve", Attempt: 1, Version: 3, Definition: def}
	}
	for _, c := range cases {
		name := pathRules[c.path].name
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// (a) the version.
			unknown := saga(2)
			before := cg.stats.unknownVersion.Load()
			_, err := cg.gate(ctx, &unknown, c.path)
			if got := errors.Is(err, ErrUnknownVersion); got != c.decides {
				t.Errorf("saga of an unregistered version: %v, want ErrUnknownVersion %v", err, c.decides)
			}
			if c.decides && cg.stats.unknownVersion.Load() != before+1 {
				t.Errorf("unknown version not counted")
			}
			known := saga(1)
			if _, err := cg.gate(ctx, &known, c.path); err != nil {
				t.Errorf("registered version, consumer group: %v, want admitted", err)
			}
			// (b) the claim, in a share group.
			_, err = share.gate(ctx, &known, c.path)
			if got := errors.Is(err, errClaimNotHeld); got != c.claim {
				t.Errorf("share group without the reply claim: %v, want errClaimNotHeld %v", err, c.claim)
			}
			held := withClaimHeld(ctx, ReplyClaimKey(share.scope, known.TxID, known.Span, known.Kind, known.Attempt))
			if _, err := share.gate(held, &known, c.path); err != nil {
				t.Errorf("share group holding the reply claim: %v, want admitted", err)
			}
			other := withClaimHeld(ctx, ReplyClaimKey(share.scope, known.TxID, known.Span, known.Kind, known.Attempt+1))
			if _, err := share.gate(other, &known, c.path); errors.Is(err, errClaimNotHeld) != c.claim {
				t.Errorf("share group holding another attempt's claim: %v, want errClaimNotHeld %v", err, c.claim)
			}
			parked := saga(1)
			parked.State = eventstore.StateRetryPending
			if _, err := share.gate(ctx, &parked, c.path); err != nil {
				t.Errorf("share group, saga awaiting no reply: %v, want admitted without a claim", err)
			}
			// (c) the step's remaining time.
			timed := saga(1)
			d := cg.stepTimeout(&timed)
			if d <= 2*time.Second {
				t.Fatalf("step timeout %v: the test needs a longer one", d)
			}
			timed.UpdatedAt = now.Add(-(d - 2*time.Second))
			adm, err := cg.gate(ctx, &timed, c.path)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]time.Duration{true: 2 * time.Second}[c.keepsTime]; adm.left != want {
				t.Errorf("remaining time %v, want %v", adm.left, want)
			}
		})
	}
}

// Every path of the gate is used by the code: a path defined but never
// passed to the gate would be a rule no write checks.
func TestGatePathsAreUsed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "gate.go" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, name := range []string{"pathReply", "pathShareReply", "pathStepTimer", "pathTimerRecord", "pathRedrive",
		"pathDeadline", "pathCancel", "pathTerminate", "pathRestore", "pathResume"} {
		if !strings.Contains(src.String(), name) {
			t.Errorf("%s is not passed to the gate outside gate.go", name)
		}
	}
}
