package writeprotect

import "sync/atomic"

// Stats counts what a guard did since it was made.
type Stats struct {
	// Executions counts the commands whose business handler ran.
	Executions uint64
	// DuplicatesSkipped counts the commands not run because their step was
	// already done: a committed marker whose recorded reply was re-sent, or
	// a repeated compensation of a step already compensated empty.
	DuplicatesSkipped uint64
	// LeaseWaits counts the waits for another execution's live lease: a
	// command that found one and backed off counts once however long it
	// waited (a compensation waiting for its running action counts too).
	LeaseWaits uint64
	// LeaseHeld counts the commands returned with ErrLeaseHeld (the lease
	// outlived the wait, which WithMaxLeaseWait bounds; the worker tries
	// again later).
	LeaseHeld uint64
	// NullCompensations counts compensations recorded as COMPENSATED_EMPTY
	// because their action never ran (the handler was not called).
	NullCompensations uint64
	// HangingRefusals counts actions refused because their compensation
	// had already been recorded (the handler was not called).
	HangingRefusals uint64
	// TerminalFenced counts late duplicates dropped because their saga was
	// already terminal (nothing run, nothing sent).
	TerminalFenced uint64
	// Released counts executions whose marker was removed instead of
	// committed: those that produced no reply at all.
	Released uint64
	// RetryablesRecorded counts retryable outcomes recorded: a duplicate
	// of the same attempt re-sends the recorded reply without running the
	// step; the next attempt runs it (see Superseded).
	RetryablesRecorded uint64
	// Superseded counts recorded outcomes of an attempt (a retryable
	// failure, or a pause) that a later attempt of the step replaced: the
	// later attempt ran the step.
	Superseded uint64
	// LeaseOverruns counts STRICT executions that ran longer than their
	// lease is certain to last (the lease less a second lost to
	// whole-second TTLs and the clock-skew margin), after which another
	// instance could have taken the step over.
	LeaseOverruns uint64
	// CommitFailures counts executions whose outcome could not be recorded;
	// their reply was sent anyway.
	CommitFailures uint64
	// LateLeases counts STRICT leases taken too late to run the step
	// within them (taking the lease and the fence outlasted the handler's
	// deadline): the lease was released, the step not run, and Execute
	// returned ErrLeaseExpired.
	LateLeases uint64
	// LostLeases counts STRICT executions whose conditional commit found
	// that another execution had taken the step over or that its
	// compensation had been recorded empty (they ran past their lease):
	// their outcome was not written over that marker.
	LostLeases uint64
	// MissingActionMarkers counts compensations run although their
	// action's marker was missing or COMPENSATED_EMPTY, because the command
	// said the action ran (topics.Envelope.ActionDone): a commit that
	// failed after the action ran. Without ActionDone they would have been
	// null compensations.
	MissingActionMarkers uint64
	// ShadowedCommits counted STRICT commits found hidden by the
	// execution's own lease when a commit was a plain write confirmed by an
	// LWT.
	//
	// Deprecated: a STRICT commit is one conditional LWT
	// (eventstore.Markers.CommitMarker), which a re-proposed lease cannot
	// hide; it is always zero.
	ShadowedCommits uint64
}

// Add returns the sum of s and o (for totals over several guards).
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Executions:           s.Executions + o.Executions,
		DuplicatesSkipped:    s.DuplicatesSkipped + o.DuplicatesSkipped,
		LeaseWaits:           s.LeaseWaits + o.LeaseWaits,
		LeaseHeld:            s.LeaseHeld + o.LeaseHeld,
		NullCompensations:    s.NullCompensations + o.NullCompensations,
		HangingRefusals:      s.HangingRefusals + o.HangingRefusals,
		TerminalFenced:       s.TerminalFenced + o.TerminalFenced,
		Released:             s.Released + o.Released,
		RetryablesRecorded:   s.RetryablesRecorded + o.RetryablesRecorded,
		Superseded:           s.Superseded + o.Superseded,
		LeaseOverruns:        s.LeaseOverruns + o.LeaseOverruns,
		CommitFailures:       s.CommitFailures + o.CommitFailures,
		LateLeases:           s.LateLeases + o.LateLeases,
		LostLeases:           s.LostLeases + o.LostLeases,
		MissingActionMarkers: s.MissingActionMarkers + o.MissingActionMarkers,
		ShadowedCommits:      s.ShadowedCommits + o.ShadowedCommits,
	}
}

type counters struct {
	executions, duplicates, leaseWaits, leaseHeld, nullComps, hanging,
	fenced, released, overruns, commitFailures, lateLeases, lostLeases,
	missingActions, shadowedCommits, retryables, superseded atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Executions:           c.executions.Load(),
		DuplicatesSkipped:    c.duplicates.Load(),
		LeaseWaits:           c.leaseWaits.Load(),
		LeaseHeld:            c.leaseHeld.Load(),
		NullCompensations:    c.nullComps.Load(),
		HangingRefusals:      c.hanging.Load(),
		TerminalFenced:       c.fenced.Load(),
		Released:             c.released.Load(),
		RetryablesRecorded:   c.retryables.Load(),
		Superseded:           c.superseded.Load(),
		LeaseOverruns:        c.overruns.Load(),
		CommitFailures:       c.commitFailures.Load(),
		LateLeases:           c.lateLeases.Load(),
		LostLeases:           c.lostLeases.Load(),
		MissingActionMarkers: c.missingActions.Load(),
		ShadowedCommits:      c.shadowedCommits.Load(),
	}
}
