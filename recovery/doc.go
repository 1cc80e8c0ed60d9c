// Package recovery makes stalled sagas heal themselves. It covers two
// failures: a step that failed retryably and must be sent again later
// (retry), and a saga whose orchestrator process vanished mid-way without
// leaving any trace of an error (restore). Both go through the same
// directory in the event store and the same retry nodes.
//
// # Windows
//
// Time is cut into windows of a fixed interval (1 minute by default; any
// whole number of minutes dividing a day, or for tests a few seconds).
// Three windows matter at any moment. The window containing now, W, is
// still open. Retries are written ahead, into W+delay (delay >= 1), and
// restore watchdogs at most K windows ahead (600 by default): the
// orchestrator writes a saga's watchdog into the first window sealed after
// its first step's timeout plus RestoreMargin (Writer.RegisterWatchdog,
// Windows.DelayUntil), and a pickup that finds the saga moving registers
// it again where the saga's current step is due, so that a saga stalled by
// a crash is restored about a step timeout after its last transition
// (within one window and a scan more) at no cost to its transitions; a
// step without a timeout is watched K windows ahead. Retry nodes read
// only windows that are over ("sealed": their end is not after now). Since
// writers only ever write windows that have not started and readers only
// read windows that have ended, they never touch the same rows at the same
// time and need no lock. Windows roll over midnight UTC: the window after
// the day's last is the next day's first. See Windows for how a window is
// named in the store (day + slot) and what happens with second intervals.
//
// # Buckets
//
// Each writer process has its own instance id (a random UUID per start)
// and writes its rows into buckets of its own: per window, retries go to
// even buckets (0, 2, 4, ...) and restore watchdogs to odd ones (1, 3, 5,
// ...). A process counts the rows it put in a window and starts the next
// bucket of that parity every bucket-size rows, so no partition grows
// without bound and no counter is shared between processes. Restore rows
// are deleted one by one when their sagas end (every saga has one), which
// leaves tombstones; keeping them out of the retry buckets keeps retry
// reads free of tombstones.
//
// # Tiers
//
// The store keeps the directory as five tables, each naming the
// partitions of the next, so a reader always knows the exact partition key
// it asks for:
//
//	tier 1  days with work              (scope, year)              -> day
//	tier 2  windows of a day            (scope, day)               -> slot
//	tier 3  writer instances of a window (scope, day, slot)        -> token(instance), instance
//	tier 4  buckets of an instance      (scope, day, slot, inst)   -> bucket
//	tier 5  sagas of a bucket           (scope, day, slot, inst, bucket) -> transaction id
//
// A Writer writes tiers 1-4 of a bucket once (with its first row, in one
// batch) and then one tier-5 row per saga: one round trip per
// registration. It remembers which buckets it wrote until their window is
// sealed.
//
// # Traversal and clean-up
//
// A retry node's Engine walks the tiers top-down: days from today minus
// lookback-days, sealed windows in order, the instances whose token lies in
// the node's token range (leased from the ring coordinator, or the whole
// ring for a node alone), their buckets, and their rows in pages. Each row
// is handed to a Redriver (the orchestrator) with bounded concurrency,
// under a context that ends when the node's range expires; none is handed
// over with less than WithRedriveMargin of the range left. It
// cleans up bottom-up: a bucket whose rows were all handled loses its
// tier-5 partition in one delete and then its tier-4 row; an instance with
// no bucket left loses its tier-3 row. A bucket with a failure, or cut
// short by shutdown or an expired range, is kept whole for the next scan.
// Tiers 2 and 1 are shared by all nodes, so only Node-0 (the owner of the
// lowest token range) deletes them, and only when no tier-3 row of the
// window is left anywhere on the ring and the window is over.
//
// # Using it from an orchestrator
//
// At saga start, before the first command is published, register the
// saga's restore watchdog and store its path as the saga's RestorePath.
// Writer.RegisterRestore writes it alone, before the saga is created (one
// extra round trip); Writer.RegisterRestoreVia hands the row to a callback
// that writes it with the create in one statement
// (eventstore.WatchedCreator), which is what this module's orchestrator
// does (and what it does when that statement fails). On a retryable failure (or a command that cannot be
// published), persist RETRY_PENDING, then call Writer.RegisterRetry with
// the delay of Config.RetryPolicy(domain, endpoint).Delay(attempt), unless
// the policy is Exhausted. At a terminal state call Writer.Unregister with
// the saga's RestorePath. A retry node also runs an Engine whose Redriver
// re-drives what it is given (see Redriver); sagas older than the
// transaction lifetime (Config.Expired) are frozen as DISABLED instead.
package recovery
