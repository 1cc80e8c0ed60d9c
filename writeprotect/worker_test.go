package writeprotect_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Payment is the domain entity of the end-to-end tests.
type Payment struct {
	ID       string `msgpack:"id"`
	Charged  int    `msgpack:"charged"`
	Refunded int    `msgpack:"refunded"`
}

// kafkaEnv is a broker with a service's command topic and a domain's
// callback topic, and a reader of the callback topic.
type kafkaEnv struct {
	t        *testing.T
	brokers  []string
	service  string
	domain   string
	callback string
	cl       *kgo.Client

	mu      sync.Mutex
	replies []*topics.Envelope
}

func newKfakeEnv(t *testing.T) *kafkaEnv {
	t.Helper()
	const service, domain = "payment-service", testDomain
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(4, topics.CommandTopic(service), topics.DeadLetterTopic(topics.CommandTopic(service)), topics.CallbackTopic(domain)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return newKafkaEnv(t, c.ListenAddrs(), service, domain)
}

func newRealKafkaEnv(t *testing.T) *kafkaEnv {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	service, domain := testenv.UniqueName(t, "svc"), testenv.UniqueName(t, "dom")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := append(topics.WorkerTopics(service), topics.OrchestratorTopics(domain)...)
	if err := topics.Ensure(ctx, kadm.NewClient(cl), names, topics.Provision{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	return newKafkaEnv(t, brokers, service, domain)
}

func newKafkaEnv(t *testing.T, brokers []string, service, domain string) *kafkaEnv {
	t.Helper()
	e := &kafkaEnv{t: t, brokers: brokers, service: service, domain: domain, callback: topics.CallbackTopic(domain)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(e.callback),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				rep, err := topics.Decode(r.Value)
				if err != nil {
					t.Errorf("undecodable reply: %v", err)
					return
				}
				e.mu.Lock()
				e.replies = append(e.replies, rep)
				e.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return e
}

// startWorker runs a worker of e's service in its own consumer group (so
// that every instance gets every command, as two instances do around a
// rebalance), guarded by g, until the test ends.
func (e *kafkaEnv) startWorker(g worker.Guard, group string, charges, refunds *atomic.Int64) {
	e.t.Helper()
	w, err := worker.New(e.service, worker.WithBrokers(e.brokers...), worker.WithGroup(group), worker.WithGuard(g),
		worker.WithLogger(quietLogger()), worker.WithKafkaOpts(kgo.FetchMaxWait(200*time.Millisecond)))
	if err != nil {
		e.t.Fatal(err)
	}
	err = worker.Register(w, worker.Endpoint[Payment]{
		Name: "charge",
		Process: func(_ context.Context, _ *worker.Step, p Payment) (Payment, error) {
			p.Charged = int(charges.Add(1))
			return p, nil
		},
		Revert: func(_ context.Context, _ *worker.Step, p Payment) (Payment, error) {
			p.Refunded = int(refunds.Add(1))
			return p, nil
		},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			e.t.Errorf("worker Run: %v", err)
		}
	})
	select {
	case <-w.Running():
	case err := <-errc:
		e.t.Fatalf("worker stopped: %v", err)
	case <-time.After(time.Minute):
		e.t.Fatal("worker did not join its group")
	}
}

// send produces cmd n times.
func (e *kafkaEnv) send(cmd *topics.Envelope, n int) {
	e.t.Helper()
	b, err := topics.Encode(cmd)
	if err != nil {
		e.t.Fatal(err)
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topics.CommandTopic(e.service), Key: []byte(cmd.TxID), Value: b}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// awaitReplies waits for n replies of tx's span and kind.
func (e *kafkaEnv) awaitReplies(tx string, kind topics.Kind, n int) []*topics.Envelope {
	e.t.Helper()
	var got []*topics.Envelope
	waitUntil(e.t, time.Minute, fmt.Sprintf("%d %s replies of %s", n, kind, tx), func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		got = got[:0]
		for _, r := range e.replies {
			if r.TxID == tx && r.Kind == kind {
				got = append(got, r)
			}
		}
		return len(got) >= n
	})
	return got
}

func (e *kafkaEnv) command(scope eventstore.Scope, tx string, kind topics.Kind) *topics.Envelope {
	payload, err := msgpack.Marshal(Payment{ID: tx})
	if err != nil {
		e.t.Fatal(err)
	}
	return &topics.Envelope{
		Type: topics.TypeCommand, Region: scope.Region, Cluster: scope.Cluster, Service: scope.Service,
		Domain: e.domain, TxID: tx, Span: 1, Kind: kind, Endpoint: "charge",
		IdempotencyKey: topics.IdempotencyKey(tx, 1, kind), Attempt: 1, ReplyTo: e.callback,
		Payload: payload, SentAt: time.Now(),
	}
}

// workerEndToEnd: two worker instances, each guarded by its own Guard on a
// shared store, both receive every command, each command is produced 3
// times: every handler runs once per (transaction, span, kind) and all 6
// replies are identical. Then the compensation, the same way.
func workerEndToEnd(t *testing.T, e *kafkaEnv, store eventstore.Store, mode writeprotect.Mode, instances int) {
	if store == nil {
		m := memory.New()
		t.Cleanup(func() { _ = m.Close() })
		store = m
	}
	cfg := writeprotect.Config{Domains: map[string]writeprotect.DomainConfig{e.domain: {Mode: mode}}}
	var charges, refunds atomic.Int64
	var guards []*writeprotect.Guard
	for i := range instances {
		g, err := writeprotect.New(store, cfg, writeprotect.WithLogger(quietLogger()), writeprotect.WithOwner(fmt.Sprintf("instance-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		guards = append(guards, g)
		e.startWorker(g, fmt.Sprintf("%s-group-%d", e.service, i), &charges, &refunds)
	}
	scope := uniqueScope(t)
	const deliveries = 3
	for _, step := range []struct {
		kind    topics.Kind
		counter *atomic.Int64
	}{{topics.KindProcess, &charges}, {topics.KindRevert, &refunds}} {
		e.send(e.command(scope, "tx-e2e", step.kind), deliveries)
		replies := e.awaitReplies("tx-e2e", step.kind, deliveries*instances)
		if n := step.counter.Load(); n != 1 {
			t.Fatalf("%s handler ran %d times, want 1", step.kind, n)
		}
		for i, r := range replies {
			if err := sameReply(replies[0], r); err != nil {
				t.Fatalf("%s reply %d: %v", step.kind, i, err)
			}
		}
		var p Payment
		if err := msgpack.Unmarshal(replies[0].Payload, &p); err != nil {
			t.Fatal(err)
		}
		ok := p.Charged == 1 && p.Refunded == 0
		if step.kind == topics.KindRevert {
			ok = p.Charged == 0 && p.Refunded == 1
		}
		if replies[0].Outcome != topics.OutcomeOK || !ok {
			t.Fatalf("%s reply %+v, payment %+v", step.kind, replies[0], p)
		}
	}
	st := sumStats(guards...)
	if st.Executions != 2 || st.DuplicatesSkipped != uint64(2*(deliveries*instances-1)) {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("stats %+v", st)
}

func TestWorkerStrictTwoInstances(t *testing.T) {
	workerEndToEnd(t, newKfakeEnv(t), nil, writeprotect.Strict, 2)
}

func TestWorkerRelaxed(t *testing.T) {
	workerEndToEnd(t, newKfakeEnv(t), nil, writeprotect.RelaxedWithDedup, 1)
}

func TestKafkaWorkerStrictTwoInstances(t *testing.T) {
	workerEndToEnd(t, newRealKafkaEnv(t), nil, writeprotect.Strict, 2)
}

// Real Kafka and the Cassandra store: the production setup.
func TestKafkaCassandraWorkerStrictTwoInstances(t *testing.T) {
	b, _ := cassandraBackend(t)
	workerEndToEnd(t, newRealKafkaEnv(t), b.store, writeprotect.Strict, 2)
}
