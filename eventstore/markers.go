package eventstore

import (
	"context"
	"fmt"
	"time"
)

// MarkerState is the state of an execution marker.
type MarkerState string

// Marker states.
const (
	// MarkerLeased: a STRICT guard holds a lease while the step runs.
	MarkerLeased MarkerState = "LEASED"
	// MarkerCommitted: the step ran; Reply holds the reply it produced.
	MarkerCommitted MarkerState = "COMMITTED"
	// MarkerCompensatedEmpty: a compensation arrived for an action that
	// never ran (null compensation); a later action is refused (hanging).
	MarkerCompensatedEmpty MarkerState = "COMPENSATED_EMPTY"
)

// MarkerKey names one execution marker. The partition is (Scope, TxID): one
// partition delete removes every marker of a saga.
type MarkerKey struct {
	Scope
	TxID string
	Span int
	Kind string
	// Site tells which guard wrote it ("worker:<service>" or "orchestrator").
	Site string
}

// Marker is a row of es_execution_markers.
type Marker struct {
	MarkerKey
	State MarkerState
	Owner string
	Reply []byte
	// TTL is the remaining time to live when read (of a lease, or of a
	// committed marker's retention); zero means permanent. PutMarker
	// writes it.
	TTL time.Duration
	// UpdatedAt is set by the store's clock when zero on write.
	UpdatedAt time.Time
}

// Markers is the execution-marker part of Store.
type Markers interface {
	// InsertMarker inserts m if no marker exists for its key, with a TTL of
	// lease (0: permanent). When a marker exists it returns applied=false and
	// the existing marker (with its remaining TTL). Guards insert leases
	// with it, and with the retention as lease the records that must
	// outlive the saga (COMPENSATED_EMPTY, a commit whose lease expired).
	//
	// Leases are whole seconds (Cassandra TTLs): lease is rounded up to the
	// next second, and a remaining TTL is reported rounded up to the next
	// second, so a live lease always reads TTL >= 1s. Owner should be unique
	// per guard attempt: when a Cassandra LWT times out with an unknown
	// outcome the store retries, and a retry that finds the marker written
	// with the same Owner and State reports applied=true.
	InsertMarker(ctx context.Context, m Marker, lease time.Duration) (applied bool, existing Marker, err error)
	// PutMarker writes m, replacing any lease, with a TTL of m.TTL rounded
	// up to whole seconds (0: permanent). Guards record committed markers
	// with a retention TTL (longer than the transaction lifetime), so that
	// they outlive their saga and a late duplicate still finds them.
	//
	// On Cassandra it is a plain write, which replaces a lease only by its
	// newer write timestamp; a lease's LWT round that another LWT on the
	// partition finishes later is re-stamped with that LWT's ballot and can
	// hide the write (writeprotect commits STRICT leases with CommitMarker
	// for this). Sent after an LWT on its key has answered, it is applied
	// after it (the node stamps plain writes and Paxos ballots from one
	// clock), but a re-send by the driver, with a fresh timestamp, overrides
	// an LWT applied in between: writeprotect's RELAXED mode, which records
	// outcomes with it, stops sequential duplicates only. It is never given
	// an explicit timestamp: one from a clock ahead of the node's would hide
	// the LWT inserts that follow it (applied, and invisible).
	PutMarker(ctx context.Context, m Marker) error
	// CommitMarker replaces the live lease that m.Owner holds on m's key
	// with m (a COMMITTED marker with the step's reply), with a TTL of m.TTL
	// rounded up to whole seconds (0: permanent), on one condition: the
	// marker is still that lease. On Cassandra it is one LWT, UPDATE ... IF
	// owner = ? AND state = 'LEASED'. Being an LWT, it first finishes any
	// unfinished Paxos round of the saga's marker partition, so a
	// re-proposed lease cannot hide it afterwards (as it can a PutMarker).
	// If the marker is not that lease (it expired, another execution took
	// the step over, a compensation was recorded empty) nothing is written:
	// applied=false and existing is the marker found, with its State and
	// Owner only (zero, State "", if there is none). As with InsertMarker, a
	// try retried after an unknown outcome that finds m's State and Owner
	// already written reports applied=true.
	CommitMarker(ctx context.Context, m Marker) (applied bool, existing Marker, err error)
	// DeleteMarkerIf deletes the marker on key if it is in state and held by
	// owner (an LWT on Cassandra: DELETE ... IF state = ? AND owner = ?).
	// Otherwise nothing is deleted: applied=false and existing is the
	// marker found, with its State and Owner only (zero if none). A guard
	// removes with it a recorded outcome that a later attempt of the step
	// supersedes, so that of two deliveries of that attempt only one
	// removes it (a plain delete could remove the other's lease).
	DeleteMarkerIf(ctx context.Context, key MarkerKey, state MarkerState, owner string) (applied bool, existing Marker, err error)
	// GetMarker reads a marker; ErrNotFound if absent or expired.
	GetMarker(ctx context.Context, key MarkerKey) (Marker, error)
	// DeleteMarker removes one marker, whatever it holds. On Cassandra it
	// is a plain delete, and the driver sends it again with a fresh write
	// timestamp when its answer is lost: the re-send removes a marker
	// written after the first send (another execution's lease). Guards
	// therefore delete with DeleteMarkerIf, whose re-send its condition
	// refuses.
	DeleteMarker(ctx context.Context, key MarkerKey) error
	// DeleteMarkers removes every marker of a saga with one partition
	// delete. On Cassandra it is a plain write: sent again by the driver
	// with a fresh timestamp, it also removes markers written after its
	// first send. The orchestrator sends it once the saga is terminal
	// (WithMarkerCleanup), when guards with the terminal fence fence every
	// execution of the saga's steps, so a marker removed then lets no step
	// run.
	DeleteMarkers(ctx context.Context, scope Scope, txID string) error
	// ListMarkers returns every live marker of a saga (for tests and admin)
	// ordered by (Span, Kind, Site).
	ListMarkers(ctx context.Context, scope Scope, txID string) ([]Marker, error)
}

// CeilSeconds rounds d up to whole seconds, as Cassandra TTLs are (see
// Markers.InsertMarker); zero or negative d gives 0.
func CeilSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}

// MarkerNotFound returns the ErrNotFound of a GetMarker of key in store
// (the message's prefix, e.g. "cassandra"). The first delivery of every
// command takes this path, so the message is formatted only when read.
func MarkerNotFound(store string, key MarkerKey) error { return &markerNotFound{store, key} }

type markerNotFound struct {
	store string
	key   MarkerKey
}

func (e *markerNotFound) Error() string {
	return fmt.Sprintf("%s: marker %s/%d/%s/%s: %v", e.store, e.key.TxID, e.key.Span, e.key.Kind, e.key.Site, ErrNotFound)
}

func (e *markerNotFound) Unwrap() error { return ErrNotFound }

// MaxMarkerExpiry is the latest time a marker written with a TTL may
// expire: 2038-01-19T03:14:06Z. Cassandra before 5.0, and 5.0 in its
// default storage compatibility mode (CASSANDRA_4), keep expiry times as
// 32-bit seconds and refuse a write whose TTL ends later, whatever the TTL
// (the 20-year TTL limit is not the binding one after early 2018). Stores
// refuse such a TTL with ErrInvalid (see ValidateTTL).
var MaxMarkerExpiry = time.Date(2038, 1, 19, 3, 14, 6, 0, time.UTC)
