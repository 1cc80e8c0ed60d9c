package orchestrator_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// waitState waits until the saga is in state want.
func waitState(t *testing.T, o *orchestrator.Orchestrator[order], id string, want eventstore.State) *orchestrator.Saga[order] {
	t.Helper()
	var s *orchestrator.Saga[order]
	waitFor(t, time.Minute, string(want), func() bool {
		var err error
		s, err = o.Get(context.Background(), id)
		return err == nil && s.State == want
	})
	return s
}

// A step pauses the saga; a second orchestrator instance resumes it with a
// context the next step's handler receives; a second resume is a no-op;
// wrong and stale keys are refused.
func TestPauseResumeForward(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.pauseCharge.Store(true)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		o, _ := r.startOrchestrator()
		ids := startConcurrently(t, o, 3)
		ctx := context.Background()
		for _, id := range ids {
			s := waitState(t, o, id, eventstore.StatePaused)
			if s.PauseEvent != "PAYMENT_AUTHORISATION" || !s.PausedUntil.IsZero() || s.Span != 1 {
				t.Fatalf("paused saga: event %q until %v span %d", s.PauseEvent, s.PausedUntil, s.Span)
			}
		}
		// Another instance of the domain (not running Run) resumes.
		other, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...), orchestrator.WithStore(r.store))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		key := topics.IdempotencyKey(ids[0], 1, topics.KindProcess)
		var ce *orchestrator.CorrelationError
		if _, err := other.Resume(ctx, ids[0], "nonsense", nil); !errors.As(err, &ce) || ce.Stale {
			t.Errorf("wrong key: %v", err)
		}
		if _, err := other.Resume(ctx, ids[0], topics.IdempotencyKey(ids[0], 0, topics.KindProcess), nil); !errors.As(err, &ce) || !ce.Stale {
			t.Errorf("stale key: %v", err)
		}
		if _, err := other.Resume(ctx, ids[0], topics.IdempotencyKey(ids[1], 1, topics.KindProcess), nil); !errors.Is(err, orchestrator.ErrCorrelationKey) {
			t.Errorf("another saga's key: %v", err)
		}
		if s, _ := o.Get(ctx, ids[0]); s.State != eventstore.StatePaused {
			t.Fatalf("refused resumes changed the saga to %s", s.State)
		}
		for _, id := range ids {
			res, err := other.Resume(ctx, id, topics.IdempotencyKey(id, 1, topics.KindProcess), map[string]string{"auth": "ok-" + id})
			if err != nil || !res.Continued {
				t.Fatalf("resume %s: %+v %v", id, res, err)
			}
		}
		expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
		if res, err := other.Resume(ctx, ids[0], key, nil); err != nil || !res.AlreadyResumed {
			t.Errorf("second resume: %+v %v, want AlreadyResumed", res, err)
		}
		for _, id := range ids {
			r.mu.Lock()
			rc := r.resumed[id+"/2/process"]
			r.mu.Unlock()
			if rc["auth"] != "ok-"+id {
				t.Errorf("%s: ship got resume context %v", id, rc)
			}
			if n := r.runsOf(id, 1, topics.KindProcess); n != 1 {
				t.Errorf("%s: charge ran %d times", id, n)
			}
			if n := r.runsOf(id, 2, topics.KindProcess); n != 1 {
				t.Errorf("%s: ship ran %d times", id, n)
			}
			h, _ := o.History(ctx, id)
			var found bool
			for _, tr := range h {
				if tr.Outcome == "resumed" {
					var rc map[string]string
					found = msgpack.Unmarshal(tr.ResumeContext, &rc) == nil && rc["auth"] == "ok-"+id && tr.Error == "PAYMENT_AUTHORISATION"
				}
			}
			if !found {
				t.Errorf("%s: no resumed tryout with the context in %+v", id, h)
			}
		}
	})
}

// A compensation pauses (refund initiated); on resume the compensation
// goes on with the next revert.
func TestPauseInCompensation(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.failShip.Store(true)
		r.pauseRefund.Store(true)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		o, _ := r.startOrchestrator()
		ids := startConcurrently(t, o, 2)
		ctx := context.Background()
		for _, id := range ids {
			s := waitState(t, o, id, eventstore.StatePaused)
			if s.Kind != string(topics.KindRevert) || s.PauseEvent != "REFUND_INITIATED" {
				t.Fatalf("paused saga: kind %s event %q", s.Kind, s.PauseEvent)
			}
			if _, err := o.Resume(ctx, id, topics.IdempotencyKey(id, 1, topics.KindRevert), map[string]string{"refund": "done"}); err != nil {
				t.Fatal(err)
			}
		}
		expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompensated)
		for _, id := range ids {
			r.mu.Lock()
			got := slices.Clone(r.reverts[id])
			rc := r.resumed[id+"/0/revert"]
			r.mu.Unlock()
			if !slices.Equal(got, []string{"charge", "reserve"}) {
				t.Errorf("%s: compensations %v", id, got)
			}
			if rc["refund"] != "done" {
				t.Errorf("%s: the next revert got resume context %v", id, rc)
			}
		}
	})
}

// A pause whose deadline passes re-invokes the paused step against the
// entity as it was before it (the first attempt's change is gone); a
// resume racing that re-invocation makes exactly one continuation.
func TestPauseDeadline(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.pauseCharge.Store(true)
		r.pauseDeadline.Store(int64(10 * time.Minute))
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)), orchestrator.WithRetryNode())
		ids := startConcurrently(t, o, 6)
		ctx := context.Background()
		for _, id := range ids {
			if s := waitState(t, o, id, eventstore.StatePaused); !s.PausedUntil.Equal(eventstore.StoredTime(s.UpdatedAt.Add(10 * time.Minute))) {
				t.Fatalf("paused until %v, updated %v", s.PausedUntil, s.UpdatedAt)
			}
		}
		// Before the deadline nothing happens.
		clock.advance(5 * time.Minute)
		if _, err := o.RecoveryEngine().Scan(ctx); err != nil {
			t.Logf("scan: %v", err)
		}
		for _, id := range ids {
			if s, _ := o.Get(ctx, id); s.State != eventstore.StatePaused {
				t.Fatalf("%s is %s before its deadline", id, s.State)
			}
		}
		// After it, half the sagas also get a resume at the same moment.
		clock.advance(10 * time.Minute)
		var wg sync.WaitGroup
		resumed := make([]error, len(ids))
		results := make([]orchestrator.ResumeResult, len(ids))
		for i, id := range ids[:3] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], resumed[i] = o.Resume(ctx, id, topics.IdempotencyKey(id, 1, topics.KindProcess), map[string]string{"auth": "late"})
			}()
		}
		expectAll(t, scanUntil(t, o, clock, time.Minute, ids), eventstore.StateCompleted)
		wg.Wait()
		for i, id := range ids {
			if n := r.runsOf(id, 2, topics.KindProcess); n != 1 {
				t.Errorf("%s: ship ran %d times, want exactly one continuation", id, n)
			}
			r.mu.Lock()
			first, second := r.seen[id+"/1/process/1"], r.seen[id+"/1/process/2"]
			r.mu.Unlock()
			reinvoked := len(second) > 0
			// The resume continued the saga, or the deadline re-invoked the
			// step first: the resume was then refused, or (coming while
			// the re-invoked step was in flight) kept for its pause
			// (ResumeResult.Early), which it continued.
			if won := resumed[i] == nil && results[i].Continued; i < 3 && won == reinvoked {
				t.Errorf("%s: resume returned %+v, %v and the step was re-invoked: %v", id, results[i], resumed[i], reinvoked)
			}
			if i >= 3 && !reinvoked {
				t.Errorf("%s: the deadline did not re-invoke the step", id)
			}
			if reinvoked {
				if len(first) == 0 || slices.Contains(second[0].Steps, "process:charge-initiated") || !slices.Equal(second[0].Steps, first[0].Steps) {
					t.Errorf("%s: the re-invoked step got %v, want the snapshot before the step %v", id, second[0].Steps, first)
				}
			}
		}
	})
}

// Ten thousand paused sagas hold no goroutine and no memory of the
// orchestrator while they wait, and all complete after their resumes.
func TestManyPausedSagasHoldNothing(t *testing.T) {
	r := newRig(t, "memory")
	r.pauseCharge.Store(true)
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	o, _ := r.startOrchestrator()
	const n = 10000
	ids := startConcurrently(t, o, n)
	waitFor(t, 5*time.Minute, "every saga paused", func() bool {
		return r.count(1, topics.KindProcess) == n && pausedCount(t, o, ids) == n
	})
	g0, h0 := settleRuntime()
	time.Sleep(2 * time.Second) // they wait
	g1, h1 := settleRuntime()
	t.Logf("while %d sagas wait: goroutines %d → %d, heap in use %.1f → %.1f MiB", n, g0, g1, float64(h0)/(1<<20), float64(h1)/(1<<20))
	if g1 > g0+10 {
		t.Errorf("goroutines grew from %d to %d while the sagas waited", g0, g1)
	}
	if h1 > h0+h0/10+(4<<20) {
		t.Errorf("heap grew from %d to %d while the sagas waited", h0, h1)
	}
	ctx := context.Background()
	for _, id := range ids {
		if _, err := o.Resume(ctx, id, topics.IdempotencyKey(id, 1, topics.KindProcess), nil); err != nil {
			t.Fatal(err)
		}
	}
	expectAll(t, waitTerminal(t, o, ids, 5*time.Minute), eventstore.StateCompleted)
}

func pausedCount(t *testing.T, o *orchestrator.Orchestrator[order], ids []string) int {
	n := 0
	for _, id := range ids {
		if s, err := o.Get(context.Background(), id); err == nil && s.State == eventstore.StatePaused {
			n++
		}
	}
	return n
}

// settleRuntime collects garbage and returns the goroutine count and the
// heap in use.
func settleRuntime() (int, uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapInuse
}

// The webhook handler answers 200/400/404/409/413 with a JSON body and
// changes nothing when it refuses.
func TestResumeHandler(t *testing.T) {
	r := newRig(t, "memory")
	r.pauseCharge.Store(true)
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	o, _ := r.startOrchestrator()
	ids := startConcurrently(t, o, 1)
	id := ids[0]
	waitState(t, o, id, eventstore.StatePaused)
	srv := httptest.NewServer(o.ResumeHandler())
	defer srv.Close()
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("content type %q", ct)
		}
		return resp.StatusCode, b.String()
	}
	key := topics.IdempotencyKey(id, 1, topics.KindProcess)
	for _, c := range []struct {
		body string
		code int
	}{
		{`{not json`, http.StatusBadRequest},
		{`{"transaction_id":"` + id + `"}`, http.StatusBadRequest},
		{`{"transaction_id":"nosuch","correlation_key":"nosuch:1:process"}`, http.StatusNotFound},
		{`{"transaction_id":"` + id + `","correlation_key":"` + id + `:0:process"}`, http.StatusConflict},
		{`{"transaction_id":"` + id + `","correlation_key":"` + key + `","context":{"x":"` + strings.Repeat("y", 70<<10) + `"}}`, http.StatusRequestEntityTooLarge},
	} {
		if code, body := post(c.body); code != c.code || !strings.Contains(body, `"status":"error"`) {
			t.Errorf("%.60s…: %d %s, want %d", c.body, code, body, c.code)
		}
	}
	if s, _ := r.store.LoadTransaction(context.Background(), o.Scope(), id); s.State != eventstore.StatePaused || s.Version != 3 {
		t.Fatalf("refused requests changed the saga: %s version %d", s.State, s.Version)
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	if code, body := post(`{"transaction_id":"` + id + `","correlation_key":"` + key + `","context":{"auth":"ok"}}`); code != 200 || !strings.Contains(body, `"resumed"`) {
		t.Fatalf("resume: %d %s", code, body)
	}
	if code, body := post(`{"transaction_id":"` + id + `","correlation_key":"` + key + `"}`); code != 200 || !strings.Contains(body, `"already_resumed"`) {
		t.Fatalf("second resume: %d %s", code, body)
	}
	expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
}

// A resume requested through the store alone (recovery.RequestResume, what
// `sagactl resume` does, from a process with no orchestrator) is continued
// by a retry node on its next pass: the next step gets the resume context,
// exactly once, and the pause's deadline no longer re-invokes the step.
func TestRequestResumeContinuedByRetryNode(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.pauseCharge.Store(true)
		r.pauseDeadline.Store(int64(30 * time.Minute))
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		clock := newFakeClock()
		cfg := recoveryCfg(t)
		o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
		ids := startConcurrently(t, o, 4)
		ctx := context.Background()
		for _, id := range ids {
			waitState(t, o, id, eventstore.StatePaused)
		}

		// The admin's side: the store, a writer on the retry nodes'
		// configuration, no orchestrator.
		w, err := recovery.NewWriter(r.store, cfg, recovery.WithClock(clock.now))
		if err != nil {
			t.Fatal(err)
		}
		l, err := recovery.ListPaused(ctx, r.store, o.Scope(), cfg, clock.now(), recovery.Page{})
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]string{}
		for _, s := range l.Sagas {
			keys[s.TxID] = s.CorrelationKey
			if s.PauseEvent != "PAYMENT_AUTHORISATION" || s.PausedUntil.IsZero() || s.Claim != "" || len(s.Entries) != 2 {
				t.Errorf("listed %s: event %q until %v claim %q entries %v", s.TxID, s.PauseEvent, s.PausedUntil, s.Claim, s.Entries)
			}
		}
		if len(keys) != len(ids) {
			t.Fatalf("ListPaused found %d of %d paused sagas", len(keys), len(ids))
		}
		for _, id := range ids {
			if want := topics.IdempotencyKey(id, 1, topics.KindProcess); keys[id] != want {
				t.Fatalf("%s: listed key %q, want %q", id, keys[id], want)
			}
			res, err := recovery.RequestResume(ctx, r.store, w, o.Scope(), id, keys[id], map[string]string{"auth": "admin-" + id}, clock.now())
			if err != nil || !res.Claimed || !res.Registered {
				t.Fatalf("RequestResume %s: %+v %v", id, res, err)
			}
		}
		// Nothing moves before a retry node's pass; the claim is shared
		// with the orchestrators' Resume.
		if res, err := recovery.RequestResume(ctx, r.store, w, o.Scope(), ids[0], keys[ids[0]], nil, clock.now()); err != nil || !res.AlreadyResumed {
			t.Errorf("second request: %+v %v", res, err)
		}
		if res, err := o.Resume(ctx, ids[1], keys[ids[1]], map[string]string{"auth": "late"}); err != nil || !res.AlreadyResumed {
			t.Errorf("Resume after RequestResume: %+v %v", res, err)
		}
		for _, id := range ids {
			if s, _ := o.Get(ctx, id); s.State != eventstore.StatePaused {
				t.Fatalf("%s is %s before a retry node's pass", id, s.State)
			}
		}
		expectAll(t, scanUntil(t, o, clock, time.Minute, ids), eventstore.StateCompleted)
		// Past the old deadline: nothing re-invokes the paused step.
		clock.advance(time.Hour)
		if _, err := o.RecoveryEngine().Scan(ctx); err != nil {
			t.Logf("scan: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		for _, id := range ids {
			r.mu.Lock()
			rc := r.resumed[id+"/2/process"]
			r.mu.Unlock()
			if rc["auth"] != "admin-"+id {
				t.Errorf("%s: ship got resume context %v", id, rc)
			}
			if c, s := r.runsOf(id, 1, topics.KindProcess), r.runsOf(id, 2, topics.KindProcess); c != 1 || s != 1 {
				t.Errorf("%s: charge ran %d times, ship %d, want once each", id, c, s)
			}
			if res, err := recovery.RequestResume(ctx, r.store, w, o.Scope(), id, keys[id], nil, clock.now()); err != nil || !res.AlreadyResumed || res.Registered {
				t.Errorf("%s: request after completion: %+v %v", id, res, err)
			}
		}
		if l, err := recovery.ListPaused(ctx, r.store, o.Scope(), cfg, clock.now(), recovery.Page{}); err != nil || len(l.Sagas) != 0 {
			t.Errorf("paused after the resumes: %+v %v", l.Sagas, err)
		}
	})
}
