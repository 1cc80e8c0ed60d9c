// Package writeprotect keeps duplicate deliveries of saga commands from
// running a business step twice (seed 000, part 3: "seed 000" is the
// design document of the Cassandra event store this project implements; the
// repository's docs/design.md says what each seed covers). A Guard wraps every
// step a worker executes (worker.WithGuard) and keeps one execution marker
// per (transaction, span, kind) in es_execution_markers, in the partition
// of the orchestrating service (the command's Region, Cluster and
// Service). Markers outlive their saga: a recorded outcome is written with
// a TTL of Config.MarkerRetention (marker-retention, default 48h, longer
// than the transaction lifetime) and expires by itself, so that a
// duplicate delivered after the saga ended still finds it (see "Late
// duplicates after the saga ended").
//
// # Modes
//
// The mode and the lease are chosen per saga domain (Config, the YAML keys
// under stacksaga.cassandra.write-protection); the default is
// RELAXED_WITH_DEDUP with a 5s lease. Leases are whole seconds between
// MinLease (2s) and MaxLease (5m); others are refused at load, naming the
// key.
//
// STRICT: INSERT ... IF NOT EXISTS USING TTL <lease> (an LWT). Applied: the
// step runs, then its lease is committed (COMMITTED, with the retention as
// its TTL) with the encoded reply by a second LWT, conditioned on the
// lease still being the execution's own (see "The commit is
// conditional"). A live lease (another
// instance is running the step): back off and read the marker again (plain
// reads: an LWT per try would contend on the partition the lease holder
// commits to) until it is committed, or gone and the insert is tried
// again; after the lease plus
// a second, or after WithMaxLeaseWait (10s) if that is sooner, the guard
// returns ErrLeaseHeld and the worker retries the command later (see
// "Waiting for a lease"). Committed: the step is skipped and the recorded
// reply re-sent, so a reply lost after the commit is produced again by the
// redelivery. A crash between lease and commit leaves the lease to expire,
// then one other instance runs the step.
//
// A handler that ignores its context and runs past what its lease is
// certain to last (below) is logged and counted (Stats.LeaseOverruns),
// since another instance may then run the step too. Its conditional commit
// does not write over another execution's lease or commit, nor over a
// compensation recorded empty meanwhile (Stats.LostLeases, logged as an
// error).
//
// STRICT's exclusivity is that of the LWT, hence of the store's serial
// consistency (eventstore/cassandra Config.SerialConsistency). With the
// default LOCAL_SERIAL it holds among the workers of one data centre:
// two workers of a STRICT domain in different data centres can both take
// the lease. Deploy the workers of a STRICT domain in one data centre, or
// set serial-consistency-level to SERIAL (Paxos across data centres, with
// the cross-DC round trips it costs). The guard cannot see the store's
// setting, so Config.Validate does not check it.
//
// RELAXED_WITH_DEDUP: read the marker; committed: skip and re-send the
// recorded reply; otherwise run the step and write the marker with the
// reply (and the retention as its TTL) in one plain write. No LWT:
// sequential duplicates are skipped, two concurrent deliveries may both
// run (for steps that are idempotent by nature).
//
// Outcomes: every reply is committed, ok, non-retryable and retryable
// alike, under the attempt that produced it. A duplicate of that attempt
// re-sends the recorded reply without running the step; the
// orchestrator's next attempt (a higher topics.Envelope.Attempt: the saga
// re-driven, or restored after COMPENSATION_FAILED) of a step whose
// recorded attempt failed, retryably or not, supersedes the record and
// runs the step (Stats.Superseded): a failed attempt left no effect. A
// later attempt of a step recorded ok gets the recorded reply. The rule is
// the answer package's (answer.ForAttempt; answer.Compensates for a
// compensation), shared with sqlbarrier and sagatest.
// So does the next attempt of a step whose record paused its saga (the
// step invoked again after the pause's deadline). STRICT removes the
// superseded record with a conditional delete (DELETE ... IF state = ? AND
// owner = ?) before taking the lease, so that of two deliveries of the next
// attempt only one runs it; RELAXED_WITH_DEDUP runs the step and writes
// over the record. A recorded reply is re-sent addressed to the
// current command (its attempt and trace), so a re-driven command's reply
// is not taken for a stale one. A recorded reply that cannot be decoded
// means the step ran and what it replied is lost: the duplicate gets a
// non-retryable reply, and for an action that reply sets
// topics.Envelope.ActionDone (the step's effect is in place), so the
// orchestrator compensates that step too, not only the ones before it.
//
// A commit can fail: the write (STRICT: the conditional commit) is tried
// three times (bounded by WithCommitTimeout, not by the caller's context),
// then the failure is logged and counted (Stats.CommitFailures) and the
// reply is sent anyway, because the step did run. The step then has no
// marker (a STRICT lease left behind expires): a duplicate delivered later
// runs it again, and its compensation relies on ActionDone (below) not to
// be taken for a null one.
//
// # The record and the reply, side by side
//
// A worker in a consumer group calls ExecuteOverlapped, not Execute: the
// guard starts the outcome's write (RELAXED: the marker; STRICT: the commit
// LWT) and hands the reply back at once, the worker produces the reply
// while the write is in flight, and it commits the command only after both
// are done. A step's critical path thus has one of the two round trips
// instead of both. What a crash can do is unchanged: the command stays
// uncommitted until the write is done, so a redelivery after a crash in
// between runs the step again exactly as before; it precedes any later
// command of the saga on its partition (compensations included), and
// records of one key are handed to the worker one at a time, so a
// duplicate finds the record. What changes is that the reply can reach
// the orchestrator before the record exists: a RELAXED compensation of
// that step run by another instance in that moment finds no action marker
// and compensates on the command's ActionDone (logged, counted in
// Stats.MissingActionMarkers); a STRICT one finds the live lease and waits
// for its commit. A share group hands out records in no order, so its
// workers call Execute; so does a guard with the terminal fence
// (WithTerminalFence, for orchestrator.WithMarkerCleanup), whose saga's end
// could otherwise delete the marker partition before the write lands.
//
// # The handler's deadline
//
// A STRICT lease is shorter than its TTL says. Cassandra computes a TTL's
// expiry from the insert's time truncated to whole seconds: a 2s lease
// written at x.93 is gone at x+2, 1.07s later. And the node that judges
// whether a lease still lives may have a clock ahead of the node that
// wrote it. From before its insert is sent, measured on the worker's
// monotonic clock, a lease of L (rounded up to whole seconds) is therefore
// certain to live for
//
//	exclusive = L - 1s - clock skew          (WithClockSkew, default 500ms)
//
// and the handler's context ends earlier still, leaving time to record the
// outcome:
//
//	deadline  = exclusive - min(L/10, 1s)
//
// With the defaults: a 2s lease gives the handler 300ms, 5s gives 3s, 10s
// gives 7.5s, a minute 57.5s. Choose a lease longer than the step's
// longest run by at least 1.5s plus a tenth of the lease (at most 1s), more
// on a loaded store (the deadline counts from before the LWT, whose
// latency it includes). A lease too short to leave the
// handler 250ms is refused: Config.Validate (and LoadConfig) refuse one
// below MinLease, naming its key; New refuses one too short for a larger
// WithClockSkew. The memory store expires TTLs the way Cassandra does, so
// tests on it see the same lease.
//
// A lease taken so late that the deadline has passed (the store's retries
// of an LWT whose outcome was unknown, or WithTerminalFence's read,
// outlasted it) is
// released without running the step: Execute returns ErrLeaseExpired and
// the worker retries (Stats.LateLeases).
//
// # Waiting for a lease
//
// A command that finds another execution's live lease on its step (or a
// compensation that finds one on its action) waits inside Execute, and so
// inside the worker's poll loop, where rebalances of the consumer group
// are blocked. A wait longer than the group's rebalance timeout would get
// the member evicted and hand the record to the next owner, which would
// wait for the same lease. So the wait is bounded twice: by the lease seen
// first plus a second (on the guard's clock), and by WithMaxLeaseWait
// (default 10s, real time), whichever ends first; Execute then returns an
// error wrapping ErrLeaseHeld (Stats.LeaseHeld) and the worker tries the
// record again later. Keep WithMaxLeaseWait well below the rebalance
// timeout. Leases are at most MaxLease (5m), so a crashed execution's lease
// does not hold its step for longer.
//
// # Null compensation and hanging actions
//
// As dtm's sub-transaction barrier does: a compensation first looks at the
// marker of the action it compensates. Committed: the compensation runs,
// guarded like any step (also when the action's recorded reply cannot be
// decoded: its effect is in place). A live lease on the action (STRICT: it
// is running) is waited for. Committed with a failure, retryable or not
// (the action's last attempt failed: it left no effect), unless that
// failure says the action's effect is in place (ActionDone): the action
// did not complete, so without ActionDone on the compensation it counts
// as absent (below) and the record is removed, conditionally, to record
// the null compensation in its place; with ActionDone the compensation
// runs (answer.Compensates).
//
// Absent, and the command carries topics.Envelope.ActionDone (the
// orchestrator holds the action's ok reply, or a failure that says the
// action ran; the StackSaga orchestrator sets it on every compensation,
// since it compensates only spans whose action ran): the action ran and its marker was lost (its commit
// failed), so the compensation runs, guarded like any step, and nothing is
// recorded on the action's key (Stats.MissingActionMarkers). The same
// holds if the action's key says COMPENSATED_EMPTY: an earlier
// compensation without ActionDone took the action for one that never ran,
// which the ok reply refutes.
//
// Absent, without ActionDone: the action may never have run. The guard
// records COMPENSATED_EMPTY on the action's key with INSERT ... IF NOT
// EXISTS (with the retention as its TTL, as a commit) and replies ok with the entity unchanged, without calling the
// handler (null compensation). An action that then arrives finds
// COMPENSATED_EMPTY and is refused (hanging): its handler is not called
// and it gets a non-retryable reply whose error is ErrHanging. The reply is
// sent rather than nothing: the orchestrator drops it as stale (the saga
// has moved on), it shows on the callback topic what happened, and a saga
// that were somehow waiting for the action would learn that it did not run
// instead of stalling. An action whose commit failed and whose
// compensation comes without ActionDone is taken for one that never ran:
// its effect is not undone. So is an action whose STRICT lease expired
// after a crash (it may have had effects before the crash).
//
// In STRICT mode the action takes its lease with a conditional insert on
// the same key, so of a compensation without ActionDone and its action
// arriving at the same time exactly one wins: either the action runs and
// the compensation waits for its commit and then runs, or the compensation
// is empty and the action is refused. In RELAXED_WITH_DEDUP mode the
// action's marker is a plain write after it ran (no LWT, by design of the
// mode): a compensation that arrives while the action is running finds no
// marker and is recorded empty, and the action is not stopped (its commit
// then overwrites the record). With ActionDone this cannot happen: the
// action has finished before the orchestrator compensates it. Use STRICT
// for domains whose compensations may overtake their actions.
//
// # The commit is conditional
//
// A STRICT commit is one LWT on the marker row: UPDATE ... SET state =
// 'COMMITTED', reply = ... IF owner = ? AND state = 'LEASED'
// (eventstore.Markers.CommitMarker). It records the outcome only over the
// execution's own live lease, so a step that ran past its lease never
// writes over another execution's lease or commit, nor over a
// compensation recorded empty (Stats.LostLeases). A lease that expired
// with nobody taking the step over is followed by INSERT ... IF NOT EXISTS
// of the commit, which loses to any execution that takes the step
// meanwhile.
//
// It is an LWT rather than a plain write for a second reason. All the
// markers of a saga share one partition, hence one Paxos state. An LWT on
// it whose round overlapped the lease's (a duplicate of another step of
// the saga, a twin of this one, a compensation's barrier) can find the
// lease's proposal unfinished and propose it again with its own, newer
// ballot, and so can the LWTs that follow while such a re-proposal is
// itself unfinished; with Paxos v1 (Cassandra's default, up to 5.0)
// re-proposed cells take the new ballot as their write timestamp. A plain
// commit, which replaces the lease only by having the newer write
// timestamp, could be hidden by one: the marker read as the lease again,
// the recorded reply was lost, and once the lease expired a duplicate ran
// the step again although nothing overran and no commit failed (seen in
// the STRICT acceptance test under load, about once in a few thousand
// steps, when commits were plain writes). The conditional commit's own
// Paxos round first finishes any unfinished round on the partition, and
// its ballot is newer than any re-proposal's: later rounds find the
// commit, never the lease. Cost: one LWT per STRICT commit, where a plain
// write and a confirming LWT were two statements.
//
// # Late duplicates after the saga ended
//
// By default the orchestrator keeps a saga's markers when the saga ends,
// and they expire after the retention: a duplicate delivered after the end
// finds its step's marker like any duplicate, is skipped and re-sends the
// recorded reply (the orchestrator ignores it as stale), and a
// compensation with ActionDone finds its action's marker. Nothing reads
// the saga's state for it. MarkerRetention must therefore be longer than
// a duplicate can arrive late: longer than the transaction lifetime (the
// recovery watchdog re-sends steps within it), at least an hour: New
// refuses one shorter than Config.TransactionLifetime (read from the same
// stacksaga.cassandra.transaction-lifetime key as the orchestrator's), or
// ending after 2038-01-19T03:14:06Z (eventstore.MaxMarkerExpiry); a
// negative retention keeps markers for good.
//
// An orchestrator with orchestrator.WithMarkerCleanup deletes a saga's
// markers with one partition delete when it reaches a terminal state
// (after persisting that state), and a late duplicate would then find no
// marker and run again. Its workers' guards need WithTerminalFence:
// whenever the guard is about to run a step (or record a null
// compensation) for which it found no marker, it reads the saga's state
// (eventstore.StateReader when the store has it, as the memory and
// Cassandra stores do: one column; LoadTransaction, the whole row,
// otherwise; the row is in the same keyspace and scope) after creating its
// marker and, if the saga is terminal, deletes what it created and sends
// nothing (Stats.TerminalFenced). After the marker is created is the safe
// order: the partition is deleted only after the saga is terminal, so a
// marker created in an emptied partition always sees the terminal row. A
// saga row that is not found does not fence (the worker's store may not
// hold the orchestrator's rows). Cost: one read per executed step, none
// per skipped duplicate.
//
// # Statements per step
//
// By default (terminal fence off; Cassandra round trips; an LWT costs about
// four):
//
//	                                  STRICT              RELAXED_WITH_DEDUP
//	action, first delivery            LWT + LWT           read + write
//	action, duplicate                 LWT                 read
//	compensation, first               read + LWT + LWT    read + read + write
//	compensation, action marker lost  read + LWT + LWT    read + read + write
//	compensation, duplicate           read + LWT          read + read
//	null compensation                 read + LWT          read + LWT
//	hanging action                    LWT                 read
//	retryable outcome                 LWT + LWT           read + write
//	retryable outcome, duplicate      LWT                 read
//	retryable outcome, next attempt   4 LWTs              read + write
//	late duplicate (markers kept)     LWT                 read
//
// The second STRICT LWT is the conditional commit (above). The next
// attempt after a recorded retryable outcome (or pause) finds the record
// with its lease's insert, removes it conditionally, inserts its lease
// and commits.
//
// With WithTerminalFence, every executed step (and null compensation)
// reads the saga's state once more:
//
//	                                  STRICT                     RELAXED_WITH_DEDUP
//	action, first delivery            LWT + read + LWT           read + read + write
//	action, duplicate                 LWT                        read
//	compensation, first               read + LWT + read + LWT    read + read + read + write
//	compensation, action marker lost  read + LWT + read + LWT    read + read + read + write
//	compensation, duplicate           read + LWT                 read + read
//	null compensation                 read + LWT + read          read + LWT + read
//	hanging action                    LWT                        read
//	retryable outcome                 LWT + read + LWT           read + read + write
//	retryable outcome, duplicate      LWT                        read
//	retryable outcome, next attempt   4 LWTs + read              read + read + write
//	late duplicate (markers kept)     LWT                        read
//	late duplicate after cleanup      LWT + read + LWT           read + read
//
// A fenced execution deletes the marker it created with a conditional
// delete (its state and owner): a plain delete, sent again by the driver
// with a fresh write timestamp after its answer was lost, would remove a
// marker that another execution wrote meanwhile.
//
// A command waiting for another execution's lease adds one read per try,
// and in STRICT mode one more LWT once the lease is gone. A STRICT commit
// that finds its lease expired (nobody took the step over) adds the LWT
// that inserts it; a lease taken too late costs a read and a delete to
// release it.
package writeprotect
