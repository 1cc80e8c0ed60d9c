package cassandra

import (
	"context"
	"errors"
	"fmt"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// keyTTL is ttl as a CQL TTL: whole seconds, rounded up (0: none).
func keyTTL(ttl time.Duration) int { return int(eventstore.CeilSeconds(ttl) / time.Second) }

// keyColumns are the values of es_business_key's non-key columns, in the
// order of cqlInsertKeyIfNotExists and cqlReplaceKeyIf.
func keyColumns(k eventstore.BusinessKey) []any {
	return []any{k.TxID, blob(k.Payload), eventstore.StoredTime(k.CreatedAt), k.Owner, k.Generation, eventstore.StoredTime(k.ClaimedAt), k.Settled}
}

// keyIDValues are the values of es_business_key's partition key.
func keyIDValues(id eventstore.BusinessKeyID) []any {
	return []any{id.Region, id.Cluster, id.Service, id.Domain, id.Key}
}

// keyFromCAS reads the row an IF NOT EXISTS on id returned.
func keyFromCAS(id eventstore.BusinessKeyID, prev map[string]any) eventstore.BusinessKey {
	k := keyCondFromCAS(id, prev)
	k.TxID, _ = prev["transaction_id"].(string)
	if v, ok := prev["payload"].([]byte); ok {
		k.Payload = nilIfEmpty(v)
	}
	k.CreatedAt, _ = prev["created_at"].(time.Time)
	k.Generation, _ = prev["generation"].(int64)
	k.ClaimedAt, _ = prev["claimed_at"].(time.Time)
	return k
}

// keyCondFromCAS reads the columns a refused IF owner = ? AND settled = ?
// on id returned: none when there is no row.
func keyCondFromCAS(id eventstore.BusinessKeyID, prev map[string]any) eventstore.BusinessKey {
	owner, _ := prev["owner"].(string)
	if owner == "" {
		return eventstore.BusinessKey{}
	}
	settled, _ := prev["settled"].(bool)
	return eventstore.BusinessKey{BusinessKeyID: id, Owner: owner, Settled: settled}
}

// casKey sends one conditional statement on a business key, retrying an
// unknown outcome (retryLWT).
func (s *Store) casKey(ctx context.Context, op, stmt string, id eventstore.BusinessKeyID, vals []any,
	read func(prev map[string]any) eventstore.BusinessKey, done func(eventstore.BusinessKey) bool) (bool, eventstore.BusinessKey, error) {
	return retryLWT(ctx, s, op, []any{"domain", id.Domain, "business_key", id.Key}, func(prev map[string]any) (bool, error) {
		return s.lwt(stmt, vals...).MapScanCASContext(ctx, prev)
	}, read, done)
}

// InsertBusinessKey claims k with INSERT ... IF NOT EXISTS USING TTL
// (eventstore.BusinessKeys). A refused insert reports the existing row from
// the LWT's answer, without a second read.
func (s *Store) InsertBusinessKey(ctx context.Context, k eventstore.BusinessKey, ttl time.Duration) (bool, eventstore.BusinessKey, error) {
	if err := s.check(ctx, k.Validate(), eventstore.ValidateLease(ttl), eventstore.ValidateExpiry(s.now(), ttl)); err != nil {
		return false, eventstore.BusinessKey{}, err
	}
	vals := append(append(keyIDValues(k.BusinessKeyID), keyColumns(k)...), keyTTL(ttl))
	return s.casKey(ctx, "insert business key", s.st.insertKeyIfNotExists, k.BusinessKeyID, vals,
		func(prev map[string]any) eventstore.BusinessKey { return keyFromCAS(k.BusinessKeyID, prev) },
		func(found eventstore.BusinessKey) bool { return found.Owner == k.Owner })
}

// ReplaceBusinessKey rewrites every non-key column of k's row with k in one
// LWT, UPDATE ... USING TTL SET ... IF owner = ? AND settled = false
// (eventstore.BusinessKeys). Every column is written, so that none keeps
// the TTL of an earlier write.
func (s *Store) ReplaceBusinessKey(ctx context.Context, k eventstore.BusinessKey, owner string, ttl time.Duration) (bool, eventstore.BusinessKey, error) {
	if err := s.check(ctx, k.Validate(), eventstore.ValidateOwner(owner), eventstore.ValidateLease(ttl), eventstore.ValidateExpiry(s.now(), ttl)); err != nil {
		return false, eventstore.BusinessKey{}, err
	}
	vals := append(append(append([]any{keyTTL(ttl)}, keyColumns(k)...), keyIDValues(k.BusinessKeyID)...), owner, false)
	return s.casKey(ctx, "replace business key", s.st.replaceKeyIf, k.BusinessKeyID, vals,
		func(prev map[string]any) eventstore.BusinessKey { return keyCondFromCAS(k.BusinessKeyID, prev) },
		func(found eventstore.BusinessKey) bool { return found.Owner == k.Owner && found.Settled == k.Settled })
}

// DeleteBusinessKey deletes id's row in one LWT, DELETE ... IF owner = ?
// AND settled = false (eventstore.BusinessKeys).
func (s *Store) DeleteBusinessKey(ctx context.Context, id eventstore.BusinessKeyID, owner string) (bool, eventstore.BusinessKey, error) {
	if err := s.check(ctx, id.Validate(), eventstore.ValidateOwner(owner)); err != nil {
		return false, eventstore.BusinessKey{}, err
	}
	vals := append(keyIDValues(id), owner, false)
	return s.casKey(ctx, "delete business key", s.st.deleteKeyIf, id, vals,
		func(prev map[string]any) eventstore.BusinessKey { return keyCondFromCAS(id, prev) },
		func(found eventstore.BusinessKey) bool { return found.Owner == "" })
}

// GetBusinessKey reads the row of id (eventstore.BusinessKeyReader).
func (s *Store) GetBusinessKey(ctx context.Context, id eventstore.BusinessKeyID) (eventstore.BusinessKey, error) {
	if err := s.check(ctx, id.Validate()); err != nil {
		return eventstore.BusinessKey{}, err
	}
	k := eventstore.BusinessKey{BusinessKeyID: id}
	var payload []byte
	err := s.read(s.st.selectKey, keyIDValues(id)...).
		ScanContext(ctx, &k.TxID, &payload, &k.CreatedAt, &k.Owner, &k.Generation, &k.ClaimedAt, &k.Settled)
	if errors.Is(err, gocql.ErrNotFound) {
		return eventstore.BusinessKey{}, fmt.Errorf("cassandra: business key %q of %s: %w", id.Key, id.Domain, eventstore.ErrNotFound)
	}
	if err != nil {
		return eventstore.BusinessKey{}, s.fail("get business key", err)
	}
	k.Payload = nilIfEmpty(payload)
	k.CreatedAt, k.ClaimedAt = k.CreatedAt.UTC(), k.ClaimedAt.UTC()
	return k, nil
}
