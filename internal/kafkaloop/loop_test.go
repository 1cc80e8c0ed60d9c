package kafkaloop_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/stacksaga-go/stacksaga/internal/kafkaloop"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const topic = "loop-test"

// env is one in-process broker with one topic, a producer and an admin
// client.
type env struct {
	t     *testing.T
	c     *kfake.Cluster
	prod  *kgo.Client
	adm   *kadm.Client
	group string
}

func newEnv(t *testing.T, partitions int32) *env {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &env{t: t, c: c, prod: prod, adm: kadm.NewClient(prod), group: "g-" + strings.ReplaceAll(t.Name(), "/", "-")}
}

// produce writes one record per key to partition p, in order, and returns
// them with their offsets.
func (e *env) produce(p int32, keys ...string) []*kgo.Record {
	e.t.Helper()
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = &kgo.Record{Topic: topic, Partition: p, Key: []byte(k), Value: []byte(fmt.Sprintf("%s#%d", k, i))}
	}
	if err := e.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// consumer builds a group member with ClientOpts, then extra options.
func (e *env) consumer(extra ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	opts := []kgo.Opt{
		kgo.SeedBrokers(e.c.ListenAddrs()...),
		kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
	opts = append(opts, kafkaloop.ClientOpts()...)
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

// runner is one kafkaloop.Run in the background.
type runner struct {
	cancel context.CancelFunc
	errc   chan error
	once   sync.Once
	err    error
}

// stop cancels Run and returns its error.
func (r *runner) stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.errc:
		case <-time.After(30 * time.Second):
			r.err = errors.New("Run did not return")
		}
	})
	return r.err
}

// run starts kafkaloop.Run, stopped at the end of the test.
func (e *env) run(cl *kgo.Client, h kafkaloop.Handler, o kafkaloop.Options) *runner {
	if o.Logger == nil {
		o.Logger = quiet
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- kafkaloop.Run(ctx, cl, h, o) }()
	e.t.Cleanup(func() { _ = r.stop() })
	return r
}

// committed returns the group's committed offset of partition p (-1 if
// none).
func (e *env) committed(p int32) int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offs, err := e.adm.FetchOffsets(ctx, e.group)
	if err != nil {
		return -1
	}
	o, ok := offs.Lookup(topic, p)
	if !ok || o.Err != nil {
		return -1
	}
	return o.At
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// journal records what a handler did, per record.
type journal struct {
	mu    sync.Mutex
	calls map[string]int // "p/offset" -> handler calls
	ok    map[string]int // "p/offset" -> successes
	order map[string][]string
	busy  map[string]bool // keys being handled
	err   error           // first ordering violation
	dead  []string        // "p/offset reason"
}

func newJournal() *journal {
	return &journal{calls: map[string]int{}, ok: map[string]int{}, order: map[string][]string{}, busy: map[string]bool{}}
}

func id(r *kgo.Record) string { return fmt.Sprintf("%d/%d", r.Partition, r.Offset) }

// handler wraps fn (nil: succeed) with bookkeeping: calls, successes in
// order per key, and a check that one key never runs twice at once.
func (j *journal) handler(fn func(r *kgo.Record, call int) error) kafkaloop.Handler {
	return func(_ context.Context, r *kgo.Record) error {
		key := string(r.Key)
		j.mu.Lock()
		if j.busy[key] && j.err == nil {
			j.err = fmt.Errorf("key %s handled concurrently", key)
		}
		j.busy[key] = true
		j.calls[id(r)]++
		call := j.calls[id(r)]
		j.mu.Unlock()
		var err error
		if fn != nil {
			err = fn(r, call)
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		j.busy[key] = false
		if err == nil {
			j.ok[id(r)]++
			j.order[key] = append(j.order[key], string(r.Value))
		}
		return err
	}
}

func (j *journal) deadLetter(_ context.Context, r *kgo.Record, reason string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dead = append(j.dead, id(r)+" "+reason)
	return nil
}

func (j *journal) get(f func(j *journal) int) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return f(j)
}

func (j *journal) okCount(rid string) int { return j.get(func(j *journal) int { return j.ok[rid] }) }
func (j *journal) callCount(rid string) int {
	return j.get(func(j *journal) int { return j.calls[rid] })
}
func (j *journal) deadCount() int { return j.get(func(j *journal) int { return len(j.dead) }) }

func (j *journal) deadLetters() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.dead...)
}

func (j *journal) check(t *testing.T) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		t.Error(j.err)
	}
}

var errTransient = errors.New("transient")

// Records of one key are handled one at a time and in offset order, also
// when some fail and are retried; different keys run concurrently.
func TestPerKeyOrder(t *testing.T) {
	e := newEnv(t, 3)
	j := newJournal()
	const perKey = 30
	keys := []string{"a", "b", "c", "d", "e", "f"}
	var want = map[string][]string{}
	for p := range int32(3) {
		var ks []string
		for range perKey {
			for _, k := range keys {
				ks = append(ks, fmt.Sprintf("%s%d", k, p))
			}
		}
		for _, r := range e.produce(p, ks...) {
			want[string(r.Key)] = append(want[string(r.Key)], string(r.Value))
		}
	}
	var running, peak atomic.Int32
	h := j.handler(func(r *kgo.Record, call int) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		if r.Offset%7 == 3 && call == 1 {
			return errTransient
		}
		return nil
	})
	e.run(e.consumer(), h, kafkaloop.Options{Concurrency: 8, RetryBackoff: time.Millisecond})
	total := int64(perKey * len(keys))
	waitFor(t, 30*time.Second, "every partition committed", func() bool {
		return e.committed(0) == total && e.committed(1) == total && e.committed(2) == total
	})
	j.check(t)
	j.mu.Lock()
	defer j.mu.Unlock()
	for k, w := range want {
		if got := j.order[k]; fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("key %s handled in order\n%v\nwant\n%v", k, got, w)
		}
	}
	if peak.Load() < 2 {
		t.Errorf("at most %d records ran at once: different keys should run concurrently", peak.Load())
	}
}

// A failing record holds the commit of its partition at its offset (later
// records of other keys run, but are not committed past it), not the
// commits of other partitions; later records of its key wait for it. Across
// the rewinds, records that finished behind it do not run again.
func TestCommitsOnlyFinishedPrefix(t *testing.T) {
	e := newEnv(t, 2)
	j := newJournal()
	e.produce(0, "a", "stuck", "c", "d", "stuck", "e") // offsets 0..5
	e.produce(1, "x", "y", "z")
	var release atomic.Bool
	h := j.handler(func(r *kgo.Record, _ int) error {
		if r.Partition == 0 && r.Offset == 1 && !release.Load() {
			return errTransient
		}
		return nil
	})
	e.run(e.consumer(), h, kafkaloop.Options{RetryBackoff: 5 * time.Millisecond, MaxBatchTime: 100 * time.Millisecond, RetryBudget: -1})
	waitFor(t, 20*time.Second, "partition 1 committed and partition 0's other keys handled", func() bool {
		return e.committed(1) == 3 && j.okCount("0/2") == 1 && j.okCount("0/3") == 1 && j.okCount("0/5") == 1
	})
	// Let a few batches and auto-commits pass with the record still failing.
	calls := j.callCount("0/1")
	waitFor(t, 20*time.Second, "more retries of the failing record", func() bool { return j.callCount("0/1") >= calls+3 })
	time.Sleep(600 * time.Millisecond) // more than one auto-commit interval
	if got := e.committed(0); got != 1 {
		t.Fatalf("partition 0 committed at %d while offset 1 fails, want 1", got)
	}
	if n := j.callCount("0/4"); n != 0 {
		t.Fatalf("offset 4 (same key as the failing offset 1) ran %d times before it", n)
	}
	release.Store(true)
	waitFor(t, 20*time.Second, "partition 0 committed", func() bool { return e.committed(0) == 6 })
	j.check(t)
	for _, rid := range []string{"0/0", "0/1", "0/2", "0/3", "0/4", "0/5", "1/0", "1/1", "1/2"} {
		if n := j.okCount(rid); n != 1 {
			t.Errorf("record %s succeeded %d times, want 1", rid, n)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if got := fmt.Sprint(j.order["stuck"]); got != "[stuck#1 stuck#4]" {
		t.Errorf("key stuck handled as %s", got)
	}
}

// A permanent error is dead-lettered at once, with its reason, and the
// consumer goes on.
func TestPermanentErrorIsDeadLettered(t *testing.T) {
	e := newEnv(t, 1)
	j := newJournal()
	e.produce(0, "a", "poison", "b", "poison")
	h := j.handler(func(r *kgo.Record, _ int) error {
		if r.Offset == 1 {
			return fmt.Errorf("store: %w", kafkaloop.Permanent(errors.New("transaction id is not valid UTF-8")))
		}
		return nil
	})
	e.run(e.consumer(), h, kafkaloop.Options{DeadLetter: j.deadLetter})
	waitFor(t, 20*time.Second, "everything committed", func() bool { return e.committed(0) == 4 })
	if got, want := fmt.Sprint(j.deadLetters()), "[0/1 permanent: store: transaction id is not valid UTF-8]"; got != want {
		t.Errorf("dead letters %s, want %s", got, want)
	}
	if n := j.callCount("0/1"); n != 1 {
		t.Errorf("the permanent record was tried %d times, want 1", n)
	}
	if j.okCount("0/2") != 1 || j.okCount("0/3") != 1 {
		t.Errorf("the records after it were not handled once each")
	}
}

// Without DeadLetter a permanent error is retried like any other.
func TestPermanentWithoutDeadLetterIsRetried(t *testing.T) {
	e := newEnv(t, 1)
	j := newJournal()
	e.produce(0, "a", "b")
	h := j.handler(func(r *kgo.Record, call int) error {
		if r.Offset == 0 && call <= 3 {
			return kafkaloop.Permanent(errors.New("refused"))
		}
		return nil
	})
	e.run(e.consumer(), h, kafkaloop.Options{RetryBackoff: time.Millisecond})
	waitFor(t, 20*time.Second, "everything committed", func() bool { return e.committed(0) == 2 })
	if n := j.callCount("0/0"); n != 4 {
		t.Errorf("record tried %d times, want 4", n)
	}
}

// A record failing for longer than its retry budget is dead-lettered,
// also when the budget spans several batches, and the consumer goes on.
func TestRetryBudgetIsDeadLettered(t *testing.T) {
	e := newEnv(t, 1)
	j := newJournal()
	e.produce(0, "a", "down", "b")
	start := time.Now()
	h := j.handler(func(r *kgo.Record, _ int) error {
		if r.Offset == 1 {
			return errors.New("store down")
		}
		return nil
	})
	const budget = 400 * time.Millisecond
	e.run(e.consumer(), h, kafkaloop.Options{
		DeadLetter: j.deadLetter, RetryBudget: budget, RetryBackoff: 10 * time.Millisecond,
		MaxBatchTime: 100 * time.Millisecond, // the budget spans 4 batches
	})
	waitFor(t, 20*time.Second, "everything committed", func() bool { return e.committed(0) == 3 })
	if took := time.Since(start); took < budget {
		t.Errorf("dead-lettered after %v, before the budget of %v", took, budget)
	}
	dead := j.deadLetters()
	tries := j.callCount("0/1")
	want := fmt.Sprintf("0/1 retry budget of 400ms exhausted after %d tries: store down", tries)
	if len(dead) != 1 || dead[0] != want {
		t.Errorf("dead letters %q, want [%q]", dead, want)
	}
	if j.okCount("0/2") != 1 {
		t.Errorf("the record after it was not handled")
	}
}

// A failing DeadLetter leaves the record unfinished: it is retried (handler
// first) until a dead letter succeeds, and only then committed.
func TestFailedDeadLetterKeepsRecordUnfinished(t *testing.T) {
	e := newEnv(t, 1)
	j := newJournal()
	e.produce(0, "poison", "b")
	var dlTries atomic.Int32
	var committedBefore atomic.Int64
	committedBefore.Store(-2)
	dl := func(ctx context.Context, r *kgo.Record, reason string) error {
		if dlTries.Add(1) <= 3 {
			committedBefore.Store(e.committed(0))
			return errors.New("dead-letter topic unavailable")
		}
		return j.deadLetter(ctx, r, reason)
	}
	h := j.handler(func(r *kgo.Record, _ int) error {
		if r.Offset == 0 {
			return kafkaloop.Permanent(errors.New("refused"))
		}
		return nil
	})
	e.run(e.consumer(), h, kafkaloop.Options{DeadLetter: dl, RetryBackoff: 5 * time.Millisecond})
	waitFor(t, 20*time.Second, "everything committed", func() bool { return e.committed(0) == 2 })
	if n := j.callCount("0/0"); n != 4 {
		t.Errorf("handler ran %d times, want 4 (once per dead-letter try)", n)
	}
	if got := committedBefore.Load(); got > 0 {
		t.Errorf("committed at %d before the dead letter succeeded", got)
	}
	if j.deadCount() != 1 {
		t.Errorf("dead letters %v", j.deadLetters())
	}
}

// A record that keeps failing does not hold the consumer: after
// MaxBatchTime the batch ends, records produced later to other partitions
// are polled and handled, and the failing record is retried in later
// batches until it succeeds.
func TestFailingRecordDoesNotHoldOtherPartitions(t *testing.T) {
	e := newEnv(t, 2)
	j := newJournal()
	e.produce(0, "stuck", "after")
	var release atomic.Bool
	h := j.handler(func(r *kgo.Record, _ int) error {
		if r.Partition == 0 && r.Offset == 0 && !release.Load() {
			return errTransient
		}
		return nil
	})
	e.run(e.consumer(), h, kafkaloop.Options{RetryBackoff: 5 * time.Millisecond, MaxBatchTime: 200 * time.Millisecond})
	waitFor(t, 20*time.Second, "the record failing", func() bool { return j.callCount("0/0") >= 3 })
	e.produce(1, "late")
	waitFor(t, 20*time.Second, "the later record of another partition handled", func() bool { return j.okCount("1/0") == 1 })
	waitFor(t, 20*time.Second, "its commit", func() bool { return e.committed(1) == 1 })
	if j.okCount("0/0") != 0 {
		t.Fatal("the failing record succeeded")
	}
	release.Store(true)
	waitFor(t, 20*time.Second, "partition 0 committed", func() bool { return e.committed(0) == 2 })
	if n := j.okCount("0/1"); n != 1 {
		t.Errorf("the record after the failing one succeeded %d times, want 1", n)
	}
	j.check(t)
}

// While a record keeps failing, a second member joining the group gets
// its partitions promptly (the batch ends at MaxBatchTime, or at once when
// the rebalance signals that it waits), and the record succeeds later on
// whichever member owns it.
func TestRebalanceCompletesWhileRecordFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      kafkaloop.Options
		signal bool
	}{
		{"max batch time", kafkaloop.Options{MaxBatchTime: 300 * time.Millisecond}, false},
		{"rebalance signal", kafkaloop.Options{MaxBatchTime: time.Hour}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 4)
			j := newJournal()
			for p := range int32(4) {
				e.produce(p, "k1", "k2")
			}
			var release atomic.Bool
			h := j.handler(func(r *kgo.Record, _ int) error {
				if r.Partition == 0 && r.Offset == 0 && !release.Load() {
					return errTransient
				}
				return nil
			})
			var extra []kgo.Opt
			if !tc.signal {
				// Only MaxBatchTime may end the batch.
				extra = append(extra, kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) {}))
			}
			o := tc.o
			o.RetryBackoff = 5 * time.Millisecond
			o.RetryBudget = -1
			e.run(e.consumer(extra...), h, o)
			waitFor(t, 20*time.Second, "the first member handling", func() bool {
				return j.callCount("0/0") >= 3 && j.okCount("1/1") == 1 && j.okCount("2/1") == 1 && j.okCount("3/1") == 1
			})

			var assigned atomic.Int32
			second := e.consumer(append(extra, kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				assigned.Add(int32(len(m[topic])))
			}))...)
			joined := time.Now()
			e.run(second, h, o)
			waitFor(t, 15*time.Second, "the second member's assignment", func() bool { return assigned.Load() > 0 })
			t.Logf("second member assigned %v after joining", time.Since(joined).Round(time.Millisecond))
			if j.okCount("0/0") != 0 {
				t.Fatal("the failing record succeeded")
			}
			release.Store(true)
			waitFor(t, 20*time.Second, "partition 0 committed", func() bool { return e.committed(0) == 2 })
			j.check(t)
		})
	}
}

// Shutdown while a handler runs: the running handler finishes and is
// committed, records not yet started (a later record of its key) and a
// record still failing are not, and the next member starts from there.
func TestShutdownCommitsOnlyFinished(t *testing.T) {
	e := newEnv(t, 1)
	j := newJournal()
	e.produce(0, "a", "b", "slow", "slow", "failing") // offsets 0..4
	started := make(chan struct{})
	release := make(chan struct{})
	var failing atomic.Bool
	failing.Store(true)
	h := j.handler(func(r *kgo.Record, call int) error {
		switch {
		case r.Offset == 2 && call == 1:
			close(started)
			<-release
		case r.Offset == 4 && failing.Load():
			return errTransient
		}
		return nil
	})
	first := e.consumer()
	run := e.run(first, h, kafkaloop.Options{RetryBackoff: 5 * time.Millisecond})
	<-started
	waitFor(t, 20*time.Second, "the other records", func() bool {
		return j.okCount("0/0") == 1 && j.okCount("0/1") == 1 && j.callCount("0/4") >= 2
	})
	run.cancel()
	close(release)
	if err := run.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := e.committed(0); got != 3 {
		t.Fatalf("committed %d after shutdown, want 3 (offsets 0-2 finished, 3 not started)", got)
	}
	if n := j.callCount("0/3"); n != 0 {
		t.Fatalf("offset 3 ran %d times during shutdown", n)
	}

	first.Close() // leave the group
	failing.Store(false)
	e.run(e.consumer(), h, kafkaloop.Options{})
	waitFor(t, 20*time.Second, "the next member to finish", func() bool { return e.committed(0) == 5 })
	if j.okCount("0/2") != 1 || j.okCount("0/3") != 1 || j.okCount("0/4") != 1 {
		t.Errorf("after restart: offsets 2-4 succeeded %d, %d, %d times, want once each", j.okCount("0/2"), j.okCount("0/3"), j.okCount("0/4"))
	}
	j.check(t)
}

func TestPermanent(t *testing.T) {
	if kafkaloop.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	cause := errors.New("bad key")
	err := fmt.Errorf("handle: %w", kafkaloop.Permanent(cause))
	if !kafkaloop.IsPermanent(err) || !errors.Is(err, cause) {
		t.Errorf("IsPermanent %v, Is(cause) %v", kafkaloop.IsPermanent(err), errors.Is(err, cause))
	}
	var pe *kafkaloop.PermanentError
	if !errors.As(err, &pe) || pe.Err != cause || err.Error() != "handle: bad key" {
		t.Errorf("As: %v %v, message %q", pe, errors.As(err, &pe), err.Error())
	}
	if kafkaloop.IsPermanent(cause) || kafkaloop.IsPermanent(nil) {
		t.Error("plain error reported permanent")
	}
}

// MaxBatchTime does not interrupt a handler that is slow but succeeds:
// it runs once, to the end; records of its key not started by the
// deadline run in a later batch, in order.
func TestSlowHandlerIsNotInterrupted(t *testing.T) {
	e := newEnv(t, 1)
	j := newJournal()
	e.produce(0, "slow", "slow", "other")
	var ctxErr atomic.Value
	h := j.handler(nil)
	slow := func(ctx context.Context, r *kgo.Record) error {
		if r.Offset == 0 {
			time.Sleep(500 * time.Millisecond)
			if err := ctx.Err(); err != nil {
				ctxErr.Store(err)
			}
		}
		return h(ctx, r)
	}
	e.run(e.consumer(), slow, kafkaloop.Options{MaxBatchTime: 100 * time.Millisecond})
	waitFor(t, 20*time.Second, "everything committed", func() bool { return e.committed(0) == 3 })
	for _, rid := range []string{"0/0", "0/1", "0/2"} {
		if n := j.callCount(rid); n != 1 {
			t.Errorf("record %s ran %d times, want 1", rid, n)
		}
	}
	if err := ctxErr.Load(); err != nil {
		t.Errorf("the slow handler's context ended: %v", err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if got := fmt.Sprint(j.order["slow"]); got != "[slow#0 slow#1]" {
		t.Errorf("key slow handled as %s", got)
	}
}
