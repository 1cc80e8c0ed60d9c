package cassandra

import (
	"context"
	"sync"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// maxDeleteBatch bounds the deletes of one batch: each is a row tombstone
// of about 60 bytes in the partition's mutation, so a full batch stays
// well under Cassandra's batch_size_warn_threshold (5 KiB by default).
const maxDeleteBatch = 32

// entryDeletes is the group commit of DeleteRecoveryEntry. Every saga that
// ends deletes its restore watchdog, and the watchdogs of the sagas an
// orchestrator instance starts in one recovery window share one tier-5
// partition (one bucket holds up to recovery.bucket-size of them). While a
// delete of a partition is in flight, further deletes of that partition
// queue; when it returns, the queue goes out as one single-partition
// unlogged batch (one mutation, applied atomically on each replica), up to
// maxDeleteBatch per batch. A lone delete is sent at once as a plain
// statement, so nothing waits for a timer: at concurrency 1 nothing
// changes, under load many sagas share a round trip.
//
// Each caller still learns whether its own delete was applied: it returns
// with the error of the statement or batch that carried it.
type entryDeletes struct {
	s  *Store
	mu sync.Mutex
	// parts holds the partitions with a delete in flight, each with the
	// groups queued behind it in arrival order (each at most
	// maxDeleteBatch ids).
	parts map[partKey][]*deleteGroup

	// sent, if set (tests), is called before each statement or batch with
	// the transaction ids it carries.
	sent func(txIDs []string)
}

// partKey names a tier-5 partition; path.Day is its UTC day (DayOf).
type partKey struct {
	scope eventstore.Scope
	path  eventstore.RecoveryPath
}

// deleteGroup is the deletes one batch carries, and its result.
type deleteGroup struct {
	txIDs []string
	done  chan struct{} // closed once err is set
	err   error
}

// delete deletes the tier-5 row (scope, path, txID), alone or in a batch
// with the other deletes of its partition queued behind one in flight. It
// returns when that statement or batch returns, or when ctx ends first (the
// delete may then still be applied).
func (d *entryDeletes) delete(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath, txID string) error {
	path.Day = eventstore.DayOf(path.Day)
	k := partKey{scope, path}
	d.mu.Lock()
	if d.parts == nil {
		d.parts = make(map[partKey][]*deleteGroup)
	}
	waiting, busy := d.parts[k]
	if !busy {
		// Nothing of this partition in flight: send at once, alone, on
		// the caller's context.
		d.parts[k] = nil
		d.mu.Unlock()
		err := d.send(ctx, k, []string{txID})
		d.next(k)
		return err
	}
	var g *deleteGroup
	if n := len(waiting); n > 0 && len(waiting[n-1].txIDs) < maxDeleteBatch {
		g = waiting[n-1]
	} else {
		g = &deleteGroup{done: make(chan struct{})}
		d.parts[k] = append(waiting, g)
	}
	g.txIDs = append(g.txIDs, txID)
	d.mu.Unlock()
	select {
	case <-g.done:
		return g.err
	case <-ctx.Done():
		return d.s.fail("delete recovery entry", ctx.Err())
	}
}

// next starts the batch of the first group waiting behind k's delete that
// has just returned, or marks k idle when none waits.
func (d *entryDeletes) next(k partKey) {
	d.mu.Lock()
	waiting := d.parts[k]
	if len(waiting) == 0 {
		delete(d.parts, k)
		d.mu.Unlock()
		return
	}
	g := waiting[0]
	waiting[0] = nil
	d.parts[k] = waiting[1:]
	d.mu.Unlock()
	go func() {
		// The group's callers each wait on their own context; the batch
		// they share is bounded by the driver's request timeout.
		g.err = d.send(context.Background(), k, g.txIDs)
		close(g.done)
		d.next(k)
	}()
}

// send deletes txIDs from partition k: one statement, or one unlogged
// single-partition batch.
func (d *entryDeletes) send(ctx context.Context, k partKey, txIDs []string) error {
	if d.sent != nil {
		d.sent(txIDs)
	}
	s, sc, p := d.s, k.scope, k.path
	if len(txIDs) == 1 {
		return s.exec(ctx, "delete recovery entry", s.st.deleteEntry, sc.Region, sc.Cluster, sc.Service,
			p.Day, p.MinuteOfDay, p.InstanceID, p.Bucket, txIDs[0])
	}
	b := s.batch(gocql.UnloggedBatch)
	for _, id := range txIDs {
		addIdempotent(b, s.st.deleteEntry, sc.Region, sc.Cluster, sc.Service,
			p.Day, p.MinuteOfDay, p.InstanceID, p.Bucket, id)
	}
	if err := b.ExecContext(ctx); err != nil {
		return s.fail("delete recovery entries", err)
	}
	return nil
}
