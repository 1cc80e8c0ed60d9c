package topics_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/topics"
)

func TestTopicLists(t *testing.T) {
	if got, want := topics.WorkerTopics("payment-service"), []string{"stacksaga.payment-service.command", "stacksaga.payment-service.command.dlt"}; !slices.Equal(got, want) {
		t.Errorf("WorkerTopics = %v, want %v", got, want)
	}
	if got, want := topics.OrchestratorTopics("order"), []string{"stacksaga.order.callback", "stacksaga.order.callback.dlt"}; !slices.Equal(got, want) {
		t.Errorf("OrchestratorTopics = %v, want %v", got, want)
	}
}

func newAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// testEnsure is run on kfake and on real Kafka.
func testEnsure(t *testing.T, adm *kadm.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	names := append(topics.WorkerTopics(prefix+"svc"), topics.OrchestratorTopics(prefix+"dom")...)
	// Duplicates in the list are fine.
	if err := topics.Ensure(ctx, adm, append(names, names[0]), topics.Provision{Partitions: 3}); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	td, err := adm.ListTopics(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		d, ok := td[n]
		if !ok || d.Err != nil {
			t.Fatalf("topic %s after Ensure: %+v", n, d)
		}
		if len(d.Partitions) != 3 {
			t.Errorf("topic %s has %d partitions, want 3", n, len(d.Partitions))
		}
	}

	// Idempotent: a second call with other settings succeeds and changes
	// nothing; a new name in the list is created with the defaults.
	extra := prefix + "extra"
	if err := topics.Ensure(ctx, adm, append(names, extra), topics.Provision{}); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	td, err = adm.ListTopics(ctx, append(names, extra)...)
	if err != nil {
		t.Fatal(err)
	}
	if p := len(td[names[0]].Partitions); p != 3 {
		t.Errorf("existing topic now has %d partitions, want 3 (unchanged)", p)
	}
	if p := len(td[extra].Partitions); p != int(topics.DefaultPartitions) {
		t.Errorf("new topic has %d partitions, want the default %d", p, topics.DefaultPartitions)
	}

	// Configs are applied on creation.
	withCfg := prefix + "withcfg"
	if err := topics.Ensure(ctx, adm, []string{withCfg}, topics.Provision{Partitions: 1, Configs: map[string]string{"retention.ms": "3600000"}}); err != nil {
		t.Fatalf("Ensure with configs: %v", err)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, withCfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rc.On(withCfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, kv := range c.Configs {
		if kv.Key == "retention.ms" && kv.MaybeValue() == "3600000" {
			found = true
		}
	}
	if !found {
		t.Errorf("retention.ms not set on %s: %+v", withCfg, c.Configs)
	}
}

func TestEnsureKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testEnsure(t, newAdmin(t, c.ListenAddrs()), "p")
}

func TestEnsureErrors(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adm := newAdmin(t, c.ListenAddrs())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if err := topics.Ensure(ctx, adm, nil, topics.Provision{}); err != nil {
		t.Errorf("Ensure(nil) = %v", err)
	}
	for _, bad := range []string{"", "has space", "slash/", ".."} {
		if err := topics.Ensure(ctx, adm, []string{bad}, topics.Provision{}); err == nil {
			t.Errorf("Ensure(%q) succeeded", bad)
		}
	}
	// An impossible replication factor is reported, not swallowed.
	if err := topics.Ensure(ctx, adm, []string{"rf-too-big"}, topics.Provision{ReplicationFactor: 3}); err == nil {
		t.Error("Ensure with replication factor 3 on one broker succeeded")
	}
	// A context that ends first is reported.
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if err := topics.Ensure(done, adm, []string{"never"}, topics.Provision{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Ensure with a cancelled context = %v, want context.Canceled", err)
	}
}
