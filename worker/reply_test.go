package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// countingCharge registers a "charge" endpoint on w that counts its runs by
// transaction.
func countingCharge(t testing.TB, w *worker.Worker) *runCounter {
	t.Helper()
	rc := &runCounter{n: map[string]int{}}
	if err := worker.Register(w, worker.Endpoint[Order]{
		Name: "charge",
		Process: func(_ context.Context, s *worker.Step, o Order) (Order, error) {
			rc.mu.Lock()
			rc.n[s.TxID]++
			rc.mu.Unlock()
			o.Charged = true
			return o, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	return rc
}

type runCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (rc *runCounter) runs(tx string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.n[tx]
}

// A reply that fails for a transient reason keeps the command uncommitted
// and retried; once Kafka takes it again the recorded reply is sent without
// running the handler again.
func TestReplyRetriedWithoutRerunning(t *testing.T) {
	e := newKfake(t)
	fault := e.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.callback, Err: kerr.NotEnoughReplicas, Count: -1})
	logs := &countingHandler{}
	w := e.newWorker(
		worker.WithKafkaOpts(kgo.RecordRetries(1), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond })),
		worker.WithLogger(slog.New(logs)),
	)
	rc := countingCharge(t, w)
	e.start(w)
	e.send(e.cmd("tx-late", "charge", 0, topics.KindProcess, Order{ID: "late"}))
	deadline := time.Now().Add(30 * time.Second)
	for logs.retries.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no failed produce retried (handler ran %d times)", rc.runs("tx-late"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := w.Stats(); st.Processed != 0 || st.DeadLettered != 0 {
		t.Fatalf("stats = %+v while the reply cannot be produced", st)
	}
	fault.Remove()
	rep := e.reply("tx-late", 0, topics.KindProcess)
	if rep.Outcome != topics.OutcomeOK || !decodeOrder(t, rep.Payload).Charged {
		t.Errorf("reply = %+v", rep)
	}
	for w.Stats().Processed == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reply was read but the command not counted processed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := rc.runs("tx-late"); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	if st := w.Stats(); st.Processed != 1 || st.DeadLettered != 0 {
		t.Errorf("stats = %+v", st)
	}
	ends, err := newAdminFor(t, e).ListEndOffsets(context.Background(), e.callback)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	if n != 1 {
		t.Errorf("callback topic holds %d records, want 1", n)
	}
}

// A reply that can never be produced dead-letters its command with
// ReasonReplyUndeliverable, and the worker goes on with the other commands
// instead of retrying that one forever.
func TestUndeliverableReply(t *testing.T) {
	const other = "stacksaga.other.callback"
	cases := []struct {
		name    string
		replyTo string
		fault   *kerr.Error // on other
		want    string      // in the reason
	}{
		{"missing topic", "stacksaga.nosuch.callback", nil, kerr.UnknownTopicOrPartition.Message},
		// A ReplyTo that is no valid topic name never reaches a handler:
		// topics.Decode refuses it (the command is undecodable).
		{"not authorized", other, kerr.TopicAuthorizationFailed, kerr.TopicAuthorizationFailed.Message},
		{"message too large", other, kerr.MessageTooLarge, kerr.MessageTooLarge.Message},
		{"record list too large", other, kerr.RecordListTooLarge, kerr.RecordListTooLarge.Message},
		{"invalid topic error", other, kerr.InvalidTopicException, kerr.InvalidTopicException.Message},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newKfake(t, kfake.SeedTopics(1, other))
			var fault *kfake.FaultHandle
			if tc.fault != nil {
				fault = e.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: other, Err: tc.fault, Count: -1})
			}
			w := e.newWorker()
			rc := countingCharge(t, w)
			e.start(w)
			bad := e.cmd("tx-bad", "charge", 0, topics.KindProcess, Order{ID: "bad"})
			bad.ReplyTo = tc.replyTo
			badValue, err := topics.Encode(bad)
			if err != nil {
				t.Fatal(err)
			}
			e.sendRaw(&kgo.Record{Key: []byte("tx-bad"), Value: badValue})
			// Commands of the same key (same partition, after it) and of
			// others.
			good := []*topics.Envelope{e.cmd("tx-bad", "charge", 1, topics.KindProcess, Order{ID: "after"})}
			for i := range 20 {
				good = append(good, e.cmd(fmt.Sprint("tx-", i), "charge", 0, topics.KindProcess, Order{ID: "x"}))
			}
			e.send(good...)
			e.waitFor("a reply to every good command and a dead letter", func(rs []*topics.Envelope, ds []*kgo.Record) bool {
				return len(rs) >= len(good) && len(ds) >= 1
			})
			e.mu.Lock()
			defer e.mu.Unlock()
			if len(e.dlts) != 1 {
				t.Fatalf("%d dead letters, want 1", len(e.dlts))
			}
			d := e.dlts[0]
			reason := topics.DeadLetterReason(d)
			if !strings.HasPrefix(reason, worker.ReasonReplyUndeliverable+": ") || !strings.Contains(reason, tc.want) {
				t.Errorf("reason %q, want prefix %q and %q", reason, worker.ReasonReplyUndeliverable, tc.want)
			}
			if !bytes.Equal(d.Value, badValue) || string(d.Key) != "tx-bad" {
				t.Error("the dead letter does not carry the command")
			}
			for _, r := range e.replies {
				if r.TxID == "tx-bad" && r.Span == 0 {
					t.Errorf("the undeliverable reply reached the callback topic: %+v", r)
				}
			}
			if n := rc.runs("tx-bad"); n != 2 {
				t.Errorf("handler ran %d times for tx-bad, want 2 (span 0 once, span 1 once)", n)
			}
			waitStats(t, w, worker.Stats{Processed: uint64(len(good)), DeadLettered: 1, Undeliverable: 1})
			if fault != nil && fault.Hits() == 0 {
				t.Error("the fault never fired")
			}
		})
	}
}

// A command for an unknown endpoint whose callback topic is missing is
// dead-lettered once; the reply telling the saga is dropped.
func TestUnknownEndpointReplyUndeliverable(t *testing.T) {
	e := newKfake(t)
	w := e.newWorker()
	countingCharge(t, w)
	e.start(w)
	c := e.cmd("tx-u", "refund", 0, topics.KindProcess, Order{ID: "u"})
	c.ReplyTo = "stacksaga.nosuch.callback"
	e.send(c, e.cmd("tx-u", "charge", 1, topics.KindProcess, Order{ID: "u"}))
	rep := e.reply("tx-u", 1, topics.KindProcess)
	if rep.Outcome != topics.OutcomeOK {
		t.Errorf("reply = %+v", rep)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.dlts) != 1 || !strings.HasPrefix(topics.DeadLetterReason(e.dlts[0]), worker.ReasonUnknownEndpoint+": ") {
		t.Errorf("dead letters: %d, first reason %q", len(e.dlts), topics.DeadLetterReason(e.dlts[0]))
	}
	waitStats(t, w, worker.Stats{Processed: 1, DeadLettered: 1})
}

// The reviewer's reproduction: one command with a bad callback topic does
// not stall the commands after it.
func TestBadReplyToDoesNotStall(t *testing.T) { caseBadReplyToDoesNotStall(t, newKfake(t)) }

func caseBadReplyToDoesNotStall(t *testing.T, e *env) {
	w := e.newWorker()
	rc := countingCharge(t, w)
	e.start(w)
	bad := e.cmd("tx-bad", "charge", 0, topics.KindProcess, Order{ID: "bad"})
	bad.ReplyTo = "stacksaga.nosuch." + e.service + ".callback"
	e.send(bad)
	var good []*topics.Envelope
	for i := range 20 {
		good = append(good, e.cmd(fmt.Sprint("tx-", i), "charge", 0, topics.KindProcess, Order{ID: "x"}))
	}
	e.send(good...)
	e.waitFor("a reply to the 20 good commands and a dead letter", func(rs []*topics.Envelope, ds []*kgo.Record) bool {
		return len(rs) >= len(good) && len(ds) >= 1
	})
	if n := rc.runs("tx-bad"); n != 1 {
		t.Errorf("handler ran %d times for the bad command", n)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := topics.DeadLetterReason(e.dlts[0]); !strings.HasPrefix(r, worker.ReasonReplyUndeliverable+": ") {
		t.Errorf("dead letter reason %q", r)
	}
}

// The reply to a dead-lettered command that fails for a transient reason is
// retried without dead-lettering the command again.
func TestNoticeRetriedWithoutDeadLetteringAgain(t *testing.T) {
	e := newKfake(t)
	fault := e.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.callback, Err: kerr.NotEnoughReplicas, Count: -1})
	logs := &countingHandler{}
	w := e.newWorker(
		worker.WithKafkaOpts(kgo.RecordRetries(1), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond })),
		worker.WithLogger(slog.New(logs)),
	)
	countingCharge(t, w)
	e.start(w)
	e.send(e.cmd("tx-n", "refund", 0, topics.KindProcess, Order{ID: "n"}))
	deadline := time.Now().Add(30 * time.Second)
	for logs.retries.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the reply was never retried")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fault.Remove()
	rep := e.reply("tx-n", 0, topics.KindProcess)
	if rep.Outcome != topics.OutcomeRetryable || !strings.Contains(rep.Error, `has no endpoint "refund"`) {
		t.Errorf("reply = %s %q", rep.Outcome, rep.Error)
	}
	e.waitFor("the dead letter", func(_ []*topics.Envelope, ds []*kgo.Record) bool { return len(ds) >= 1 })
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.dlts) != 1 {
		t.Errorf("%d dead letters, want 1", len(e.dlts))
	}
	waitStats(t, w, worker.Stats{DeadLettered: 1})
}

// A reply kept for a retry is dropped with its command's partition: when a
// rebalance moves the partition to another instance, that instance answers
// the command, and the first keeps neither the reply nor its payload. Both
// instances fail every reply (the callback topic's broker refuses them),
// so each keeps one per partition it owns; once the second has joined, the
// first keeps none for the partitions the second now owns.
func TestPendingRepliesDroppedWithPartition(t *testing.T) {
	e := newKfake(t) // a command topic of 4 partitions
	e.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.callback, Err: kerr.NotEnoughReplicas, Count: -1})
	retry := worker.WithKafkaOpts(kgo.RecordRetries(1), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
	a := e.newWorker(retry)
	countingCharge(t, a)
	e.start(a)
	var cmds []*topics.Envelope
	for i := range 32 { // keys that cover the four partitions
		cmds = append(cmds, e.cmd(fmt.Sprint("tx-", i), "charge", 0, topics.KindProcess, Order{ID: fmt.Sprint(i)}))
	}
	e.send(cmds...)
	waitForCond(t, "a reply kept for every partition", func() bool { return len(worker.PendingPartitions(a)) == 4 })
	b := e.newWorker(retry)
	countingCharge(t, b)
	e.start(b)
	waitForCond(t, "the second instance keeping replies of the partitions it got", func() bool { return len(worker.PendingPartitions(b)) > 0 })
	var pa, pb map[int32]int
	deadline := time.Now().Add(30 * time.Second)
	for {
		pa, pb = worker.PendingPartitions(a), worker.PendingPartitions(b)
		shared := 0
		for p := range pb {
			if pa[p] > 0 {
				shared++
			}
		}
		if shared == 0 && len(pa)+len(pb) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replies kept by partition: first instance %v, second %v; want the first to keep none of the second's partitions", pa, pb)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("replies kept by partition: first instance %v, second %v", pa, pb)
}
