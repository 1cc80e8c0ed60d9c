package cassandra

import (
	"context"
	"slices"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// AppendAudit inserts rec into es_admin_audit (eventstore.Auditor), keyed
// by its time and a timeuuid made here: records of the same millisecond are
// both kept, and the driver's re-send of the insert writes the same row. A
// zero At takes the store's clock. No TTL: see schema.cql.
func (s *Store) AppendAudit(ctx context.Context, scope eventstore.Scope, rec eventstore.AuditRecord) error {
	if err := s.check(ctx, eventstore.ValidateAudit(scope, rec)); err != nil {
		return err
	}
	at := rec.At
	if at.IsZero() {
		at = s.now()
	}
	at = eventstore.StoredTime(at)
	return s.exec(ctx, "append audit", s.st.insertAudit, scope.Region, scope.Cluster, scope.Service, rec.TxID,
		at, gocql.UUIDFromTime(at), rec.Actor, rec.Action, rec.Detail, rec.Result, rec.Error)
}

// AuditTrail reads a saga's audit trail, oldest first: its whole partition,
// or its latest limit rows (read newest first, then reversed).
func (s *Store) AuditTrail(ctx context.Context, scope eventstore.Scope, txID string, limit int) ([]eventstore.AuditRecord, error) {
	if err := s.check(ctx, eventstore.ValidateKey(scope, txID)); err != nil {
		return nil, err
	}
	q := s.read(s.st.selectAudit, scope.Region, scope.Cluster, scope.Service, txID)
	if limit > 0 {
		q = s.read(s.st.selectAuditLatest, scope.Region, scope.Cluster, scope.Service, txID, limit)
	}
	iter := q.IterContext(ctx)
	var out []eventstore.AuditRecord
	var r eventstore.AuditRecord
	var at time.Time
	for iter.Scan(&at, &r.Actor, &r.Action, &r.Detail, &r.Result, &r.Error) {
		r.TxID, r.At = txID, at.UTC()
		out = append(out, r)
		r = eventstore.AuditRecord{}
	}
	if err := iter.Close(); err != nil {
		return nil, s.fail("audit trail", err)
	}
	if limit > 0 {
		slices.Reverse(out)
	}
	return out, nil
}
