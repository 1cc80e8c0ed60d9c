package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
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
	t.Setenv(kafkaflags.DeprecatedEnvBrokers, "")
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
	if code, _, _ := r.run(kafka("cancel", aTxID, "--reason", "x")...); code != exitNotFound {
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

// cancel and terminate reach a Kafka that requires TLS and SASL with the
// flags sagademo and sagabench take (internal/kafkaflags): on the real
// SASL_SSL listener the request lands on the domain's callback topic, and
// without the flags it cannot be sent. A SASL user without a password is a
// usage error before anything is opened.
func TestCancelOverTLS(t *testing.T) {
	r := newAdminRig(t)
	k := testenv.KafkaSASLSSL(t)
	if k.Brokers == nil {
		return
	}
	plain := testenv.KafkaBrokers(t)
	domain := testenv.UniqueName(t, "cxtls")
	cl, err := kgo.NewClient(kgo.SeedBrokers(plain...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := topics.Ensure(ctx, kadm.NewClient(cl), topics.OrchestratorTopics(domain), topics.Provision{Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	tx := r.saga(time.Minute, eventstore.StateInProgress, func(tx *eventstore.Transaction) { tx.Domain = domain })
	secure := []string{"--brokers", strings.Join(k.Brokers, ","), "--kafka-tls-ca", os.Getenv(testenv.EnvKafkaTLSCA),
		"--kafka-sasl-mechanism", "plain", "--kafka-sasl-user", k.User, "--kafka-sasl-password-env", "SAGACTL_TEST_KAFKA_PASSWORD"}

	t.Setenv("SAGACTL_TEST_KAFKA_PASSWORD", "")
	if code, _, errOut := r.run(append([]string{"cancel", tx.TxID, "--reason", "r"}, secure...)...); code != exitUsage || !strings.Contains(errOut, "--kafka-sasl-user") {
		t.Errorf("cancel with a SASL user and no password: exit %d: %s", code, errOut)
	}
	// Plaintext to the SASL_SSL listener: the request is not sent.
	if code, _, errOut := r.run("terminate", tx.TxID, "--reason", "r", "--brokers", strings.Join(k.Brokers, ","), "--timeout", "5s"); code != exitFailure {
		t.Errorf("terminate over plaintext to the SASL_SSL listener: exit %d, want %d: %s", code, exitFailure, errOut)
	}
	t.Setenv("SAGACTL_TEST_KAFKA_PASSWORD", k.Password)
	out := r.ok(append([]string{"cancel", tx.TxID, "--reason", "over TLS", "--actor", "alice"}, secure...)...)
	if !strings.Contains(out, "cancel requested for "+tx.TxID) {
		t.Errorf("cancel over TLS: %s", out)
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(plain...), kgo.ConsumeTopics(topics.CallbackTopic(domain)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var got []string
	for len(got) == 0 {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no request on %s: %v", topics.CallbackTopic(domain), ctx.Err())
		}
		fs.EachRecord(func(rec *kgo.Record) {
			for _, h := range rec.Headers {
				if h.Key == orchestrator.ControlHeader {
					got = append(got, string(rec.Key)+" "+string(h.Value))
				}
			}
		})
	}
	if want := []string{tx.TxID + " " + orchestrator.ControlCancel}; !slices.Equal(got, want) {
		t.Errorf("callback topic holds %v, want %v (only the request sent over TLS)", got, want)
	}
}

// TestEnvBrokersDeprecatedName: STACKSAGA_KAFKA_BROKERS is read silently;
// KAFKA_BROKERS, when it is unset, with a note naming the new name.
func TestEnvBrokersDeprecatedName(t *testing.T) {
	t.Setenv("STACKSAGA_KAFKA_BROKERS", "")
	t.Setenv("KAFKA_BROKERS", "127.0.0.1:19092")
	var errb strings.Builder
	if got := envBrokers(&errb); got != "127.0.0.1:19092" || !strings.Contains(errb.String(), "KAFKA_BROKERS is deprecated: set STACKSAGA_KAFKA_BROKERS") {
		t.Errorf("KAFKA_BROKERS: %q, stderr %q", got, errb.String())
	}
	errb.Reset()
	t.Setenv("STACKSAGA_KAFKA_BROKERS", "127.0.0.1:29092")
	if got := envBrokers(&errb); got != "127.0.0.1:29092" || errb.Len() != 0 {
		t.Errorf("STACKSAGA_KAFKA_BROKERS: %q, stderr %q", got, errb.String())
	}
}
