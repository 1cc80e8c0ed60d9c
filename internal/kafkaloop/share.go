package kafkaloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/wait"
)

// Share mode: RunShare consumes as a member of a Kafka share group
// (KIP-932, built with ShareClientOpts). The broker hands each record to
// one member at a time under an acquisition lock, and every record is
// acknowledged on its own:
//
//   - accept once its handler returned nil (its effects are durable);
//   - release when the handler failed for a reason that may pass (the
//     store or the broker unavailable, another instance busy with the same
//     saga): the broker redelivers it, possibly to another member, and
//     counts the delivery. The release waits a backoff that doubles with
//     the record's delivery count, so a redelivery does not come back at
//     once;
//   - reject when it can never be processed: the handler returned a
//     Permanent error (the record is first handed to Options.DeadLetter
//     with the reason "permanent: <error>"), or a Rejected one (the handler
//     dead-lettered it itself), or it failed on its last delivery
//     (Options.DeliveryLimit, the group's share.delivery.count.limit; the
//     reason is "delivery count limit of <n> reached: <error>"), so that a
//     record that keeps failing lands in the dead-letter topic instead of
//     being archived by the broker without a trace.
//
// No record is released on its last delivery: the broker archives a
// record released (or whose lock ends) once its delivery count has
// reached the limit, and nothing would be left of it. Before the last
// delivery a dead letter that fails is tried three times, then the record
// is released (it comes back, and its dead letter is tried again). On the
// last one the record is held (its lock renewed with Options.RenewLocks)
// and its dead letter retried, with a backoff growing to
// maxDeadLetterBackoff and an error logged each time, until it succeeds;
// meanwhile the next poll waits. Only a shutdown ends that
// wait: after shutdownDeadLetterTries more tries the record is rejected,
// and logged at Error with its topic, partition, offset and key as lost to
// the broker's archive. Without RenewLocks the lock of a record held that
// long ends and the broker archives it meanwhile; its dead letter, still
// retried, keeps it.
//
// There is no order: records of one key may reach several members at
// once, and duplicates are the norm; handlers must fence what they change.
// Within one poll, records of one key run one after the other; records of
// different keys run concurrently, at most Options.Concurrency at once.
//
// A poll's records are all acknowledged before the next poll (kgo accepts
// whatever a poll left unacknowledged when it polls again), so a slow record
// holds back the next poll; Options.MaxPollRecords (which ShareClientOpts
// also sends as the fetch's record limit) bounds a poll. With
// Options.RenewLocks the loop renews the acquisition lock of every record
// of the poll in hand every third of the lock until it is acknowledged, so
// a slow handler (or a long queue behind Options.Concurrency) keeps its
// records; without it a record whose handler runs longer than the lock is
// redelivered to another member meanwhile. A process that dies stops
// renewing: its records come back after one lock.
//
// Shutdown: when ctx ends, the loop polls no more; every record of the
// poll in hand runs (its handler's context does not end) and is
// acknowledged, the acknowledgements are flushed and RunShare returns.
// None is released unstarted: the broker counts a delivery when it hands a
// record out, so a release would spend one of a record that never ran, and
// on its last delivery the broker would archive it. Options.MaxPollRecords
// (the fetch's limit, see ShareClientOpts) bounds that work: at most a poll
// of records, Options.Concurrency at a time. Close the client after it:
// closing leaves the group. A process that dies (kill -9) leaves its
// records locked until the acquisition lock times out, or until the broker
// sees its connection close; the broker then redelivers them.
//
// Failed acknowledgements: kgo retries an acknowledgement that may pass
// and drops one that cannot (the broker refused it, typically because the
// record's lock had ended) without a word. A client built with
// ShareAckFailures logs each at Warn and counts it: a lost accept means a
// redelivery, a lost renewal a record another member may run meanwhile.
//
// Options.RetryBudget and MaxBatchTime do not apply to share mode: the
// delivery limit bounds the retries, and there are no rebalances to wait
// for.

// DefaultDeliveryLimit is Options.DeliveryLimit's default, the broker's
// default group.share.delivery.count.limit.
const DefaultDeliveryLimit = 5

// DefaultShareMaxPollRecords is the default poll size of share mode: a
// poll's records are all acknowledged before the next poll, so it is kept
// near the concurrency.
const DefaultShareMaxPollRecords = 256

// ackFlushTimeout bounds the final flush of acknowledgements.
const ackFlushTimeout = 10 * time.Second

// maxDeadLetterBackoff caps the pause between the tries of the dead letter
// of a record held on its last delivery.
const maxDeadLetterBackoff = 10 * time.Second

// shutdownDeadLetterTries is how many more times, once RunShare's context
// has ended, the dead letter of a record held on its last delivery is
// tried before the record is given up.
const shutdownDeadLetterTries = 3

// ErrNoDeadLetter: RunShare needs Options.DeadLetter, where records go that
// cannot be processed, or fail on their last delivery.
var ErrNoDeadLetter = errors.New("kafkaloop: share mode needs Options.DeadLetter: without it a record failing on its last delivery would be archived by the broker")

// RejectedError marks a handler error for a record the handler has already
// dead-lettered (with its own reason): share mode rejects it without
// calling Options.DeadLetter; the classic loop counts it as done. Build it
// with Rejected.
type RejectedError struct {
	// Reason says why the record was dead-lettered.
	Reason string
}

// Error returns "rejected: <reason>".
func (e *RejectedError) Error() string { return "rejected: " + e.Reason }

// Rejected returns a *RejectedError with reason.
func Rejected(reason string) error { return &RejectedError{Reason: reason} }

// IsRejected reports whether err, or an error it wraps, is a
// *RejectedError.
func IsRejected(err error) bool {
	var re *RejectedError
	return errors.As(err, &re)
}

// ShareClientOpts returns the kgo options RunShare relies on for the share
// group: the producer settings of ProducerOpts (handlers may produce with
// the consuming client) and the fetch's record limit, maxPollRecords (0:
// DefaultShareMaxPollRecords; give RunShare the same Options.MaxPollRecords).
// The limit is strict and the client fetches only when polled
// (kgo.ShareMaxRecordsStrict): every record the broker has locked for this
// member is in the poll in hand, whose locks RunShare renews, none waits in
// the client's buffer while its lock runs out. The cost: no fetch overlaps
// the handling of a poll, and with the topic's partitions led by several
// brokers a poll asks them one at a time (each may hold it up to the
// fetch's max wait when it has nothing). Add kgo.ShareGroup and
// kgo.ConsumeTopics.
func ShareClientOpts(maxPollRecords int) []kgo.Opt {
	if maxPollRecords <= 0 {
		maxPollRecords = DefaultShareMaxPollRecords
	}
	return append(ProducerOpts(), kgo.ShareMaxRecords(int32(min(maxPollRecords, 1<<20))), kgo.ShareMaxRecordsStrict())
}

// ShareAckFailures returns the kgo option (a kgo.ShareAckCallback) that
// makes failed share acknowledgements visible; without a callback kgo
// retries the retryable ones and drops the others silently. A lost accept,
// release or reject leaves its record to the broker, which delivers it
// again once its acquisition lock ends (a duplicate: handlers fence it, but
// an operator should see why); a lost renewal (Options.RenewLocks) ends the
// lock while the handler still runs, so another member may run the same
// record meanwhile.
//
// Each acknowledge result that failed is logged at Warn on log, one line
// per topic and error of a result set (kgo calls back once per acknowledge
// request, one result per partition): the topic, the partitions, the
// error, what it means for the records, and failed_total, the failed
// results of the client so far. count, if not nil, is called once per
// failed result. kgo reports neither the offsets nor the types of the
// acknowledgements of a result, so the line cannot name the records nor
// tell a renewal from a final acknowledgement. A result set that is all
// successes costs one pass over it, nothing allocated.
//
// Give it to the share-group client (ShareClientOpts' client); a
// kgo.ShareAckCallback given after it replaces it.
func ShareAckFailures(log *slog.Logger, count func(topic string, partition int32, err error)) kgo.Opt {
	return kgo.ShareAckCallback(shareAckFailures(log, count))
}

// shareAckFailures is ShareAckFailures' callback.
func shareAckFailures(log *slog.Logger, count func(topic string, partition int32, err error)) func(*kgo.Client, kgo.ShareAckResults) {
	if log == nil {
		log = slog.Default()
	}
	var total atomic.Int64
	return func(_ *kgo.Client, rs kgo.ShareAckResults) {
		if rs.Ok() {
			return
		}
		type failure struct {
			topic      string
			err        error
			msg        string
			partitions []int32
		}
		var fs []failure
		n := int64(0)
		for _, r := range rs {
			if r.Err == nil {
				continue
			}
			n++
			if count != nil {
				count(r.Topic, r.Partition, r.Err)
			}
			msg := r.Err.Error()
			i := slices.IndexFunc(fs, func(f failure) bool { return f.topic == r.Topic && f.msg == msg })
			if i < 0 {
				fs = append(fs, failure{topic: r.Topic, err: r.Err, msg: msg})
				i = len(fs) - 1
			}
			fs[i].partitions = append(fs[i].partitions, r.Partition)
		}
		sum := total.Add(n)
		for _, f := range fs {
			log.Warn("kafkaloop: share acknowledgements failed", "topic", f.topic, "partitions", f.partitions,
				"err", f.err, "effect", shareAckFailureEffect(f.err), "failed_total", sum)
		}
	}
}

// shareAckFailureEffect says what a failed acknowledgement means for its
// records.
func shareAckFailureEffect(err error) string {
	if errors.Is(err, kerr.InvalidRecordState) {
		return "the broker no longer holds the records for this member (their acquisition lock ended, or they were acknowledged already): " +
			"after a lost accept, release or reject the record is delivered again; after a lost renewal another member may get it while its handler still runs"
	}
	return "not delivered: the broker delivers the records again once their acquisition locks end, and a lost renewal lets the lock end while the handler runs"
}

// RunShare consumes with cl, a share-group client (see ShareClientOpts),
// until ctx ends; see "Share mode" above. It returns nil after a shutdown,
// ErrNoDeadLetter at once without Options.DeadLetter, and an error
// otherwise only if the client was closed under it. One client serves one
// RunShare at a time.
func RunShare(ctx context.Context, cl *kgo.Client, h Handler, o Options) error {
	if o.DeadLetter == nil {
		return ErrNoDeadLetter
	}
	if o.MaxPollRecords <= 0 {
		o.MaxPollRecords = DefaultShareMaxPollRecords
	}
	o.defaults()
	if o.DeliveryLimit <= 0 {
		o.DeliveryLimit = DefaultDeliveryLimit
	}
	s := &shareLoop{cl: cl, h: h, o: o, hctx: context.WithoutCancel(ctx), sem: make(chan struct{}, o.Concurrency)}
	defer s.flush()
	for ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, o.MaxPollRecords)
		if fetches.IsClientClosed() {
			return errors.New("kafkaloop: client closed")
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				o.Logger.Warn("kafkaloop: share fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		if recs := fetches.Records(); len(recs) > 0 {
			s.batch(ctx, recs)
		}
	}
	return nil
}

type shareLoop struct {
	cl   *kgo.Client
	h    Handler
	o    Options
	hctx context.Context
	sem  chan struct{}
}

// flush sends the acknowledgements still queued.
func (s *shareLoop) flush() {
	fctx, cancel := context.WithTimeout(context.Background(), ackFlushTimeout)
	defer cancel()
	if err := s.cl.FlushAcks(fctx); err != nil {
		s.o.Logger.Warn("kafkaloop: flushing share acknowledgements failed", "err", err)
	}
}

// batch handles and acknowledges every record of one poll, records of one
// key in order, and returns when all are acknowledged.
func (s *shareLoop) batch(ctx context.Context, recs []*kgo.Record) {
	byKey := make(map[string][]*kgo.Record)
	var keys []string
	for _, r := range recs {
		k := string(r.Key)
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func(rs []*kgo.Record) {
			defer wg.Done()
			for _, r := range rs {
				s.one(ctx, r)
			}
		}(byKey[k])
	}
	if s.o.RenewLocks {
		defer s.renew(recs)()
	}
	wg.Wait()
}

// Bounds of the renewal interval. A renewal is a ShareAcknowledge; while a
// poll is handled the client sends no fetch, so the renewals are also what
// keeps its share-session connection from idling out (kgo closes an idle
// connection after ConnIdleTimeout, 30s by default), hence the cap.
const (
	minRenewEvery = 300 * time.Millisecond
	maxRenewEvery = 10 * time.Second
)

// renew renews the acquisition locks of recs until the returned stop is
// called: first after a third of the shortest lock left among them, then
// every third of the longest (a renewed lock is the group's whole lock,
// which is at least that), at most every maxRenewEvery. A record already
// acknowledged ignores the renewal (kgo's Ack keeps the first final
// status), and so does one whose previous renewal the broker has not
// confirmed yet.
func (s *shareLoop) renew(recs []*kgo.Record) (stop func()) {
	now := time.Now()
	shortest, longest := time.Duration(math.MaxInt64), time.Duration(0)
	for _, r := range recs {
		left := r.AcquisitionDeadline().Sub(now)
		shortest, longest = min(shortest, left), max(longest, left)
	}
	every := func(lock time.Duration) time.Duration { return min(max(lock/3, minRenewEvery), maxRenewEvery) }
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTimer(every(shortest))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			t.Reset(every(longest))
			for _, r := range recs {
				r.Ack(kgo.AckRenew)
			}
			// Send them now: with no fetch in flight (none is while a
			// poll is handled) kgo sends acknowledgements on a 1s timer,
			// which a short lock cannot spare. FlushAcks signals the send
			// at once, then waits for every acknowledgement of the client
			// (other records' too): bound the wait by the next round.
			fctx, cancelFlush := context.WithTimeout(ctx, every(longest))
			_ = s.cl.FlushAcks(fctx)
			cancelFlush()
		}
	}()
	return func() {
		cancel()
		<-stopped
	}
}

// one handles r and acknowledges it. It runs r even once ctx has ended
// (see "Shutdown" above).
func (s *shareLoop) one(ctx context.Context, r *kgo.Record) {
	s.sem <- struct{}{}
	err := s.h(s.hctx, r)
	<-s.sem
	s.settle(ctx, r, err)
}

// settle acknowledges r after its handler returned err.
func (s *shareLoop) settle(ctx context.Context, r *kgo.Record, err error) {
	if err == nil {
		r.Ack(kgo.AckAccept)
		return
	}
	n := int(r.DeliveryCount())
	last := n >= s.o.DeliveryLimit
	log := s.o.Logger.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "delivery", n, "err", err)
	if IsRejected(err) {
		log.Warn("kafkaloop: record rejected (dead-lettered by its handler)")
		r.Ack(kgo.AckReject)
		return
	}
	var reason string
	switch {
	case IsPermanent(err):
		reason = "permanent: " + err.Error()
	case last:
		reason = fmt.Sprintf("delivery count limit of %d reached: %v", s.o.DeliveryLimit, err)
	}
	if reason == "" {
		log.Warn("kafkaloop: record failed, releasing it for redelivery")
		s.wait(ctx, r, s.backoff(n))
		s.release(r, "failed")
		return
	}
	s.deadLetter(ctx, r, reason, last, log)
}

// deadLetter hands r to Options.DeadLetter with reason and rejects it once
// that succeeded. A dead letter that keeps failing releases r for a later
// delivery, unless this is its last one (see "No record is released on
// its last delivery" above).
func (s *shareLoop) deadLetter(ctx context.Context, r *kgo.Record, reason string, last bool, log *slog.Logger) {
	afterShutdown := 0
	for try := 1; ; try++ {
		dlErr := s.o.DeadLetter(s.hctx, r, reason)
		if dlErr == nil {
			log.Warn("kafkaloop: record dead-lettered and rejected", "reason", reason)
			r.Ack(kgo.AckReject)
			return
		}
		if !last {
			// The dead letter is the record's last chance on this
			// delivery: try it a few times within the record's lock
			// before giving the record back.
			if try < 3 && s.wait(ctx, r, s.backoff(try)) {
				continue
			}
			log.Error("kafkaloop: dead letter failed, releasing the record", "reason", reason, "dead_letter_err", dlErr)
			s.release(r, "dead letter failed")
			return
		}
		// Releasing it would have the broker archive it: hold it and try
		// the dead letter again.
		d := s.deadLetterBackoff(try)
		if ctx.Err() != nil {
			if afterShutdown++; afterShutdown > shutdownDeadLetterTries {
				log.Error("kafkaloop: LOST: shutting down, the dead letter of a record on its last delivery failed; the broker archives the record",
					"key", string(r.Key), "reason", reason, "dead_letter_err", dlErr, "tries", try)
				r.Ack(kgo.AckReject)
				return
			}
			d = s.backoff(afterShutdown)
		}
		log.Error("kafkaloop: dead letter of a record on its last delivery failed, holding the record to try again",
			"reason", reason, "dead_letter_err", dlErr, "tries", try, "retry_in", d)
		t := time.NewTimer(d)
		if ctx.Err() != nil {
			<-t.C
			continue
		}
		select {
		case <-t.C:
		case <-ctx.Done(): // try once more at once, then at the shutdown's pace
			t.Stop()
		}
	}
}

// deadLetterBackoff is the pause after the try-th failed dead letter of a
// record held on its last delivery: RetryBackoff doubled per try, up to
// maxDeadLetterBackoff.
func (s *shareLoop) deadLetterBackoff(try int) time.Duration {
	d := s.o.RetryBackoff
	for i := 1; i < try && d < maxDeadLetterBackoff; i++ {
		d *= 2
	}
	return min(d, maxDeadLetterBackoff)
}

// release gives r back to the broker for redelivery.
func (s *shareLoop) release(r *kgo.Record, why string) {
	r.Ack(kgo.AckRelease)
	if s.o.Released != nil {
		s.o.Released(r, why)
	}
}

// backoff is the pause before releasing a record that failed on its n-th
// delivery.
func (s *shareLoop) backoff(n int) time.Duration {
	d := s.o.RetryBackoff
	for i := 1; i < n && d < MaxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, MaxRetryBackoff)
}

// wait sleeps d, less if r's acquisition lock would end first (with a
// second to spare) or ctx ends; it reports whether it slept in full. With
// RenewLocks the lock lasts while the loop holds the record (the record's
// AcquisitionDeadline, set at the fetch, does not move with the renewals).
func (s *shareLoop) wait(ctx context.Context, r *kgo.Record, d time.Duration) bool {
	if dl := r.AcquisitionDeadline(); !dl.IsZero() && !s.o.RenewLocks {
		d = min(d, time.Until(dl)-time.Second)
	}
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// WaitShareMember waits until the share group has a member with clientID
// that is assigned topic (the member has joined and may be handed
// records), polling every interval, or ctx ends. Give each client of the
// group its own client id (kgo.ClientID) to tell them apart.
func WaitShareMember(ctx context.Context, cl *kgo.Client, group, clientID, topic string, interval time.Duration) error {
	adm := kadm.NewClient(cl)
	for {
		gs, err := adm.DescribeShareGroups(ctx, group)
		if err == nil {
			for _, m := range gs[group].Members {
				if m.ClientID == clientID && len(m.Assignment[topic]) > 0 {
					return nil
				}
			}
		}
		if !wait.Sleep(ctx, interval) {
			return ctx.Err()
		}
	}
}
