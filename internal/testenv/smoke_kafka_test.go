package testenv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// TestKafkaSmoke proves the broker is a real, usable Kafka: records produced
// with acks=all are consumed through a consumer group whose offsets are
// committed by hand, and a new member of the group resumes after them.
func TestKafkaSmoke(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.UniqueName(t, "smoke")
	group := testenv.UniqueName(t, "grp")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admCl.Close) // after the topic deletion below (cleanups run last-in first-out)
	adm := kadm.NewClient(admCl)
	created, err := adm.CreateTopic(ctx, 2, 1, nil, topic)
	if err != nil || created.Err != nil {
		t.Fatalf("create topic %s: %v / %v", topic, err, created.Err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := adm.DeleteTopics(ctx, topic)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Errorf("delete topic %s: %v", topic, err)
		}
	})

	produce := func(from, to int) {
		t.Helper()
		prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()))
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%3), Value: fmt.Appendf(nil, "v%d", i)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	// consume reads until want values arrived, commits them, and returns the
	// values in arrival order.
	consume := func(want int) []string {
		t.Helper()
		cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		var got []string
		var recs []*kgo.Record
		for len(got) < want {
			fetches := cons.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("consumed %d of %d records before the deadline: %v", len(got), want, err)
			}
			fetches.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
			fetches.EachRecord(func(r *kgo.Record) {
				got = append(got, string(r.Value))
				recs = append(recs, r)
			})
		}
		if err := cons.CommitRecords(ctx, recs...); err != nil {
			t.Fatalf("commit: %v", err)
		}
		return got
	}

	produce(0, 10)
	first := consume(10)
	if len(first) != 10 {
		t.Fatalf("first consumer got %d records (%v), want exactly 10", len(first), first)
	}
	seen := map[string]bool{}
	for _, v := range first {
		seen[v] = true
	}
	for i := range 10 {
		if !seen[fmt.Sprintf("v%d", i)] {
			t.Fatalf("first consumer missed v%d: %v", i, first)
		}
	}

	offsets, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch committed offsets: %v", err)
	}
	var committed int64
	offsets.Each(func(o kadm.OffsetResponse) { committed += o.At })
	if committed != 10 {
		t.Fatalf("committed offsets sum to %d, want 10", committed)
	}

	// A new member of the group starts after the committed offsets.
	produce(10, 11)
	if second := consume(1); len(second) != 1 || second[0] != "v10" {
		t.Fatalf("second consumer got %v, want only [v10]", second)
	}
}
