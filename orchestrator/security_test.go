package orchestrator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
)

// Sagas run end to end when every Kafka client of the orchestrator and
// its workers reaches the brokers over TLS with SASL/PLAIN, given only
// through WithKafkaOpts (scripts/services' Kafka has a SASL_SSL listener):
// the producers, the group consumers and the topic provisioning all take
// the options. Wrong credentials fail the orchestrator's start with the
// broker's refusal instead of hanging.
func TestKafkaSagaOverTLSAndSASL(t *testing.T) {
	k := testenv.KafkaSASLSSL(t)
	secure := func(pass string) []kgo.Opt {
		return []kgo.Opt{kgo.DialTLSConfig(k.TLS.Clone()), kgo.SASL(plain.Auth{User: k.User, Pass: pass}.AsMechanism())}
	}
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
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- bad.Run(ctx) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "sasl") {
			t.Fatalf("Run with a wrong password: %v, want the broker's SASL refusal", err)
		}
	case <-bad.Running():
		t.Fatal("an orchestrator with a wrong password started")
	case <-ctx.Done():
		t.Fatal("Run with a wrong password neither failed nor started in a minute")
	}
}
