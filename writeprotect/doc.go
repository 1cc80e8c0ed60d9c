// Package writeprotect keeps duplicate deliveries of saga commands from
// running a business step twice (seed 000, part 3). A Guard wraps every
// step a worker executes (worker.WithGuard) and keeps one execution marker
// per (transaction, span, kind) in es_execution_markers, in the partition
// of the orchestrating service (the command's Region, Cluster and
// Service), which the orchestrator deletes with one partition delete when
// the saga ends.
//
// # Modes
//
// The mode and the lease are chosen per saga domain (Config, the YAML keys
// under stacksaga.cassandra.write-protection); the default is
// RELAXED_WITH_DEDUP with a 5s lease.
//
// STRICT: INSERT ... IF NOT EXISTS USING TTL <lease> (an LWT). Applied: the
// step runs, then its marker is committed permanently (TTL 0, COMMITTED)
// with the encoded reply. A live lease (another instance is running the
// step): back off and try again until it is committed or expires; after
// the lease plus a second the guard returns ErrLeaseHeld and the worker
// retries the command later. Committed: the step is skipped and the
// recorded reply re-sent, so a reply lost after the commit is produced
// again by the redelivery. A crash between lease and commit leaves the
// lease to expire, then one other instance runs the step. The handler's
// context ends a fifth of the lease before the lease does (leaving time to
// commit); a handler that ignores it and overruns its lease is logged and
// counted (Stats.LeaseOverruns), since another instance may then run the
// step too: choose a lease longer than the step's longest run.
//
// RELAXED_WITH_DEDUP: read the marker; committed: skip and re-send the
// recorded reply; otherwise run the step and write the marker with the
// reply in one plain write. No LWT: sequential duplicates are skipped, two
// concurrent deliveries may both run (for steps that are idempotent by
// nature).
//
// Outcomes: ok and non-retryable replies are committed. A retryable reply
// is not (a STRICT lease is deleted instead): the step is re-driven later
// and must run again. A recorded reply is re-sent addressed to the
// current command (its attempt and trace), so a re-driven command's reply
// is not taken for a stale one.
//
// # Null compensation and hanging actions
//
// As dtm's sub-transaction barrier does: a compensation first looks at the
// marker of the action it compensates. Committed: the compensation runs,
// guarded like any step. Absent: the guard records COMPENSATED_EMPTY on
// the action's key with INSERT ... IF NOT EXISTS and replies ok with the
// entity unchanged, without calling the handler (null compensation). An
// action that then arrives finds COMPENSATED_EMPTY and is refused
// (hanging): its handler is not called and it gets a non-retryable reply
// whose error is ErrHanging. The reply is sent rather than nothing: the
// orchestrator drops it as stale (the saga has moved on), it shows on the
// callback topic what happened, and a saga that were somehow waiting for
// the action would learn that it did not run instead of stalling. A live
// lease on the action (STRICT: it is running) is waited for.
//
// In STRICT mode the action takes its lease with a conditional insert on
// the same key, so of a compensation and its action arriving at the same
// time exactly one wins: either the action runs and the compensation waits
// for its commit and then runs, or the compensation is empty and the action
// is refused. In RELAXED_WITH_DEDUP mode the action's marker is a plain
// write after it ran (no LWT, by design of the mode): a compensation that
// arrives while the action is running finds no marker and is recorded
// empty, and the action is not stopped. This cannot happen with the
// orchestrator's default navigation, which compensates only spans whose
// action replied ok (so committed); use STRICT for domains whose
// compensations may overtake their actions. In both modes an action whose
// lease expired after a crash cannot be told from one that never ran.
//
// # Late duplicates after the saga ended
//
// The orchestrator deletes a saga's markers when it reaches a terminal
// state (after persisting that state), so a duplicate delivered later
// would find no marker. Terminal fence: whenever the guard is about to run
// a step (or record a null compensation) for which it found no marker, it
// reads the saga's row (LoadTransaction; the row is in the same keyspace
// and scope) after creating its marker and, if the saga is terminal,
// deletes what it created and sends nothing (Stats.TerminalFenced). After
// the marker is created is the safe order: the partition is deleted only
// after the saga is terminal, so a marker created in an emptied partition
// always sees the terminal row. A saga row that is not found does not
// fence (the worker's store may not hold the orchestrator's rows). Cost: one
// read per executed step, none per skipped duplicate; WithoutTerminalFence
// saves it.
//
// # Statements per step
//
// With the terminal fence on (Cassandra round trips; an LWT costs about
// four):
//
//	                         STRICT                   RELAXED_WITH_DEDUP
//	action, first delivery   LWT + read + write       read + read + write
//	action, duplicate        LWT                      read
//	compensation, first      read + LWT + read + write  read + read + read + write
//	compensation, duplicate  read + LWT               read + read
//	null compensation        read + LWT + read        read + LWT + read
//	hanging action           LWT                      read
//	retryable outcome        LWT + read + delete      read + read
//	late duplicate (fenced)  LWT + read + delete      read + read
//
// A command waiting for a lease adds one LWT (STRICT) or read (RELAXED)
// per try.
package writeprotect
