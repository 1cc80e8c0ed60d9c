package worker

// Share groups (WithGroupType(topics.GroupShare)): the worker joins the
// share group "stacksaga.<service>.worker.share" (WithGroup overrides it)
// instead of a consumer group, so that any number of instances work one
// command topic whatever its partition count. Each command is acknowledged
// on its own:
//
//   - accepted once its reply is durable (or the guard suppressed it);
//   - released when it failed for a reason that may pass (the guard's store
//     or the callback topic's broker unavailable, a STRICT lease held by
//     another instance): the broker redelivers it, possibly to another
//     instance;
//   - rejected, after it was dead-lettered with its reason, when it can
//     never be processed (not an envelope, not a command, an unknown
//     endpoint, oversize, a reply that can never be produced, a store that
//     refuses it), and when it failed on its last delivery
//     (topics.ShareSettings.DeliveryLimit, ReasonGivenUp "delivery count
//     limit of <n> reached").
//
// Run gives the group its configs when it starts (topics.ConfigureShareGroup:
// share.auto.offset.reset=earliest, the delivery limit and, if set, the
// acquisition lock). With WithoutProvision a failure to do so is a warning,
// and the worker reads the group's delivery limit instead
// (topics.ShareDeliveryLimit; failing that, Run fails): a command must be
// dead-lettered on the delivery the broker treats as its last. A command
// is never released on its last delivery (the broker would archive it): if
// its dead letter cannot be produced, it is held and the dead letter tried
// again. At shutdown the commands already fetched (one poll, twice the
// concurrency) run before Run returns, rather than being released, which
// would spend one of their deliveries; a killed instance's commands come
// back after the acquisition lock. Commands of one saga may run on several instances at
// once and duplicates are the norm: use the STRICT guard (writeprotect),
// which runs a step once even when two instances get it at the same moment.
//
// An acknowledgement that fails (the broker refuses an accept that comes
// after the command's acquisition lock ended, a renewal that cannot be
// delivered) is logged at WARN ("kafkaloop: share acknowledgements
// failed", with the topic, the partitions and the error) and, with
// WithMeterProvider, counted (telemetry.MetricKafkaShareAckFailures): the
// command is delivered again, or, for a lost renewal, may run on another
// instance meanwhile. A kgo.ShareAckCallback among WithKafkaOpts replaces
// this.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/kafkaloop"
	"github.com/stacksaga-go/stacksaga/topics"
)

// shareMemberWait bounds how long Run waits to see its share-group member
// assigned before it reports Running anyway.
const shareMemberWait = 30 * time.Second

// GroupType returns how the worker consumes its command topic.
func (w *Worker) GroupType() topics.GroupType { return w.cfg.groupType }

// runShare is Run's consume part for a share group.
func (w *Worker) runShare(ctx context.Context) error {
	clientID := "stacksaga-worker-" + w.service + "-" + uuid.NewString()[:8]
	opts := w.baseOpts()
	opts = append(opts, kgo.ClientID(clientID), kgo.ShareGroup(w.cfg.group), kgo.ConsumeTopics(w.topic))
	maxPoll := w.cfg.concurrency * 2
	opts = append(opts, kafkaloop.ShareClientOpts(maxPoll)...)
	opts = append(opts, kafkaloop.ShareAckFailures(w.log, w.tel.shareAckFailed))
	if w.tel.kafkaOpt != nil {
		opts = append(opts, w.tel.kafkaOpt) // as the consumer-group client (clientOpts)
	}
	cl, err := kgo.NewClient(append(opts, w.cfg.kopts...)...)
	if err != nil {
		return fmt.Errorf("worker: kafka client: %w", err)
	}
	defer cl.Close()
	support, err := topics.ProbeShareGroups(ctx, cl)
	if err != nil {
		return fmt.Errorf("worker: group type %s: %w", topics.GroupShare, err)
	}
	if !support.LockRenewal {
		w.log.Warn("worker: share-group record locks cannot be renewed (KIP-1222): a step running longer than the record lock is delivered again meanwhile, and a poll held longer than the client's connection idle timeout (30s by default) loses its records", "group", w.cfg.group, "reason", support.NoLockRenewal)
	}
	limit := w.cfg.share.Limit()
	if err := topics.ConfigureShareGroup(ctx, cl, w.cfg.group, w.cfg.share); err != nil {
		if !w.cfg.noProvision {
			return fmt.Errorf("worker: %w", err)
		}
		// The loop must know the delivery the broker treats as the last:
		// a record released on it is archived without a dead letter.
		got, rerr := topics.ShareDeliveryLimit(ctx, cl, w.cfg.group)
		if rerr != nil {
			return fmt.Errorf("worker: share group %s: could not configure it (%w) nor read its share.delivery.count.limit: %w", w.cfg.group, err, rerr)
		}
		w.log.Warn("worker: could not configure the share group (WithoutProvision: going on with its current configs, and its delivery limit)",
			"group", w.cfg.group, "err", err, "delivery_limit", got, "delivery_limit_configured", limit)
		limit = got
	}

	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer pcancel()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(shutdownGrace, pcancel)
		context.AfterFunc(pctx, func() { t.Stop() })
	})
	defer stopGrace()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wctx, cancel := context.WithTimeout(ctx, shareMemberWait)
		defer cancel()
		if err := kafkaloop.WaitShareMember(wctx, cl, w.cfg.group, clientID, w.topic, 100*time.Millisecond); err != nil && ctx.Err() == nil {
			w.log.Warn("worker: share-group member not seen assigned yet, reporting running anyway", "group", w.cfg.group, "err", err)
		}
		if ctx.Err() == nil {
			w.runningOnce.Do(func() { close(w.running) })
		}
	}()
	defer wg.Wait()

	err = kafkaloop.RunShare(ctx, cl, w.loopHandler(pctx, cl), kafkaloop.Options{
		Concurrency:    w.cfg.concurrency,
		MaxPollRecords: maxPoll,
		Logger:         w.log,
		DeliveryLimit:  limit,
		RenewLocks:     support.LockRenewal,
		DeadLetter: func(_ context.Context, r *kgo.Record, reason string) error {
			w.dropPending(r)
			return w.deadLetter(pctx, cl, r, ReasonGivenUp+": "+reason)
		},
		// A released command may come back to another instance: the
		// reply kept for its retry here would never be used.
		Released: func(r *kgo.Record, _ string) { w.dropPending(r) },
	})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}
