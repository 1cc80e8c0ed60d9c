package memory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// live reports whether r is alive at now and fills its remaining TTL.
func (r markerRec) live(now time.Time) (eventstore.Marker, bool) {
	m := r.m
	m.Reply = cloneBytes(m.Reply)
	if r.expires.IsZero() {
		m.TTL = 0
		return m, true
	}
	left := r.expires.Sub(now)
	if left <= 0 {
		return eventstore.Marker{}, false
	}
	m.TTL = eventstore.CeilSeconds(left)
	return m, true
}

// leaseExpiry is when a marker inserted at now with a TTL of lease
// disappears, as Cassandra computes it: the insert's time truncated to
// whole seconds plus the TTL in whole seconds (lease rounded up). A 2s
// lease inserted at x.9 is gone at x+2, 1.1s later.
func leaseExpiry(now time.Time, lease time.Duration) time.Time {
	return now.Truncate(time.Second).Add(eventstore.CeilSeconds(lease))
}

func (s *Store) markerRec(m eventstore.Marker, lease time.Duration, now time.Time) markerRec {
	m.TTL = 0
	m.Reply = cloneBytes(m.Reply)
	if m.UpdatedAt.IsZero() {
		m.UpdatedAt = now
	}
	m.UpdatedAt = eventstore.StoredTime(m.UpdatedAt)
	r := markerRec{m: m}
	if lease > 0 {
		r.expires = leaseExpiry(now, lease)
	}
	return r
}

// markerKeys returns the partition and clustering keys of k's marker.
func markerKeys(k eventstore.MarkerKey) (txKey, markerCK) {
	return txKey{k.Scope, k.TxID}, markerCK{k.Span, k.Kind, k.Site}
}

// InsertMarker inserts m unless a live marker has its key; see
// eventstore.Markers.
func (s *Store) InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (bool, eventstore.Marker, error) {
	now := s.now()
	if err := s.check(ctx, m.MarkerKey.Validate(), eventstore.ValidateLease(lease), eventstore.ValidateExpiry(now, lease)); err != nil {
		return false, eventstore.Marker{}, err
	}
	pk, ck := markerKeys(m.MarkerKey)
	sh := s.shard(m.TxID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	part := sh.markers[pk]
	if old, ok := part[ck]; ok {
		if cur, alive := old.live(now); alive {
			return false, cur, nil
		}
	}
	if part == nil {
		part = make(map[markerCK]markerRec)
		sh.markers[pk] = part
	}
	part[ck] = s.markerRec(m, lease, now)
	return true, eventstore.Marker{}, nil
}

// PutMarker writes m with a TTL of m.TTL (0: permanent), replacing any
// lease.
func (s *Store) PutMarker(ctx context.Context, m eventstore.Marker) error {
	now := s.now()
	if err := s.check(ctx, m.MarkerKey.Validate(), eventstore.ValidateExpiry(now, m.TTL)); err != nil {
		return err
	}
	pk, ck := markerKeys(m.MarkerKey)
	sh := s.shard(m.TxID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	part := sh.markers[pk]
	if part == nil {
		part = make(map[markerCK]markerRec)
		sh.markers[pk] = part
	}
	part[ck] = s.markerRec(m, eventstore.CeilSeconds(m.TTL), now)
	return nil
}

// CommitMarker replaces the live lease of m.Owner on m's key with m; see
// eventstore.Markers.
func (s *Store) CommitMarker(ctx context.Context, m eventstore.Marker) (bool, eventstore.Marker, error) {
	now := s.now()
	if err := s.check(ctx, m.MarkerKey.Validate(), eventstore.ValidateExpiry(now, m.TTL)); err != nil {
		return false, eventstore.Marker{}, err
	}
	pk, ck := markerKeys(m.MarkerKey)
	sh := s.shard(m.TxID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cur, alive := liveRec(sh.markers[pk], ck, now)
	if !alive || cur.State != eventstore.MarkerLeased || cur.Owner != m.Owner {
		return false, condResult(cur, alive), nil
	}
	sh.markers[pk][ck] = s.markerRec(m, eventstore.CeilSeconds(m.TTL), now)
	return true, eventstore.Marker{}, nil
}

// DeleteMarkerIf deletes the marker on key if it is in state and held by
// owner; see eventstore.Markers.
func (s *Store) DeleteMarkerIf(ctx context.Context, key eventstore.MarkerKey, state eventstore.MarkerState, owner string) (bool, eventstore.Marker, error) {
	if err := s.check(ctx, key.Validate()); err != nil {
		return false, eventstore.Marker{}, err
	}
	now := s.now()
	pk, ck := markerKeys(key)
	sh := s.shard(key.TxID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	part := sh.markers[pk]
	cur, alive := liveRec(part, ck, now)
	if !alive || cur.State != state || cur.Owner != owner {
		return false, condResult(cur, alive), nil
	}
	delete(part, ck)
	if len(part) == 0 {
		delete(sh.markers, pk)
	}
	return true, eventstore.Marker{}, nil
}

// liveRec returns the live marker of part at ck, if any.
func liveRec(part map[markerCK]markerRec, ck markerCK, now time.Time) (eventstore.Marker, bool) {
	r, ok := part[ck]
	if !ok {
		return eventstore.Marker{}, false
	}
	return r.live(now)
}

// condResult is what a refused conditional statement reports of the
// marker it found: its key, State and Owner, as Cassandra returns the
// columns of the condition.
func condResult(cur eventstore.Marker, alive bool) eventstore.Marker {
	if !alive {
		return eventstore.Marker{}
	}
	return eventstore.Marker{MarkerKey: cur.MarkerKey, State: cur.State, Owner: cur.Owner}
}

// GetMarker reads a live marker.
func (s *Store) GetMarker(ctx context.Context, key eventstore.MarkerKey) (eventstore.Marker, error) {
	if err := s.check(ctx, key.Validate()); err != nil {
		return eventstore.Marker{}, err
	}
	now := s.now()
	pk, ck := markerKeys(key)
	sh := s.shard(key.TxID)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if r, ok := sh.markers[pk][ck]; ok {
		if m, alive := r.live(now); alive {
			return m, nil
		}
	}
	return eventstore.Marker{}, eventstore.MarkerNotFound("memory", key)
}

// DeleteMarker removes one marker.
func (s *Store) DeleteMarker(ctx context.Context, key eventstore.MarkerKey) error {
	if err := s.check(ctx, key.Validate()); err != nil {
		return err
	}
	pk, ck := markerKeys(key)
	sh := s.shard(key.TxID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if part := sh.markers[pk]; part != nil {
		delete(part, ck)
		if len(part) == 0 {
			delete(sh.markers, pk)
		}
	}
	return nil
}

// DeleteMarkers removes every marker of a saga.
func (s *Store) DeleteMarkers(ctx context.Context, scope eventstore.Scope, txID string) error {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return err
	}
	sh := s.shard(txID)
	sh.mu.Lock()
	delete(sh.markers, txKey{scope, txID})
	sh.mu.Unlock()
	return nil
}

// ListMarkers returns the live markers of a saga ordered by (Span, Kind,
// Site). Expired leases found on the way are purged.
func (s *Store) ListMarkers(ctx context.Context, scope eventstore.Scope, txID string) ([]eventstore.Marker, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return nil, err
	}
	now := s.now()
	pk := txKey{scope, txID}
	sh := s.shard(txID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	part := sh.markers[pk]
	var out []eventstore.Marker
	for ck, r := range part {
		m, alive := r.live(now)
		if !alive {
			delete(part, ck)
			continue
		}
		out = append(out, m)
	}
	if part != nil && len(part) == 0 {
		delete(sh.markers, pk)
	}
	slices.SortFunc(out, func(a, b eventstore.Marker) int {
		return cmp.Or(cmp.Compare(a.Span, b.Span), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Site, b.Site))
	})
	return out, nil
}
