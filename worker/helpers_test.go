package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

const (
	service = "payment-service"
	domain  = "order"
)

var (
	commandTopic  = topics.CommandTopic(service)
	deadTopic     = topics.DeadLetterTopic(commandTopic)
	callbackTopic = topics.CallbackTopic(domain)
)

// Order is the domain entity of the tests.
type Order struct {
	ID       string   `msgpack:"id"`
	Amount   int      `msgpack:"amount"`
	Charged  bool     `msgpack:"charged"`
	Refunded bool     `msgpack:"refunded"`
	Log      []string `msgpack:"log,omitempty"`
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{}, &slog.HandlerOptions{Level: slog.LevelError + 1}))
}

type testWriter struct{}

func (testWriter) Write(p []byte) (int, error) { return len(p), nil }

// env is one test's broker (kfake or real Kafka), topic names and a client
// that produces commands and reads replies and dead letters.
type env struct {
	t        testing.TB
	kfake    *kfake.Cluster // nil on real Kafka
	brokers  []string
	command  string
	dead     string
	callback string
	service  string
	group    string
	cl       *kgo.Client

	mu      sync.Mutex
	replies []*topics.Envelope
	dlts    []*kgo.Record
	stop    context.CancelFunc
	done    chan struct{}
}

func newKfake(t testing.TB, opts ...kfake.Opt) *env {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.SeedTopics(4, commandTopic, deadTopic, callbackTopic),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := newEnv(t, c.ListenAddrs(), service, domain, "")
	e.kfake = c
	return e
}

// newEnv starts a reader of the callback and dead-letter topics from their
// start.
func newEnv(t testing.TB, brokers []string, svc, dom, group string) *env {
	t.Helper()
	e := &env{
		t:        t,
		brokers:  brokers,
		service:  svc,
		command:  topics.CommandTopic(svc),
		dead:     topics.DeadLetterTopic(topics.CommandTopic(svc)),
		callback: topics.CallbackTopic(dom),
		group:    group,
		done:     make(chan struct{}),
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(e.callback, e.dead),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.ProducerBatchMaxBytes(4<<20),
		kgo.MetadataMinAge(50*time.Millisecond),
		kgo.FetchMaxWait(300*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	e.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	go func() {
		defer close(e.done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				e.mu.Lock()
				defer e.mu.Unlock()
				if r.Topic == e.dead {
					e.dlts = append(e.dlts, r)
					return
				}
				rep, err := topics.Decode(r.Value)
				if err != nil {
					t.Errorf("undecodable reply at offset %d: %v", r.Offset, err)
					return
				}
				if string(r.Key) != rep.TxID {
					t.Errorf("reply of %s keyed %q", rep.TxID, r.Key)
				}
				e.replies = append(e.replies, rep)
			})
		}
	}()
	t.Cleanup(e.close)
	return e
}

func (e *env) close() {
	e.stop()
	<-e.done
	e.cl.Close()
}

// newWorker makes a worker on e's brokers with quiet logs.
func (e *env) newWorker(opts ...worker.Option) *worker.Worker {
	e.t.Helper()
	base := []worker.Option{
		worker.WithBrokers(e.brokers...),
		worker.WithLogger(quietLogger()),
		worker.WithKafkaOpts(kgo.MetadataMinAge(50*time.Millisecond), kgo.FetchMaxWait(300*time.Millisecond)),
	}
	if e.group != "" {
		base = append(base, worker.WithGroup(e.group))
	}
	w, err := worker.New(e.service, append(base, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// start runs w until the test ends (or the returned stop is called), and
// waits until it has joined its group.
func (e *env) start(w *worker.Worker) (stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil {
				e.t.Errorf("Run: %v", err)
			}
		})
	}
	e.t.Cleanup(stop)
	select {
	case <-w.Running():
	case err := <-errc:
		e.t.Fatalf("Run returned before joining: %v", err)
	case <-time.After(30 * time.Second):
		e.t.Fatal("worker did not join its group in 30s")
	}
	return stop
}

// cmd builds a command envelope.
func (e *env) cmd(tx, endpoint string, span int, kind topics.Kind, in any) *topics.Envelope {
	var payload []byte
	if in != nil {
		b, err := msgpack.Marshal(in)
		if err != nil {
			e.t.Fatal(err)
		}
		payload = b
	}
	return &topics.Envelope{
		Type:           topics.TypeCommand,
		Region:         "r1",
		Cluster:        "c1",
		Service:        "order-service",
		Domain:         domain,
		TxID:           tx,
		Span:           span,
		Kind:           kind,
		Endpoint:       endpoint,
		IdempotencyKey: topics.IdempotencyKey(tx, span, kind),
		Attempt:        1,
		ReplyTo:        e.callback,
		Payload:        payload,
		SentAt:         time.Now(),
	}
}

// send produces commands to the command topic, keyed by transaction id.
func (e *env) send(cmds ...*topics.Envelope) {
	e.t.Helper()
	recs := make([]*kgo.Record, len(cmds))
	for i, c := range cmds {
		b, err := topics.Encode(c)
		if err != nil {
			e.t.Fatal(err)
		}
		recs[i] = &kgo.Record{Topic: e.command, Key: []byte(c.TxID), Value: b}
	}
	e.sendRaw(recs...)
}

func (e *env) sendRaw(recs ...*kgo.Record) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range recs {
		if r.Topic == "" {
			r.Topic = e.command
		}
	}
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatalf("produce commands: %v", err)
	}
}

// waitFor polls until cond holds on the replies and dead letters read so
// far, or fails the test after 30s.
func (e *env) waitFor(what string, cond func(replies []*topics.Envelope, dlts []*kgo.Record) bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		e.mu.Lock()
		ok := cond(e.replies, e.dlts)
		n, d := len(e.replies), len(e.dlts)
		e.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s (%d replies, %d dead letters read)", what, n, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reply waits for the reply of tx's span and kind.
func (e *env) reply(tx string, span int, kind topics.Kind) *topics.Envelope {
	e.t.Helper()
	var got *topics.Envelope
	e.waitFor("reply of "+tx, func(rs []*topics.Envelope, _ []*kgo.Record) bool {
		for _, r := range rs {
			if r.TxID == tx && r.Span == span && r.Kind == kind {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

func decodeOrder(t testing.TB, b []byte) Order {
	t.Helper()
	var o Order
	if err := msgpack.Unmarshal(b, &o); err != nil {
		t.Fatalf("decode payload: %v", err)
	}
	return o
}

var errDeclined = errors.New("card declined")

// registerPayment registers the endpoints the shared cases use.
func registerPayment(t testing.TB, w *worker.Worker) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(worker.Register(w, worker.Endpoint[Order]{
		Name: "charge",
		Process: func(_ context.Context, s *worker.Step, o Order) (Order, error) {
			if o.Amount < 0 {
				return o, worker.NonRetryable(errDeclined)
			}
			o.Charged = true
			o.Log = append(o.Log, "charged:"+s.IdempotencyKey)
			return o, nil
		},
		Revert: func(_ context.Context, s *worker.Step, o Order) (Order, error) {
			o.Refunded = true
			prev, _ := s.Hint("refunds")
			s.PutHint("refunds", prev+"x")
			return o, nil
		},
	}))
	must(worker.Register(w, worker.Endpoint[*Order]{
		Name: "check", // a query step: no Revert
		Process: func(_ context.Context, _ *worker.Step, o *Order) (*Order, error) {
			o.Log = append(o.Log, "checked")
			return o, nil
		},
	}))
}

// newBareKfake starts a broker without topics.
func newBareKfake(t testing.TB) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newAdminFor(t testing.TB, e *env) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// ensureCallback creates e's callback topic (the orchestrator's job).
func ensureCallback(t testing.TB, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := topics.Ensure(ctx, newAdminFor(t, e), []string{e.callback}, topics.Provision{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
}

func alterMaxBytes(n int) []kadm.AlterConfig {
	v := strconv.Itoa(n)
	return []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}
}

// waitStats polls w's counters until they equal want (a reply may be read
// before its command is counted), or fails the test after 30s.
func waitStats(t testing.TB, w *worker.Worker, want worker.Stats) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := w.Stats()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats = %+v, want %+v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
