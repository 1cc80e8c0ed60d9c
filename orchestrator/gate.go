package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
)

// One gate for every write to a saga (issue 47, rule 1). Every path that
// writes a saga passes gate first, which checks, by the path's rule
// (pathRules):
//
//   - the saga's definition version is registered here when the path asks
//     the saga's definition for a decision; otherwise the saga is left as
//     it is, for an instance that has the version (docs/versions.md);
//   - in a share group, the attempt's reply claim (ReplyClaimKey) is held
//     by every path that writes a saga waiting for a reply (a reply, a
//     step timer, a cancel, a terminate), so that two instances never
//     write the same saga version (the store would merge their rows): the
//     path takes it with claimAttempt and re-reads the saga under it, and
//     the gate refuses a path that does not hold it (errClaimNotHeld);
//   - the step's remaining time is kept by the paths that persist the
//     saga without sending its step again (a cancel, a deadline's cancel):
//     admission.keepStepTime re-arms the step timer with the time the step
//     had left when it was admitted, not a whole step timeout.

// writePath names a path that writes a saga.
type writePath int

// The paths that write a saga.
const (
	pathReply       writePath = iota // a reply, consumer group (handleRecord)
	pathShareReply                   // a reply, share group (handleShared)
	pathStepTimer                    // a step timer fired here (stepTimedOut)
	pathTimerRecord                  // a timer record from another instance (applyTimerRecord)
	pathRedrive                      // a re-drive of a park (prepareRedriveAt)
	pathDeadline                     // a re-drive past the saga's deadline (failParked)
	pathCancel                       // a cancel (applyControl)
	pathTerminate                    // a terminate (applyControl)
	pathRestore                      // a restore: the step sent again (Restore)
	pathResume                       // a resume or a pause's deadline (continueFrom)
	numPaths
)

// pathRule is what the gate checks on a path.
type pathRule struct {
	name string
	// decides: the path asks the saga's definition for a decision, so its
	// version must be registered here.
	decides bool
	// claim: in a share group, the path holds the attempt's reply claim
	// when the saga waits for a reply.
	claim bool
	// keepsTime: the path persists a saga waiting for its step's reply
	// without sending the step again; it keeps the step's remaining time.
	keepsTime bool
}

// pathRules are the gate's rules, by path.
var pathRules = [numPaths]pathRule{
	pathReply:       {name: "reply", decides: true, claim: true}, // a consumer group's: no claims
	pathShareReply:  {name: "share-group reply", decides: true, claim: true},
	pathStepTimer:   {name: "step timer", decides: true, claim: true},
	pathTimerRecord: {name: "timer record", decides: true}, // consumer groups only
	pathRedrive:     {name: "re-drive"},                    // sends the recorded step again; the park's claim fences it
	pathDeadline:    {name: "re-drive past the deadline", decides: true},
	pathCancel:      {name: "cancel", decides: true, claim: true, keepsTime: true},
	pathTerminate:   {name: "terminate", claim: true}, // runs nothing: needs no definition
	pathRestore:     {name: "restore"},                // sends the recorded step again
	pathResume:      {name: "resume", decides: true},  // the pause's claim fences it
}

// errClaimNotHeld: a path that must hold the attempt's reply claim came
// to the gate without it (a bug: every such path takes it first).
var errClaimNotHeld = errors.New("orchestrator: the attempt's reply claim is not held")

// admission is a path's pass through the gate.
type admission struct {
	left time.Duration // the step's remaining time when admitted (0: none)
}

// gate admits path p to write tx, read under the saga's lock (and, where
// p's rule says so, under the attempt's reply claim, which ctx carries:
// claimAttempt). It fails with ErrUnknownVersion (counted and logged)
// when p decides and tx's version is not registered, and with
// errClaimNotHeld when p must hold the claim and ctx does not carry it.
func (o *Orchestrator[T]) gate(ctx context.Context, tx *eventstore.Transaction, p writePath) (admission, error) {
	rule := pathRules[p]
	var a admission
	if rule.decides && o.unregistered(ctx, tx, rule.name) {
		return a, fmt.Errorf("orchestrator: %s of %s: %w %d", rule.name, tx.TxID, ErrUnknownVersion, versionOf(tx))
	}
	if rule.claim && o.cfg.groupType == topics.GroupShare && awaitsReply(tx.State) {
		if held, _ := ctx.Value(claimHeldKey{}).(eventstore.MarkerKey); held != ReplyClaimKey(o.scope, tx.TxID, tx.Span, tx.Kind, tx.Attempt) {
			return a, fmt.Errorf("%w: %s of %s (span %d, %s, attempt %d)", errClaimNotHeld, rule.name, tx.TxID, tx.Span, tx.Kind, tx.Attempt)
		}
	}
	if rule.keepsTime {
		a.left = o.stepLeft(tx, o.cfg.now())
	}
	return a, nil
}

// claimHeldKey is the context key of the reply claim a path holds.
type claimHeldKey struct{}

// withClaimHeld returns ctx saying that the reply claim key is held.
func withClaimHeld(ctx context.Context, key eventstore.MarkerKey) context.Context {
	return context.WithValue(ctx, claimHeldKey{}, key)
}

// claimAttempt takes the reply claim of tx's attempt (ReplyClaimKey) for
// what, as a share-group reply of that attempt takes it; it returns ctx
// carrying it, for the gate. release deletes it, so that the reply, if it
// comes after, is applied at once. errClaimBusy: another instance holds
// it.
func (o *Orchestrator[T]) claimAttempt(ctx context.Context, tx *eventstore.Transaction, what string) (held context.Context, release func(), err error) {
	key := ReplyClaimKey(o.scope, tx.TxID, tx.Span, tx.Kind, tx.Attempt)
	claim := eventstore.Marker{MarkerKey: key, State: eventstore.MarkerLeased, Owner: o.instance}
	applied, existing, err := o.store.InsertMarker(ctx, claim, o.cfg.claimLease)
	if err != nil {
		return ctx, nil, fmt.Errorf("orchestrator: claim %s for a %s: %w", tx.TxID, what, err)
	}
	if !applied && existing.Owner != o.instance {
		return ctx, nil, fmt.Errorf("%w (%s, claim owner %s)", errClaimBusy, tx.TxID, existing.Owner)
	}
	return withClaimHeld(ctx, key), func() {
		if _, _, err := o.store.DeleteMarkerIf(context.WithoutCancel(ctx), key, eventstore.MarkerLeased, o.instance); err != nil {
			o.logger().Warn("orchestrator: could not release a reply claim; the reply waits for its lease", "tx", tx.TxID, "err", err)
		}
	}, nil
}

// keepStepTime re-arms the step timer of tx, just persisted by a path
// that keeps the step's time (pathRule.keepsTime), with the time the step
// had left when admitted: persisting armed a whole step timeout, but the
// step was sent before. A step without a timeout keeps what persisting
// armed.
func (o *Orchestrator[T]) keepStepTime(tx *eventstore.Transaction, left time.Duration) {
	if o.stepTimeout(tx) <= 0 {
		return
	}
	o.armStep(tx.TxID, tx.Version, max(left, time.Millisecond), false)
}
