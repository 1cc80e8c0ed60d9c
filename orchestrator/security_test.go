package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// secureKafka are the client options for k's SASL_SSL listener: TLS
// trusting its certificate and SASL/PLAIN as k's user with pass.
func secureKafka(k testenv.KafkaSecure, pass string) []kgo.Opt {
	return []kgo.Opt{kgo.DialTLSConfig(k.TLS.Clone()), kgo.SASL(plain.Auth{User: k.User, Pass: pass}.AsMechanism())}
}

// Sagas run end to end when every Kafka client of the orchestrator and
// its workers reaches the brokers over TLS with SASL/PLAIN, given only
// through WithKafkaOpts (scripts/services' Kafka has a SASL_SSL listener):
// the producers, the group consumers and the topic provisioning all take
// the options. Wrong credentials fail the orchestrator's start with the
// broker's refusal instead of hanging.
func TestKafkaSagaOverTLSAndSASL(t *testing.T) {
	k := testenv.KafkaSASLSSL(t)
	secure := func(pass string) []kgo.Opt { return secureKafka(k, pass) }
	r := newRigOn(t, "memory", k.Brokers, secure(k.Password)...)
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	o, _ := r.startOrchestrator()
	ids := startConcurrently(t, o, 20)
	expectAll(t, waitTerminal(t, o, ids, 2*time.Minute), eventstore.StateCompleted)

	bad, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(k.Brokers...),
		orchestrator.WithKafkaOpts(secure("not-the-password")...))
	if err != nil {
		t.Fatal(err)
	}
	expectSASLRefusal(t, "an orchestrator", bad.Run, bad.Running())
}

// expectSASLRefusal runs run (the Run of what was given a wrong password)
// and fails t unless it returns the broker's SASL refusal within a
// minute, without reporting running.
func expectSASLRefusal(t *testing.T, what string, run func(context.Context) error, running <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "sasl") {
			t.Fatalf("%s with a wrong password: Run %v, want the broker's SASL refusal", what, err)
		}
	case <-running:
		t.Fatalf("%s with a wrong password started", what)
	case <-ctx.Done():
		t.Fatalf("%s with a wrong password neither failed nor started in a minute", what)
	}
}

// The same over share groups (KIP-932): both workers and the orchestrator
// consume as share groups, every Kafka client given TLS and SASL/PLAIN only
// through WithKafkaOpts. A share-group worker's client (worker/share.go)
// and a share-group orchestrator's consumer (orchestrator/share.go) check
// the brokers' share-group support, configure their group, join it, and
// fetch and acknowledge over SASL_SSL; the broker lists each group as a
// share group whose member is assigned the group's topic. A share-group
// worker with a wrong password, whose share client is its first (it does
// not provision), fails Run with the broker's refusal instead of hanging.
func TestKafkaShareGroupSagaOverTLSAndSASL(t *testing.T) {
	k := testenv.KafkaSASLSSL(t)
	r := newRigOn(t, "memory", k.Brokers, secureKafka(k, k.Password)...)
	groups := map[string]string{ // share group -> the topic it consumes
		r.svcStock + ".worker.share":     topics.CommandTopic(r.svcStock),
		r.svcPay + ".worker.share":       topics.CommandTopic(r.svcPay),
		r.domain + ".orchestrator.share": topics.CallbackTopic(r.domain),
	}
	r.startWorker(r.svcStock, worker.WithGroupType(topics.GroupShare), worker.WithGroup(r.svcStock+".worker.share"))
	r.startWorker(r.svcPay, worker.WithGroupType(topics.GroupShare), worker.WithGroup(r.svcPay+".worker.share"))
	o, _ := r.startOrchestrator(orchestrator.WithGroupType(topics.GroupShare), orchestrator.WithGroup(r.domain+".orchestrator.share"))
	if o.GroupType() != topics.GroupShare {
		t.Fatalf("orchestrator group type %s, want %s", o.GroupType(), topics.GroupShare)
	}
	const n = 20
	ids := startConcurrently(t, o, n)
	expectAll(t, waitTerminal(t, o, ids, 2*time.Minute), eventstore.StateCompleted)
	// A handler records its run before it replies: every step of every
	// saga ran on the share-group workers by the time the saga completed.
	for span, step := range []string{"reserve", "charge", "ship"} {
		if got := r.count(span, topics.KindProcess); got != n {
			t.Errorf("%s ran for %d of %d sagas", step, got, n)
		}
	}

	cl, err := r.client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// A share group's member is listed once it has joined; Running may
	// have been reported before the broker showed it assigned.
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing := shareGroupsUnassigned(t, kadm.NewClient(cl), groups)
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", missing)
		}
		time.Sleep(100 * time.Millisecond)
	}

	bad, err := worker.New(r.svcPay, worker.WithBrokers(k.Brokers...), worker.WithKafkaOpts(secureKafka(k, "not-the-password")...),
		worker.WithGroupType(topics.GroupShare), worker.WithGroup(r.svcPay+".worker.share"), worker.WithoutProvision())
	if err != nil {
		t.Fatal(err)
	}
	expectSASLRefusal(t, "a share-group worker", bad.Run, bad.Running())
}

// shareGroupsUnassigned describes groups (share group -> the topic it
// consumes) and returns "" when the broker lists each as a share group with
// a member assigned a partition of its topic, else what it lacks.
func shareGroupsUnassigned(t *testing.T, adm *kadm.Client, groups map[string]string) string {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	described, err := adm.DescribeShareGroups(ctx, names...)
	if err != nil {
		return "describe share groups: " + err.Error()
	}
	for g, topic := range groups {
		d, ok := described[g]
		if !ok || d.Err != nil {
			return fmt.Sprintf("share group %s not described (%v)", g, d.Err)
		}
		assigned := false
		for _, m := range d.Members {
			assigned = assigned || len(m.Assignment[topic]) > 0
		}
		if !assigned {
			return fmt.Sprintf("share group %s (state %s, %d members): no member assigned %s", g, d.GroupState, len(d.Members), topic)
		}
	}
	return ""
}
