package memory

import (
	"context"
	"slices"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// AppendAudit adds rec to its saga's audit trail (eventstore.Auditor),
// after every record of the same or an earlier time; a zero At takes the
// store's clock.
func (s *Store) AppendAudit(ctx context.Context, scope eventstore.Scope, rec eventstore.AuditRecord) error {
	if err := s.check(ctx, eventstore.ValidateAudit(scope, rec)); err != nil {
		return err
	}
	if rec.At.IsZero() {
		rec.At = s.now()
	}
	rec.At = eventstore.StoredTime(rec.At)
	k := txKey{scope, rec.TxID}
	sh := s.shard(rec.TxID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	trail := sh.audits[k]
	i := len(trail)
	for i > 0 && trail[i-1].At.After(rec.At) {
		i--
	}
	sh.audits[k] = slices.Insert(trail, i, rec)
	return nil
}

// AuditTrail returns the latest limit records of a saga's audit trail
// (limit <= 0: all), oldest first.
func (s *Store) AuditTrail(ctx context.Context, scope eventstore.Scope, txID string, limit int) ([]eventstore.AuditRecord, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return nil, err
	}
	sh := s.shard(txID)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	trail := sh.audits[txKey{scope, txID}]
	if limit > 0 && len(trail) > limit {
		trail = trail[len(trail)-limit:]
	}
	if len(trail) == 0 {
		return nil, nil
	}
	return slices.Clone(trail), nil
}
