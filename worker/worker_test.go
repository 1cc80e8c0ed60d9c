package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"

	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

func TestMain(m *testing.M) {
	// worker.WithConfig links package config, hence the ring
	// coordinator's rsocket, whose ants pool starts a purger at init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*Pool).purgePeriodically"))
}

func TestProcessRoundTrip(t *testing.T) { caseProcessRoundTrip(t, newKfake(t)) }

func caseProcessRoundTrip(t *testing.T, e *env) {
	w := e.newWorker()
	var seen atomic.Pointer[worker.Step]
	if err := worker.Register(w, worker.Endpoint[Order]{
		Name: "charge",
		Process: func(_ context.Context, s *worker.Step, o Order) (Order, error) {
			cp := *s
			seen.Store(&cp)
			o.Charged = true
			return o, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	e.start(w)

	cmd := e.cmd("tx-ok", "charge", 3, topics.KindProcess, Order{ID: "o-1", Amount: 42})
	cmd.Attempt = 2
	cmd.Hints = map[string]string{"h": "v"}
	cmd.Trace = map[string]string{"traceparent": "00-abc-def-01"}
	e.send(cmd)
	rep := e.reply("tx-ok", 3, topics.KindProcess)

	if rep.Type != topics.TypeReply || rep.Outcome != topics.OutcomeOK || rep.Error != "" {
		t.Fatalf("reply = %+v, want an ok reply", rep)
	}
	if rep.Domain != domain || rep.Service != "order-service" || rep.Region != "r1" || rep.Cluster != "c1" ||
		rep.Endpoint != "charge" || rep.IdempotencyKey != cmd.IdempotencyKey || rep.Attempt != 2 || rep.ReplyTo != "" {
		t.Errorf("reply does not echo the command: %+v", rep)
	}
	if !maps.Equal(rep.Hints, cmd.Hints) || !maps.Equal(rep.Trace, cmd.Trace) {
		t.Errorf("reply hints/trace = %v / %v", rep.Hints, rep.Trace)
	}
	if rep.SentAt.IsZero() {
		t.Error("reply has no SentAt")
	}
	if o := decodeOrder(t, rep.Payload); !o.Charged || o.ID != "o-1" || o.Amount != 42 {
		t.Errorf("payload = %+v", o)
	}
	s := seen.Load()
	if s == nil || s.TxID != "tx-ok" || s.Domain != domain || s.Span != 3 || s.Kind != topics.KindProcess ||
		s.Endpoint != "charge" || s.Attempt != 2 || s.IdempotencyKey != cmd.IdempotencyKey || s.Trace["traceparent"] != "00-abc-def-01" {
		t.Errorf("step = %+v", s)
	}
	if v, ok := s.Hint("h"); !ok || v != "v" {
		t.Errorf("Hint(h) = %q, %v", v, ok)
	}
	waitStats(t, w, worker.Stats{Processed: 1})
}

func TestErrorMapping(t *testing.T) { caseErrorMapping(t, newKfake(t)) }

func caseErrorMapping(t *testing.T, e *env) {
	w := e.newWorker()
	handlers := map[string]func() (Order, error){
		"retryable":     func() (Order, error) { return Order{}, worker.Retryable(errors.New("bank busy")) },
		"nonretryable":  func() (Order, error) { return Order{}, worker.NonRetryable(errDeclined) },
		"plain":         func() (Order, error) { return Order{}, errors.New("plain failure") },
		"deadline":      func() (Order, error) { return Order{}, fmt.Errorf("call bank: %w", context.DeadlineExceeded) },
		"wrapped-retry": func() (Order, error) { return Order{}, fmt.Errorf("outer: %w", worker.Retryable(errors.New("inner"))) },
		"panic":         func() (Order, error) { panic("boom: nil card") },
	}
	for name, h := range handlers {
		if err := worker.Register(w, worker.Endpoint[Order]{
			Name:    name,
			Process: func(context.Context, *worker.Step, Order) (Order, error) { return h() },
		}); err != nil {
			t.Fatal(err)
		}
	}
	e.start(w)
	for name := range handlers {
		e.send(e.cmd("tx-"+name, name, 0, topics.KindProcess, Order{ID: name}))
	}
	want := map[string]struct {
		outcome topics.Outcome
		msg     string
	}{
		"retryable":     {topics.OutcomeRetryable, "bank busy"},
		"nonretryable":  {topics.OutcomeNonRetryable, "card declined"},
		"plain":         {topics.OutcomeNonRetryable, "plain failure"},
		"deadline":      {topics.OutcomeRetryable, "call bank: context deadline exceeded"},
		"wrapped-retry": {topics.OutcomeRetryable, "outer: inner"},
		"panic":         {topics.OutcomeNonRetryable, "boom: nil card"},
	}
	for name, wt := range want {
		rep := e.reply("tx-"+name, 0, topics.KindProcess)
		if rep.Outcome != wt.outcome || !strings.Contains(rep.Error, wt.msg) {
			t.Errorf("%s: reply %s %q, want %s containing %q", name, rep.Outcome, rep.Error, wt.outcome, wt.msg)
		}
		// A failed step returns the entity it was given.
		if o := decodeOrder(t, rep.Payload); o.ID != name {
			t.Errorf("%s: payload %+v, want the input", name, o)
		}
		if name != "panic" && rep.Error != wt.msg {
			t.Errorf("%s: error %q, want exactly %q", name, rep.Error, wt.msg)
		}
	}
	p := e.reply("tx-panic", 0, topics.KindProcess)
	if !strings.Contains(p.Error, "panic") || !strings.Contains(p.Error, "goroutine ") || !strings.Contains(p.Error, "worker_test.go") {
		t.Errorf("panic reply lacks the stack:\n%s", p.Error)
	}
	waitStats(t, w, worker.Stats{Processed: uint64(len(handlers)), Panics: 1})
}

func TestIsRetryable(t *testing.T) {
	base := errors.New("x")
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{base, false},
		{worker.Retryable(base), true},
		{worker.NonRetryable(base), false},
		{fmt.Errorf("ctx: %w", worker.Retryable(base)), true},
		{worker.NonRetryable(worker.Retryable(base)), false},
		{worker.Retryable(worker.NonRetryable(base)), true},
		{context.DeadlineExceeded, true},
		{worker.NonRetryable(context.DeadlineExceeded), false},
		{context.Canceled, false},
	}
	for _, c := range cases {
		if got := worker.IsRetryable(c.err); got != c.want {
			t.Errorf("IsRetryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if worker.Retryable(nil) != nil || worker.NonRetryable(nil) != nil {
		t.Error("wrapping nil is not nil")
	}
	r := worker.Retryable(base)
	var re *worker.RetryableError
	if !errors.Is(r, base) || !errors.As(r, &re) || r.Error() != "x" {
		t.Errorf("Retryable does not wrap transparently: %v", r)
	}
	var ne *worker.NonRetryableError
	if n := worker.NonRetryable(base); !errors.Is(n, base) || !errors.As(n, &ne) || n.Error() != "x" {
		t.Errorf("NonRetryable does not wrap transparently: %v", n)
	}
}

func TestRevertAndHints(t *testing.T) { caseRevertAndHints(t, newKfake(t)) }

func caseRevertAndHints(t *testing.T, e *env) {
	w := e.newWorker()
	registerPayment(t, w)
	e.start(w)

	// A query step has no compensation: ok, payload byte for byte.
	q := e.cmd("tx-q", "check", 1, topics.KindRevert, Order{ID: "q", Log: []string{"a"}})
	q.Hints = map[string]string{"keep": "me"}
	e.send(q)
	rep := e.reply("tx-q", 1, topics.KindRevert)
	if rep.Outcome != topics.OutcomeOK || !bytes.Equal(rep.Payload, q.Payload) || rep.Hints["keep"] != "me" {
		t.Errorf("revert without handler: %+v", rep)
	}

	// Hints put by one compensation reach the next one through the
	// orchestrator, which sends back the hints of the last reply.
	c1 := e.cmd("tx-h", "charge", 2, topics.KindRevert, Order{ID: "h", Charged: true})
	c1.Hints = map[string]string{"from-process": "p"}
	e.send(c1)
	r1 := e.reply("tx-h", 2, topics.KindRevert)
	if r1.Outcome != topics.OutcomeOK || r1.Hints["refunds"] != "x" || r1.Hints["from-process"] != "p" {
		t.Fatalf("first revert reply: %+v", r1)
	}
	if o := decodeOrder(t, r1.Payload); !o.Refunded {
		t.Errorf("revert payload = %+v", o)
	}
	c2 := e.cmd("tx-h", "charge", 1, topics.KindRevert, Order{ID: "h"})
	c2.Hints = r1.Hints
	e.send(c2)
	r2 := e.reply("tx-h", 1, topics.KindRevert)
	if r2.Hints["refunds"] != "xx" {
		t.Errorf("second revert did not see the first one's hint: %v", r2.Hints)
	}
}

func TestDeadLetters(t *testing.T) { caseDeadLetters(t, newKfake(t)) }

func caseDeadLetters(t *testing.T, e *env) {
	w := e.newWorker(worker.WithMaxRecordBytes(4 << 10))
	registerPayment(t, w)
	e.start(w)

	good := func(i int) *topics.Envelope {
		return e.cmd("tx-dlt", "charge", i, topics.KindProcess, Order{ID: fmt.Sprint(i)})
	}
	enc := func(c *topics.Envelope) []byte {
		b, err := topics.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	unknown := good(0)
	unknown.Endpoint = "no-such-endpoint"
	big := good(0)
	big.Payload, _ = msgpack.Marshal(Order{ID: strings.Repeat("x", 8<<10)})
	noReply := good(0)
	noReply.ReplyTo = ""
	isReply := good(0)
	isReply.Type = topics.TypeReply
	isReply.Outcome = topics.OutcomeOK
	bad := []struct {
		value  []byte
		reason string
	}{
		{[]byte("\xc1 garbage, not msgpack"), worker.ReasonUndecodable},
		{enc(unknown), worker.ReasonUnknownEndpoint},
		{enc(big), worker.ReasonOversize},
		{enc(noReply), worker.ReasonNoReplyTo},
		{enc(isReply), worker.ReasonNotCommand},
	}
	// Each bad record is followed by a good one of the same key, which
	// must be processed after it.
	var recs []*kgo.Record
	for i, b := range bad {
		recs = append(recs,
			&kgo.Record{Key: []byte("tx-dlt"), Value: b.value, Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(fmt.Sprint(i))}}},
			&kgo.Record{Key: []byte("tx-dlt"), Value: enc(good(i + 1))})
	}
	e.sendRaw(recs...)

	// The unknown endpoint is replied retryable (an instance with the
	// endpoint may come: the saga waits in RETRY_PENDING), the oversize
	// command non-retryable; the others cannot be replied to. All replies
	// of the key come in order.
	type want struct {
		span    int
		outcome topics.Outcome
		err     string
	}
	wantReplies := []want{
		{1, topics.OutcomeOK, ""},
		{0, topics.OutcomeRetryable, `worker: ` + e.service + ` has no endpoint "no-such-endpoint"`},
		{2, topics.OutcomeOK, ""},
		{0, topics.OutcomeNonRetryable, "over the limit"},
		{3, topics.OutcomeOK, ""},
		{4, topics.OutcomeOK, ""},
		{5, topics.OutcomeOK, ""},
	}
	e.waitFor("dead letters and replies", func(rs []*topics.Envelope, ds []*kgo.Record) bool {
		return len(ds) >= len(bad) && len(rs) >= len(wantReplies)
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.dlts) != len(bad) {
		t.Errorf("%d dead letters, want %d", len(e.dlts), len(bad))
	}
	for _, d := range e.dlts {
		var n int
		for _, h := range d.Headers {
			if h.Key == "n" {
				fmt.Sscan(string(h.Value), &n)
			}
		}
		want := bad[n]
		reason := topics.DeadLetterReason(d)
		if !strings.HasPrefix(reason, want.reason+": ") {
			t.Errorf("dead letter %d: reason %q, want prefix %q", n, reason, want.reason)
		}
		if !bytes.Equal(d.Value, want.value) || string(d.Key) != "tx-dlt" {
			t.Errorf("dead letter %d does not carry the original record", n)
		}
	}
	if len(e.replies) != len(wantReplies) {
		t.Errorf("%d replies, want %d", len(e.replies), len(wantReplies))
	}
	for i, r := range e.replies[:min(len(e.replies), len(wantReplies))] {
		w := wantReplies[i]
		if r.Span != w.span || r.Outcome != w.outcome || (w.err == "") != (r.Error == "") || !strings.Contains(r.Error, w.err) {
			t.Errorf("reply %d: span %d %s %q; want span %d %s %q", i, r.Span, r.Outcome, r.Error, w.span, w.outcome, w.err)
		}
		if r.Type != topics.TypeReply || r.TxID != "tx-dlt" || r.Kind != topics.KindProcess || r.Attempt != 1 ||
			r.IdempotencyKey != topics.IdempotencyKey("tx-dlt", r.Span, topics.KindProcess) {
			t.Errorf("reply %d does not answer its command: %+v", i, r)
		}
	}
	if r := e.replies[1]; !bytes.Equal(r.Payload, unknown.Payload) {
		t.Errorf("the unknown endpoint's reply does not carry the entity it was given")
	}
	if r := e.replies[3]; len(r.Payload) != 0 {
		t.Errorf("the oversize command's reply carries %d payload bytes", len(r.Payload))
	}
	waitStats(t, w, worker.Stats{Processed: uint64(len(bad)), DeadLettered: uint64(len(bad))})
}

// A command larger than the dead-letter topic accepts is dead-lettered
// without its value rather than blocking the partition.
func TestDeadLetterTooLargeForDLT(t *testing.T) {
	e := newKfake(t)
	ctx := context.Background()
	// Let the command topic take 2 MiB records; the DLT keeps the 1 MiB
	// default.
	if _, err := newAdminFor(t, e).AlterTopicConfigs(ctx, alterMaxBytes(4<<20), e.command); err != nil {
		t.Fatal(err)
	}
	w := e.newWorker()
	registerPayment(t, w)
	e.start(w)
	huge := e.cmd("tx-huge", "charge", 0, topics.KindProcess, Order{ID: strings.Repeat("y", 2<<20)})
	e.send(huge, e.cmd("tx-huge", "charge", 1, topics.KindProcess, Order{ID: "after"}))
	e.waitFor("dead letter and replies", func(rs []*topics.Envelope, ds []*kgo.Record) bool { return len(ds) >= 1 && len(rs) >= 2 })
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.dlts[0]
	if r := topics.DeadLetterReason(d); !strings.HasPrefix(r, worker.ReasonOversize) || !strings.Contains(r, "dropped") || len(d.Value) != 0 {
		t.Errorf("dead letter: reason %q, %d value bytes", r, len(d.Value))
	}
	if r := e.replies[0]; r.Span != 0 || r.Outcome != topics.OutcomeNonRetryable || !strings.Contains(r.Error, "over the limit") {
		t.Errorf("reply to the oversize command: span %d %s %q", r.Span, r.Outcome, r.Error)
	}
	if r := e.replies[1]; r.Span != 1 || r.Outcome != topics.OutcomeOK {
		t.Errorf("reply to the next command: span %d %s %q", r.Span, r.Outcome, r.Error)
	}
	if len(e.dlts) != 1 || len(e.replies) != 2 {
		t.Errorf("%d dead letters and %d replies, want 1 and 2", len(e.dlts), len(e.replies))
	}
}

// A reply too large to produce becomes a non-retryable reply without
// payload, saying that the step ran, instead of a command retried forever.
func TestReplyTooLarge(t *testing.T) {
	e := newKfake(t)
	w := e.newWorker()
	if err := worker.Register(w, worker.Endpoint[Order]{
		Name: "inflate",
		Process: func(_ context.Context, _ *worker.Step, o Order) (Order, error) {
			o.ID = strings.Repeat("z", 3<<20)
			return o, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	e.start(w)
	e.send(e.cmd("tx-big", "inflate", 0, topics.KindProcess, Order{ID: "small"}))
	rep := e.reply("tx-big", 0, topics.KindProcess)
	if rep.Outcome != topics.OutcomeNonRetryable || !strings.Contains(rep.Error, "too large") || len(rep.Payload) != 0 {
		t.Errorf("reply = %s %q (%d payload bytes)", rep.Outcome, rep.Error, len(rep.Payload))
	}
	// The step ran: the orchestrator must compensate it too.
	if !rep.ActionDone {
		t.Error("the reply to a step that ran does not say ActionDone")
	}
}

// A payload that does not decode into the endpoint's type is a business
// error of that command, not a dead letter.
func TestPayloadTypeMismatch(t *testing.T) {
	e := newKfake(t)
	w := e.newWorker()
	registerPayment(t, w)
	e.start(w)
	e.send(e.cmd("tx-mis", "charge", 0, topics.KindProcess, []string{"not", "an", "order"}))
	rep := e.reply("tx-mis", 0, topics.KindProcess)
	if rep.Outcome != topics.OutcomeNonRetryable || !strings.Contains(rep.Error, "decode") {
		t.Errorf("reply = %s %q", rep.Outcome, rep.Error)
	}
}

func TestRestartLosesNothing(t *testing.T) { caseRestart(t, newKfake(t), 300) }

// caseRestart stops a worker in the middle of a stream of commands and
// starts a new one in the same group: every command gets a reply, and what
// the first one committed is not run again.
func caseRestart(t *testing.T, e *env, n int) {
	var runs sync.Map // tx -> *atomic.Int32
	// The first worker handles n/6 commands, then its handlers block
	// until it has been told to stop.
	gate := make(chan struct{})
	w1 := e.newWorker(worker.WithConcurrency(4))
	var calls1 atomic.Int32
	if err := worker.Register(w1, worker.Endpoint[Order]{
		Name: "charge",
		Process: func(_ context.Context, s *worker.Step, o Order) (Order, error) {
			c, _ := runs.LoadOrStore(s.TxID, new(atomic.Int32))
			c.(*atomic.Int32).Add(1)
			if calls1.Add(1) > int32(n/6) {
				<-gate
			}
			o.Charged = true
			return o, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	errc := make(chan error, 1)
	go func() { errc <- w1.Run(ctx1) }()
	<-w1.Running()

	var cmds []*topics.Envelope
	for i := range n {
		cmds = append(cmds, e.cmd(fmt.Sprintf("tx-r%04d", i), "charge", 0, topics.KindProcess, Order{ID: fmt.Sprint(i)}))
	}
	e.send(cmds...)
	e.waitFor("the first replies", func(rs []*topics.Envelope, _ []*kgo.Record) bool { return len(rs) >= n/6 })
	cancel1()
	close(gate) // handlers in flight finish and reply during the stop
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	p1 := w1.Stats().Processed
	if p1 < uint64(n/6) || p1 >= uint64(n) {
		t.Fatalf("first worker processed %d of %d: the stop did not land mid-stream", p1, n)
	}

	w2 := e.newWorker()
	if err := worker.Register(w2, worker.Endpoint[Order]{
		Name: "charge",
		Process: func(_ context.Context, s *worker.Step, o Order) (Order, error) {
			c, _ := runs.LoadOrStore(s.TxID, new(atomic.Int32))
			c.(*atomic.Int32).Add(1)
			o.Charged = true
			return o, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	e.start(w2)
	e.waitFor("a reply to every command", func(rs []*topics.Envelope, _ []*kgo.Record) bool {
		seen := make(map[string]bool, n)
		for _, r := range rs {
			seen[r.TxID] = true
		}
		return len(seen) == n
	})
	// A reply is read before its command is counted: wait for the count
	// (an extra one would still show below).
	for deadline := time.Now().Add(30 * time.Second); p1+w2.Stats().Processed < uint64(n) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	p2 := w2.Stats().Processed
	if p1+p2 != uint64(n) {
		t.Errorf("processed %d + %d = %d, want %d: a graceful stop must commit what it replied to", p1, p2, p1+p2, n)
	}
	dups := 0
	runs.Range(func(_, v any) bool {
		if v.(*atomic.Int32).Load() > 1 {
			dups++
		}
		return true
	})
	if dups != 0 {
		t.Errorf("%d commands ran twice across a graceful restart", dups)
	}
}

func TestRunLeavesNoGoroutines(t *testing.T) {
	c := newBareKfake(t)
	brokers := c.ListenAddrs()
	ctx := context.Background()
	// Clients of the test itself are short-lived, so that only the broker's
	// goroutines are running when the snapshot is taken.
	func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := topics.Ensure(ctx, kadm.NewClient(cl), []string{callbackTopic}, topics.Provision{Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}()
	ignore := goleak.IgnoreCurrent()

	w, err := worker.New(service, worker.WithBrokers(brokers...), worker.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	registerPayment(t, w)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(rctx) }()
	<-w.Running()

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(callbackTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := msgpack.Marshal(Order{ID: "g"})
	v, _ := topics.Encode(&topics.Envelope{Type: topics.TypeCommand, Domain: domain, TxID: "tx-g", Kind: topics.KindProcess, Endpoint: "charge", Attempt: 1, ReplyTo: callbackTopic, Payload: b})
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: commandTopic, Key: []byte("tx-g"), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if fs := cl.PollRecords(pctx, 1); fs.NumRecords() != 1 {
		t.Fatalf("no reply: %v", fs.Err())
	}
	cl.Close()

	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// The broker's side of a closed connection may outlive it a little.
	if err := goleak.Find(ignore,
		goleak.IgnoreTopFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).read"),
		goleak.IgnoreTopFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).write"),
	); err != nil {
		t.Errorf("goroutines left after Run returned: %v", err)
	}
}

func TestLifecycle(t *testing.T) {
	e := newKfake(t)

	if _, err := worker.New("bad name"); err == nil {
		t.Error("New accepted an invalid service name")
	}
	if _, err := worker.New(service, worker.WithConcurrency(0), worker.WithMaxRecordBytes(-1), worker.WithGroup("")); err == nil ||
		!strings.Contains(err.Error(), "concurrency") || !strings.Contains(err.Error(), "max record bytes") || !strings.Contains(err.Error(), "group") {
		t.Errorf("New with three bad options: %v (want all three reported)", err)
	}
	// Nil options fail in New rather than panic later.
	for name, opts := range map[string][]worker.Option{
		"nil logger":       {worker.WithLogger(nil)},
		"nil guard":        {worker.WithGuard(nil)},
		"nil option":       {worker.WithConcurrency(1), nil},
		"nil kafka option": {worker.WithKafkaOpts(kgo.FetchMaxWait(time.Second), nil)},
		"empty broker":     {worker.WithBrokers("127.0.0.1:9092", "")},
	} {
		var w *worker.Worker
		var err error
		func() {
			defer func() {
				if v := recover(); v != nil {
					t.Errorf("%s: New panicked: %v", name, v)
				}
			}()
			w, err = worker.New(service, opts...)
		}()
		if err == nil || w != nil {
			t.Errorf("%s: New = %v, %v; want an error", name, w, err)
		} else if !strings.HasPrefix(err.Error(), "worker: ") || !strings.Contains(err.Error(), strings.TrimPrefix(strings.TrimPrefix(name, "nil "), "empty ")) {
			t.Errorf("%s: unclear error %q", name, err)
		}
	}

	w := e.newWorker()
	noop := func(_ context.Context, _ *worker.Step, o Order) (Order, error) { return o, nil }
	if err := worker.Register(w, worker.Endpoint[Order]{Name: "", Process: noop}); !errors.Is(err, worker.ErrInvalidEndpoint) {
		t.Errorf("empty name: %v", err)
	}
	if err := worker.Register(w, worker.Endpoint[Order]{Name: "x"}); !errors.Is(err, worker.ErrInvalidEndpoint) {
		t.Errorf("nil Process: %v", err)
	}
	if err := worker.Register(w, worker.Endpoint[Order]{Name: "x", Process: noop}); err != nil {
		t.Fatal(err)
	}
	if err := worker.Register(w, worker.Endpoint[Order]{Name: "x", Process: noop}); !errors.Is(err, worker.ErrDuplicateEndpoint) {
		t.Errorf("duplicate: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	<-w.Running()
	if err := worker.Register(w, worker.Endpoint[Order]{Name: "y", Process: noop}); !errors.Is(err, worker.ErrStarted) {
		t.Errorf("Register while running: %v", err)
	}
	if err := w.Run(ctx); !errors.Is(err, worker.ErrStarted) {
		t.Errorf("second Run: %v", err)
	}
	w.Close() // stops Run and waits for it
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Run after Close: %v", err)
		}
	default:
		t.Error("Close returned before Run did")
	}
	w.Close()
	if err := w.Run(ctx); !errors.Is(err, worker.ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}

	// Closed before it ever ran.
	w2 := e.newWorker()
	w2.Close()
	w2.Close()
	if err := w2.Run(ctx); !errors.Is(err, worker.ErrClosed) {
		t.Errorf("Run of a worker closed before running: %v", err)
	}
	if err := worker.Register(w2, worker.Endpoint[Order]{Name: "z", Process: noop}); !errors.Is(err, worker.ErrClosed) {
		t.Errorf("Register after Close: %v", err)
	}
}

// Run creates its topics when they are missing.
func TestProvisionsTopics(t *testing.T) {
	c := newBareKfake(t)
	e := newEnv(t, c.ListenAddrs(), "fresh-service", domain, "")
	ensureCallback(t, e)
	w := e.newWorker(worker.WithProvision(topics.Provision{Partitions: 2}))
	registerPayment(t, w)
	e.start(w)
	td, err := newAdminFor(t, e).ListTopics(context.Background(), e.command, e.dead)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{e.command, e.dead} {
		if d := td[n]; d.Err != nil || len(d.Partitions) != 2 {
			t.Errorf("topic %s: %+v", n, d)
		}
	}
	e.send(e.cmd("tx-p", "charge", 0, topics.KindProcess, Order{ID: "p"}))
	if rep := e.reply("tx-p", 0, topics.KindProcess); rep.Outcome != topics.OutcomeOK {
		t.Errorf("reply = %+v", rep)
	}
}

// recordingGuard runs a command once per idempotency key and re-sends the
// recorded reply for duplicates; it refuses the first call of each key, as a
// held lease would.
type recordingGuard struct {
	mu       sync.Mutex
	replies  map[string]*topics.Envelope
	refused  map[string]bool
	executes atomic.Int32
}

func (g *recordingGuard) Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	g.executes.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.refused[cmd.IdempotencyKey] {
		g.refused[cmd.IdempotencyKey] = true
		return nil, errors.New("lease held")
	}
	if r, ok := g.replies[cmd.IdempotencyKey]; ok {
		return r, nil
	}
	r := run(ctx)
	g.replies[cmd.IdempotencyKey] = r
	return r, nil
}

func TestGuard(t *testing.T) {
	e := newKfake(t)
	g := &recordingGuard{replies: map[string]*topics.Envelope{}, refused: map[string]bool{}}
	w := e.newWorker(worker.WithGuard(g))
	var runs atomic.Int32
	registerCharge(t, w, func(o Order) Order { runs.Add(1); o.Charged = true; return o })
	e.start(w)
	c := e.cmd("tx-guard", "charge", 0, topics.KindProcess, Order{ID: "g"})
	e.send(c, c) // a duplicate delivery
	e.waitFor("two replies", func(rs []*topics.Envelope, _ []*kgo.Record) bool { return len(rs) == 2 })
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	if n := g.executes.Load(); n != 3 {
		t.Errorf("guard called %d times, want 3 (refused, run, duplicate)", n)
	}
	for _, r := range e.replies {
		if r.Outcome != topics.OutcomeOK || !decodeOrder(t, r.Payload).Charged {
			t.Errorf("reply = %+v", r)
		}
	}
}

func BenchmarkWorkerRoundTrip(b *testing.B) {
	e := newKfake(b, kfake.SeedTopics(8, commandTopic, deadTopic, callbackTopic))
	w := e.newWorker()
	registerPayment(b, w)
	e.start(w)
	const batch = 1000
	cmds := make([]*topics.Envelope, batch)
	b.ReportAllocs()
	total := 0
	for b.Loop() {
		for i := range cmds {
			cmds[i] = e.cmd(fmt.Sprintf("tx-b%d-%d", total, i), "charge", 0, topics.KindProcess, Order{ID: "b", Amount: i})
		}
		total += batch
		e.send(cmds...)
		e.waitFor("replies", func(rs []*topics.Envelope, _ []*kgo.Record) bool { return len(rs) >= total })
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "commands/s")
}

// A second instance joining the group mid-stream takes over partitions
// (the first commits on revoke); every command gets a reply.
func TestTwoWorkersShareTheLoad(t *testing.T) {
	e := newKfake(t)
	const n = 400
	var byWorker [2]atomic.Int32
	mk := func(i int) *worker.Worker {
		w := e.newWorker()
		if err := worker.Register(w, worker.Endpoint[Order]{
			Name: "charge",
			Process: func(_ context.Context, _ *worker.Step, o Order) (Order, error) {
				byWorker[i].Add(1)
				time.Sleep(200 * time.Microsecond)
				return o, nil
			},
		}); err != nil {
			t.Fatal(err)
		}
		return w
	}
	e.start(mk(0))
	var cmds []*topics.Envelope
	for i := range n {
		cmds = append(cmds, e.cmd(fmt.Sprintf("tx-s%04d", i), "charge", 0, topics.KindProcess, Order{ID: fmt.Sprint(i)}))
	}
	e.send(cmds[:n/2]...)
	e.start(mk(1))
	e.send(cmds[n/2:]...)
	e.waitFor("a reply to every command", func(rs []*topics.Envelope, _ []*kgo.Record) bool {
		seen := make(map[string]bool, n)
		for _, r := range rs {
			seen[r.TxID] = true
		}
		return len(seen) == n
	})
	if byWorker[1].Load() == 0 {
		t.Errorf("the second worker handled nothing (first: %d)", byWorker[0].Load())
	}
}

// countingHandler counts the loop's "retrying" warnings.
type countingHandler struct{ retries atomic.Int32 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "retrying") {
		h.retries.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// overlapGuard is a guard that overlaps recording with the reply's
// sending: its wait holds until open is closed.
type overlapGuard struct {
	open       chan struct{}
	once       sync.Once
	overlapped atomic.Int32
	executes   atomic.Int32
}

func (g *overlapGuard) release() { g.once.Do(func() { close(g.open) }) }

func (g *overlapGuard) Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	g.executes.Add(1)
	return run(ctx), nil
}

func (g *overlapGuard) ExecuteOverlapped(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, func(), error) {
	g.overlapped.Add(1)
	return run(ctx), func() { <-g.open }, nil
}

// With a guard that has ExecuteOverlapped the reply is sent before the
// outcome is recorded, and the command is not done (the next one of its
// saga waits) until it is.
func TestGuardOverlapsRecordWithReply(t *testing.T) {
	e := newKfake(t)
	g := &overlapGuard{open: make(chan struct{})}
	w := e.newWorker(worker.WithGuard(g))
	var runs atomic.Int32
	registerCharge(t, w, func(o Order) Order { runs.Add(1); return o })
	e.start(w)
	t.Cleanup(g.release) // before the worker's stop (cleanups run last first): a failed assertion must not hang it
	e.send(e.cmd("tx-ov", "charge", 0, topics.KindProcess, Order{ID: "o"}), e.cmd("tx-ov", "charge", 1, topics.KindProcess, Order{ID: "o"}))
	if rep := e.reply("tx-ov", 0, topics.KindProcess); rep.Outcome != topics.OutcomeOK {
		t.Fatalf("reply = %+v", rep)
	}
	time.Sleep(50 * time.Millisecond) // a chance for the next command to run too early
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs while the first command's outcome is unrecorded, want 1 (the next command of its saga waits)", n)
	}
	g.release()
	if rep := e.reply("tx-ov", 1, topics.KindProcess); rep.Outcome != topics.OutcomeOK {
		t.Fatalf("second reply = %+v", rep)
	}
	if o, x := g.overlapped.Load(), g.executes.Load(); o != 2 || x != 0 {
		t.Fatalf("ExecuteOverlapped called %d times and Execute %d, want 2 and 0", o, x)
	}
}

// registerCharge registers a "charge" endpoint whose process step is f.
func registerCharge(t *testing.T, w *worker.Worker, f func(Order) Order) {
	t.Helper()
	if err := worker.Register(w, worker.Endpoint[Order]{
		Name:    "charge",
		Process: func(_ context.Context, _ *worker.Step, o Order) (Order, error) { return f(o), nil },
	}); err != nil {
		t.Fatal(err)
	}
}
