package eventstore

import (
	"fmt"
	"time"
)

// Argument validation shared by the Store implementations. Every function
// returns nil or an error wrapping ErrInvalid whose text names the problem;
// implementations prefix it with their package name. Where a value has
// several problems, the first in the order listed in the doc comment is
// reported.

// ValidateKey checks a saga's key: scope (see Scope.Validate), then a
// non-empty txID.
func ValidateKey(scope Scope, txID string) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	return validateTxID(txID)
}

func validateTxID(txID string) error {
	if txID == "" {
		return fmt.Errorf("%w: empty transaction id", ErrInvalid)
	}
	return nil
}

// Validate checks tx's key (ValidateKey), if set its RestorePath
// (RecoveryPath.Validate; the error then ends in "(restore path)"), then
// its Version, Fence and Definition ranges (MaxVersion, MaxFence,
// MaxDefinition). It
// shadows the promoted Scope.Validate, which checks the scope alone.
func (tx Transaction) Validate() error {
	if err := ValidateKey(tx.Scope, tx.TxID); err != nil {
		return err
	}
	if p := tx.RestorePath; p != nil {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("%w (restore path)", err)
		}
	}
	if tx.Version < 0 || tx.Version > MaxVersion {
		return fmt.Errorf("%w: version %d outside 0..%d", ErrInvalid, tx.Version, MaxVersion)
	}
	if tx.Fence < 0 || tx.Fence > MaxFence {
		return fmt.Errorf("%w: fence %d outside 0..%d", ErrInvalid, tx.Fence, MaxFence)
	}
	if tx.Definition < 0 || tx.Definition > MaxDefinition {
		return fmt.Errorf("%w: definition version %d outside 0..%d", ErrInvalid, tx.Definition, MaxDefinition)
	}
	return nil
}

// ValidateWatched checks the arguments of
// WatchedCreator.CreateTransactionWatched, in this order: tx
// (Transaction.Validate), watchdog (RecoveryEntry.Validate), watchdog's
// TxID equal to tx's, watchdog in a restore (odd) bucket, and
// tx.RestorePath naming watchdog's path.
func ValidateWatched(tx Transaction, watchdog RecoveryEntry) error {
	if err := tx.Validate(); err != nil {
		return err
	}
	if err := watchdog.Validate(); err != nil {
		return fmt.Errorf("%w (watchdog)", err)
	}
	switch {
	case watchdog.TxID != tx.TxID:
		return fmt.Errorf("%w: watchdog of transaction %q written with %q", ErrInvalid, watchdog.TxID, tx.TxID)
	case !watchdog.Restore():
		return fmt.Errorf("%w: watchdog in retry bucket %d (restore buckets are odd)", ErrInvalid, watchdog.Bucket)
	case tx.RestorePath == nil || !tx.RestorePath.Equal(watchdog.RecoveryPath):
		return fmt.Errorf("%w: the transaction's restore path does not name its watchdog", ErrInvalid)
	}
	return nil
}

// ValidateFor checks that t may be written for transaction txID: its TxID
// is empty (it then takes txID) or equal to txID. A nil t (no tryout) is
// valid.
func (t *Tryout) ValidateFor(txID string) error {
	if t != nil && t.TxID != "" && t.TxID != txID {
		return fmt.Errorf("%w: tryout of transaction %q written with %q", ErrInvalid, t.TxID, txID)
	}
	return nil
}

// Validate checks k's saga key (ValidateKey), then that Kind and Site are
// set. It shadows the promoted Scope.Validate.
func (k MarkerKey) Validate() error {
	if err := ValidateKey(k.Scope, k.TxID); err != nil {
		return err
	}
	if k.Kind == "" || k.Site == "" {
		return fmt.Errorf("%w: marker kind and site must be set", ErrInvalid)
	}
	return nil
}

// ValidateLease checks an InsertMarker lease: zero (permanent) or positive.
func ValidateLease(lease time.Duration) error {
	if lease < 0 {
		return fmt.Errorf("%w: negative lease %v", ErrInvalid, lease)
	}
	return nil
}

// ValidateExpiry checks the TTL of a marker written at now: zero or
// negative (permanent) passes; a positive ttl, rounded up to whole seconds
// and counted from now truncated to whole seconds (as Cassandra counts
// it), must end no later than MaxMarkerExpiry.
func ValidateExpiry(now time.Time, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	if end := now.Truncate(time.Second).Add(CeilSeconds(ttl)); end.After(MaxMarkerExpiry) {
		return fmt.Errorf("%w: a marker TTL of %v written at %s would end at %s, after %s, the latest expiry Cassandra stores "+
			"(it keeps expiry times as 32-bit seconds before 5.0, and in 5.0's default storage compatibility mode): at most %v is accepted now",
			ErrInvalid, ttl, now.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), MaxMarkerExpiry.Format(time.RFC3339),
			MaxMarkerExpiry.Sub(now.Truncate(time.Second)))
	}
	return nil
}

// ValidateWindow checks a recovery window: 0 <= minuteOfDay <
// MinutesPerDay.
func ValidateWindow(minuteOfDay int) error {
	if minuteOfDay < 0 || minuteOfDay >= MinutesPerDay {
		return fmt.Errorf("%w: minute of day %d outside 0..%d", ErrInvalid, minuteOfDay, MinutesPerDay-1)
	}
	return nil
}

// ValidateInstanceID checks that a writer instance id is not empty.
func ValidateInstanceID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty instance id", ErrInvalid)
	}
	return nil
}

// ValidateDaySpan checks a ListDays range: the calendar years (UTC) of from
// and to are at most MaxListDaysYears apart.
func ValidateDaySpan(from, to time.Time) error {
	if DayOf(to).Year()-DayOf(from).Year() > MaxListDaysYears {
		return fmt.Errorf("%w: ListDays spans more than %d years", ErrInvalid, MaxListDaysYears)
	}
	return nil
}

// Validate checks p: its window (ValidateWindow), its instance id
// (ValidateInstanceID), then a non-negative Bucket. Day is not checked:
// stores keep its calendar day.
func (p RecoveryPath) Validate() error {
	if err := ValidateWindow(p.MinuteOfDay); err != nil {
		return err
	}
	if err := ValidateInstanceID(p.InstanceID); err != nil {
		return err
	}
	if p.Bucket < 0 {
		return fmt.Errorf("%w: negative bucket %d", ErrInvalid, p.Bucket)
	}
	return nil
}

// Validate checks e's path (RecoveryPath.Validate), then a non-empty TxID.
func (e RecoveryEntry) Validate() error {
	if err := e.RecoveryPath.Validate(); err != nil {
		return err
	}
	return validateTxID(e.TxID)
}
