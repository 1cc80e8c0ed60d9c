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
	"github.com/twmb/franz-go/pkg/kmsg"
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

// watchCommits checks every offset commit the broker receives for the
// group: a commit of offset c on a partition must come after every record
// below c succeeded at least once (by j's count). A violation fails the
// test at its end.
func (e *env) watchCommits(j *journal) {
	var mu sync.Mutex
	var bad []string
	e.c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.OffsetCommitRequest)
		if r.Group != e.group {
			return nil, nil, false
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				for o := int64(0); o < p.Offset; o++ {
					if rid := fmt.Sprintf("%d/%d", p.Partition, o); !j.finished(rid) {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("committed %d on partition %d before record %s succeeded", p.Offset, p.Partition, rid))
						mu.Unlock()
						break
					}
				}
			}
		}
		return nil, nil, false
	})
	e.t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range bad {
			e.t.Error(b)
		}
	})
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
	busy  map[string]string // "p/key" -> record being handled
	err   error             // first ordering violation
	dead  []string          // "p/offset reason"
	dlIDs map[string]int    // "p/offset" -> dead letters
}

func newJournal() *journal {
	return &journal{calls: map[string]int{}, ok: map[string]int{}, order: map[string][]string{}, busy: map[string]string{}, dlIDs: map[string]int{}}
}

func id(r *kgo.Record) string { return fmt.Sprintf("%d/%d", r.Partition, r.Offset) }

// handler wraps fn (nil: succeed) with bookkeeping: calls, successes in
// order per key, and a check that one key of a partition never runs twice
// at once, on one member or across members. (The same key on two
// partitions may run concurrently: order is per partition and key, as a
// key's records share a partition under Kafka's partitioners.)
func (j *journal) handler(fn func(r *kgo.Record, call int) error) kafkaloop.Handler {
	return func(_ context.Context, r *kgo.Record) error {
		key := string(r.Key)
		lane := fmt.Sprintf("%d/%s", r.Partition, key)
		j.mu.Lock()
		if other := j.busy[lane]; other != "" && j.err == nil {
			j.err = fmt.Errorf("key %s of partition %d handled concurrently: offsets %s and %s", key, r.Partition, other, id(r))
		}
		j.busy[lane] = id(r)
		j.calls[id(r)]++
		call := j.calls[id(r)]
		j.mu.Unlock()
		var err error
		if fn != nil {
			err = fn(r, call)
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		j.busy[lane] = ""
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
	j.dlIDs[id(r)]++
	return nil
}

// finished reports whether record rid succeeded or was dead-lettered.
func (j *journal) finished(rid string) bool {
	return j.get(func(j *journal) int { return j.ok[rid] + j.dlIDs[rid] }) > 0
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
	e.watchCommits(j)
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
// commits of other partitions; later records of its key wait for it.
// Records that finished behind it do not run again.
func TestCommitsOnlyFinishedPrefix(t *testing.T) {
	e := newEnv(t, 2)
	j := newJournal()
	e.watchCommits(j)
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
	e.watchCommits(j)
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
	e.watchCommits(j)
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

// A record failing for longer than its retry budget is dead-lettered, and
// the consumer goes on.
func TestRetryBudgetIsDeadLettered(t *testing.T) {
	e := newEnv(t, 1)
	j := newJournal()
	e.watchCommits(j)
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
	e.watchCommits(j)
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

// A record that keeps failing does not hold the consumer: records produced
// later to other partitions are polled and handled, and the failing record
// is retried until it succeeds.
func TestFailingRecordDoesNotHoldOtherPartitions(t *testing.T) {
	e := newEnv(t, 2)
	j := newJournal()
	e.watchCommits(j)
	e.produce(0, "stuck", "after")
	var release atomic.Bool
	h := j.handler(func(r *kgo.Record, _ int) error {
		if r.Partition == 0 && r.Offset == 0 && !release.Load() {
			return errTransient
		}
		return nil
	})
	e.run(e.consumer(), h, kafkaloop.Options{RetryBackoff: 5 * time.Millisecond, MaxBatchTime: time.Hour})
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
// its partitions promptly, whatever MaxBatchTime (a record waiting out its
// backoff holds no rebalance; a rebalance that waits for polling does not
// change that), and the record succeeds later on whichever member owns
// it.
func TestRebalanceCompletesWhileRecordFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      kafkaloop.Options
		signal bool
	}{
		{"short max batch time, no blocked-callback signal", kafkaloop.Options{MaxBatchTime: 300 * time.Millisecond}, false},
		{"max batch time of an hour", kafkaloop.Options{MaxBatchTime: time.Hour}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 4)
			j := newJournal()
			e.watchCommits(j)
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
				// A user's blocked-callback option changes nothing.
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
	e.watchCommits(j)
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

// A handler that is slow but succeeds is not interrupted (its context does
// not end, whatever MaxBatchTime): it runs once, to the end, and the later
// records of its key run after it, in order.
func TestSlowHandlerIsNotInterrupted(t *testing.T) {
	e := newEnv(t, 1)
	j := newJournal()
	e.watchCommits(j)
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

// waitClosed waits for c to close, failing the test after d.
func waitClosed(t *testing.T, d time.Duration, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// The pipeline: a record of key b, polled after a slow record of key a
// started (a later poll, same partition), is handled while a still runs;
// the later record of key a waits for it. The commit point stays at a
// until a finishes. MaxBatchTime is an hour: nothing ends a batch here.
func TestSlowRecordDoesNotHoldOtherKeysAcrossPolls(t *testing.T) {
	e := newEnv(t, 1)
	j := newJournal()
	e.watchCommits(j)
	e.produce(0, "a") // offset 0
	started, release := make(chan struct{}), make(chan struct{})
	h := j.handler(func(r *kgo.Record, call int) error {
		if r.Offset == 0 && call == 1 {
			close(started)
			<-release
		}
		return nil
	})
	e.run(e.consumer(), h, kafkaloop.Options{MaxBatchTime: time.Hour})
	waitClosed(t, 20*time.Second, "the slow record to start", started)
	e.produce(0, "b", "a", "c") // offsets 1-3, polled after offset 0 started
	waitFor(t, 20*time.Second, "b and c handled while a runs", func() bool {
		return j.okCount("0/1") == 1 && j.okCount("0/3") == 1
	})
	if n := j.callCount("0/2"); n != 0 {
		t.Fatalf("the second record of key a ran %d times while the first runs", n)
	}
	time.Sleep(700 * time.Millisecond) // more than one auto-commit interval
	if got := e.committed(0); got > 0 {
		t.Fatalf("committed %d while offset 0 runs", got)
	}
	close(release)
	waitFor(t, 20*time.Second, "everything committed", func() bool { return e.committed(0) == 4 })
	j.check(t)
	j.mu.Lock()
	defer j.mu.Unlock()
	if got := fmt.Sprint(j.order["a"]); got != "[a#0 a#1]" {
		t.Errorf("key a handled as %s", got)
	}
}

// Offsets are marked as each partition's finished prefix advances, not
// when a polled batch ends: with one record running for as long as the
// test lasts, the records before it are committed, and the commit point
// moves again as soon as it finishes.
func TestCommitFollowsFinishedPrefix(t *testing.T) {
	e := newEnv(t, 2)
	j := newJournal()
	e.watchCommits(j)
	e.produce(0, "a", "b", "c", "slow", "d", "e") // offsets 0-5, one poll
	e.produce(1, "x", "y")
	started, release := make(chan struct{}), make(chan struct{})
	h := j.handler(func(r *kgo.Record, call int) error {
		if r.Partition == 0 && r.Offset == 3 && call == 1 {
			close(started)
			<-release
		}
		return nil
	})
	e.run(e.consumer(), h, kafkaloop.Options{MaxBatchTime: time.Hour})
	waitClosed(t, 20*time.Second, "the slow record to start", started)
	waitFor(t, 20*time.Second, "the prefix before the slow record committed", func() bool {
		return e.committed(0) == 3 && e.committed(1) == 2
	})
	waitFor(t, 20*time.Second, "the records after it handled", func() bool {
		return j.okCount("0/4") == 1 && j.okCount("0/5") == 1
	})
	time.Sleep(700 * time.Millisecond)
	if got := e.committed(0); got != 3 {
		t.Fatalf("committed %d past the running record at offset 3", got)
	}
	close(release)
	waitFor(t, 20*time.Second, "the rest committed", func() bool { return e.committed(0) == 6 })
	for o := range 6 {
		if n := j.okCount(fmt.Sprintf("0/%d", o)); n != 1 {
			t.Errorf("record 0/%d succeeded %d times, want 1", o, n)
		}
	}
	j.check(t)
}

// unbufferedCounter counts the records the client hands to polls.
type unbufferedCounter struct{ polled atomic.Int64 }

func (u *unbufferedCounter) OnFetchRecordUnbuffered(_ *kgo.Record, polled bool) {
	if polled {
		u.polled.Add(1)
	}
}

// The loop holds at most MaxPollRecords unfinished records: it polls only
// below that bound, however many records wait in the topic. (No record
// fails here: the hook would count the buffered records of a paused
// partition as polled.)
func TestHeldRecordsAreBounded(t *testing.T) {
	e := newEnv(t, 3)
	j := newJournal()
	e.watchCommits(j)
	const perPartition = 100
	for p := range int32(3) {
		keys := make([]string, perPartition)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%d", i%7)
		}
		e.produce(p, keys...)
	}
	var (
		hook     unbufferedCounter
		finished atomic.Int64
		peak     atomic.Int64
	)
	const bound = 10
	inner := j.handler(func(*kgo.Record, int) error {
		if held := hook.polled.Load() - finished.Load(); held > peak.Load() {
			peak.Store(held) // one handler at a time updates it, below
		}
		time.Sleep(time.Millisecond)
		return nil
	})
	var mu sync.Mutex
	h := func(ctx context.Context, r *kgo.Record) error {
		mu.Lock() // serialise the peak update; Concurrency is 1 anyway
		defer mu.Unlock()
		err := inner(ctx, r)
		if err == nil {
			finished.Add(1)
		}
		return err
	}
	e.run(e.consumer(kgo.WithHooks(&hook)), h, kafkaloop.Options{Concurrency: 1, MaxPollRecords: bound})
	waitFor(t, 30*time.Second, "everything committed", func() bool {
		return e.committed(0) == perPartition && e.committed(1) == perPartition && e.committed(2) == perPartition
	})
	if p := peak.Load(); p > bound || p < 1 {
		t.Errorf("up to %d records were held unfinished, want 1..%d", p, bound)
	}
	j.check(t)
}

// Rebalance mid-flight: a second member joins while records (some slow,
// some failing once) are in flight and more are produced. The revoke
// drains the handlers of the partitions it takes away and commits their
// prefix; no commit ever passes an unfinished record (watchCommits), no
// key runs twice at once across the members, every record succeeds, and
// the first successes of each key are in offset order.
func TestRebalanceMidFlight(t *testing.T) {
	e := newEnv(t, 4)
	j := newJournal()
	e.watchCommits(j)
	const waves, perWave = 2, 40
	keysOf := func(p int32) []string {
		ks := make([]string, perWave)
		for i := range ks {
			ks[i] = fmt.Sprintf("p%d-k%d", p, i%5)
		}
		return ks
	}
	var want = map[string][]string{}
	produceWave := func() {
		for p := range int32(4) {
			for _, r := range e.produce(p, keysOf(p)...) {
				want[string(r.Key)] = append(want[string(r.Key)], fmt.Sprintf("%d/%d", r.Partition, r.Offset))
			}
		}
	}
	var running atomic.Int32
	slowStarted := make(chan struct{})
	var slowOnce sync.Once
	h := j.handler(func(r *kgo.Record, call int) error {
		running.Add(1)
		defer running.Add(-1)
		switch {
		case r.Offset%9 == 4:
			slowOnce.Do(func() { close(slowStarted) })
			time.Sleep(300 * time.Millisecond)
		case r.Offset%7 == 2 && call == 1:
			return errTransient
		default:
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	})
	// Both members map successes to "p/offset"; record them per key.
	var firstMu sync.Mutex
	firsts := map[string][]string{}
	seen := map[string]bool{}
	wrapped := func(ctx context.Context, r *kgo.Record) error {
		err := h(ctx, r)
		if err == nil {
			firstMu.Lock()
			if rid := id(r); !seen[rid] {
				seen[rid] = true
				firsts[string(r.Key)] = append(firsts[string(r.Key)], rid)
			}
			firstMu.Unlock()
		}
		return err
	}
	fast := []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}
	o := kafkaloop.Options{Concurrency: 8, RetryBackoff: 5 * time.Millisecond, MaxBatchTime: time.Hour}
	produceWave()
	e.run(e.consumer(fast...), wrapped, o)
	waitClosed(t, 20*time.Second, "a slow record to start", slowStarted)
	waitFor(t, 20*time.Second, "handlers in flight", func() bool { return running.Load() > 0 })

	var assigned atomic.Int32
	second := e.consumer(append(fast, kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		assigned.Add(int32(len(m[topic])))
	}))...)
	e.run(second, wrapped, o)
	produceWave()
	waitFor(t, 30*time.Second, "the second member's assignment", func() bool { return assigned.Load() > 0 })
	total := int64(waves * perWave)
	waitFor(t, 60*time.Second, "every partition committed to its end", func() bool {
		for p := range int32(4) {
			if e.committed(p) != total {
				return false
			}
		}
		return true
	})
	j.check(t)
	for p := range int32(4) {
		for o := range total {
			if rid := fmt.Sprintf("%d/%d", p, o); j.okCount(rid) == 0 {
				t.Errorf("record %s never succeeded", rid)
			}
		}
	}
	firstMu.Lock()
	defer firstMu.Unlock()
	for k, w := range want {
		if got := firsts[k]; fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("key %s first succeeded as\n%v\nwant\n%v", k, got, w)
		}
	}
}

// A partition whose head keeps failing, with many records of the same key
// queued behind it, is paused: its records stop counting against the held
// bound, so records produced later to another partition are still polled
// and handled (with a bound of 10 and 40 records stuck). Once the record
// succeeds, the partition resumes and everything is committed in order.
func TestStuckPartitionDoesNotStarveOthers(t *testing.T) {
	e := newEnv(t, 2)
	j := newJournal()
	e.watchCommits(j)
	stuck := make([]string, 40)
	for i := range stuck {
		stuck[i] = "stuck"
	}
	e.produce(0, stuck...)
	var release atomic.Bool
	h := j.handler(func(r *kgo.Record, _ int) error {
		if r.Partition == 0 && r.Offset == 0 && !release.Load() {
			return errTransient
		}
		return nil
	})
	e.run(e.consumer(), h, kafkaloop.Options{MaxPollRecords: 10, RetryBackoff: 5 * time.Millisecond, RetryBudget: -1})
	waitFor(t, 20*time.Second, "the head failing", func() bool { return j.callCount("0/0") >= 3 })
	e.produce(1, "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l")
	waitFor(t, 20*time.Second, "the other partition handled and committed", func() bool { return e.committed(1) == 12 })
	if got := e.committed(0); got > 0 {
		t.Fatalf("partition 0 committed at %d while its head fails", got)
	}
	release.Store(true)
	waitFor(t, 30*time.Second, "partition 0 committed", func() bool { return e.committed(0) == 40 })
	j.check(t)
	j.mu.Lock()
	defer j.mu.Unlock()
	if got := len(j.order["stuck"]); got != 40 {
		t.Errorf("key stuck succeeded %d times, want 40", got)
	}
	for i, v := range j.order["stuck"] {
		if v != fmt.Sprintf("stuck#%d", i) {
			t.Fatalf("key stuck handled out of order: %v", j.order["stuck"])
		}
	}
}

// A revoke waits for the running handlers of the partitions it takes away
// (MaxBatchTime is an hour), then commits their finished prefix: the new
// owner does not run those records again, and nothing is lost. Here both
// partitions have a handler blocked when a second member joins; the
// rebalance (both members synced in the new generation) cannot hand a
// partition over until the handlers return.
func TestRevokeWaitsForRunningHandlers(t *testing.T) {
	e := newEnv(t, 2)
	j := newJournal()
	e.watchCommits(j)
	var syncs atomic.Int32
	e.c.ControlKey(int16(kmsg.SyncGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if req.(*kmsg.SyncGroupRequest).Group == e.group {
			syncs.Add(1)
		}
		return nil, nil, false
	})
	e.produce(0, "a", "slow0", "b") // offsets 0-2
	e.produce(1, "c", "slow1", "d")
	release := make(chan struct{})
	var started atomic.Int32
	h := j.handler(func(r *kgo.Record, call int) error {
		if r.Offset == 1 && call == 1 {
			started.Add(1)
			<-release
		}
		return nil
	})
	fast := kgo.HeartbeatInterval(100 * time.Millisecond)
	o := kafkaloop.Options{MaxBatchTime: time.Hour}
	e.run(e.consumer(fast), h, o)
	waitFor(t, 20*time.Second, "both slow records running", func() bool { return started.Load() == 2 })
	waitFor(t, 20*time.Second, "the records after them handled", func() bool { return j.okCount("0/2") == 1 && j.okCount("1/2") == 1 })
	syncsBefore := syncs.Load()

	var assigned atomic.Bool
	second := e.consumer(fast, kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		if len(m[topic]) > 0 {
			assigned.Store(true)
		}
	}))
	e.run(second, h, o)
	waitFor(t, 20*time.Second, "both members synced in the new generation", func() bool { return syncs.Load() >= syncsBefore+2 })
	time.Sleep(500 * time.Millisecond)
	if assigned.Load() {
		t.Fatal("the second member got a partition while its handlers were running")
	}
	close(release)
	waitFor(t, 20*time.Second, "the second member's assignment", assigned.Load)
	waitFor(t, 20*time.Second, "everything committed", func() bool { return e.committed(0) == 3 && e.committed(1) == 3 })
	for p := range 2 {
		for o := range 3 {
			if n := j.okCount(fmt.Sprintf("%d/%d", p, o)); n != 1 {
				t.Errorf("record %d/%d succeeded %d times, want once (the revoke committed it)", p, o, n)
			}
		}
	}
	j.check(t)
}
