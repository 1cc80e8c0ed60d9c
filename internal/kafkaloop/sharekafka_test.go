package kafkaloop_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/kafkaloop"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Share mode on real Kafka (4.x): the broker archives a record released on
// its last delivery, so the loop must never release one.

// newShareKafka is newShareEnv on the real Kafka of testenv: a topic of its
// own with one partition, and a share group configured with s.
func newShareKafka(t *testing.T, s topics.ShareSettings) *shareEnv {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	e := &shareEnv{t: t, brokers: brokers, topic: testenv.UniqueName(t, "share"), prod: prod, group: testenv.UniqueName(t, "sg")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := topics.Ensure(ctx, kadm.NewClient(prod), []string{e.topic}, topics.Provision{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := topics.ConfigureShareGroup(ctx, prod, e.group, s); err != nil {
		t.Fatal(err)
	}
	return e
}

// A record that fails on its last delivery while its dead letter cannot be
// produced is held, and its dead letter retried, until it lands: the loop
// does not release it (the broker would archive it, and nothing would be
// left of it), and it is not delivered again once dead-lettered.
func TestKafkaShareLastDeliveryWaitsForItsDeadLetter(t *testing.T) {
	e := newShareKafka(t, topics.ShareSettings{DeliveryLimit: 2})
	e.produce("a")
	tl := newTally()
	h := func(_ context.Context, r *kgo.Record) error {
		tl.mu.Lock()
		tl.runs[string(r.Value)]++
		tl.mu.Unlock()
		tl.poke()
		return errors.New("store unavailable")
	}
	var tries atomic.Int32
	const refused = 5
	dl := func(ctx context.Context, r *kgo.Record, reason string) error {
		if tries.Add(1) <= refused {
			return errors.New("dead-letter topic unavailable")
		}
		return tl.deadLetter(ctx, r, reason)
	}
	e.member(h, kafkaloop.Options{DeliveryLimit: 2, RetryBackoff: time.Millisecond, Released: tl.release, DeadLetter: dl})
	tl.waitFor(t, "the dead letter", func() bool { return tl.dead["v0"] != "" })
	time.Sleep(time.Second) // a redelivery would show by now
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if got, want := tl.dead["v0"], "delivery count limit of 2 reached: store unavailable"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	if n := tries.Load(); n != refused+1 {
		t.Errorf("%d dead-letter tries, want %d", n, refused+1)
	}
	if tl.runs["v0"] != 2 || fmt.Sprint(tl.released["v0"]) != "[failed]" {
		t.Errorf("ran %d times, released %v; want 2 runs and one release (after the first)", tl.runs["v0"], tl.released["v0"])
	}
}

// A record on its last delivery that has not started when the member shuts
// down is not released (the broker would archive it): the member runs it
// before it returns, as it runs every record it holds.
func TestKafkaShareShutdownKeepsLastDelivery(t *testing.T) {
	e := newShareKafka(t, topics.ShareSettings{DeliveryLimit: 2})
	e.produce("k", "k") // v0 and v1, one key: v1 runs after v0
	tl := newTally()
	deliveries := map[string][]int32{}
	blocking, unblock := make(chan struct{}), make(chan struct{})
	h := func(_ context.Context, r *kgo.Record) error {
		v := string(r.Value)
		tl.mu.Lock()
		tl.runs[v]++
		deliveries[v] = append(deliveries[v], r.DeliveryCount())
		tl.mu.Unlock()
		if r.DeliveryCount() == 1 {
			return errors.New("store unavailable") // both are released, and come back on their last delivery
		}
		if v == "v0" {
			close(blocking)
			<-unblock
		}
		tl.mu.Lock()
		tl.ok[v]++
		tl.mu.Unlock()
		tl.poke()
		return nil
	}
	cl, err := kgo.NewClient(append(kafkaloop.ShareClientOpts(0), kgo.SeedBrokers(e.brokers...), kgo.ShareGroup(e.group), kgo.ConsumeTopics(e.topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- kafkaloop.RunShare(ctx, cl, h, kafkaloop.Options{Logger: quiet, DeliveryLimit: 2, RetryBackoff: time.Millisecond, Released: tl.release, DeadLetter: tl.deadLetter})
	}()
	select {
	case <-blocking:
	case <-time.After(30 * time.Second):
		t.Fatalf("v0 never came back: runs %v", tl.runs)
	}
	cancel() // shutting down while v0 runs and v1, on its last delivery, waits behind it
	close(unblock)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cl.Close()
	// Whatever the first member left is another member's.
	e.member(h, kafkaloop.Options{DeliveryLimit: 2, Released: tl.release, DeadLetter: tl.deadLetter})
	tl.waitFor(t, "both records handled", func() bool { return tl.ok["v0"] == 1 && tl.ok["v1"] == 1 })
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for v, d := range deliveries {
		if fmt.Sprint(d) != "[1 2]" {
			t.Errorf("%s delivered %v, want [1 2]", v, d)
		}
	}
	for v, why := range tl.released {
		if fmt.Sprint(why) != "[failed]" {
			t.Errorf("%s released %v, want once, after its first failure", v, why)
		}
	}
}
