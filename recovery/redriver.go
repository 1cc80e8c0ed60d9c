package recovery

import (
	"context"
	"errors"
	"fmt"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Redriver re-drives the saga a directory entry points to; the orchestrator
// implements it. Redrive is called concurrently (up to Concurrency calls at
// once) and may be called more than once for the same entry (after a retry
// node stopped mid-bucket, or crashed), so it must be idempotent.
//
// Return nil when the entry is handled: the saga was re-driven, or there
// was nothing to do (it is gone, terminal, no longer RETRY_PENDING, or was
// frozen). Return an error wrapping ErrLater (see Later) to have the engine
// register the entry again further forward. Any other error leaves the
// entry in its bucket, which is then kept and scanned again.
//
// What the orchestrator's Redrive is expected to do:
//
//   - load the saga (es_transaction); not found: return nil;
//   - terminal (COMPLETED, COMPENSATED, COMPENSATION_FAILED): for a restore
//     entry (e.Restore()) delete nothing else and return nil — the engine
//     drops the whole bucket afterwards; for a retry entry return nil;
//   - older than the transaction lifetime (Config.Expired): freeze it as
//     DISABLED with the reason, delete its watchdog, return nil;
//   - a retry entry (even bucket): if the saga is RETRY_PENDING, send its
//     step again with the next attempt (Orchestrator.Redrive); otherwise
//     return nil (someone else already did);
//   - a restore entry (odd bucket) of a saga that is not terminal: the
//     process that ran it died or lost it; re-send its last unfinished step
//     (write protection makes a step that already ran skip and re-send its
//     recorded reply), and re-arm the watchdog (return Later with the
//     delay of the re-sent step's timeout) so a second crash is caught
//     too. If the saga is still making progress (a transition more recent
//     than its current step's timeout plus RestoreMargin) return Later
//     with the delay until that step is due: the watchdog follows the
//     saga lazily, rolled forward only when it fires.
//   - a re-send that fails again registers a retry forward as any
//     retryable failure does (Writer.RegisterRetry), or returns Later.
type Redriver interface {
	Redrive(ctx context.Context, e eventstore.RecoveryEntry) error
}

// RedriverFunc adapts a function to Redriver.
type RedriverFunc func(ctx context.Context, e eventstore.RecoveryEntry) error

// Redrive calls f.
func (f RedriverFunc) Redrive(ctx context.Context, e eventstore.RecoveryEntry) error {
	return f(ctx, e)
}

// ErrLater is matched (errors.Is) by the errors Later returns.
var ErrLater = errors.New("recovery: redrive later")

// LaterError asks the engine to register an entry again further forward.
type LaterError struct {
	// DelayWindows is the delay of the new registration; below 1: the
	// domain's retry delay (even entries) or restore delay (odd entries).
	DelayWindows int
	// Reason is logged.
	Reason string
}

// Later returns a *LaterError: the entry is registered again delayWindows
// windows ahead (below 1: the domain's delay for the entry's kind).
func Later(delayWindows int, reason string) error {
	return &LaterError{DelayWindows: delayWindows, Reason: reason}
}

func (e *LaterError) Error() string {
	return fmt.Sprintf("recovery: redrive later (+%d windows): %s", e.DelayWindows, e.Reason)
}

// Is reports whether target is ErrLater.
func (e *LaterError) Is(target error) bool { return target == ErrLater }
