package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// tryoutsFailStore fails the first read of the history of saga failTx
// once armed: the read timeout of the node that has just claimed the
// pause's deadline and reads the snapshot to re-invoke the step against.
type tryoutsFailStore struct {
	eventstore.Store
	failTx string
	armed  atomic.Bool
	failed atomic.Int32
}

func (s *tryoutsFailStore) Tryouts(ctx context.Context, scope eventstore.Scope, txID string) ([]eventstore.Tryout, error) {
	if txID == s.failTx && s.armed.CompareAndSwap(true, false) {
		s.failed.Add(1)
		return nil, errors.New("injected: read timeout")
	}
	return s.Store.Tryouts(ctx, scope, txID)
}

// A pause deadline that a retry node claimed but could not re-invoke (a
// read failed between the claim and the re-invocation) is re-invoked by a
// later pass: the saga does not stay PAUSED under its deadline's claim
// (issue 35.2).
func TestPauseDeadlineClaimedThenFailedIsReinvokedLater(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.pauseCharge.Store(true)
		r.pauseDeadline.Store(int64(10 * time.Minute))
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		store := &tryoutsFailStore{Store: r.store}
		clock := newFakeClock()
		o, _ := r.startOrchestrator(orchestrator.WithStore(store), orchestrator.WithClock(clock.now),
			orchestrator.WithRecovery(recoveryCfg(t)), orchestrator.WithRetryNode())
		ids := startConcurrently(t, o, 2)
		ctx := context.Background()
		for _, id := range ids {
			waitState(t, o, id, eventstore.StatePaused)
		}
		stranded := ids[0]
		store.failTx = stranded
		store.armed.Store(true)
		advanceIdle(t, o, clock.advance, 15*time.Minute)
		if _, err := o.RecoveryEngine().Scan(ctx); err != nil {
			t.Logf("scan: %v", err)
		}
		if store.failed.Load() != 1 {
			t.Fatalf("the pass past the deadline did not read %s's history (injected failures: %d)", stranded, store.failed.Load())
		}
		m, err := r.store.GetMarker(ctx, eventstore.ResumeClaimKey(o.Scope(), stranded, 1, string(topics.KindProcess), 1))
		if err != nil || m.Owner != eventstore.ClaimDeadline {
			t.Fatalf("the deadline's claim of %s: %+v %v", stranded, m, err)
		}
		// Later passes (retry entries kept, restore watchdogs) must
		// re-invoke it; bounded, so that a stranded saga fails fast.
		for pass := 0; pass < 20; pass++ {
			if s, err := o.Get(ctx, stranded); err == nil && s.State != eventstore.StatePaused {
				break
			}
			advanceIdle(t, o, clock.advance, time.Minute)
			if _, err := o.RecoveryEngine().Scan(ctx); err != nil {
				t.Logf("scan: %v", err)
			}
		}
		if s, err := o.Get(ctx, stranded); err != nil || s.State == eventstore.StatePaused {
			_, rerr := o.Resume(ctx, stranded, topics.IdempotencyKey(stranded, 1, topics.KindProcess), nil)
			t.Fatalf("%s still PAUSED after 20 passes past its claimed deadline (%v); Resume says: %v", stranded, err, rerr)
		}
		expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
		for _, id := range ids {
			r.mu.Lock()
			first, second := r.seen[id+"/1/process/1"], r.seen[id+"/1/process/2"]
			r.mu.Unlock()
			if len(first) != 1 || len(second) != 1 {
				t.Fatalf("%s: charge attempt 1 ran %d times, attempt 2 %d times, want once each", id, len(first), len(second))
			}
			if slices.Contains(second[0].Steps, "process:charge-initiated") || !slices.Equal(second[0].Steps, first[0].Steps) {
				t.Errorf("%s: the re-invoked step got %v, want the snapshot before the step %v", id, second[0].Steps, first[0].Steps)
			}
			if n := r.runsOf(id, 2, topics.KindProcess); n != 1 {
				t.Errorf("%s: ship ran %d times", id, n)
			}
		}
	})
}

// startPayWorker runs the rig's payment service with charge as its charge
// handler (process and revert); the returned stop waits for Run to return.
func (r *rig) startPayWorker(charge func(context.Context, *worker.Step, order) (order, error)) {
	r.t.Helper()
	w, err := worker.New(r.svcPay, worker.WithBrokers(r.brokers...), worker.WithKafkaOpts(r.kopts...))
	if err != nil {
		r.t.Fatal(err)
	}
	if err := worker.Register(w, worker.Endpoint[order]{Name: "charge", Process: charge, Revert: charge}); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Running():
	case err := <-done:
		r.t.Fatalf("worker %s: %v", r.svcPay, err)
	case <-time.After(time.Minute):
		r.t.Fatalf("worker %s did not start", r.svcPay)
	}
	r.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("worker %s Run: %v", r.svcPay, err)
		}
	})
}

// earlyOrderStore makes the early resume of saga raceTx's charge land
// only after the pause of that step has looked for it: the orchestrator
// applying the pause misses it, and the resume must find the pause.
type earlyOrderStore struct {
	eventstore.Store
	scope   eventstore.Scope
	raceTx  atomic.Value // string
	checked chan struct{}
	once    sync.Once
}

func (s *earlyOrderStore) earlyKey() (eventstore.MarkerKey, bool) {
	tx, _ := s.raceTx.Load().(string)
	return eventstore.EarlyResumeKey(s.scope, tx, 1, string(topics.KindProcess)), tx != ""
}

func (s *earlyOrderStore) GetMarker(ctx context.Context, key eventstore.MarkerKey) (eventstore.Marker, error) {
	m, err := s.Store.GetMarker(ctx, key)
	if k, ok := s.earlyKey(); ok && key == k {
		s.once.Do(func() { close(s.checked) })
	}
	return m, err
}

func (s *earlyOrderStore) InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (bool, eventstore.Marker, error) {
	if k, ok := s.earlyKey(); ok && m.MarkerKey == k {
		select {
		case <-s.checked:
		case <-time.After(time.Minute):
			return false, eventstore.Marker{}, errors.New("test: the pause never looked for the early resume")
		}
	}
	return s.Store.InsertMarker(ctx, m, lease)
}

// A resume that arrives while the step it is for is still in flight (the
// payment gateway's webhook before the worker's reply) is kept, and the
// step's pause continues the saga with it: the handler's own resume
// (answered Early, twice), and one racing the pause that lands only after
// the pause looked for it (answered Continued: the resume finds the pause).
// The next step gets each context once (issue 35.4).
func TestEarlyResumeIsKeptForThePause(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		store := &earlyOrderStore{Store: r.store, checked: make(chan struct{})}
		var o *orchestrator.Orchestrator[order]
		type result struct {
			res orchestrator.ResumeResult
			err error
		}
		inline := make(chan result, 2)
		racing := make(chan result, 1)
		var charges sync.Map // tx/attempt → runs
		r.startPayWorker(func(ctx context.Context, s *worker.Step, in order) (order, error) {
			n, _ := charges.LoadOrStore(fmt.Sprintf("%s/%s/%d", s.TxID, s.Kind, s.Attempt), new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			if s.Kind != topics.KindProcess {
				return in, nil
			}
			rc := map[string]string{"auth": in.ID}
			switch in.ID {
			case "inline":
				for range 2 {
					res, err := o.Resume(ctx, s.TxID, s.IdempotencyKey, rc)
					inline <- result{res, err}
				}
			case "racing":
				store.raceTx.Store(s.TxID)
				go func() {
					res, err := o.Resume(context.Background(), s.TxID, s.IdempotencyKey, rc)
					racing <- result{res, err}
				}()
			}
			s.Pause("PAYMENT_AUTHORISATION", 0)
			return in, nil
		})
		r.startWorker(r.svcStock)
		var err error
		o, err = orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...), orchestrator.WithStore(store))
		if err != nil {
			t.Fatal(err)
		}
		store.scope = o.Scope()
		runOrch(t, o)
		ctx := context.Background()
		var ids []string
		for _, name := range []string{"inline", "racing"} {
			id, err := o.Start(ctx, order{ID: name})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for range 2 {
			if got := <-inline; got.err != nil || !got.res.Early || got.res.Continued {
				t.Fatalf("resume before the step replied: %+v %v, want Early", got.res, got.err)
			}
		}
		var got result
		select {
		case got = <-racing:
		case <-time.After(2 * time.Minute):
			t.Fatal("the racing resume did not return")
		}
		if got.err != nil || !got.res.Continued {
			t.Fatalf("resume racing the pause: %+v %v, want Continued", got.res, got.err)
		}
		expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
		for i, id := range ids {
			name := []string{"inline", "racing"}[i]
			r.mu.Lock()
			rc := r.resumed[id+"/2/process"]
			r.mu.Unlock()
			if rc["auth"] != name {
				t.Errorf("%s: ship got resume context %v", name, rc)
			}
			if n, _ := charges.Load(id + "/process/1"); n == nil || n.(*atomic.Int32).Load() != 1 {
				t.Errorf("%s: charge ran %v times", name, n)
			}
			if n := r.runsOf(id, 2, topics.KindProcess); n != 1 {
				t.Errorf("%s: ship ran %d times", name, n)
			}
			if res, err := o.Resume(ctx, id, topics.IdempotencyKey(id, 1, topics.KindProcess), nil); err != nil || !res.AlreadyResumed {
				t.Errorf("%s: the webhook retried after completion: %+v %v, want AlreadyResumed", name, res, err)
			}
		}
	})
}

// flakyLoadStore fails the next read of saga failTx once armed: a store
// read timeout while a webhook resumes it.
type flakyLoadStore struct {
	eventstore.Store
	failTx atomic.Value // string
}

func (s *flakyLoadStore) LoadTransaction(ctx context.Context, scope eventstore.Scope, txID string) (eventstore.Transaction, error) {
	if tx, _ := s.failTx.Load().(string); tx == txID && s.failTx.CompareAndSwap(tx, "") {
		return eventstore.Transaction{}, errors.New("injected: read timeout")
	}
	return s.Store.LoadTransaction(ctx, scope, txID)
}

// The webhook's answers separate bad input (400), a resume that cannot be
// done now (503 with Retry-After: a store read timed out; the retry
// resumes), refusals (409: wrong or stale key, saga ended) and a resume
// that came before its pause (202: kept, and the pause continues the saga
// with it) (issue 35.4).
func TestResumeHandlerAnswers(t *testing.T) {
	r := newRig(t, "memory")
	gate, running := make(chan struct{}), make(chan struct{})
	r.startPayWorker(func(ctx context.Context, s *worker.Step, in order) (order, error) {
		if s.Kind == topics.KindProcess && s.Attempt == 1 {
			if in.ID == "held" {
				close(running)
				<-gate
			}
			s.Pause("PAYMENT_AUTHORISATION", 0)
		}
		return in, nil
	})
	r.startWorker(r.svcStock)
	store := &flakyLoadStore{Store: r.store}
	o, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...), orchestrator.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	runOrch(t, o)
	ctx := context.Background()
	paused, err := o.Start(ctx, order{ID: "paused"})
	if err != nil {
		t.Fatal(err)
	}
	held, err := o.Start(ctx, order{ID: "held"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	waitState(t, o, paused, eventstore.StatePaused)
	select {
	case <-running:
	case <-time.After(time.Minute):
		t.Fatal("the held charge did not start")
	}
	srv := httptest.NewServer(o.ResumeHandler())
	defer srv.Close()
	post := func(body string) (int, string, http.Header) {
		t.Helper()
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	body := func(tx, key, rc string) string {
		return `{"transaction_id":"` + tx + `","correlation_key":"` + key + `"` + rc + `}`
	}
	key := topics.IdempotencyKey(paused, 1, topics.KindProcess)
	for _, c := range []struct {
		name, body string
		code       int
	}{
		{"malformed JSON", `{not json`, http.StatusBadRequest},
		{"no key", `{"transaction_id":"` + paused + `"}`, http.StatusBadRequest},
		{"empty context key", body(paused, key, `,"context":{"":"x"}`), http.StatusBadRequest},
		{"unknown saga", body("nosuch", "nosuch:1:process", ""), http.StatusNotFound},
		{"stale key", body(paused, topics.IdempotencyKey(paused, 0, topics.KindProcess), ""), http.StatusConflict},
		{"wrong key", body(paused, "nonsense", ""), http.StatusConflict},
	} {
		if code, b, _ := post(c.body); code != c.code || !strings.Contains(b, `"status":"error"`) {
			t.Errorf("%s: %d %s, want %d", c.name, code, b, c.code)
		}
	}
	store.failTx.Store(paused)
	code, b, h := post(body(paused, key, `,"context":{"auth":"ok"}`))
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(b, `"status":"error"`) {
		t.Errorf("store read timeout: %d %s Retry-After %q, want 503 with Retry-After", code, b, h.Get("Retry-After"))
	}
	if s, _ := r.store.LoadTransaction(ctx, o.Scope(), paused); s.State != eventstore.StatePaused {
		t.Fatalf("refused requests changed the saga to %s", s.State)
	}
	if code, b, _ := post(body(paused, key, `,"context":{"auth":"ok"}`)); code != http.StatusOK || !strings.Contains(b, `"resumed"`) {
		t.Fatalf("the retried resume: %d %s", code, b)
	}
	if code, b, _ := post(body(paused, key, "")); code != http.StatusOK || !strings.Contains(b, `"already_resumed"`) {
		t.Errorf("the resume again: %d %s", code, b)
	}
	if code, b, _ := post(body(held, topics.IdempotencyKey(held, 1, topics.KindProcess), `,"context":{"auth":"early"}`)); code != http.StatusAccepted || !strings.Contains(b, `"accepted"`) {
		t.Errorf("the resume before the pause: %d %s, want 202 accepted", code, b)
	}
	close(gate)
	expectAll(t, waitTerminal(t, o, []string{paused, held}, time.Minute), eventstore.StateCompleted)
	r.mu.Lock()
	rcPaused, rcHeld := r.resumed[paused+"/2/process"], r.resumed[held+"/2/process"]
	r.mu.Unlock()
	if rcPaused["auth"] != "ok" || rcHeld["auth"] != "early" {
		t.Errorf("ship got resume contexts %v and %v", rcPaused, rcHeld)
	}
	if code, b, _ := post(body(paused, topics.IdempotencyKey(paused, 2, topics.KindProcess), "")); code != http.StatusConflict {
		t.Errorf("resume of an ended saga: %d %s, want 409", code, b)
	}
}
