package tracewindow

import (
	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
)

// The rules the Trace Window and sagactl share: which sagas a list calls
// "in flight", when a saga's last error is its state rather than its
// history, and when a recovery-directory row is due in real time.

// Unended reports whether a saga in state s has not ended: every state but
// the terminal ones (COMPLETED, COMPENSATED, COMPENSATION_FAILED,
// TERMINATED). It is what "in flight" means to a list: `sagactl list
// in-flight` and GET /api/sagas?state=in_flight keep these states, DISABLED
// included (a DISABLED saga has not ended: an admin restores or terminates
// it). InFlight, the health's count, leaves DISABLED out.
func Unended(s eventstore.State) bool { return !s.Terminal() }

// UnendedStates lists the states Unended accepts, in lifecycle order.
func UnendedStates() []eventstore.State {
	var out []eventstore.State
	for _, s := range States {
		if Unended(s) {
			out = append(out, s)
		}
	}
	return out
}

// ErrorIsState reports whether a saga in state s is explained by its last
// error (Transaction.Error): it is parked, failing, compensating, frozen or
// stopped because of it. In the other states (STARTED, IN_PROGRESS, PAUSED,
// COMPLETED) the saga went on after that error: it is an earlier attempt's,
// history (the step's tryout holds it), not the saga's state.
func ErrorIsState(s eventstore.State) bool {
	switch s {
	case eventstore.StateStarted, eventstore.StateInProgress, eventstore.StatePaused, eventstore.StateCompleted:
		return false
	}
	return true
}

// SplitError returns tx's last error as the saga's state (current) or as
// history (past), by ErrorIsState; the other is "".
func SplitError(tx *eventstore.Transaction) (current, past string) {
	if ErrorIsState(tx.State) {
		return tx.Error, ""
	}
	return "", tx.Error
}

// WindowOf is the recovery window of a directory path in real time. With
// second window intervals the directory's Day is a synthetic date (year
// ~2300 at 1s, see recovery.Windows): printing it says nothing; the
// window's Start and End, computed back with cfg's interval, say when the
// row is due. ok is false when cfg's interval is invalid.
func WindowOf(cfg recovery.Config, p eventstore.RecoveryPath) (w recovery.Window, ok bool) {
	ws, err := cfg.Windows()
	if err != nil {
		return recovery.Window{}, false
	}
	return ws.FromSlot(p.Day, p.MinuteOfDay), true
}
