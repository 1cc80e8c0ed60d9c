package kafkaloop_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/kafkaloop"
	"github.com/stacksaga-go/stacksaga/topics"
)

// shareEnv is an in-process broker with one topic of one partition, a
// producer and a share group configured as the worker and the orchestrator
// configure theirs (earliest, the delivery limit, the record lock).
type shareEnv struct {
	t       *testing.T
	c       *kfake.Cluster // nil on real Kafka
	brokers []string
	topic   string
	prod    *kgo.Client
	group   string
}

func newShareEnv(t *testing.T, s topics.ShareSettings, opts ...kfake.Opt) *shareEnv {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	e := &shareEnv{t: t, c: c, brokers: c.ListenAddrs(), topic: topic, prod: prod, group: "sg-" + strings.ReplaceAll(t.Name(), "/", "-")}
	if err := topics.ConfigureShareGroup(t.Context(), prod, e.group, s); err != nil {
		t.Fatal(err)
	}
	return e
}

// newShareEnvLock is newShareEnv with the broker's acquisition lock set to
// lock (the in-process broker reads it from its broker config only).
func newShareEnvLock(t *testing.T, lock time.Duration) *shareEnv {
	t.Helper()
	return newShareEnv(t, topics.ShareSettings{}, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": fmt.Sprint(lock.Milliseconds()),
	}))
}

func (e *shareEnv) produce(keys ...string) {
	e.t.Helper()
	for i, k := range keys {
		if err := e.prod.ProduceSync(e.t.Context(), &kgo.Record{Topic: e.topic, Key: []byte(k), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// member runs RunShare with h in its own client until the returned stop is
// called (stop waits for RunShare and closes the client).
func (e *shareEnv) member(h kafkaloop.Handler, o kafkaloop.Options, opts ...kgo.Opt) (stop func()) {
	e.t.Helper()
	cl, err := kgo.NewClient(append(append(kafkaloop.ShareClientOpts(o.MaxPollRecords),
		kgo.SeedBrokers(e.brokers...), kgo.ShareGroup(e.group), kgo.ConsumeTopics(e.topic)), opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	if o.Logger == nil {
		o.Logger = quiet
	}
	if o.DeadLetter == nil {
		o.DeadLetter = func(context.Context, *kgo.Record, string) error { return nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- kafkaloop.RunShare(ctx, cl, h, o) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("RunShare: %v", err)
			}
			cl.Close()
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// tally counts handler runs and settled outcomes per record value.
type tally struct {
	mu       sync.Mutex
	runs     map[string]int
	ok       map[string]int
	dead     map[string]string
	released map[string][]string
	ch       chan struct{}
}

func newTally() *tally {
	return &tally{runs: map[string]int{}, ok: map[string]int{}, dead: map[string]string{}, released: map[string][]string{}, ch: make(chan struct{}, 1)}
}

func (t *tally) poke() {
	select {
	case t.ch <- struct{}{}:
	default:
	}
}

func (t *tally) deadLetter(_ context.Context, r *kgo.Record, reason string) error {
	t.mu.Lock()
	t.dead[string(r.Value)] = reason
	t.mu.Unlock()
	t.poke()
	return nil
}

func (t *tally) release(r *kgo.Record, why string) {
	t.mu.Lock()
	t.released[string(r.Value)] = append(t.released[string(r.Value)], why)
	t.mu.Unlock()
	t.poke()
}

// waitFor waits until cond (called under the lock) holds.
func (t *tally) waitFor(tt *testing.T, what string, cond func() bool) {
	tt.Helper()
	deadline := time.After(30 * time.Second)
	for {
		t.mu.Lock()
		ok := cond()
		t.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-t.ch:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.mu.Lock()
			defer t.mu.Unlock()
			tt.Fatalf("timed out waiting for %s: runs=%v ok=%v dead=%v released=%v", what, t.runs, t.ok, t.dead, t.released)
		}
	}
}

// Every record is handled and accepted once, by the members sharing the one
// partition; an accepted record is never delivered again.
func TestShareAcceptsEveryRecordOnce(t *testing.T) {
	e := newShareEnv(t, topics.ShareSettings{})
	var keys []string
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("k%d", i%17))
	}
	e.produce(keys...)
	tl := newTally()
	h := func(_ context.Context, r *kgo.Record) error {
		tl.mu.Lock()
		tl.runs[string(r.Value)]++
		tl.ok[string(r.Value)]++
		tl.mu.Unlock()
		tl.poke()
		return nil
	}
	for range 3 {
		e.member(h, kafkaloop.Options{Concurrency: 4, MaxPollRecords: 16})
	}
	tl.waitFor(t, "200 records", func() bool { return len(tl.ok) == 200 })
	time.Sleep(200 * time.Millisecond) // a redelivery would show by now
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for v, n := range tl.runs {
		if n != 1 {
			t.Errorf("%s handled %d times", v, n)
		}
	}
}

// A transient failure releases the record; it comes back (delivery count 2)
// and is accepted then.
func TestShareReleasesTransientFailure(t *testing.T) {
	e := newShareEnv(t, topics.ShareSettings{RecordLock: time.Minute})
	e.produce("a", "b", "c")
	tl := newTally()
	deliveries := map[string][]int32{}
	h := func(_ context.Context, r *kgo.Record) error {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		v := string(r.Value)
		tl.runs[v]++
		deliveries[v] = append(deliveries[v], r.DeliveryCount())
		if v == "v1" && tl.runs[v] == 1 {
			return errors.New("store unavailable")
		}
		tl.ok[v]++
		tl.poke()
		return nil
	}
	e.member(h, kafkaloop.Options{Released: tl.release, DeadLetter: tl.deadLetter})
	tl.waitFor(t, "all three accepted", func() bool { return len(tl.ok) == 3 })
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if got := fmt.Sprint(deliveries["v1"]); got != "[1 2]" {
		t.Errorf("deliveries of the failing record: %s, want [1 2]", got)
	}
	if got := fmt.Sprint(tl.released["v1"]); got != "[failed]" {
		t.Errorf("releases: %s, want [failed]", got)
	}
	if len(tl.dead) != 0 {
		t.Errorf("dead letters: %v", tl.dead)
	}
}

// A permanent error dead-letters the record with its reason and rejects it:
// it is never delivered again. A Rejected error (the handler dead-lettered
// the record itself) is rejected without DeadLetter.
func TestShareRejectsPoison(t *testing.T) {
	e := newShareEnv(t, topics.ShareSettings{})
	e.produce("a", "b", "c")
	tl := newTally()
	h := func(_ context.Context, r *kgo.Record) error {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		v := string(r.Value)
		tl.runs[v]++
		tl.poke()
		switch v {
		case "v0":
			return kafkaloop.Permanent(errors.New("undecodable"))
		case "v1":
			return kafkaloop.Rejected("unknown-endpoint")
		}
		tl.ok[v]++
		return nil
	}
	e.member(h, kafkaloop.Options{Released: tl.release, DeadLetter: tl.deadLetter})
	tl.waitFor(t, "the poison dead-lettered and the good record accepted", func() bool {
		return tl.dead["v0"] != "" && tl.ok["v2"] == 1 && tl.runs["v1"] == 1
	})
	time.Sleep(300 * time.Millisecond)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if got := tl.dead["v0"]; got != "permanent: undecodable" {
		t.Errorf("reason %q", got)
	}
	if _, ok := tl.dead["v1"]; ok {
		t.Errorf("a Rejected record was handed to DeadLetter")
	}
	for v, n := range tl.runs {
		if n != 1 {
			t.Errorf("%s delivered %d times after a reject", v, n)
		}
	}
	if len(tl.released) != 0 {
		t.Errorf("released: %v", tl.released)
	}
}

// A record that fails on every delivery is dead-lettered on its last one
// (the group's delivery limit) instead of being archived by the broker.
func TestShareDeliveryLimitDeadLetters(t *testing.T) {
	e := newShareEnv(t, topics.ShareSettings{DeliveryLimit: 3, RecordLock: time.Minute})
	e.produce("a")
	tl := newTally()
	h := func(_ context.Context, r *kgo.Record) error {
		tl.mu.Lock()
		tl.runs[string(r.Value)]++
		tl.mu.Unlock()
		return errors.New("broker unavailable")
	}
	e.member(h, kafkaloop.Options{DeliveryLimit: 3, RetryBackoff: time.Millisecond, Released: tl.release, DeadLetter: tl.deadLetter})
	tl.waitFor(t, "the dead letter", func() bool { return tl.dead["v0"] != "" })
	time.Sleep(300 * time.Millisecond)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if got, want := tl.dead["v0"], "delivery count limit of 3 reached: broker unavailable"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	if tl.runs["v0"] != 3 {
		t.Errorf("ran %d times, want 3", tl.runs["v0"])
	}
	if got := fmt.Sprint(tl.released["v0"]); got != "[failed failed]" {
		t.Errorf("releases %s", got)
	}
}

// Shutdown runs every record of the poll in hand instead of releasing the
// ones not started yet: a release would spend one of their deliveries (the
// broker counts one when it hands a record out), and on the last one the
// broker would archive the record. Each runs once, on its first delivery,
// is accepted, and none comes back to another member.
func TestShareShutdownRunsThePollInHand(t *testing.T) {
	e := newShareEnv(t, topics.ShareSettings{RecordLock: time.Minute})
	e.produce("a", "b", "c", "d")
	tl := newTally()
	deliveries := map[string][]int32{}
	started, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := func(_ context.Context, r *kgo.Record) error {
		once.Do(func() { close(started) })
		<-unblock
		tl.mu.Lock()
		tl.ok[string(r.Value)]++
		tl.runs[string(r.Value)]++
		deliveries[string(r.Value)] = append(deliveries[string(r.Value)], r.DeliveryCount())
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
		done <- kafkaloop.RunShare(ctx, cl, h, kafkaloop.Options{Logger: quiet, Concurrency: 1, Released: tl.release, DeadLetter: tl.deadLetter})
	}()
	<-started
	cancel() // shutting down while one record runs and the other three wait for the one slot
	close(unblock)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cl.Close()
	e.member(h, kafkaloop.Options{Released: tl.release, DeadLetter: tl.deadLetter})
	time.Sleep(500 * time.Millisecond) // a released record would reach the second member by now
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.ok) != 4 || len(tl.released) != 0 {
		t.Errorf("accepted %v, released %v: want the four run by the member shutting down, none released", tl.ok, tl.released)
	}
	for v, d := range deliveries {
		if fmt.Sprint(d) != "[1]" {
			t.Errorf("%s delivered %v, want once, on its first delivery", v, d)
		}
	}
}

// RunShare refuses to run without a dead letter: a record failing on its
// last delivery would have nowhere to go but the broker's archive.
func TestShareNeedsDeadLetter(t *testing.T) {
	e := newShareEnv(t, topics.ShareSettings{})
	cl, err := kgo.NewClient(append(kafkaloop.ShareClientOpts(0), kgo.SeedBrokers(e.brokers...), kgo.ShareGroup(e.group), kgo.ConsumeTopics(e.topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kafkaloop.RunShare(ctx, cl, func(context.Context, *kgo.Record) error { return nil }, kafkaloop.Options{Logger: quiet}); !errors.Is(err, kafkaloop.ErrNoDeadLetter) {
		t.Fatalf("RunShare: %v, want ErrNoDeadLetter", err)
	}
}

// A record whose handler runs longer than the acquisition lock keeps it
// while RenewLocks renews it: the broker confirms every renewal and the
// final accept, and the record runs once. Without renewal the lock ends
// while the handler runs and the record is delivered again.
func TestShareRenewsLocksOfSlowRecords(t *testing.T) {
	const lock = 2 * time.Second
	for _, renew := range []bool{true, false} {
		t.Run(fmt.Sprintf("renew=%v", renew), func(t *testing.T) {
			t.Parallel()
			e := newShareEnvLock(t, lock)
			tl := newTally()
			var acks, ackErrs int
			h := func(_ context.Context, r *kgo.Record) error {
				tl.mu.Lock()
				tl.runs[string(r.Value)]++
				first := tl.runs[string(r.Value)] == 1
				tl.mu.Unlock()
				if first {
					time.Sleep(5 * lock / 2) // the lock ends twice meanwhile unless renewed
				}
				tl.mu.Lock()
				tl.ok[string(r.Value)]++
				tl.mu.Unlock()
				tl.poke()
				return nil
			}
			onAck := kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
				tl.mu.Lock()
				for _, r := range rs {
					acks++
					if r.Err != nil {
						ackErrs++
					}
				}
				tl.mu.Unlock()
			})
			stop := e.member(h, kafkaloop.Options{RenewLocks: renew, Released: tl.release}, onAck)
			e.produce("slow")
			if !renew {
				tl.waitFor(t, "the slow record delivered again", func() bool { return tl.runs["v0"] == 2 })
				return
			}
			tl.waitFor(t, "the slow record handled", func() bool { return tl.ok["v0"] == 1 })
			// Stopping flushes the acknowledgements, the accept included,
			// and waits for their results.
			stop()
			tl.mu.Lock()
			defer tl.mu.Unlock()
			if tl.runs["v0"] != 1 || len(tl.released) != 0 || ackErrs != 0 {
				t.Errorf("runs %v, released %v, %d of %d acknowledgements refused: want one run, no release, none refused", tl.runs, tl.released, ackErrs, acks)
			}
			if acks < 3 {
				t.Errorf("%d acknowledgement results, want at least two renewals and the accept", acks)
			}
		})
	}
}

// With RenewLocks a failing record waits out its release backoff in full
// even once it has been held past the lock its fetch reported: the
// renewals keep the lock, so the loop does not cut the wait short.
func TestShareRenewedRecordWaitsItsBackoff(t *testing.T) {
	const lock = 2 * time.Second
	e := newShareEnvLock(t, lock)
	tl := newTally()
	var failedAt, retriedAt time.Time
	h := func(_ context.Context, r *kgo.Record) error {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		tl.runs[string(r.Value)]++
		if tl.runs[string(r.Value)] == 1 {
			tl.mu.Unlock()
			time.Sleep(lock + lock/2) // past the fetch's deadline
			tl.mu.Lock()
			failedAt = time.Now()
			return errors.New("store unavailable")
		}
		retriedAt = time.Now()
		tl.ok[string(r.Value)]++
		tl.poke()
		return nil
	}
	const backoff = time.Second
	e.member(h, kafkaloop.Options{RenewLocks: true, RetryBackoff: backoff, Released: tl.release})
	e.produce("flaky")
	tl.waitFor(t, "the retried record accepted", func() bool { return tl.ok["v0"] == 1 })
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if waited := retriedAt.Sub(failedAt); waited < backoff {
		t.Errorf("released %v after the failure, want the whole %v backoff", waited, backoff)
	}
}

// No record waits in the client's buffer while its lock runs out: the
// client fetches only what it polls, so records produced while a slow one
// runs are fetched (and locked) only once it is done, and each runs on its
// first delivery. (A client that fetched ahead would hold them, unrenewed,
// until their locks ended, and run them on their second delivery.)
func TestShareFetchesOnlyWhatItPolls(t *testing.T) {
	const lock = 2 * time.Second
	e := newShareEnvLock(t, lock)
	tl := newTally()
	deliveries := map[string][]int32{}
	slowStarted := make(chan struct{})
	h := func(_ context.Context, r *kgo.Record) error {
		tl.mu.Lock()
		tl.runs[string(r.Key)]++
		deliveries[string(r.Key)] = append(deliveries[string(r.Key)], r.DeliveryCount())
		tl.mu.Unlock()
		if string(r.Key) == "slow" && r.DeliveryCount() == 1 {
			close(slowStarted)
			time.Sleep(5 * lock / 2) // past the lock of anything fetched meanwhile
		}
		tl.mu.Lock()
		tl.ok[string(r.Key)]++
		tl.mu.Unlock()
		tl.poke()
		return nil
	}
	e.member(h, kafkaloop.Options{RenewLocks: true})
	e.produce("slow")
	<-slowStarted
	e.produce("a", "b")
	tl.waitFor(t, "the three records handled", func() bool { return len(tl.ok) == 3 })
	// A record fetched ahead and held past its lock may still be polled
	// on its first delivery; its accept is then refused and it comes back
	// within a lock: wait that out.
	time.Sleep(lock + time.Second)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for k, d := range deliveries {
		if fmt.Sprint(d) != "[1]" {
			t.Errorf("%s delivered %v, want once, on its first delivery", k, d)
		}
	}
}

// logCapture is a slog handler that keeps the records logged at Warn and
// above and signals each on ch.
type logCapture struct {
	mu   sync.Mutex
	recs []slog.Record
	ch   chan struct{}
}

func newLogCapture() *logCapture { return &logCapture{ch: make(chan struct{}, 1)} }

func (c *logCapture) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler           { return c }
func (c *logCapture) WithGroup(string) slog.Handler                { return c }
func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	c.recs = append(c.recs, r.Clone())
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
	return nil
}

// find waits for a record with message msg and returns its attributes.
func (c *logCapture) find(t *testing.T, msg string) map[string]slog.Value {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		for _, r := range c.recs {
			if r.Message == msg {
				attrs := map[string]slog.Value{"level": slog.StringValue(r.Level.String())}
				r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Resolve(); return true })
				c.mu.Unlock()
				return attrs
			}
		}
		c.mu.Unlock()
		select {
		case <-c.ch:
		case <-deadline:
			c.mu.Lock()
			for _, r := range c.recs {
				t.Logf("logged: %s", r.Message)
			}
			c.mu.Unlock()
			t.Fatalf("no log %q", msg)
		}
	}
}

// An accept the broker refuses (the record's acquisition lock ended while
// its handler ran, and the broker gave it to another member) is logged at
// Warn, with its topic, partition and error, and counted. Without
// ShareAckFailures kgo drops it silently.
//
// The late accept goes out in the flush of a member shutting down: the
// in-process broker loses the error of an acknowledgement piggybacked on a
// share fetch that then waits for records (it rebuilds the response), so
// the test sends it on its own ShareAcknowledge.
func TestShareAckFailuresAreLoggedAndCounted(t *testing.T) {
	e := newShareEnvLock(t, time.Second)
	logs := newLogCapture()
	log := slog.New(logs)
	var mu sync.Mutex
	var counted []string
	count := func(topic string, partition int32, err error) {
		mu.Lock()
		counted = append(counted, fmt.Sprintf("%s/%d: %v", topic, partition, err))
		mu.Unlock()
	}
	// The first delivery runs on the first member until the record has
	// been delivered again to the second (its lock ended meanwhile), which
	// holds it (accepted, the record would make the late accept a no-op).
	firstStarted, acceptNow, redelivered, done := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once, doneOnce sync.Once
	h := func(_ context.Context, r *kgo.Record) error {
		if r.DeliveryCount() == 1 {
			close(firstStarted)
			<-acceptNow
			return nil
		}
		once.Do(func() { close(redelivered) })
		<-done
		return nil
	}
	cl, err := kgo.NewClient(append(kafkaloop.ShareClientOpts(0), kgo.SeedBrokers(e.c.ListenAddrs()...),
		kgo.ShareGroup(e.group), kgo.ConsumeTopics(topic), kafkaloop.ShareAckFailures(log, count))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan error, 1)
	go func() {
		first <- kafkaloop.RunShare(ctx, cl, h, kafkaloop.Options{Logger: log, DeadLetter: newTally().deadLetter})
	}()
	e.produce("late")
	<-firstStarted
	finish := func() { doneOnce.Do(func() { close(done) }) }
	e.member(h, kafkaloop.Options{Logger: log}, kafkaloop.ShareAckFailures(log, count))
	t.Cleanup(finish) // before the second member stops
	<-redelivered
	cancel() // the first member stops once its handler returns, and flushes the accept
	close(acceptNow)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	got := logs.find(t, "kafkaloop: share acknowledgements failed")
	if got["level"].String() != "WARN" || got["topic"].String() != topic || fmt.Sprint(got["partitions"].Any()) != "[0]" ||
		!strings.Contains(got["err"].String(), kerr.InvalidRecordState.Message) || got["failed_total"].Int64() != 1 {
		t.Errorf("logged %v, want a warning for partition 0 of %s with INVALID_RECORD_STATE, failed_total 1", got, topic)
	}
	// The count precedes the log line; the second member's accept waits
	// for the cleanup.
	mu.Lock()
	defer mu.Unlock()
	if len(counted) != 1 || !strings.Contains(counted[0], topic+"/0: "+kerr.InvalidRecordState.Message) {
		t.Errorf("counted %v, want the one refused accept", counted)
	}
}
