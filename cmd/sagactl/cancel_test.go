package main

import (
	"context"
	"fmt"
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
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// cancel and terminate refuse a missing TXID, reason or brokers before
// they open the store.
func TestCancelUsage(t *testing.T) {
	clearAdminEnv(t)
	t.Setenv(envKafkaBrokers, "")
	for _, args := range [][]string{
		{"cancel", "--service", "s", "--reason", "r", "--brokers", "127.0.0.1:1"},
		{"cancel", "tx", "--service", "s", "--brokers", "127.0.0.1:1"},
		{"terminate", "tx", "--service", "s", "--reason", " ", "--brokers", "127.0.0.1:1"},
		{"terminate", "tx", "--service", "s", "--reason", "r"},
	} {
		if code, _, errOut := sagactl(t, args...); code != exitUsage || !strings.HasPrefix(errOut, "sagactl: "+args[0]) {
			t.Errorf("%q: exit %d: %s", args, code, errOut)
		}
	}
}

// sagactl cancel and terminate on real Kafka and Cassandra: a PAUSED saga
// is cancelled (its completed steps compensated once, in reverse) and
// another terminated (nothing compensated); both histories name the actor
// and the reason, both actions are audited, and a second request for an
// ended saga exits 4.
func TestCancelEndToEnd(t *testing.T) {
	r := newAdminRig(t)
	brokers := testenv.KafkaBrokers(t)
	u := testenv.UniqueName(t, "cx")
	domain, svcStock, svcPay, service := "order-"+u, "stock-"+u, "pay-"+u, "orders-"+u
	r.scope = eventstore.Scope{Region: orchestrator.DefaultRegion, Cluster: "default", Service: service}
	r.flags = []string{"--hosts", r.hosts, "--keyspace", r.ks, "--service", service}
	kafka := func(args ...string) []string {
		return append(args, "--brokers", strings.Join(brokers, ","), "--actor", "alice")
	}

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
	reverts := map[string][]string{}
	handler := func(name string) func(context.Context, *worker.Step, e2eOrder) (e2eOrder, error) {
		return func(_ context.Context, s *worker.Step, in e2eOrder) (e2eOrder, error) {
			mu.Lock()
			defer mu.Unlock()
			if s.Kind == topics.KindRevert {
				reverts[s.TxID] = append(reverts[s.TxID], name)
			}
			if name == "charge" && s.Kind == topics.KindProcess {
				s.Pause("PAYMENT_AUTHORISATION", 0)
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
	o, err := orchestrator.New(service, orchestrator.Domain[e2eOrder]{Name: domain, OnNext: orchestrator.Sequence[e2eOrder](
		orchestrator.Step{Service: svcStock, Endpoint: "reserve"},
		orchestrator.Step{Service: svcPay, Endpoint: "charge"},
		orchestrator.Step{Service: svcStock, Endpoint: "ship"},
	)}, orchestrator.WithBrokers(brokers...), orchestrator.WithStore(r.store))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, "orchestrator", o.Run, o.Running())
	state := func(id string) eventstore.State {
		s, err := o.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return s.State
	}
	waitFor := func(id string, want eventstore.State) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); state(id) != want; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("saga %s is %s, want %s", id, state(id), want)
			}
		}
	}
	var ids []string
	for i := range 2 {
		id, err := o.Start(context.Background(), e2eOrder{ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(id, eventstore.StatePaused)
		ids = append(ids, id)
	}

	var doc jsonControl
	r.jsonOf(&doc, kafka("cancel", ids[0], "--reason", "customer cancelled the order")...)
	if doc.Status != "requested" || doc.State != string(eventstore.StatePaused) || doc.Actor != "alice" || doc.Audit != auditRecorded {
		t.Errorf("cancel: %+v", doc)
	}
	waitFor(ids[0], eventstore.StateCompensated)
	r.ok(kafka("terminate", ids[1], "--reason", "duplicate of "+ids[0])...)
	waitFor(ids[1], eventstore.StateTerminated)

	for _, c := range []struct{ id, outcome, reason string }{
		{ids[0], orchestrator.OutcomeCancelled, "customer cancelled the order"},
		{ids[1], orchestrator.OutcomeTerminated, "duplicate of " + ids[0]},
	} {
		h, err := o.History(context.Background(), c.id)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(h, func(tr eventstore.Tryout) bool { return tr.Outcome == c.outcome })
		if i < 0 || h[i].Error != c.outcome+" by alice: "+c.reason {
			t.Errorf("%s: history %+v, want a %s row by alice", c.id, h, c.outcome)
		}
		if out := r.ok("show", c.id); !strings.Contains(out, c.outcome) || !strings.Contains(out, "alice") {
			t.Errorf("show %s:\n%s", c.id, out)
		}
	}
	mu.Lock()
	if got := reverts[ids[0]]; !slices.Equal(got, []string{"charge", "reserve"}) {
		t.Errorf("cancelled saga: compensations %v, want [charge reserve]", got)
	}
	if got := reverts[ids[1]]; len(got) != 0 {
		t.Errorf("terminated saga: compensations %v, want none", got)
	}
	mu.Unlock()
	for _, args := range [][]string{{"cancel", ids[0], "--reason", "again"}, {"terminate", ids[1], "--reason", "again"}} {
		if code, _, errOut := r.run(kafka(args...)...); code != exitNotRestorable || !strings.Contains(errOut, "already ended") {
			t.Errorf("%q: exit %d: %s", args, code, errOut)
		}
	}
	if code, _, _ := r.run(kafka("cancel", "0000000000000000-nope", "--reason", "x")...); code != exitNotFound {
		t.Errorf("cancel of an unknown saga: exit %d, want %d", code, exitNotFound)
	}
	recs, err := r.store.AuditTrail(context.Background(), r.scope, ids[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range recs {
		got = append(got, rec.Action+"|"+rec.Actor+"|"+rec.Result)
	}
	if want := []string{"cancel|alice|ok", "cancel|alice|refused: wrong state"}; !slices.Equal(got, want) {
		t.Errorf("audit trail %v, want %v", got, want)
	}
}
