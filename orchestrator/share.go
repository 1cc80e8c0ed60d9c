package orchestrator

// Share groups (WithGroupType(topics.GroupShare)): the domain's callback
// topic is consumed by a Kafka share group (KIP-932), so any number of
// orchestrator instances share its partitions. Without partition order two
// things change, and both are handled here rather than assumed away:
//
//   - Replies of one saga may reach different instances at once (a reply
//     and its duplicate; the reply to a step and a late one of the step
//     before). Each reply is applied under a claim: an execution marker
//     (eventstore.Markers.InsertMarker, a lightweight transaction on
//     Cassandra) keyed by the saga and the reply's span, kind and attempt,
//     leased for WithClaimLease. Only the instance whose claim applied
//     advances the saga, and it first re-reads the saga from the store, so
//     a stale cached state never wins: a reply the stored saga no longer
//     waits for is ignored (counted in StaleReplies). An instance that
//     finds the claim held by another waits for the saga to move (then the
//     reply is stale) or for the lease to expire (the claimer died: it
//     takes over), and releases the reply for later if neither happens
//     within its acquisition lock. The claim covers every version the
//     reply writes (FAILED, then the first compensation), so two instances
//     never both advance the same saga version. The store's version fence
//     (eventstore.Store.Transition) still stops a zombie's late write.
//   - The reply to a command may reach another instance before the
//     instance that sent the command has persisted the saga's new state.
//     So a share-group orchestrator persists a transition before it
//     publishes the command (as a resume does); a command whose publish
//     then fails is re-sent by the saga's restore watchdog.
//
// Each reply is accepted once applied (or found stale), released on a
// transient failure (the store or Kafka unavailable, the claim busy), and
// rejected after being dead-lettered when it can never be applied (not a
// reply, unknown saga, refused by the store), or when it failed on its last
// delivery (topics.ShareSettings.DeliveryLimit; the saga's watchdog then
// re-sends its step). The cost: one lightweight transaction and one read
// per reply, on top of the transition.
//
// An acknowledgement that fails (the broker refuses an accept that comes
// after the reply's acquisition lock ended, a renewal that cannot be
// delivered) is logged at WARN ("kafkaloop: share acknowledgements
// failed", with the topic, the partitions and the error) and, with
// WithMeterProvider, counted (telemetry.MetricKafkaShareAckFailures): the
// reply is delivered again (the claim fences it), or, for a lost renewal,
// may be applied by another instance meanwhile. A kgo.ShareAckCallback
// among WithKafkaOpts replaces this.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/kafkaloop"
	"github.com/stacksaga-go/stacksaga/internal/wait"
	"github.com/stacksaga-go/stacksaga/topics"
)

// claimKindPrefix starts the Kind of a reply claim's marker key.
const claimKindPrefix = "reply:"

// ReplyClaimKey is the execution marker a share-group orchestrator takes
// before it applies the reply of txID's span, kind and attempt (see
// WithGroupType). It lives in the saga's marker partition.
func ReplyClaimKey(scope eventstore.Scope, txID string, span int, kind string, attempt int) eventstore.MarkerKey {
	return eventstore.MarkerKey{Scope: scope, TxID: txID, Span: span, Kind: claimKindPrefix + kind, Site: "orchestrator:attempt:" + strconv.Itoa(attempt)}
}

// errClaimBusy: another instance holds the claim on the reply and the saga
// has not moved yet.
var errClaimBusy = errors.New("orchestrator: another instance is applying this reply")

// claimPoll is how often a busy claim is checked again.
const claimPoll = 50 * time.Millisecond

// GroupType returns how the orchestrator consumes its callback topic.
func (o *Orchestrator[T]) GroupType() topics.GroupType { return o.cfg.groupType }

// shareClientOpts are the consumer options of a share-group orchestrator.
func (o *Orchestrator[T]) shareClientOpts() []kgo.Opt {
	return append([]kgo.Opt{
		kgo.ShareGroup(o.cfg.group(o.scope, o.domain.Name)),
		kgo.ConsumeTopics(o.cbTopic),
		kafkaloop.ShareAckFailures(o.logger(), o.tel.shareAckFailed),
	}, kafkaloop.ShareClientOpts(o.cfg.concurrency)...)
}

// runShare consumes the callback topic as a share group until ctx ends.
func (o *Orchestrator[T]) runShare(ctx, pctx context.Context, cons *kgo.Client) error {
	group := o.cfg.group(o.scope, o.domain.Name)
	support, err := topics.ProbeShareGroups(ctx, cons)
	if err != nil {
		return fmt.Errorf("orchestrator: group type %s: %w", topics.GroupShare, err)
	}
	if !support.LockRenewal {
		o.logger().Warn("orchestrator: share-group record locks cannot be renewed (KIP-1222): a reply applied for longer than the record lock is delivered again meanwhile, and a poll held longer than the client's connection idle timeout (30s by default) loses its records", "group", group, "reason", support.NoLockRenewal)
	}
	limit := o.cfg.share.Limit()
	if err := topics.ConfigureShareGroup(ctx, cons, group, o.cfg.share); err != nil {
		if o.cfg.provision {
			return fmt.Errorf("orchestrator: %w", err)
		}
		// The loop must know the delivery the broker treats as the last:
		// a reply released on it is archived without a dead letter.
		got, rerr := topics.ShareDeliveryLimit(ctx, cons, group)
		if rerr != nil {
			return fmt.Errorf("orchestrator: share group %s: could not configure it (%w) nor read its share.delivery.count.limit: %w", group, err, rerr)
		}
		o.logger().Warn("orchestrator: could not configure the share group (WithoutProvision: going on with its current configs, and its delivery limit)",
			"group", group, "err", err, "delivery_limit", got, "delivery_limit_configured", limit)
		limit = got
	}
	o.shareRenew = support.LockRenewal
	o.runOnce.Do(func() { close(o.running) })
	return kafkaloop.RunShare(ctx, cons, loopHandler(pctx, o.handleShared), kafkaloop.Options{
		Concurrency:    o.cfg.concurrency,
		MaxPollRecords: o.cfg.concurrency, // as shareClientOpts' fetch limit
		Logger:         o.cfg.logger,
		DeliveryLimit:  limit,
		RenewLocks:     support.LockRenewal,
		DeadLetter: func(_ context.Context, r *kgo.Record, reason string) error {
			return o.deadLetter(pctx, r, dlGivenUp, "orchestrator: "+reason)
		},
	})
}

// handleShared applies one reply of a share group (see "Share groups").
func (o *Orchestrator[T]) handleShared(ctx context.Context, r *kgo.Record) error {
	if controlAction(r) != "" {
		return o.handleControlShared(ctx, r) // a cancel or terminate (cancel.go)
	}
	env, err := o.decodeReply(ctx, r, o.rejectRecord)
	if env == nil {
		return err
	}
	l := o.lock(env.TxID)
	l.Lock()
	defer l.Unlock()
	claim := eventstore.Marker{
		MarkerKey: ReplyClaimKey(o.scope, env.TxID, env.Span, string(env.Kind), env.Attempt),
		State:     eventstore.MarkerLeased,
		Owner:     o.instance,
	}
	// Wait for a busy claim at most one claim lease, and within the
	// record's lock when it is not renewed (a renewed lock outlasts its
	// AcquisitionDeadline, which is set at the fetch).
	deadline := time.Now().Add(o.cfg.claimLease + 2*time.Second)
	if dl := r.AcquisitionDeadline(); !dl.IsZero() && !o.shareRenew {
		deadline = dl.Add(-2 * time.Second)
	}
	for {
		applied, existing, err := o.store.InsertMarker(ctx, claim, o.cfg.claimLease)
		if err != nil {
			return fmt.Errorf("orchestrator: claim the reply of %s: %w", env.TxID, err)
		}
		// The claim fences the reply; the store has the saga's state (a
		// cached one may be stale: another instance may have moved it).
		tx, err := o.store.LoadTransaction(ctx, o.scope, env.TxID)
		if errors.Is(err, eventstore.ErrNotFound) {
			return o.rejectRecord(ctx, r, dlUnknownTx, "orchestrator: unknown transaction "+env.TxID)
		}
		if err != nil {
			return fmt.Errorf("orchestrator: load %s: %w", env.TxID, err)
		}
		if !expects(&tx, env) {
			o.cache.drop(env.TxID)
			o.countStale(&tx)
			return nil
		}
		if applied || existing.Owner == o.instance {
			// Ours (a claim of ours left by a failed attempt of this
			// reply is ours too: the lock above keeps this process to one
			// attempt at a time).
			return o.applyReply(withClaimHeld(withPersistFirst(ctx), claim.MarkerKey), r, &tx, env, pathShareReply)
		}
		if !time.Now().Add(claimPoll).Before(deadline) {
			return fmt.Errorf("%w (%s, claim owner %s, %v left)", errClaimBusy, env.TxID, existing.Owner, existing.TTL)
		}
		if !wait.Sleep(ctx, claimPoll) {
			return ctx.Err()
		}
	}
}

// rejectRecord dead-letters r (counted under code) and reports it
// rejected.
func (o *Orchestrator[T]) rejectRecord(ctx context.Context, r *kgo.Record, code, reason string) error {
	if err := o.deadLetter(ctx, r, code, reason); err != nil {
		return err
	}
	return kafkaloop.Rejected(reason)
}
