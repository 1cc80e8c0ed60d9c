// Package kafkaloop is the at-least-once consume loop shared by the worker
// and the orchestrator: poll a batch with rebalances blocked, run the handler
// on every record (records with the same key in order, different keys
// concurrently), mark only records whose effects are durable, commit marked
// offsets on revoke and on shutdown, then allow the rebalance.
//
// No single record can stall a consumer:
//
//   - A handler error wrapped with Permanent, or a record that has kept
//     failing for longer than Options.RetryBudget, is handed to
//     Options.DeadLetter; once that succeeds the record counts as done.
//   - A polled batch holds rebalances for at most Options.MaxBatchTime, and
//     for less when the group wants to rebalance: records still failing
//     then (and the later records of their keys) are left unfinished, the
//     finished prefix of each partition is marked, and each partition with
//     an unfinished record is rewound to its first unfinished record, which
//     the next poll delivers again. A record's retry budget and backoff are
//     carried from batch to batch.
//
// Delivery stays at-least-once: a record is marked only after its handler
// (or DeadLetter) succeeded, and committed offsets never pass an
// unfinished record. Records that finished behind an unfinished one are
// not run again by this consumer after the rewind (it remembers them), but
// a record finished and not yet committed when its partition moves to
// another member runs again there.
package kafkaloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
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
	// DefaultMaxBatchTime bounds how long a polled batch blocks
	// rebalances; it is well under kgo's default rebalance timeout (60s)
	// and session timeout (45s).
	DefaultMaxBatchTime = 20 * time.Second
)

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
	// Concurrency bounds the records handled at once (default 64).
	Concurrency int
	// MaxPollRecords bounds one poll (default 2000).
	MaxPollRecords int
	// Logger receives retry, dead-letter and commit messages (default
	// slog.Default()).
	Logger *slog.Logger
	// RetryBackoff is the first pause before retrying a failed record,
	// doubled on every failure of the same record up to MaxRetryBackoff
	// (default 20ms).
	RetryBackoff time.Duration
	// RetryBudget is how long a record may keep failing, from its first
	// failure and across batches, before it is handed to DeadLetter with
	// the reason "retry budget of <budget> exhausted after <n> tries:
	// <last error>". 0 means DefaultRetryBudget (5 minutes); a negative
	// value means no budget (retry until the handler succeeds). The budget
	// is also spent while the store or the broker is down: choose it
	// longer than an outage you would rather wait out than dead-letter.
	RetryBudget time.Duration
	// MaxBatchTime bounds how long a polled batch blocks rebalances
	// (default DefaultMaxBatchTime, 20s; negative: no bound). When it
	// passes, failing records stop being retried in this batch, records
	// not yet started are not started, and running handlers finish (a slow
	// handler is not interrupted); the unfinished records are polled again
	// by the next batch. A rebalance that the batch blocks ends the batch
	// the same way, at once, when the client was built with ClientOpts.
	MaxBatchTime time.Duration
	// DeadLetter receives a record that will not be retried: its handler
	// returned a Permanent error (reason "permanent: <error>") or its
	// RetryBudget is exhausted. It runs with the handler's context (one
	// that does not end at shutdown). If it returns nil the record counts
	// as done and is marked; if it fails the record stays unfinished and is
	// retried (handler first) with backoff. Count dead-lettered records
	// here. If DeadLetter is nil, such records are logged and retried like
	// any other failure: a permanent error then stalls its key (and the
	// commits of its partition) until the handler succeeds.
	DeadLetter func(ctx context.Context, r *kgo.Record, reason string) error
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

// loops maps a client to the state of the Run using it, for the rebalance
// callbacks installed by ClientOpts.
var loops sync.Map // *kgo.Client -> *tracker

// ClientOpts returns the kgo options Run relies on: no producer linger,
// rebalances blocked while a polled batch is processed, offsets committed
// only for marked records, marked offsets committed when partitions are
// revoked, and the callbacks that let Run end a batch early when a
// rebalance waits for it and forget the retry state of partitions it no
// longer owns. Options given after these that set OnPartitionsRevoked,
// OnPartitionsLost or OnPartitionsCallbackBlocked replace them.
func ClientOpts() []kgo.Opt {
	return []kgo.Opt{
		// Handlers produce synchronously before a batch can be marked, so a
		// linger only adds latency: concurrent records still share produce
		// requests while one is in flight.
		kgo.ProducerLinger(0),
		kgo.BlockRebalanceOnPoll(),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(500 * time.Millisecond),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = cl.CommitMarkedOffsets(ctx)
			if t := trackerOf(cl); t != nil {
				t.forget(revoked)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
			if t := trackerOf(cl); t != nil {
				t.forget(lost)
			}
		}),
		kgo.OnPartitionsCallbackBlocked(func(_ context.Context, cl *kgo.Client) {
			if t := trackerOf(cl); t != nil {
				t.interrupt()
			}
		}),
	}
}

func trackerOf(cl *kgo.Client) *tracker {
	if v, ok := loops.Load(cl); ok {
		return v.(*tracker)
	}
	return nil
}

// Run consumes with cl (built with ClientOpts) until ctx ends, then finishes
// the in-flight batch, commits what is marked and returns nil. It returns an
// error only if the client was closed under it. One client serves one Run
// at a time.
func Run(ctx context.Context, cl *kgo.Client, h Handler, o Options) error {
	o.defaults()
	l := &loop{cl: cl, h: h, o: o, sem: make(chan struct{}, o.Concurrency), tr: newTracker(4*o.MaxPollRecords + 1024)}
	loops.Store(cl, l.tr)
	defer loops.CompareAndDelete(cl, l.tr)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cl.CommitMarkedOffsets(cctx); err != nil {
			o.Logger.Warn("kafkaloop: final commit failed", "err", err)
		}
	}()
	for {
		fetches := cl.PollRecords(ctx, o.MaxPollRecords)
		if fetches.IsClientClosed() {
			return errors.New("kafkaloop: client closed")
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				o.Logger.Warn("kafkaloop: fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		if recs := fetches.Records(); len(recs) > 0 {
			done := l.processBatch(ctx, recs)
			l.finish(ctx, recs, done)
		}
		cl.AllowRebalance()
		l.tr.allowed()
		if ctx.Err() != nil {
			return nil
		}
	}
}

type loop struct {
	cl  *kgo.Client
	h   Handler
	o   Options
	sem chan struct{}
	tr  *tracker
}

// processBatch runs h on recs; records sharing topic, partition and key run
// in order. It returns which records finished. It stops starting records
// and retrying failed ones when ctx ends, when MaxBatchTime passes or when
// a rebalance waits for the batch.
func (l *loop) processBatch(ctx context.Context, recs []*kgo.Record) []bool {
	type group struct{ idx []int }
	done := make([]bool, len(recs))
	groups := make(map[string]*group)
	var order []*group
	for i, r := range recs {
		if l.tr.doneAhead(r) {
			done[i] = true // finished in an earlier batch, before a rewind
			continue
		}
		k := r.Topic + "\x00" + strconv.Itoa(int(r.Partition)) + "\x00" + string(r.Key)
		g := groups[k]
		if g == nil {
			g = &group{}
			groups[k] = g
			order = append(order, g)
		}
		g.idx = append(g.idx, i)
	}
	if len(order) == 0 {
		return done
	}
	// stop closes when the batch must end: MaxBatchTime passed or a
	// rebalance waits.
	b := l.tr.startBatch()
	defer l.tr.endBatch()
	if l.o.MaxBatchTime > 0 {
		t := time.AfterFunc(l.o.MaxBatchTime, b.close)
		defer t.Stop()
	}
	stop := b.c
	// Handlers run to completion even when ctx ends: a shutdown finishes
	// in-flight work instead of abandoning it half way. Records not yet
	// started when ctx ends are left unmarked, for the next owner of the
	// partition.
	hctx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
launch:
	for _, g := range order {
		select {
		case l.sem <- struct{}{}:
		case <-stop:
			break launch
		case <-ctx.Done():
			break launch
		}
		wg.Add(1)
		go func(g *group) {
			defer wg.Done()
			defer func() { <-l.sem }()
			for _, i := range g.idx {
				if ctx.Err() != nil || closed(stop) || !l.runOne(ctx, hctx, stop, recs[i]) {
					return
				}
				done[i] = true
			}
		}(g)
	}
	wg.Wait()
	return done
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// runOne runs h on r until it succeeds or is dead-lettered (true), or
// until ctx ends or stop closes between tries (false).
func (l *loop) runOne(ctx, hctx context.Context, stop <-chan struct{}, r *kgo.Record) bool {
	k := recKey{r.Topic, r.Partition, r.Offset}
	for {
		if f, ok := l.tr.failure(k); ok {
			// Failed before, in this batch or an earlier one: wait out its
			// backoff, unless the batch ends first.
			if !wait(ctx, stop, time.Until(f.last.Add(l.backoff(f.tries)))) {
				return false
			}
		}
		err := l.h(hctx, r)
		if err == nil {
			l.tr.clear(k)
			return true
		}
		f := l.tr.fail(k, time.Now())
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
			if dlErr := l.o.DeadLetter(hctx, r, reason); dlErr != nil {
				log.Error("kafkaloop: dead letter failed, retrying the record", "reason", reason, "dead_letter_err", dlErr)
				continue
			}
			log.Warn("kafkaloop: record dead-lettered", "reason", reason)
			l.tr.clear(k)
			return true
		}
	}
}

// backoff is the pause after the tries-th failure of a record.
func (l *loop) backoff(tries int) time.Duration {
	d := l.o.RetryBackoff
	for i := 1; i < tries && d < MaxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, MaxRetryBackoff)
}

// wait pauses for d; it returns false at once if ctx has ended or stop is
// closed, or when either happens first.
func wait(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	if ctx.Err() != nil || closed(stop) {
		return false
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

// finish marks, per partition, the records up to the first unfinished
// one, so a committed offset never skips an unprocessed record, and
// rewinds each partition with an unfinished record to it, so the next poll
// delivers it again (not at shutdown: the next owner starts from the
// commit).
func (l *loop) finish(ctx context.Context, recs []*kgo.Record, done []bool) {
	blocked := make(map[tp]bool)
	next := make(map[tp]int64) // per partition, the end of the marked prefix
	rewind := make(map[string]map[int32]kgo.EpochOffset)
	var mark []*kgo.Record
	for i, r := range recs {
		k := tp{r.Topic, r.Partition}
		switch {
		case blocked[k]:
			if done[i] {
				l.tr.setDoneAhead(r)
			}
		case !done[i]:
			blocked[k] = true
			next[k] = r.Offset
			if rewind[r.Topic] == nil {
				rewind[r.Topic] = make(map[int32]kgo.EpochOffset)
			}
			rewind[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
		default:
			mark = append(mark, r)
			next[k] = r.Offset + 1
		}
	}
	l.cl.MarkCommitRecords(mark...)
	l.tr.advance(next)
	if len(rewind) > 0 && ctx.Err() == nil {
		// Called before AllowRebalance, as kgo requires of a group
		// consumer: no revoke can run in between. It drops what the
		// client buffered for these partitions and marks the rewound
		// offset, which equals the end of the marked prefix.
		l.cl.SetOffsets(rewind)
	}
}
