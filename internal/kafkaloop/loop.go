// Package kafkaloop is the at-least-once consume loop shared by the worker
// and the orchestrator. It is pipelined: polling goes on while handlers run,
// so records of different keys never wait for each other, whichever poll
// brought them.
//
//   - Records of one key (per partition) run one at a time, in offset
//     order; records of different keys run concurrently, at most
//     Options.Concurrency at once.
//   - Each partition keeps a commit point: the end of its contiguous prefix
//     of finished records. A record is marked for commit as soon as the
//     prefix reaches it (commits do not wait for a batch to end), and a
//     committed offset never passes an unfinished record.
//   - At most Options.MaxPollRecords records are held unfinished at once;
//     the loop polls only below that bound. A partition with a failing
//     record and a quarter of the bound unfinished (records of its key
//     waiting behind it, say), or with a very long run of records finished
//     behind an unfinished one, is paused until it recovers; its records
//     then stop counting against the bound (it cannot grow), so one stuck
//     partition does not stop the others. Memory stays bounded by the
//     bound plus what each stuck partition held when it was paused.
//   - A failing record is retried with a doubling backoff without holding a
//     concurrency slot; it blocks only the later records of its key and the
//     commit point of its partition. A handler error wrapped with Permanent,
//     or a record that has kept failing for longer than
//     Options.RetryBudget, is handed to Options.DeadLetter; once that
//     succeeds the record counts as finished.
//   - Rebalances: when partitions are revoked, the loop stops starting
//     their records, waits for their running handlers (at most
//     Options.MaxBatchTime), commits their finished prefix and forgets them;
//     their unfinished records go to the next owner from that commit. Lost
//     partitions are forgotten without a commit. A handler still running
//     when its partition is forgotten keeps its key busy in this process
//     until it returns, so a key is never handled twice at once here. The
//     failed records of a forgotten partition go to Options.Abandoned, so
//     that what a handler kept for their retry goes with the partition.
//   - Shutdown: when Run's context ends, nothing new starts (failing
//     records are not retried), running handlers finish (their context does
//     not end), the finished prefix is committed and Run returns.
//
// Delivery stays at-least-once: a record is marked only after its handler
// (or DeadLetter) succeeded. A record finished but not yet committed when
// its partition moves to another member (or the process dies) runs again
// there.
package kafkaloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Defaults of Options.
const (
	DefaultConcurrency    = 64
	DefaultMaxPollRecords = 2000
	DefaultRetryBackoff   = 20 * time.Millisecond
	// MaxRetryBackoff caps the doubling retry backoff.
	MaxRetryBackoff = time.Second
	// DefaultRetryBudget is how long a record may keep failing before it
	// is dead-lettered.
	DefaultRetryBudget = 5 * time.Minute
	// DefaultMaxBatchTime bounds how long a rebalance waits for the
	// handlers running on the partitions it revokes; it is well under
	// kgo's default rebalance timeout (60s). The session timeout does not
	// bound it: kgo goes on heartbeating while a revoke drains.
	DefaultMaxBatchTime = 20 * time.Second
)

// aheadFactor times the held bound is how many entries (finished or not)
// a partition may keep behind its commit point before it is paused. A
// finished entry keeps only its offset, not the record.
const aheadFactor = 16

// Handler processes one record. It returns nil once the record's effects
// are durable (the reply produced, the state persisted). A non-nil error
// means "try again": the loop retries the record with backoff and never
// marks it until it succeeds, except that an error wrapped with Permanent,
// or failures lasting longer than Options.RetryBudget, send the record to
// Options.DeadLetter. Records the handler knows can never succeed
// (malformed, unknown endpoint) may also be dead-lettered by the handler
// itself, which then returns nil.
type Handler func(ctx context.Context, r *kgo.Record) error

// Options tune Run. The zero value of every field means its default.
type Options struct {
	// Concurrency bounds the handlers running at once (default 64).
	Concurrency int
	// MaxPollRecords bounds the records held unfinished at once (polled
	// and not yet handled or dead-lettered), and so one poll; the loop
	// polls only while fewer are held, not counting those of partitions
	// paused because a record of theirs keeps failing (default 2000).
	MaxPollRecords int
	// Logger receives retry, dead-letter and commit messages (default
	// slog.Default()).
	Logger *slog.Logger
	// RetryBackoff is the first pause before retrying a failed record,
	// doubled on every failure of the same record up to MaxRetryBackoff
	// (default 20ms).
	RetryBackoff time.Duration
	// RetryBudget is how long a record may keep failing, from its first
	// failure, before it is handed to DeadLetter with the reason "retry
	// budget of <budget> exhausted after <n> tries: <last error>". 0 means
	// DefaultRetryBudget (5 minutes); a negative value means no budget
	// (retry until the handler succeeds). The budget is also spent while
	// the store or the broker is down: choose it longer than an outage you
	// would rather wait out than dead-letter.
	RetryBudget time.Duration
	// MaxBatchTime bounds how long a rebalance waits for the handlers
	// running on the partitions it revokes (default DefaultMaxBatchTime,
	// 20s; negative: no bound). Failing records of those partitions are not
	// retried during the wait. A handler still running when it passes is
	// not interrupted, but its record is left to the next owner.
	MaxBatchTime time.Duration
	// DeadLetter receives a record that will not be retried: its handler
	// returned a Permanent error (reason "permanent: <error>") or its
	// RetryBudget is exhausted. It runs with the handler's context (one
	// that does not end at shutdown). If it returns nil the record counts
	// as done and is marked; if it fails the record stays unfinished and is
	// retried (handler first) with backoff. Count dead-lettered records
	// here. If DeadLetter is nil, such records are logged and retried like
	// any other failure: a permanent error then stalls its key (and the
	// commits of its partition) until the handler succeeds. RunShare
	// requires it (ErrNoDeadLetter) and may call it several times for a
	// record (see "Share mode").
	DeadLetter func(ctx context.Context, r *kgo.Record, reason string) error
	// Abandoned (consumer groups only, Run), if set, is called for each
	// record that failed at least once and that the loop leaves unfinished
	// because its partition was revoked or lost (for a record whose handler
	// was running then, once the handler has failed): the partition's next
	// owner handles the record, so whatever the handler kept for its retry
	// (the worker's reply waiting to be sent again) is of no more use here.
	// It is called without the loop's locks held.
	Abandoned func(r *kgo.Record)
	// Revoked, if set, is called with the partitions a rebalance takes
	// away (revoked or lost) as soon as it does, before their running
	// handlers are waited for: state kept per owned partition must go
	// before another member can apply their records.
	Revoked func(partitions map[string][]int32)

	// DeliveryLimit (share mode only, RunShare) is the share group's
	// delivery count limit (share.delivery.count.limit): a record that
	// fails on its last delivery is dead-lettered and rejected instead of
	// released (default DefaultDeliveryLimit, the broker's default). It
	// must be the group's own (topics.ShareDeliveryLimit reads it): with a
	// higher one the broker archives records the loop releases.
	DeliveryLimit int
	// Released (share mode only, RunShare), if set, is called after a
	// record was released for redelivery (why: "failed" or "dead letter
	// failed"; never on its last delivery); the redelivery may go to
	// another member.
	Released func(r *kgo.Record, why string)
	// RenewLocks (share mode only, RunShare) keeps the acquisition locks of
	// a poll's records while they wait for a handler, run, or wait out a
	// release backoff: each is renewed (KIP-1222) every third of its lock
	// (at most every 10s), so a step that runs longer than the lock is not
	// redelivered to another member meanwhile, and a record's
	// AcquisitionDeadline (which the renewals do not move) no longer
	// bounds the loop's waits; the handler should not rely on it either.
	// Set it only for brokers that take renew acknowledgements
	// (topics.ProbeShareGroups' LockRenewal, Kafka 4.2 on); without it such
	// a record is redelivered while it runs.
	RenewLocks bool
}

func (o *Options) defaults() {
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxPollRecords <= 0 {
		o.MaxPollRecords = DefaultMaxPollRecords
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.RetryBudget == 0 {
		o.RetryBudget = DefaultRetryBudget
	}
	if o.MaxBatchTime == 0 {
		o.MaxBatchTime = DefaultMaxBatchTime
	}
}

// loops maps a client to the Run using it, for the rebalance callbacks
// installed by ClientOpts.
var loops sync.Map // *kgo.Client -> *loop

// WithoutConsumerOpts is opts without the consumer's and the group's
// options (kgo.ConsumerOpt, kgo.GroupOpt), for a client of the same
// configuration that consumes nothing: kgo refuses some of them (a share
// group's kgo.ShareAckCallback or kgo.ShareMaxRecords) on a client without
// a group, and a group option would make it join.
func WithoutConsumerOpts(opts []kgo.Opt) []kgo.Opt {
	out := make([]kgo.Opt, 0, len(opts))
	for _, opt := range opts {
		switch opt.(type) {
		case kgo.ConsumerOpt, kgo.GroupOpt:
		default:
			out = append(out, opt)
		}
	}
	return out
}

// ProducerOpts returns the producer settings for the framework's
// request/reply records (commands, replies, dead letters: a few hundred
// bytes each, produced synchronously). ClientOpts includes them; a client
// that only produces such records can use them alone.
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		// No linger: handlers produce synchronously before their record is
		// marked, so a linger could only add latency to every hop (kgo's
		// ProduceSync skips it anyway). Concurrent produces still share
		// requests: while up to 5 are in flight to a broker (idempotent
		// producer), new records wait and go out together, so batches grow
		// with the load.
		kgo.ProducerLinger(0),
		// No compression: a batch here holds one or a few small records,
		// which snappy hardly shrinks, while the broker decompresses every
		// compressed batch to validate it. On a CPU-bound machine that
		// runs the broker too, this costs throughput: measured with
		// sagabench's floor (6 hops per saga, real Kafka on 2 cores), the
		// broker's CPU per saga fell from 0.58-0.97 ms to 0.36-0.42 ms at
		// concurrency 64, and from 1.9-3.0 ms to 1.8-2.0 ms at concurrency
		// 1, with this process's own CPU per saga down by about a tenth.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}
}

// ClientOpts returns the kgo options Run relies on, with the producer
// settings of ProducerOpts (handlers may produce with the consuming
// client, as the worker does for its replies). Options given after these
// that set OnPartitionsRevoked or OnPartitionsLost replace the loop's own,
// which drain and forget revoked partitions: do not replace them.
//
// The consumer keeps kgo's defaults where they already suit both the
// latency-bound case (concurrency 1) and the throughput-bound one: a fetch
// returns as soon as one record is there (FetchMinBytes 1, so no hop waits
// for FetchMaxWait), and fetch sessions keep the requests of an idle
// consumer small.
func ClientOpts() []kgo.Opt {
	return append(ProducerOpts(),
		// Poll and the hand-over of the polled records to the loop's state
		// run between PollRecords and AllowRebalance, which Run calls as
		// soon as the records are queued (not after they are handled): a
		// revoke therefore never runs while records of the partitions it
		// takes away are half queued, and it never waits for handlers
		// except its own drain (OnPartitionsRevoked below).
		kgo.BlockRebalanceOnPoll(),
		// Only offsets the loop marked (the finished prefix of each
		// partition) are committed; they are marked as the prefix
		// advances, and committed every 500ms, so a restart or a
		// rebalance re-delivers at most about half a second of finished
		// work.
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(500*time.Millisecond),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
			l := loopOf(cl)
			if l != nil && l.o.Revoked != nil {
				l.o.Revoked(revoked)
			}
			if l != nil {
				l.drain(revoked)
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := cl.CommitMarkedOffsets(cctx); err != nil && l != nil {
				l.o.Logger.Warn("kafkaloop: commit on revoke failed", "err", err)
			}
			if l != nil {
				l.abandon(l.drop(revoked))
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
			if l := loopOf(cl); l != nil {
				if l.o.Revoked != nil {
					l.o.Revoked(lost)
				}
				l.abandon(l.drop(lost))
			}
		}),
	)
}

func loopOf(cl *kgo.Client) *loop {
	if v, ok := loops.Load(cl); ok {
		return v.(*loop)
	}
	return nil
}

// Run consumes with cl (built with ClientOpts) until ctx ends, then lets the
// running handlers finish, commits what is marked and returns nil. Records
// polled but not started by then are left to the next owner of their
// partition (close cl after Run: a later Run on the same client would not
// see them again). Run returns an error only if the client was closed under
// it, or if the group refuses its member for good: another process joined
// with its instance id (topics.ErrInstanceFenced) or the brokers refuse its
// session timeout (topics.ErrSessionTimeoutRefused). One client serves one
// Run at a time; close it with CloseMember.
func Run(ctx context.Context, cl *kgo.Client, h Handler, o Options) error {
	o.defaults()
	l := newLoop(ctx, cl, h, o)
	loops.Store(cl, l)
	defer loops.CompareAndDelete(cl, l)
	stopWake := context.AfterFunc(ctx, l.wake)
	defer stopWake()

	err := l.poll(ctx)
	l.shutdown()
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cerr := cl.CommitMarkedOffsets(cctx); cerr != nil {
		o.Logger.Warn("kafkaloop: final commit failed", "err", cerr)
	}
	return err
}

// poll feeds the loop until ctx ends or the client is closed.
func (l *loop) poll(ctx context.Context) error {
	for {
		n, ok := l.room(ctx)
		if !ok {
			return nil
		}
		fetches := l.cl.PollRecords(ctx, n)
		if fetches.IsClientClosed() {
			l.cl.AllowRebalance()
			return errors.New("kafkaloop: client closed")
		}
		var fatal error
		fetches.EachError(func(t string, p int32, err error) {
			if gerr := groupError(l.cl, err); gerr != nil {
				fatal = gerr
				return
			}
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				l.o.Logger.Warn("kafkaloop: fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		if recs := fetches.Records(); len(recs) > 0 {
			l.add(recs)
		}
		// The polled records are in the loop's state: a revoke may run.
		l.cl.AllowRebalance()
		if fatal != nil {
			// The partitions are gone already (kgo called
			// OnPartitionsLost before reporting it).
			l.o.Logger.Error("kafkaloop: stopping: the consumer group refuses this member", "err", fatal)
			return fatal
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// room waits until fewer than maxHeld records are held, not counting those
// of paused partitions, and returns how many the next poll may bring, or
// false once ctx has ended.
func (l *loop) room(ctx context.Context) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if ctx.Err() != nil {
			return 0, false
		}
		if n := l.maxHeld - l.countedLocked(); n > 0 {
			return min(l.o.MaxPollRecords, n), true
		}
		l.cond.Wait()
	}
}

// countedLocked is the number of held records that count against the
// bound: a paused partition cannot grow, so its records do not.
func (l *loop) countedLocked() int {
	n := l.held
	for _, p := range l.parts {
		if p.paused {
			n -= p.undone
		}
	}
	return n
}

// run handles e (its key's head) once and settles the outcome.
func (l *loop) run(e *entry) {
	defer l.wg.Done()
	r := e.rec
	err := l.h(l.hctx, r)
	if err == nil || IsRejected(err) {
		// A Rejected record was dead-lettered by its handler: done.
		l.finish(e)
		return
	}
	f := l.failed(e, time.Now())
	var reason string
	switch {
	case IsPermanent(err):
		reason = "permanent: " + err.Error()
	case l.o.RetryBudget > 0 && f.last.Sub(f.first) >= l.o.RetryBudget:
		reason = fmt.Sprintf("retry budget of %v exhausted after %d tries: %v", l.o.RetryBudget, f.tries, err)
	}
	log := l.o.Logger.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "tries", f.tries, "err", err)
	switch {
	case reason == "":
		log.Warn("kafkaloop: record failed, retrying")
	case l.o.DeadLetter == nil:
		log.Error("kafkaloop: record cannot succeed but no dead letter is configured, retrying", "reason", reason)
	default:
		if dlErr := l.o.DeadLetter(l.hctx, r, reason); dlErr != nil {
			log.Error("kafkaloop: dead letter failed, retrying the record", "reason", reason, "dead_letter_err", dlErr)
			break
		}
		log.Warn("kafkaloop: record dead-lettered", "reason", reason)
		l.finish(e)
		return
	}
	l.retryLater(e)
}

// backoff is the pause after the tries-th failure of a record.
func (l *loop) backoff(tries int) time.Duration {
	d := l.o.RetryBackoff
	for i := 1; i < tries && d < MaxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, MaxRetryBackoff)
}
