package eventstore

import (
	"context"
	"fmt"
	"time"
)

// BusinessKeyID names one business key: a caller's idempotency key for
// starting a saga of Domain in Scope (an order id, an Idempotency-Key
// header). It is the key of a row of es_business_key.
type BusinessKeyID struct {
	Scope
	Domain string
	Key    string
}

// Validate checks id's scope (Scope.Validate), then a non-empty Domain and
// Key. It shadows the promoted Scope.Validate.
func (id BusinessKeyID) Validate() error {
	if err := id.Scope.Validate(); err != nil {
		return err
	}
	switch {
	case id.Domain == "":
		return fmt.Errorf("%w: empty business key domain", ErrInvalid)
	case id.Key == "":
		return fmt.Errorf("%w: empty business key", ErrInvalid)
	}
	return nil
}

// BusinessKey is a row of es_business_key: the claim of a business key by
// the Start call that uses it first, naming the saga that call starts.
// The orchestrator's keyed Start writes it before the saga row; its fields
// let a later Start with the same key find that saga, or, if the claimer
// died before creating it, create it in its place (orchestrator package,
// "Business keys").
type BusinessKey struct {
	BusinessKeyID
	// TxID is the saga the key names, fixed by the first claim.
	TxID string
	// Payload is the domain entity the first claim encoded: a takeover
	// starts the saga from it, not from its own caller's entity.
	Payload []byte
	// CreatedAt is the saga's CreatedAt, fixed by the first claim.
	CreatedAt time.Time
	// Owner names the Start call that holds the claim: unique per claim
	// and per takeover. The conditional writes below compare it.
	Owner string
	// Generation counts the takeovers (0 for the first claim). A takeover
	// creates the saga with it as the Fence, so that its write wins over
	// a late create of an earlier claimer.
	Generation int64
	// ClaimedAt is when Owner claimed the key (the first claim or a
	// takeover): another Start takes the claim over only a grace period
	// after it.
	ClaimedAt time.Time
	// Settled means the owner created the saga and confirmed that it still
	// held the claim: the claim can no longer be taken over or released.
	Settled bool
}

// Validate checks k's id (BusinessKeyID.Validate), then that TxID and
// Owner are set and Generation lies in 0..MaxFence. It shadows the
// promoted Validate of the id.
func (k BusinessKey) Validate() error {
	if err := k.BusinessKeyID.Validate(); err != nil {
		return err
	}
	switch {
	case k.TxID == "":
		return fmt.Errorf("%w: business key without a transaction id", ErrInvalid)
	case k.Owner == "":
		return fmt.Errorf("%w: business key without an owner", ErrInvalid)
	case k.Generation < 0 || k.Generation > MaxFence:
		return fmt.Errorf("%w: business key generation %d outside 0..%d", ErrInvalid, k.Generation, MaxFence)
	}
	return nil
}

// BusinessKeys is an optional part of a Store: the claims of business keys
// that make a keyed Start idempotent. Both stores of this module implement
// it (the Cassandra store with lightweight transactions on es_business_key,
// serial consistency LOCAL_SERIAL by default); the orchestrator checks for
// it at run time, and a keyed Start on a store without it fails. The
// conformance suite checks it on stores that have it.
//
// Every write is conditional, and the three share one condition: the row
// exists, its Owner is the given owner and it is not Settled. Rows expire
// after the TTL of their last write (whole seconds, as marker TTLs, see
// Markers.InsertMarker; 0: never), which must end no later than
// MaxMarkerExpiry. Arguments are checked as BusinessKey.Validate and
// ValidateLease say (ErrInvalid). When a Cassandra LWT times out with an
// unknown outcome the store sends it again, and a retry that finds its own
// effect (the row with its Owner, and its Settled for a replace; no row for
// a delete) reports applied=true.
type BusinessKeys interface {
	// InsertBusinessKey inserts k if no live row has its id, with a TTL of
	// ttl. When one exists it returns applied=false and the row found,
	// every field set.
	InsertBusinessKey(ctx context.Context, k BusinessKey, ttl time.Duration) (applied bool, existing BusinessKey, err error)
	// ReplaceBusinessKey replaces every field of the row of k's id with k,
	// with a TTL of ttl, if the row is held by owner and not settled. The
	// owner settles its claim with it (k: its own row with Settled set),
	// and another Start takes the claim over (k: a new Owner, the next
	// Generation, a new ClaimedAt). Otherwise nothing is written:
	// applied=false and existing holds the Owner and Settled of the row
	// found (zero if there is none).
	ReplaceBusinessKey(ctx context.Context, k BusinessKey, owner string, ttl time.Duration) (applied bool, existing BusinessKey, err error)
	// DeleteBusinessKey deletes the row of id if it is held by owner and not
	// settled: a claimer whose saga was not created releases the key with
	// it. Otherwise nothing is deleted: applied=false and existing holds
	// the Owner and Settled of the row found (zero if there is none).
	DeleteBusinessKey(ctx context.Context, id BusinessKeyID, owner string) (applied bool, existing BusinessKey, err error)
}

// BusinessKeyReader is an optional part of a Store: reading the claim of a
// business key, to find the saga it names (sagactl list --business-key).
// Both stores of this module implement it; the conformance suite checks it
// on stores that have it.
type BusinessKeyReader interface {
	// GetBusinessKey returns the live row of id, every field set, or an
	// error wrapping ErrNotFound when there is none (never claimed,
	// released or expired). id is checked as BusinessKeyID.Validate says
	// (ErrInvalid). The Cassandra store reads at its read consistency: a
	// claim whose LWT is still in progress may not be seen yet.
	GetBusinessKey(ctx context.Context, id BusinessKeyID) (BusinessKey, error)
}

// ValidateOwner checks the owner of a conditional business-key write: not
// empty.
func ValidateOwner(owner string) error {
	if owner == "" {
		return fmt.Errorf("%w: empty business key owner", ErrInvalid)
	}
	return nil
}
