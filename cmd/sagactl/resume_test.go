package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

func TestResumeUsage(t *testing.T) {
	clearAdminEnv(t)
	for _, args := range [][]string{
		{"resume", "--service", "s"},
		{"resume", "tx", "--service", "s"},
		{"resume", "tx", "", "--service", "s"},
		{"resume", "tx", "tx:1:process", "novalue", "--service", "s"},
		{"resume", "tx", "tx:1:process", "=v", "--service", "s"},
		{"resume", "tx", "tx:1:process", "a=1", "a=2", "--service", "s"},
		{"resume", "tx", "tx:1:process", "k=" + string([]byte{0xff}), "--service", "s"},
		{"resume", "tx", "tx:1:process", "--service", "s", "--limit", "3"}, // list-only flag
		{"list", "paused", "--service", "s", "--limit", "0"},
	} {
		code, out, errOut := sagactl(t, args...)
		if code != exitUsage || out != "" {
			t.Errorf("sagactl %q: exit %d, stdout %q, want 2 (stderr %q)", args, code, out, errOut)
			continue
		}
		oneLineErr(t, args, errOut, "")
	}
	code, out, _ := sagactl(t, "resume", "-h")
	if code != exitOK || !strings.Contains(out, "sagactl resume TXID CORRELATION_KEY [key=value ...]") || !strings.Contains(out, "list paused") {
		t.Errorf("resume -h: exit %d, %.300q", code, out)
	}
	if rc, err := resumeContext([]string{"status=authorised", "note=a=b", "empty="}); err != nil ||
		!maps.Equal(rc, map[string]string{"status": "authorised", "note": "a=b", "empty": ""}) {
		t.Errorf("resumeContext: %v %v", rc, err)
	}
	if got := deadline(time.Time{}, time.Now()); got != "none" {
		t.Errorf("no deadline: %q", got)
	}
	at := time.Date(2026, 3, 10, 10, 0, 0, 0, time.UTC)
	if got := deadline(at.Add(30*time.Minute), at); got != "in 30m" {
		t.Errorf("future deadline: %q", got)
	}
	if got := deadline(at.Add(-2*time.Minute), at); got != "passed 2m ago" {
		t.Errorf("past deadline: %q", got)
	}
}

type pausedDoc struct {
	List  string `json:"list"`
	Next  string `json:"next_after"`
	Sagas []struct {
		TxID           string    `json:"tx_id"`
		State          string    `json:"state"`
		Kind           string    `json:"kind"`
		Span           int       `json:"span"`
		PauseEvent     string    `json:"pause_event"`
		PausedUntil    time.Time `json:"paused_until"`
		CorrelationKey string    `json:"correlation_key"`
		PausedAt       time.Time `json:"paused_at"`
		PausedSeconds  int64     `json:"paused_seconds"`
		AgeSeconds     int64     `json:"age_seconds"`
		Claim          string    `json:"claim"`
		Entries        []struct {
			Bucket int `json:"bucket"`
		} `json:"entries"`
	} `json:"sagas"`
}

func (d pausedDoc) ids() []string {
	var out []string
	for _, s := range d.Sagas {
		out = append(out, s.TxID)
	}
	return out
}

type resumeDoc struct {
	TxID           string            `json:"tx_id"`
	Status         string            `json:"status"`
	State          string            `json:"state"`
	CorrelationKey string            `json:"correlation_key"`
	Span           int               `json:"span"`
	Kind           string            `json:"kind"`
	PauseEvent     string            `json:"pause_event"`
	Context        map[string]string `json:"context"`
	Retry          *struct{ Bucket int }
	RetryDue       time.Time `json:"retry_due"`
	WindowSeconds  float64   `json:"window_seconds"`
}

// TestAdminPausedCommands seeds paused sagas and runs list paused and
// resume end to end against real Cassandra.
func TestAdminPausedCommands(t *testing.T) {
	r := newAdminRig(t)
	ctx := t.Context()
	at := eventstore.StoredTime(r.started.Add(time.Minute))
	old := now
	now = func() time.Time { return at }
	t.Cleanup(func() { now = old })

	paused := func(ago time.Duration, mod func(tx *eventstore.Transaction)) eventstore.Transaction {
		t.Helper()
		tx := r.saga(ago, eventstore.StatePaused, func(tx *eventstore.Transaction) {
			tx.Attempt, tx.Error, tx.PauseEvent = 1, "", "PAYMENT_AUTHORISATION"
			tx.UpdatedAt = eventstore.StoredTime(at.Add(-10 * time.Minute))
			if mod != nil {
				mod(tx)
			}
		})
		if _, err := r.writer.RegisterRestore(ctx, r.scope, tx.TxID, tx.Domain); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	expired := paused(30*time.Hour, nil)
	p1 := paused(3*time.Hour, nil)
	p2 := paused(2*time.Hour, func(tx *eventstore.Transaction) { tx.PausedUntil = eventstore.StoredTime(at.Add(30 * time.Minute)) })
	if _, err := r.writer.RegisterRetry(ctx, r.scope, p2.TxID, p2.Domain, 31); err != nil {
		t.Fatal(err)
	}
	p3 := paused(time.Hour, func(tx *eventstore.Transaction) {
		tx.Span, tx.Kind, tx.Endpoint, tx.PauseEvent = 0, "revert", "stock-service.reserve", "REFUND_INITIATED"
	})
	running := r.saga(30*time.Minute, eventstore.StateInProgress, func(tx *eventstore.Transaction) { tx.Error = "" })
	if _, err := r.writer.RegisterRestore(ctx, r.scope, running.TxID, running.Domain); err != nil {
		t.Fatal(err)
	}
	key := func(tx eventstore.Transaction) string { return eventstore.CorrelationKey(tx.TxID, tx.Span, tx.Kind) }

	t.Run("list paused", func(t *testing.T) {
		var d pausedDoc
		r.jsonOf(&d, "list", "paused")
		if want := []string{p3.TxID, p2.TxID, p1.TxID, expired.TxID}; !slices.Equal(d.ids(), want) {
			t.Fatalf("paused %v, want newest first %v", d.ids(), want)
		}
		if d.List != "paused" || d.Next != "" {
			t.Errorf("document %+v", d)
		}
		s := d.Sagas[0]
		if s.State != "PAUSED" || s.Kind != "revert" || s.PauseEvent != "REFUND_INITIATED" || s.CorrelationKey != p3.TxID+":0:revert" ||
			!s.PausedUntil.IsZero() || s.PausedSeconds != 600 || s.Claim != "" || len(s.Entries) != 1 || s.Entries[0].Bucket%2 != 1 {
			t.Errorf("p3 %+v", s)
		}
		if s := d.Sagas[1]; !s.PausedUntil.Equal(p2.PausedUntil) || s.CorrelationKey != key(p2) || len(s.Entries) != 2 {
			t.Errorf("p2 %+v", s)
		}
		pg := r.list("paused", "--limit", "2")
		if !slices.Equal(pg.ids(), []string{p3.TxID, p2.TxID}) || pg.Next != p2.TxID {
			t.Errorf("page 1: %v next %q", pg.ids(), pg.Next)
		}
		pg = r.list("paused", "--limit", "2", "--after", pg.Next)
		if !slices.Equal(pg.ids(), []string{p1.TxID, expired.TxID}) || pg.Next != "" {
			t.Errorf("page 2: %v next %q", pg.ids(), pg.Next)
		}
		if pg = r.list("paused", "--limit", "2", "--page", "2"); !slices.Equal(pg.ids(), []string{p1.TxID, expired.TxID}) {
			t.Errorf("--page 2: %v", pg.ids())
		}

		out := r.ok("list", "paused", "--limit", "3")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 5 || !strings.HasPrefix(lines[0], "TXID") {
			t.Fatalf("table:\n%s", out)
		}
		for i, want := range [][]string{
			{"TXID", "EVENT", "AGE", "PAUSED FOR", "DEADLINE", "CLAIM", "CORRELATION KEY"},
			{p3.TxID, "0 revert stock-service.reserve", "REFUND_INITIATED", "1h01m", "10m", "none", p3.TxID + ":0:revert"},
			{p2.TxID, "PAYMENT_AUTHORISATION", "2h01m", "in 30m", key(p2)},
			{p1.TxID, "none", key(p1)},
			{"next page: --after " + p1.TxID},
		} {
			for _, w := range want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("table line %d lacks %q:\n%s", i, w, out)
				}
			}
		}
	})

	t.Run("resume refused", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{p1.TxID, "nonsense"}, exitNotPaused, "wrong correlation key"},
			{[]string{p1.TxID, key(p2)}, exitNotPaused, "wrong correlation key"},
			{[]string{p1.TxID, p1.TxID + ":0:process"}, exitNotPaused, "stale correlation key"},
			{[]string{running.TxID, key(running)}, exitNotPaused, "is IN_PROGRESS, not PAUSED"},
			{[]string{expired.TxID, key(expired)}, exitNotPaused, "outlived its transaction lifetime"},
			{[]string{aTxID, aTxID + ":1:process"}, exitNotFound, "no such saga in eu/cell-1/"},
		} {
			args := append([]string{"resume"}, c.args...)
			code, out, errOut := r.run(args...)
			if code != c.code || out != "" {
				t.Errorf("%q: exit %d (want %d), stdout %q", args, code, c.code, out)
			}
			oneLineErr(t, args, errOut, c.want)
		}
		for _, tx := range []eventstore.Transaction{p1, running, expired} {
			if ms, err := r.store.ListMarkers(ctx, r.scope, tx.TxID); err != nil || len(ms) != 0 {
				t.Errorf("%s: markers %v %v after refused resumes", tx.TxID, ms, err)
			}
		}
	})

	t.Run("resume", func(t *testing.T) {
		out := r.ok("resume", p1.TxID, key(p1), "status=authorised", "ref=psp-1")
		for _, want := range []string{
			"resume requested for " + p1.TxID + ": PAUSED at span 1 process payment-service.charge (attempt 1), waiting for PAYMENT_AUTHORISATION",
			"its deadline (none) can no longer invoke the step again", "resume context: ref=psp-1 status=authorised",
			"retry registered: ", "bucket 0, due ", "a retry node continues the saga on its first pass after that",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("resume output lacks %q:\n%s", want, out)
			}
		}
		m, err := r.store.GetMarker(ctx, eventstore.ResumeClaimKey(r.scope, p1.TxID, 1, "process", 1))
		if err != nil {
			t.Fatal(err)
		}
		if rc, err := eventstore.DecodeResumeContext(m.Reply); err != nil || m.Owner != eventstore.ClaimResume ||
			!maps.Equal(rc, map[string]string{"status": "authorised", "ref": "psp-1"}) {
			t.Errorf("claim %+v context %v %v", m, rc, err)
		}
		if got := r.load(p1.TxID); got.State != eventstore.StatePaused || got.Version != p1.Version {
			t.Errorf("the saga row changed: %+v", got)
		}
		var d pausedDoc
		r.jsonOf(&d, "list", "paused")
		for _, s := range d.Sagas {
			if want := map[bool]string{true: "resume"}[s.TxID == p1.TxID]; s.Claim != want {
				t.Errorf("%s claim %q, want %q", s.TxID, s.Claim, want)
			}
		}
		if out := r.ok("list", "paused"); !strings.Contains(out, "resume requested") {
			t.Errorf("table lacks the claim:\n%s", out)
		}

		// Again: already resumed, exit 0, a retry registered again.
		var doc resumeDoc
		r.jsonOf(&doc, "resume", p1.TxID, key(p1), "status=declined")
		if doc.Status != "already_resumed" || doc.State != "PAUSED" || doc.Retry == nil || doc.WindowSeconds != 60 {
			t.Errorf("second resume: %+v", doc)
		}
		if out := r.ok("resume", p1.TxID, key(p1)); !strings.Contains(out, "already resumed "+p1.TxID) || !strings.Contains(out, "still PAUSED") {
			t.Errorf("second resume text:\n%s", out)
		}

		// A compensation's pause, as JSON.
		r.jsonOf(&doc, "resume", p3.TxID, key(p3), "refund=done")
		if doc.Status != "requested" || doc.Kind != "revert" || doc.Span != 0 || doc.PauseEvent != "REFUND_INITIATED" ||
			doc.Context["refund"] != "done" || doc.Retry == nil || doc.Retry.Bucket%2 != 0 || !doc.RetryDue.After(at) {
			t.Errorf("resume of a compensation: %+v", doc)
		}
	})
}

// TestResumeEndToEnd runs the loop on real Kafka and Cassandra: a step
// pauses its saga; sagactl lists it with its correlation key and resumes it
// with a context; the retry node continues it on its next pass, and the
// next step receives the context; every step ran once.
func TestResumeEndToEnd(t *testing.T) {
	r := newAdminRig(t)
	brokers := testenv.KafkaBrokers(t)
	u := testenv.UniqueName(t, "pz")
	domain, svcStock, svcPay, service := "order-"+u, "stock-"+u, "pay-"+u, "orders-"+u
	r.scope = eventstore.Scope{Region: orchestrator.DefaultRegion, Cluster: "default", Service: service}
	r.flags = []string{"--hosts", r.hosts, "--keyspace", r.ks, "--service", service}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	names := append(topics.WorkerTopics(svcStock), topics.WorkerTopics(svcPay)...)
	names = append(names, topics.OrchestratorTopics(domain)...)
	err = topics.Ensure(ctx, kadm.NewClient(cl), names, topics.Provision{Partitions: 2, ReplicationFactor: 1})
	cancel()
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	runs := map[string]int{}
	var shipGot worker.ResumeContext
	handler := func(name string) func(context.Context, *worker.Step, e2eOrder) (e2eOrder, error) {
		return func(_ context.Context, s *worker.Step, in e2eOrder) (e2eOrder, error) {
			mu.Lock()
			defer mu.Unlock()
			runs[fmt.Sprintf("%s/%d/%s", s.TxID, s.Span, s.Kind)]++
			if name == "charge" && s.Kind == topics.KindProcess {
				s.Pause("PAYMENT_AUTHORISATION", 30*time.Minute)
			}
			if name == "ship" {
				shipGot = s.Resumed()
			}
			return in, nil
		}
	}
	for svc, eps := range map[string][]string{svcStock: {"reserve", "ship"}, svcPay: {"charge"}} {
		w, err := worker.New(svc, worker.WithBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range eps {
			if err := worker.Register(w, worker.Endpoint[e2eOrder]{Name: ep, Process: handler(ep), Revert: handler(ep)}); err != nil {
				t.Fatal(err)
			}
		}
		runInBackground(t, "worker "+svc, w.Run, w.Running())
	}
	clock := &e2eClock{t: time.Now().UTC()}
	cfg := recovery.DefaultConfig()
	cfg.Restore.DefaultDelayWindows = 5
	o, err := orchestrator.New(service, orchestrator.Domain[e2eOrder]{Name: domain, OnNext: orchestrator.Sequence[e2eOrder](
		orchestrator.Step{Service: svcStock, Endpoint: "reserve"},
		orchestrator.Step{Service: svcPay, Endpoint: "charge"},
		orchestrator.Step{Service: svcStock, Endpoint: "ship"},
	)}, orchestrator.WithBrokers(brokers...), orchestrator.WithStore(r.store), orchestrator.WithClock(clock.now),
		orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, "orchestrator", o.Run, o.Running())
	id, err := o.Start(context.Background(), e2eOrder{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	state := func() eventstore.State {
		s, err := o.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return s.State
	}
	for deadline := time.Now().Add(time.Minute); state() != eventstore.StatePaused; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("saga %s, want PAUSED", state())
		}
	}

	old := now
	now = clock.now
	t.Cleanup(func() { now = old })
	var d pausedDoc
	r.jsonOf(&d, "list", "paused")
	if len(d.Sagas) != 1 || d.Sagas[0].TxID != id || d.Sagas[0].CorrelationKey != topics.IdempotencyKey(id, 1, topics.KindProcess) {
		t.Fatalf("list paused: %+v", d.Sagas)
	}
	r.ok("resume", id, d.Sagas[0].CorrelationKey, "auth=ok", "ref=psp-9")
	if st := state(); st != eventstore.StatePaused {
		t.Fatalf("%s before a retry node's pass", st)
	}
	for deadline := time.Now().Add(2 * time.Minute); state() != eventstore.StateCompleted; {
		if time.Now().After(deadline) {
			t.Fatalf("saga %s after the retry node's passes, want COMPLETED", state())
		}
		advanceIdle(t, o.Stats, clock.advance, time.Minute)
		if _, err := o.RecoveryEngine().Scan(context.Background()); err != nil {
			t.Logf("scan: %v", err)
		}
		for wait := time.Now().Add(3 * time.Second); time.Now().Before(wait) && state() != eventstore.StateCompleted; {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if out := r.ok("resume", id, d.Sagas[0].CorrelationKey); !strings.Contains(out, "already resumed") || !strings.Contains(out, "moved on: it is COMPLETED") {
		t.Errorf("resume after completion:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if !maps.Equal(shipGot, worker.ResumeContext{"auth": "ok", "ref": "psp-9"}) {
		t.Errorf("ship got resume context %v", shipGot)
	}
	for _, k := range []string{id + "/0/process", id + "/1/process", id + "/2/process"} {
		if runs[k] != 1 {
			t.Errorf("%s ran %d times, want once", k, runs[k])
		}
	}
}
