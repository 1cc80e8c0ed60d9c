package cassandra

import (
	"context"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// pathStatements adds the tiers 1-4 upserts of p to b.
func (s *Store) pathStatements(b *gocql.Batch, scope eventstore.Scope, p eventstore.RecoveryPath, token int64) {
	day := eventstore.DayOf(p.Day)
	r, c, sv := scope.Region, scope.Cluster, scope.Service
	addIdempotent(b, s.st.upsertDay, r, c, sv, day.Year(), day)
	addIdempotent(b, s.st.upsertWindow, r, c, sv, day, p.MinuteOfDay)
	addIdempotent(b, s.st.upsertInstance, r, c, sv, day, p.MinuteOfDay, token, p.InstanceID)
	addIdempotent(b, s.st.upsertBucket, r, c, sv, day, p.MinuteOfDay, p.InstanceID, p.Bucket)
}

func (s *Store) entryValues(scope eventstore.Scope, e eventstore.RecoveryEntry) []any {
	return []any{
		scope.Region, scope.Cluster, scope.Service, eventstore.DayOf(e.Day), e.MinuteOfDay, e.InstanceID, e.Bucket,
		e.TxID, e.Domain, e.Status, e.InstanceToken,
	}
}

// RegisterRecovery writes tiers 1-4 of e's path and its tier-5 row in one
// logged batch: the five partitions differ, and the batch log guarantees
// the tier-5 row is never left without the directory keys that lead to it.
func (s *Store) RegisterRecovery(ctx context.Context, scope eventstore.Scope, e eventstore.RecoveryEntry) error {
	if err := s.check(ctx, scope.Validate(), e.Validate()); err != nil {
		return err
	}
	b := s.batch(gocql.LoggedBatch)
	s.pathStatements(b, scope, e.RecoveryPath, e.InstanceToken)
	addIdempotent(b, s.st.upsertEntry, s.entryValues(scope, e)...)
	if err := b.ExecContext(ctx); err != nil {
		return s.fail("register recovery", err)
	}
	return nil
}

// PutDirectoryPath upserts tiers 1-4 of path in one logged batch.
func (s *Store) PutDirectoryPath(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath, instanceToken int64) error {
	if err := s.check(ctx, scope.Validate(), path.Validate()); err != nil {
		return err
	}
	b := s.batch(gocql.LoggedBatch)
	s.pathStatements(b, scope, path, instanceToken)
	if err := b.ExecContext(ctx); err != nil {
		return s.fail("put directory path", err)
	}
	return nil
}

// PutRecoveryEntry upserts the tier-5 row of e.
func (s *Store) PutRecoveryEntry(ctx context.Context, scope eventstore.Scope, e eventstore.RecoveryEntry) error {
	if err := s.check(ctx, scope.Validate(), e.Validate()); err != nil {
		return err
	}
	return s.exec(ctx, "put recovery entry", s.st.upsertEntry, s.entryValues(scope, e)...)
}

// ListDays reads one tier-1 partition per calendar year of from..to.
func (s *Store) ListDays(ctx context.Context, scope eventstore.Scope, from, to time.Time) ([]time.Time, error) {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateDaySpan(from, to)); err != nil {
		return nil, err
	}
	lo, hi := eventstore.DayOf(from), eventstore.DayOf(to)
	var out []time.Time
	for y := lo.Year(); y <= hi.Year(); y++ {
		iter := s.read(s.st.selectDays, scope.Region, scope.Cluster, scope.Service, y, lo, hi).IterContext(ctx)
		var d time.Time
		for iter.Scan(&d) {
			out = append(out, eventstore.DayOf(d))
		}
		if err := iter.Close(); err != nil {
			return nil, s.fail("list days", err)
		}
	}
	return out, nil
}

func (s *Store) ints(ctx context.Context, op string, q *gocql.Query) ([]int, error) {
	iter := q.IterContext(ctx)
	var out []int
	var v int
	for iter.Scan(&v) {
		out = append(out, v)
	}
	if err := iter.Close(); err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

// ListWindows reads the tier-2 partition of day.
func (s *Store) ListWindows(ctx context.Context, scope eventstore.Scope, day time.Time) ([]int, error) {
	if err := s.check(ctx, scope.Validate()); err != nil {
		return nil, err
	}
	return s.ints(ctx, "list windows", s.read(s.st.selectWindows, scope.Region, scope.Cluster, scope.Service, eventstore.DayOf(day)))
}

// ListInstances reads the token slice r of a tier-3 partition.
func (s *Store) ListInstances(ctx context.Context, scope eventstore.Scope, day time.Time, minuteOfDay int, r eventstore.TokenRange) ([]eventstore.Instance, error) {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateWindow(minuteOfDay)); err != nil {
		return nil, err
	}
	iter := s.read(s.st.selectInstances, scope.Region, scope.Cluster, scope.Service, eventstore.DayOf(day), minuteOfDay, r.Min, r.Max).IterContext(ctx)
	var out []eventstore.Instance
	var inst eventstore.Instance
	for iter.Scan(&inst.Token, &inst.ID) {
		out = append(out, inst)
	}
	if err := iter.Close(); err != nil {
		return nil, s.fail("list instances", err)
	}
	return out, nil
}

// HasInstances reads at most one row of a tier-3 partition.
func (s *Store) HasInstances(ctx context.Context, scope eventstore.Scope, day time.Time, minuteOfDay int) (bool, error) {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateWindow(minuteOfDay)); err != nil {
		return false, err
	}
	iter := s.read(s.st.anyInstance, scope.Region, scope.Cluster, scope.Service, eventstore.DayOf(day), minuteOfDay).IterContext(ctx)
	var id string
	found := iter.Scan(&id)
	if err := iter.Close(); err != nil {
		return false, s.fail("has instances", err)
	}
	return found, nil
}

// ListBuckets reads a tier-4 partition.
func (s *Store) ListBuckets(ctx context.Context, scope eventstore.Scope, day time.Time, minuteOfDay int, instanceID string) ([]int, error) {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateWindow(minuteOfDay), eventstore.ValidateInstanceID(instanceID)); err != nil {
		return nil, err
	}
	return s.ints(ctx, "list buckets", s.read(s.st.selectBuckets, scope.Region, scope.Cluster, scope.Service, eventstore.DayOf(day), minuteOfDay, instanceID))
}

// ListRecoveryEntries reads a page of a tier-5 partition.
func (s *Store) ListRecoveryEntries(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath, afterTxID string, limit int) ([]eventstore.RecoveryEntry, error) {
	if err := s.check(ctx, scope.Validate(), path.Validate()); err != nil {
		return nil, err
	}
	path.Day = eventstore.DayOf(path.Day)
	iter := s.read(s.st.selectEntries, scope.Region, scope.Cluster, scope.Service, path.Day, path.MinuteOfDay, path.InstanceID, path.Bucket, afterTxID, cqlLimit(limit)).IterContext(ctx)
	var out []eventstore.RecoveryEntry
	e := eventstore.RecoveryEntry{RecoveryPath: path}
	for iter.Scan(&e.TxID, &e.Domain, &e.Status, &e.InstanceToken) {
		out = append(out, e)
	}
	if err := iter.Close(); err != nil {
		return nil, s.fail("list recovery entries", err)
	}
	return out, nil
}

// DeleteRecoveryEntry deletes one tier-5 row. Deletes of one partition
// that arrive while another of it is in flight are sent together when it
// returns, in one single-partition batch (a group commit: a saga's end
// deletes its watchdog, and the watchdogs of the sagas an instance starts
// in one window share a partition). Each call returns with the result of
// the statement or batch that carried its delete.
func (s *Store) DeleteRecoveryEntry(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath, txID string) error {
	if err := s.check(ctx, scope.Validate(), eventstore.RecoveryEntry{RecoveryPath: path, TxID: txID}.Validate()); err != nil {
		return err
	}
	return s.deletes.delete(ctx, scope, path, txID)
}

// DropBucket deletes a tier-5 partition (one partition tombstone).
func (s *Store) DropBucket(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath) error {
	if err := s.check(ctx, scope.Validate(), path.Validate()); err != nil {
		return err
	}
	return s.exec(ctx, "drop bucket", s.st.dropBucket, scope.Region, scope.Cluster, scope.Service,
		eventstore.DayOf(path.Day), path.MinuteOfDay, path.InstanceID, path.Bucket)
}

// DeleteBucket deletes a tier-4 row.
func (s *Store) DeleteBucket(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath) error {
	if err := s.check(ctx, scope.Validate(), path.Validate()); err != nil {
		return err
	}
	return s.exec(ctx, "delete bucket", s.st.deleteBucket, scope.Region, scope.Cluster, scope.Service,
		eventstore.DayOf(path.Day), path.MinuteOfDay, path.InstanceID, path.Bucket)
}

// DeleteInstance deletes a tier-3 row.
func (s *Store) DeleteInstance(ctx context.Context, scope eventstore.Scope, day time.Time, minuteOfDay int, inst eventstore.Instance) error {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateWindow(minuteOfDay), eventstore.ValidateInstanceID(inst.ID)); err != nil {
		return err
	}
	return s.exec(ctx, "delete instance", s.st.deleteInstance, scope.Region, scope.Cluster, scope.Service,
		eventstore.DayOf(day), minuteOfDay, inst.Token, inst.ID)
}

// DeleteWindow deletes a tier-2 row.
func (s *Store) DeleteWindow(ctx context.Context, scope eventstore.Scope, day time.Time, minuteOfDay int) error {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateWindow(minuteOfDay)); err != nil {
		return err
	}
	return s.exec(ctx, "delete window", s.st.deleteWindow, scope.Region, scope.Cluster, scope.Service, eventstore.DayOf(day), minuteOfDay)
}

// DeleteDay deletes a tier-1 row.
func (s *Store) DeleteDay(ctx context.Context, scope eventstore.Scope, day time.Time) error {
	if err := s.check(ctx, scope.Validate()); err != nil {
		return err
	}
	d := eventstore.DayOf(day)
	return s.exec(ctx, "delete day", s.st.deleteDay, scope.Region, scope.Cluster, scope.Service, d.Year(), d)
}
