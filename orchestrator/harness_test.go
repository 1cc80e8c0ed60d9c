package orchestrator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// order is the test saga's entity.
type order struct {
	ID    string
	Steps []string
}

// respondFunc answers a command; nil drops it.
type respondFunc func(cmd *topics.Envelope) *topics.Envelope

// responder plays the workers: it consumes command topics and replies with
// whatever fn returns.
type responder struct {
	cl  *kgo.Client
	fn  respondFunc
	mu  sync.Mutex
	got []*topics.Envelope
}

func startResponder(t *testing.T, brokers []string, cmdTopics []string, fn respondFunc) *responder {
	t.Helper()
	return startResponderWith(t, brokers, cmdTopics, fn)
}

// startResponderWith is startResponder with a client made with opts too.
func startResponderWith(t *testing.T, brokers []string, cmdTopics []string, fn respondFunc, opts ...kgo.Opt) *responder {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(cmdTopics...),
		kgo.ConsumerGroup(cmdTopics[0] + "-responder"), kgo.ProducerLinger(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r := &responder{cl: cl, fn: fn}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(rec *kgo.Record) {
				cmd, err := topics.Decode(rec.Value)
				if err != nil {
					return
				}
				r.mu.Lock()
				r.got = append(r.got, cmd)
				r.mu.Unlock()
				rep := r.fn(cmd)
				if rep == nil {
					return
				}
				b, _ := topics.Encode(rep)
				cl.Produce(ctx, &kgo.Record{Topic: cmd.ReplyTo, Key: []byte(cmd.TxID), Value: b}, nil)
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return r
}

func (r *responder) commands() []*topics.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*topics.Envelope(nil), r.got...)
}

// reply builds the reply to cmd with outcome and payload.
func reply(cmd *topics.Envelope, outcome topics.Outcome, payload []byte, errMsg string) *topics.Envelope {
	r := *cmd
	r.Type, r.Outcome, r.Error, r.ReplyTo = topics.TypeReply, outcome, errMsg, ""
	if payload != nil {
		r.Payload = payload
	}
	return &r
}

// newCluster starts a kfake cluster with the topics of a test saga.
func newCluster(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func ensureTopics(t *testing.T, brokers []string, names ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := topics.Ensure(ctx, kadm.NewClient(cl), names, topics.Provision{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
}

// runOrch runs o until the test ends and waits for Run to return.
func runOrch[T any](t *testing.T, o *orchestrator.Orchestrator[T]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	select {
	case <-o.Running():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("orchestrator did not start")
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run returned %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitState polls until every saga in ids is in a terminal state, or fails.
func waitTerminal[T any](t *testing.T, o *orchestrator.Orchestrator[T], ids []string, within time.Duration) map[string]eventstore.State {
	t.Helper()
	deadline := time.Now().Add(within)
	out := make(map[string]eventstore.State, len(ids))
	for {
		pending := 0
		for _, id := range ids {
			if out[id].Terminal() {
				continue
			}
			s, err := o.Get(context.Background(), id)
			if err != nil {
				t.Fatalf("get %s: %v", id, err)
			}
			out[id] = s.State
			if !s.State.Terminal() {
				pending++
			}
		}
		if pending == 0 {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sagas not terminal after %v", pending, len(ids), within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFor polls cond until it holds or fails the test.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// advanceIdle waits until every command o published has had its reply
// (Stats.Awaiting), then advances the test's clock by d.
func advanceIdle[T any](t *testing.T, o *orchestrator.Orchestrator[T], advance func(time.Duration), d time.Duration) {
	t.Helper()
	waitStats(t, o, "every command's reply", func(st orchestrator.Stats) bool { return st.Awaiting() == 0 })
	advance(d)
}

// waitStats waits until o's counters satisfy cond: a counter is updated
// just after the store write that waitTerminal observes, so a test must wait
// for the counter it asserts.
func waitStats[T any](t *testing.T, o *orchestrator.Orchestrator[T], what string, cond func(orchestrator.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(o.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: timed out waiting for %s", o.Stats(), what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
