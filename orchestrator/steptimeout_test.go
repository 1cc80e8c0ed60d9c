package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// A step that outruns its step timeout (set for the charge endpoint
// alone) fails retryably and is retried in process; its late reply is
// ignored as stale. With STRICT write protection the retry does not run
// the step again: the first attempt committed its marker, and the second
// gets its recorded reply.
func TestStepTimeoutRetriesASlowStep(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.guarded, r.guardMode = true, writeprotect.Strict
		r.slowChargeOnce.Store(3000)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		cfg := recovery.DefaultConfig()
		timeout := 500 * time.Millisecond
		cfg.Retry.DefaultEndpoints = map[string]recovery.RetryOverride{r.svcPay + "/charge": {StepTimeout: &timeout}}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		o, _ := r.startOrchestrator(orchestrator.WithRecovery(cfg))
		ids := startConcurrently(t, o, 5)
		waitStates(t, o, 2*time.Minute, ids, eventstore.StateCompleted)
		for _, id := range ids {
			if n := r.runsOf(id, 1, topics.KindProcess); n != 1 {
				t.Errorf("%s: charge ran %d times, want once (STRICT: the retry gets the first attempt's recorded reply)", id, n)
			}
			h, err := o.History(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			// The charge attempts: each timed out but the last, which got
			// the first attempt's recorded reply (the later ones queue
			// behind the slow first on the saga's key, and may time out
			// too).
			var charges []string
			for _, tr := range h {
				if tr.Span == 1 && tr.Kind == string(topics.KindProcess) {
					charges = append(charges, fmt.Sprintf("attempt %d %s %q", tr.Attempt, tr.Outcome, tr.Error))
				}
			}
			ok := len(charges) >= 2
			for i, c := range charges {
				last := i == len(charges)-1
				ok = ok && strings.HasPrefix(c, fmt.Sprintf("attempt %d ", i+1)) &&
					(last && strings.Contains(c, " ok ") || !last && strings.Contains(c, "retryable \"step timed out"))
			}
			if !ok {
				t.Errorf("%s: charge attempts %q, want timed-out attempts then one ok", id, charges)
			}
			// Reserve (no timeout of its own beyond the default 30s) once.
			if n := r.runsOf(id, 0, topics.KindProcess); n != 1 {
				t.Errorf("%s: reserve ran %d times", id, n)
			}
		}
		if st := o.Stats(); st.TimedOut < int64(len(ids)) {
			t.Errorf("TimedOut = %d, want at least %d", st.TimedOut, len(ids))
		}
		// The first attempts' late replies arrive and are ignored.
		waitStats(t, o, "the late replies, ignored as stale", func(st orchestrator.Stats) bool { return st.StaleReplies >= int64(len(ids)) })
		for _, id := range ids {
			if s, _ := o.Get(context.Background(), id); s.State != eventstore.StateCompleted {
				t.Errorf("%s: %s after the late reply, want COMPLETED", id, s.State)
			}
		}
	})
}

// The default step timeout is 30 s and every step gets it.
func TestDefaultStepTimeout(t *testing.T) {
	if d := recovery.DefaultConfig().RetryPolicy("any", "svc/ep").StepTimeout; d != 30*time.Second {
		t.Errorf("default step timeout %v, want 30s", d)
	}
}

// A command lost on its way (FaultLoseCommand: the orchestrator stays
// alive) is failed by its step timer and retried: the saga completes, the
// step runs once, the saga is not counted abandoned.
func TestLostCommandRetriedAtItsStepTimeout(t *testing.T) {
	r := newRig(t, "memory")
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	cfg := recovery.DefaultConfig()
	// Long enough that the retried charge answers within it on a loaded
	// machine (at 300 ms the CI box timed the retry out too and ran the
	// charge again, legitimately: nothing guards it), short enough to keep
	// the test quick.
	timeout := 3 * time.Second
	cfg.Retry.DefaultEndpoints = map[string]recovery.RetryOverride{r.svcPay + "/charge": {StepTimeout: &timeout}}
	lost := map[string]bool{}
	var mu sync.Mutex
	fault := func(p orchestrator.FaultPoint, txID string) bool {
		mu.Lock()
		defer mu.Unlock()
		// The second command of each saga (its charge) is lost once.
		if p != orchestrator.FaultLoseCommand {
			return false
		}
		n := lost[txID+"/n"]
		lost[txID+"/n"] = true
		if n && !lost[txID] {
			lost[txID] = true
			return true
		}
		return false
	}
	o, _ := r.startOrchestrator(orchestrator.WithRecovery(cfg), orchestrator.WithFaultInjection(fault))
	ids := startConcurrently(t, o, 4)
	waitStates(t, o, time.Minute, ids, eventstore.StateCompleted)
	for _, id := range ids {
		if n := r.runsOf(id, 1, topics.KindProcess); n != 1 {
			t.Errorf("%s: charge ran %d times, want once (its first command was lost)", id, n)
		}
	}
	if st := o.Stats(); st.TimedOut != int64(len(ids)) || st.Abandoned != 0 {
		t.Errorf("stats %+v: want %d timed out, none abandoned", st, len(ids))
	}
}
