package eventstore

import (
	"context"
	"time"
)

// RecoveryPath locates one row of tier 5 of the recovery directory.
type RecoveryPath struct {
	// Day is the UTC calendar day (date_of_year), MinuteOfDay the window.
	Day         time.Time
	MinuteOfDay int
	InstanceID  string
	// Bucket is even for retry and odd for restore.
	Bucket int
}

// RecoveryEntry is a tier-5 row: a pointer to a saga to retry or restore.
type RecoveryEntry struct {
	RecoveryPath
	TxID   string
	Domain string
	Status string
}

// Directory is the 5-tier recovery directory part of Store (seed 000 part
// 4). The eventstore/cassandra and eventstore/memory implementations fill in
// the tier operations; see the recovery package for their use.
type Directory interface {
	// RegisterRecovery upserts the tiers 1-4 keys of e's path and inserts
	// its tier-5 row.
	RegisterRecovery(ctx context.Context, scope Scope, e RecoveryEntry) error
}
