package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/topics"
)

// newRealKafka gives a test its own service, domain and group on the real
// Kafka of testenv, with the topics created.
func newRealKafka(t *testing.T) *env { return newRealKafkaPartitions(t, 4) }

// newRealKafkaPartitions is newRealKafka with topics of that many
// partitions.
func newRealKafkaPartitions(t *testing.T, partitions int32) *env {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	svc := testenv.UniqueName(t, "svc")
	dom := testenv.UniqueName(t, "dom")
	group := testenv.UniqueName(t, "grp")
	names := append(topics.WorkerTopics(svc), topics.OrchestratorTopics(dom)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := &env{t: t, brokers: brokers}
	if err := topics.Ensure(ctx, newAdminFor(t, e), names, topics.Provision{Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
	return newEnv(t, brokers, svc, dom, group)
}

func TestKafkaProcessRoundTrip(t *testing.T) { caseProcessRoundTrip(t, newRealKafka(t)) }
func TestKafkaErrorMapping(t *testing.T)     { caseErrorMapping(t, newRealKafka(t)) }
func TestKafkaRevertAndHints(t *testing.T)   { caseRevertAndHints(t, newRealKafka(t)) }
func TestKafkaDeadLetters(t *testing.T)      { caseDeadLetters(t, newRealKafka(t)) }
func TestKafkaRestartLosesNothing(t *testing.T) {
	caseRestart(t, newRealKafka(t), 200)
}
func TestKafkaBadReplyToDoesNotStall(t *testing.T) {
	caseBadReplyToDoesNotStall(t, newRealKafka(t))
}
