package eventstore

import (
	"context"
	"math"
	"time"
)

// MinutesPerDay bounds RecoveryPath.MinuteOfDay: windows are 0..1439.
const MinutesPerDay = 1440

// MaxListDaysYears bounds the calendar years one ListDays call may span (it
// reads one tier-1 partition per year); a wider span fails with ErrInvalid.
const MaxListDaysYears = 4

// RecoveryPath locates one row of tier 5 of the recovery directory.
type RecoveryPath struct {
	// Day is the UTC calendar day (date_of_year), MinuteOfDay the window.
	// Stores keep only the calendar day of Day (UTC midnight).
	Day         time.Time
	MinuteOfDay int
	InstanceID  string
	// Bucket is even for retry and odd for restore.
	Bucket int
}

// Equal reports whether p and q name the same row partition: the same
// calendar day (UTC), window, instance and bucket.
func (p RecoveryPath) Equal(q RecoveryPath) bool {
	return DayOf(p.Day).Equal(DayOf(q.Day)) && p.MinuteOfDay == q.MinuteOfDay &&
		p.InstanceID == q.InstanceID && p.Bucket == q.Bucket
}

// Restore reports whether p is a restore (watchdog) bucket: odd buckets are
// restore, even buckets retry.
func (p RecoveryPath) Restore() bool { return p.Bucket%2 == 1 }

// RecoveryEntry is a tier-5 row: a pointer to a saga to retry or restore.
type RecoveryEntry struct {
	RecoveryPath
	TxID   string
	Domain string
	Status string
	// InstanceToken is the Murmur3 token of InstanceID (equal to CQL
	// token(instance_id)), the tier-3 clustering key that retry nodes
	// slice by. The recovery package computes it; the store only stores it.
	InstanceToken int64
}

// Instance is a row of tier 3 (es_instances_by_recovery_window): a writer
// instance that registered work in a window, clustered by its token.
type Instance struct {
	Token int64
	ID    string
}

// TokenRange is an inclusive range of Murmur3 tokens, Min <= token <= Max.
type TokenRange struct {
	Min, Max int64
}

// FullRing is the whole Murmur3 token ring.
var FullRing = TokenRange{Min: math.MinInt64, Max: math.MaxInt64}

// Contains reports whether token lies in r.
func (r TokenRange) Contains(token int64) bool { return token >= r.Min && token <= r.Max }

// Directory is the 5-tier recovery directory part of Store (seed 000 part
// 4, the design document of the event store; see docs/design.md):
//
//	tier 1 es_days_by_year                      (scope, year)               -> day ASC
//	tier 2 es_recovery_windows_by_day           (scope, day)                -> minute_of_day ASC
//	tier 3 es_instances_by_recovery_window      (scope, day, minute)        -> instance_id_token ASC, instance_id ASC
//	tier 4 es_buckets_by_instance               (scope, day, minute, inst)  -> bucket_index ASC
//	tier 5 es_recovery_transactions_by_instance (scope, day, minute, inst, bucket) -> transaction_id ASC
//
// Every read names one full partition key (ListDays names one partition per
// calendar year it spans) and returns rows in clustering order. Upserts of
// tiers 1-4 are idempotent; deletes of absent rows are no-ops. Writers
// (standard nodes) call RegisterRecovery (or PutDirectoryPath once per
// window and PutRecoveryEntry per saga); retry nodes traverse top-down with
// the List methods and clean up bottom-up with DropBucket, DeleteBucket and
// DeleteInstance; Node-0 compacts tiers 2 and 1 with DeleteWindow and
// DeleteDay after HasInstances reports an empty window.
type Directory interface {
	// RegisterRecovery upserts the tiers 1-4 keys of e's path and inserts
	// its tier-5 row.
	RegisterRecovery(ctx context.Context, scope Scope, e RecoveryEntry) error

	// PutDirectoryPath upserts only the tiers 1-4 keys of path (tier 3 with
	// instanceToken). Writers that remember which paths they already wrote
	// in a window call it once per path and then PutRecoveryEntry per saga.
	PutDirectoryPath(ctx context.Context, scope Scope, path RecoveryPath, instanceToken int64) error
	// PutRecoveryEntry upserts only the tier-5 row of e.
	PutRecoveryEntry(ctx context.Context, scope Scope, e RecoveryEntry) error

	// ListDays returns the tier-1 days from..to (inclusive, calendar days,
	// UTC) in ascending order. It reads one partition per calendar year,
	// at most MaxListDaysYears+1 of them.
	ListDays(ctx context.Context, scope Scope, from, to time.Time) ([]time.Time, error)
	// ListWindows returns the tier-2 minute windows of day, ascending.
	ListWindows(ctx context.Context, scope Scope, day time.Time) ([]int, error)
	// ListInstances returns the tier-3 instances of a window whose token
	// lies in r, ordered by (token, id).
	ListInstances(ctx context.Context, scope Scope, day time.Time, minuteOfDay int, r TokenRange) ([]Instance, error)
	// HasInstances reports whether any tier-3 instance of a window is left,
	// over the whole token ring (Node-0's gate 1).
	HasInstances(ctx context.Context, scope Scope, day time.Time, minuteOfDay int) (bool, error)
	// ListBuckets returns the tier-4 bucket indexes of an instance in a
	// window, ascending.
	ListBuckets(ctx context.Context, scope Scope, day time.Time, minuteOfDay int, instanceID string) ([]int, error)
	// ListRecoveryEntries returns tier-5 rows of the bucket partition at
	// path (path.Bucket included) ordered by TxID: those with TxID >
	// afterTxID ("" starts at the first), at most limit (<= 0: all).
	ListRecoveryEntries(ctx context.Context, scope Scope, path RecoveryPath, afterTxID string, limit int) ([]RecoveryEntry, error)

	// DeleteRecoveryEntry deletes one tier-5 row (the restore watchdog of a
	// saga that ended normally).
	DeleteRecoveryEntry(ctx context.Context, scope Scope, path RecoveryPath, txID string) error
	// DropBucket deletes the whole tier-5 partition at path with one
	// partition delete.
	DropBucket(ctx context.Context, scope Scope, path RecoveryPath) error
	// DeleteBucket deletes the tier-4 row of path's bucket.
	DeleteBucket(ctx context.Context, scope Scope, path RecoveryPath) error
	// DeleteInstance deletes one tier-3 row of a window.
	DeleteInstance(ctx context.Context, scope Scope, day time.Time, minuteOfDay int, inst Instance) error
	// DeleteWindow deletes one tier-2 row (Node-0 compaction).
	DeleteWindow(ctx context.Context, scope Scope, day time.Time, minuteOfDay int) error
	// DeleteDay deletes one tier-1 row (Node-0 compaction).
	DeleteDay(ctx context.Context, scope Scope, day time.Time) error
}

// DayOf returns the UTC calendar day of t (midnight UTC), the form in which
// stores keep RecoveryPath.Day.
func DayOf(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}
