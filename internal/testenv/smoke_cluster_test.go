package testenv_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// TestClusterCassandraSmoke proves the cluster of `scripts/services up
// --cluster` is what the cluster tests assume: three nodes on three
// loopback addresses, in one data centre, one rack each.
func TestClusterCassandraSmoke(t *testing.T) {
	c := testenv.CassandraClusterNodes(t)
	cl := gocql.NewCluster(c.Hosts...)
	cl.Timeout, cl.ConnectTimeout = 20*time.Second, 10*time.Second
	cl.Logger = gocql.NewLogger(gocql.LogLevelNone)
	s, err := cl.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	racks := map[string]string{}
	for _, h := range s.GetHosts() {
		if h.DataCenter() != c.DC {
			t.Errorf("node %s is in data centre %q, want %q", h.ConnectAddress(), h.DataCenter(), c.DC)
		}
		racks[h.ConnectAddress().String()] = h.Rack()
	}
	want := map[string]string{"127.0.0.1": "rack1", "127.0.0.2": "rack2", "127.0.0.3": "rack3"}
	if len(racks) != 3 || racks["127.0.0.1"] != want["127.0.0.1"] || racks["127.0.0.2"] != want["127.0.0.2"] || racks["127.0.0.3"] != want["127.0.0.3"] {
		t.Errorf("nodes and racks = %v, want %v", racks, want)
	}
}

// TestClusterKafkaSmoke proves the Kafka cluster's defaults: three brokers
// in three racks, and a topic created with the broker defaults is
// replicated three times with min.insync.replicas=2.
func TestClusterKafkaSmoke(t *testing.T) {
	brokers := testenv.KafkaClusterBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close) // after the topic's deletion (cleanups run last-in first-out)
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, b := range md.Brokers {
		hosts = append(hosts, b.Host)
	}
	sort.Strings(hosts)
	if strings.Join(hosts, ",") != "127.0.0.1,127.0.0.2,127.0.0.3" {
		t.Fatalf("brokers on %v, want 127.0.0.1-3", hosts)
	}
	topic := testenv.UniqueName(t, "smoke")
	created, err := adm.CreateTopic(ctx, -1, -1, nil, topic)
	if err != nil || created.Err != nil {
		t.Fatalf("create topic %s: %v / %v", topic, err, created.Err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopics(ctx, topic); err != nil {
			t.Errorf("delete topic %s: %v", topic, err)
		}
	})
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	td := tds[topic]
	if td.Err != nil || len(td.Partitions) == 0 {
		t.Fatalf("topic %s: %+v", topic, td)
	}
	for _, p := range td.Partitions {
		if len(p.Replicas) != 3 {
			t.Errorf("partition %d has replicas %v, want 3", p.Partition, p.Replicas)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rc.Configs {
		if c.Key == "min.insync.replicas" {
			found = true
			if c.MaybeValue() != "2" {
				t.Errorf("min.insync.replicas = %q, want 2", c.MaybeValue())
			}
		}
	}
	if !found {
		t.Error("min.insync.replicas not described")
	}
}
