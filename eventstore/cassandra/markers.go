package cassandra

import (
	"context"
	"errors"
	"fmt"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

func markerValues(m eventstore.Marker, leaseUntil, now time.Time) []any {
	updated := m.UpdatedAt
	if updated.IsZero() {
		updated = now
	}
	return []any{
		m.Region, m.Cluster, m.Service, m.TxID, m.Span, m.Kind, m.Site,
		string(m.State), m.Owner, blob(m.Reply), eventstore.StoredTime(leaseUntil), eventstore.StoredTime(updated),
	}
}

// expiry is the lease_until of a marker written at now with a TTL of ttl
// seconds: when it expires (zero for none). Every write with a TTL stores
// it, so that a refused conditional insert reports the remaining TTL of
// whatever it found without a second read (a marker committed by an
// earlier version, which left it empty, reads as permanent until it
// expires).
func expiry(now time.Time, ttl int) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return now.Add(time.Duration(ttl) * time.Second)
}

// InsertMarker inserts m with INSERT ... IF NOT EXISTS USING TTL (serial
// consistency LOCAL_SERIAL by default). A refused insert reports the
// existing marker from the LWT's answer, its remaining TTL from the
// lease_until column (its expiry), without a second read.
func (s *Store) InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (bool, eventstore.Marker, error) {
	now := s.now()
	if err := s.check(ctx, m.MarkerKey.Validate(), eventstore.ValidateLease(lease), eventstore.ValidateExpiry(now, lease)); err != nil {
		return false, eventstore.Marker{}, err
	}
	ttl := int(eventstore.CeilSeconds(lease) / time.Second)
	vals := append(markerValues(m, expiry(now, ttl), now), ttl)
	return s.casMarker(ctx, "insert marker", s.st.insertMarkerIfNotExists, m.MarkerKey, vals,
		func(prev map[string]any) eventstore.Marker { return markerFromCAS(m.MarkerKey, prev, s.now()) }, wrote(m))
}

// markerFromCAS reads the existing row an IF NOT EXISTS returned.
func markerFromCAS(k eventstore.MarkerKey, prev map[string]any, now time.Time) eventstore.Marker {
	m := eventstore.Marker{MarkerKey: k}
	if v, ok := prev["state"].(string); ok {
		m.State = eventstore.MarkerState(v)
	}
	m.Owner, _ = prev["owner"].(string)
	if v, ok := prev["reply"].([]byte); ok {
		m.Reply = nilIfEmpty(v)
	}
	m.UpdatedAt, _ = prev["updated_at"].(time.Time)
	if until, ok := prev["lease_until"].(time.Time); ok && !until.IsZero() {
		// The row is alive, so it has at least a second left on the
		// server's clock whatever ours says.
		m.TTL = max(time.Second, eventstore.CeilSeconds(until.Sub(now)))
	}
	return m
}

// PutMarker writes m with a TTL of m.TTL (0: none), replacing any lease;
// lease_until records its expiry (see InsertMarker).
func (s *Store) PutMarker(ctx context.Context, m eventstore.Marker) error {
	now := s.now()
	if err := s.check(ctx, m.MarkerKey.Validate(), eventstore.ValidateExpiry(now, m.TTL)); err != nil {
		return err
	}
	ttl := int(eventstore.CeilSeconds(m.TTL) / time.Second)
	return s.exec(ctx, "put marker", s.st.putMarker, append(markerValues(m, expiry(now, ttl), now), ttl)...)
}

// CommitMarker replaces the live lease of m.Owner on m's key with m in one
// LWT: UPDATE ... USING TTL SET (every non-key column) IF state = 'LEASED'
// AND owner = ?. Every column is written, so that none keeps the lease's
// TTL; the row outlives the lease's row marker by its cells. lease_until
// records the commit's expiry (see InsertMarker). See eventstore.Markers.
func (s *Store) CommitMarker(ctx context.Context, m eventstore.Marker) (bool, eventstore.Marker, error) {
	now := s.now()
	if err := s.check(ctx, m.MarkerKey.Validate(), eventstore.ValidateExpiry(now, m.TTL)); err != nil {
		return false, eventstore.Marker{}, err
	}
	ttl := int(eventstore.CeilSeconds(m.TTL) / time.Second)
	updated := m.UpdatedAt
	if updated.IsZero() {
		updated = now
	}
	vals := []any{ttl, string(m.State), m.Owner, blob(m.Reply), eventstore.StoredTime(expiry(now, ttl)), eventstore.StoredTime(updated),
		m.Region, m.Cluster, m.Service, m.TxID, m.Span, m.Kind, m.Site, string(eventstore.MarkerLeased), m.Owner}
	return s.casMarker(ctx, "commit marker", s.st.commitMarker, m.MarkerKey, vals, condReader(m.MarkerKey), wrote(m))
}

// wrote recognises, in the marker a retried LWT finds, the effect of its
// earlier try that wrote m (an answer lost): m's state and owner.
func wrote(m eventstore.Marker) func(eventstore.Marker) bool {
	return func(existing eventstore.Marker) bool { return existing.Owner == m.Owner && existing.State == m.State }
}

// DeleteMarkerIf deletes the marker on key if it is in state and held by
// owner, in one LWT. See eventstore.Markers.
func (s *Store) DeleteMarkerIf(ctx context.Context, key eventstore.MarkerKey, state eventstore.MarkerState, owner string) (bool, eventstore.Marker, error) {
	if err := s.check(ctx, key.Validate()); err != nil {
		return false, eventstore.Marker{}, err
	}
	vals := []any{key.Region, key.Cluster, key.Service, key.TxID, key.Span, key.Kind, key.Site, string(state), owner}
	return s.casMarker(ctx, "delete marker if", s.st.deleteMarkerIf, key, vals, condReader(key), func(existing eventstore.Marker) bool {
		return existing.State == ""
	})
}

// casMarker sends a conditional statement on one marker, retrying an
// unknown outcome; read turns the columns of a refusal into the marker
// found, and a retry that is refused but finds what done recognises (the
// earlier try's effect) reports applied.
func (s *Store) casMarker(ctx context.Context, op, stmt string, key eventstore.MarkerKey, vals []any,
	read func(prev map[string]any) eventstore.Marker, done func(eventstore.Marker) bool) (bool, eventstore.Marker, error) {
	return s.retryCAS(ctx, op, key, func(prev map[string]any) (bool, error) {
		return s.lwt(stmt, vals...).MapScanCASContext(ctx, prev)
	}, read, done)
}

// retryCAS is casMarker's loop around try (see retryLWT).
func (s *Store) retryCAS(ctx context.Context, op string, key eventstore.MarkerKey, try func(prev map[string]any) (bool, error),
	read func(prev map[string]any) eventstore.Marker, done func(eventstore.Marker) bool) (bool, eventstore.Marker, error) {
	return retryLWT(ctx, s, op, []any{"tx", key.TxID, "span", key.Span}, try, read, done)
}

// retryLWT sends a conditional statement with try, which sends it once
// and fills prev with a refusal's columns, retrying an unknown outcome; read
// turns the columns of a refusal into the row found, and a retry that is
// refused but finds what done recognises (the earlier try's effect) reports
// applied. logAttrs name the row in the debug log of a retry.
//
// Every outcome the driver reports has its handling:
//   - applied: (true, nil);
//   - not applied: (false, the row found, nil), or (true, nil) when a retry
//     finds the effect of an earlier try of its own (done);
//   - a WriteTimeout (type CAS: the Paxos round timed out, the proposal
//     may have been accepted; or the commit's), a ReadTimeout, a
//     CAS_WRITE_UNKNOWN, Unavailable (which the commit phase can raise
//     after a quorum accepted the proposal) or no response: the outcome is
//     unknown. The LWT is sent again (up to lwtTries tries in all): a
//     retry first completes any round the earlier try left in flight,
//     then applies or finds its effect, which is the SERIAL read that
//     learns the outcome. When every try fails so, the error wraps
//     eventstore.ErrOutcomeUnknown, the first unknown try's driver error and
//     the last one: the write
//     may have landed (and may still land when a quorum completes it);
//   - anything else: s.fail's classification (permanent, closed, or as
//     the driver reported it) of a try whose predecessors, if any, were
//     all unknown outcomes, so the result wraps ErrOutcomeUnknown too when
//     an earlier try was unknown.
//
// Once a try has failed in a way worth retrying, its outcome is unknown,
// so a later failure is never reported as eventstore.ErrClosed, which says
// that nothing was written: Close cutting the retries short leaves the
// outcome unknown.
func retryLWT[R any](ctx context.Context, s *Store, op string, logAttrs []any, try func(prev map[string]any) (bool, error),
	read func(prev map[string]any) R, done func(R) bool) (bool, R, error) {
	var zero R
	var unknown error // the first try whose outcome is unknown
	tries := 0
	fail := func(err error) error {
		if unknown == nil {
			return s.fail(op, err)
		}
		if errors.Is(s.fail(op, err), eventstore.ErrClosed) {
			return fmt.Errorf("cassandra: %s: %w: a try failed (%w) and the store closed before a retry could tell (%v)", op, eventstore.ErrOutcomeUnknown, unknown, err)
		}
		if tries == 1 {
			return fmt.Errorf("cassandra: %s: %w: %w", op, eventstore.ErrOutcomeUnknown, err)
		}
		return fmt.Errorf("cassandra: %s: %w after %d tries (the first: %w): %w", op, eventstore.ErrOutcomeUnknown, tries, unknown, err)
	}
	for attempt := 0; ; attempt++ {
		prev := make(map[string]any)
		tries++
		applied, err := try(prev)
		if err == nil {
			if applied {
				return true, zero, nil
			}
			existing := read(prev)
			if attempt > 0 && done(existing) {
				return true, zero, nil
			}
			return false, existing, nil
		}
		if lwtRetryable(err) && unknown == nil {
			unknown = err
		}
		if !lwtRetryable(err) || attempt+1 >= s.lwtTries {
			return false, zero, fail(err)
		}
		s.log.DebugContext(ctx, "cassandra: LWT outcome unknown, retrying", append([]any{"op", op, "attempt", attempt + 1, "err", err}, logAttrs...)...)
		if err := backoff(ctx, attempt); err != nil {
			return false, zero, fail(err)
		}
	}
}

// condReader reads the columns a refused IF state = ? AND owner = ? on k
// returned (see condMarker).
func condReader(k eventstore.MarkerKey) func(map[string]any) eventstore.Marker {
	return func(prev map[string]any) eventstore.Marker { return condMarker(k, prev) }
}

// condMarker reads the columns a refused IF state = ? AND owner = ?
// returned: none when there is no row.
func condMarker(k eventstore.MarkerKey, prev map[string]any) eventstore.Marker {
	state, _ := prev["state"].(string)
	if state == "" {
		return eventstore.Marker{}
	}
	owner, _ := prev["owner"].(string)
	return eventstore.Marker{MarkerKey: k, State: eventstore.MarkerState(state), Owner: owner}
}

func scanMarker(scan func(...any) error, scope eventstore.Scope, txID string) (eventstore.Marker, error) {
	m := eventstore.Marker{MarkerKey: eventstore.MarkerKey{Scope: scope, TxID: txID}}
	var state string
	var ttl int
	if err := scan(&m.Span, &m.Kind, &m.Site, &state, &m.Owner, &m.Reply, &m.UpdatedAt, &ttl); err != nil {
		return eventstore.Marker{}, err
	}
	m.State = eventstore.MarkerState(state)
	m.Reply = nilIfEmpty(m.Reply)
	m.TTL = time.Duration(ttl) * time.Second
	return m, nil
}

// GetMarker reads a live marker with its remaining TTL (TTL(state)).
func (s *Store) GetMarker(ctx context.Context, key eventstore.MarkerKey) (eventstore.Marker, error) {
	if err := s.check(ctx, key.Validate()); err != nil {
		return eventstore.Marker{}, err
	}
	q := s.read(s.st.selectMarker, key.Region, key.Cluster, key.Service, key.TxID, key.Span, key.Kind, key.Site)
	m, err := scanMarker(func(dest ...any) error { return q.ScanContext(ctx, dest...) }, key.Scope, key.TxID)
	if errors.Is(err, gocql.ErrNotFound) {
		return eventstore.Marker{}, eventstore.MarkerNotFound("cassandra", key)
	}
	if err != nil {
		return eventstore.Marker{}, s.fail("get marker", err)
	}
	return m, nil
}

// DeleteMarker deletes one marker row.
func (s *Store) DeleteMarker(ctx context.Context, key eventstore.MarkerKey) error {
	if err := s.check(ctx, key.Validate()); err != nil {
		return err
	}
	return s.exec(ctx, "delete marker", s.st.deleteMarker, key.Region, key.Cluster, key.Service, key.TxID, key.Span, key.Kind, key.Site)
}

// DeleteMarkers removes every marker of a saga with one partition delete.
func (s *Store) DeleteMarkers(ctx context.Context, scope eventstore.Scope, txID string) error {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return err
	}
	return s.exec(ctx, "delete markers", s.st.deleteMarkers, scope.Region, scope.Cluster, scope.Service, txID)
}

// ListMarkers returns the live markers of a saga in clustering order
// (span, kind, site).
func (s *Store) ListMarkers(ctx context.Context, scope eventstore.Scope, txID string) ([]eventstore.Marker, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return nil, err
	}
	iter := s.read(s.st.selectMarkers, scope.Region, scope.Cluster, scope.Service, txID).IterContext(ctx)
	var out []eventstore.Marker
	for {
		m, err := scanMarker(func(dest ...any) error {
			if !iter.Scan(dest...) {
				return errDone
			}
			return nil
		}, scope, txID)
		if err != nil {
			break
		}
		out = append(out, m)
	}
	if err := iter.Close(); err != nil {
		return nil, s.fail("list markers", err)
	}
	return out, nil
}

var errDone = errors.New("cassandra: no more rows")
