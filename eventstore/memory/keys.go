package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// keyTable holds the business keys (eventstore.BusinessKeys): one row per
// id, with its expiry (zero: none), under one lock (keyed Starts are few
// next to transitions).
type keyTable struct {
	mu   sync.Mutex
	rows map[eventstore.BusinessKeyID]keyRec
	// puts counts the writes since the last sweep of expired rows.
	puts int
}

// sweepEvery is how many writes pass between two sweeps of the expired
// rows, which nothing else removes.
const sweepEvery = 4096

type keyRec struct {
	k       eventstore.BusinessKey
	expires time.Time
}

// live returns the row of id if it exists and has not expired at now.
func (t *keyTable) live(id eventstore.BusinessKeyID, now time.Time) (eventstore.BusinessKey, bool) {
	r, ok := t.rows[id]
	if !ok || !r.expires.IsZero() && !now.Before(r.expires) {
		return eventstore.BusinessKey{}, false
	}
	return cloneKey(r.k), true
}

// put writes k with a TTL of ttl (0: none) at now, expiring as Cassandra
// expires it (see leaseExpiry).
func (t *keyTable) put(k eventstore.BusinessKey, ttl time.Duration, now time.Time) {
	r := keyRec{k: cloneKey(k)}
	r.k.CreatedAt, r.k.ClaimedAt = eventstore.StoredTime(k.CreatedAt), eventstore.StoredTime(k.ClaimedAt)
	if ttl > 0 {
		r.expires = leaseExpiry(now, ttl)
	}
	t.rows[k.BusinessKeyID] = r
	if t.puts++; t.puts >= sweepEvery {
		t.puts = 0
		for id, r := range t.rows {
			if !r.expires.IsZero() && !now.Before(r.expires) {
				delete(t.rows, id)
			}
		}
	}
}

func cloneKey(k eventstore.BusinessKey) eventstore.BusinessKey {
	k.Payload = cloneBytes(k.Payload)
	return k
}

// keyCond is what a refused conditional write reports of the row it found:
// its Owner and Settled, as Cassandra returns the columns of the condition.
func keyCond(cur eventstore.BusinessKey, alive bool) eventstore.BusinessKey {
	if !alive {
		return eventstore.BusinessKey{}
	}
	return eventstore.BusinessKey{BusinessKeyID: cur.BusinessKeyID, Owner: cur.Owner, Settled: cur.Settled}
}

// InsertBusinessKey inserts k unless a live row has its id; see
// eventstore.BusinessKeys.
func (s *Store) InsertBusinessKey(ctx context.Context, k eventstore.BusinessKey, ttl time.Duration) (bool, eventstore.BusinessKey, error) {
	now := s.now()
	if err := s.check(ctx, k.Validate(), eventstore.ValidateLease(ttl), eventstore.ValidateExpiry(now, ttl)); err != nil {
		return false, eventstore.BusinessKey{}, err
	}
	s.keys.mu.Lock()
	defer s.keys.mu.Unlock()
	if cur, ok := s.keys.live(k.BusinessKeyID, now); ok {
		return false, cur, nil
	}
	s.keys.put(k, ttl, now)
	return true, eventstore.BusinessKey{}, nil
}

// ReplaceBusinessKey replaces the row of k's id with k if owner holds it
// unsettled; see eventstore.BusinessKeys.
func (s *Store) ReplaceBusinessKey(ctx context.Context, k eventstore.BusinessKey, owner string, ttl time.Duration) (bool, eventstore.BusinessKey, error) {
	now := s.now()
	if err := s.check(ctx, k.Validate(), eventstore.ValidateOwner(owner), eventstore.ValidateLease(ttl), eventstore.ValidateExpiry(now, ttl)); err != nil {
		return false, eventstore.BusinessKey{}, err
	}
	s.keys.mu.Lock()
	defer s.keys.mu.Unlock()
	cur, ok := s.keys.live(k.BusinessKeyID, now)
	if !ok || cur.Owner != owner || cur.Settled {
		return false, keyCond(cur, ok), nil
	}
	s.keys.put(k, ttl, now)
	return true, eventstore.BusinessKey{}, nil
}

// DeleteBusinessKey deletes the row of id if owner holds it unsettled; see
// eventstore.BusinessKeys.
func (s *Store) DeleteBusinessKey(ctx context.Context, id eventstore.BusinessKeyID, owner string) (bool, eventstore.BusinessKey, error) {
	if err := s.check(ctx, id.Validate(), eventstore.ValidateOwner(owner)); err != nil {
		return false, eventstore.BusinessKey{}, err
	}
	now := s.now()
	s.keys.mu.Lock()
	defer s.keys.mu.Unlock()
	cur, ok := s.keys.live(id, now)
	if !ok || cur.Owner != owner || cur.Settled {
		return false, keyCond(cur, ok), nil
	}
	delete(s.keys.rows, id)
	return true, eventstore.BusinessKey{}, nil
}

// GetBusinessKey returns the live row of id; see
// eventstore.BusinessKeyReader.
func (s *Store) GetBusinessKey(ctx context.Context, id eventstore.BusinessKeyID) (eventstore.BusinessKey, error) {
	if err := s.check(ctx, id.Validate()); err != nil {
		return eventstore.BusinessKey{}, err
	}
	s.keys.mu.Lock()
	defer s.keys.mu.Unlock()
	k, ok := s.keys.live(id, s.now())
	if !ok {
		return eventstore.BusinessKey{}, fmt.Errorf("memory: business key %q of %s: %w", id.Key, id.Domain, eventstore.ErrNotFound)
	}
	return k, nil
}
