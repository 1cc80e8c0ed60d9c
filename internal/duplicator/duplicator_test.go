package duplicator_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/duplicator"
)

func TestRelayAppendsCopiesBehindOriginals(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := duplicator.New(c.ListenAddrs(), []string{"t"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, k := range []string{"a", "b", "c"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Key: []byte(k), Value: []byte("v-" + k)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int{}
	pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
	defer pcancel()
	for n := 0; n < 9; {
		fs := cl.PollFetches(pctx)
		if err := pctx.Err(); err != nil {
			t.Fatalf("got %v after %v", got, err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			got[string(rec.Key)+"="+string(rec.Value)]++
			n++
		})
	}
	for _, k := range []string{"a", "b", "c"} {
		if got[k+"=v-"+k] != 3 {
			t.Errorf("%s delivered %d times, want 3: %v", k, got[k+"=v-"+k], got)
		}
	}
	// The counter moves once the relay's produce returns, which can be
	// after the copies are readable.
	for deadline := time.Now().Add(10 * time.Second); r.Copied() != 6; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("copied %d, want 6", r.Copied())
		}
	}
	if _, err := duplicator.New(c.ListenAddrs(), []string{"t"}, 0); err == nil {
		t.Error("copies 0 accepted")
	}
}
