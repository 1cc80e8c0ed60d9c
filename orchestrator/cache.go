package orchestrator

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// DefaultStateCacheSize bounds the sagas whose state an orchestrator keeps
// in memory (WithStateCacheSize).
const DefaultStateCacheSize = 200_000

// stateCache keeps the last persisted state of the sagas whose replies this
// orchestrator applies, so that applying a reply costs no read of the saga
// row. It is an optimisation only: a reply that does not match the cached
// state (a duplicate, or a saga another instance moved on) is checked
// against the store.
//
// Replies are applied by the instance that owns the saga's callback
// partition, so the cache holds only the sagas of the partitions this
// instance owns, one shard per partition: a saga's partition is computed
// from its transaction id as the workers' producers choose it (Kafka's
// default partitioner: murmur2 of the key), an entry is put only while its
// partition is owned (nothing is put before Run's first assignment: the
// partition may be another instance's then, which may run the saga on
// before this one is given it), and a shard is dropped whole the
// moment its partition is revoked or lost, before the partition's last
// replies are drained. So an entry never outlives this instance's
// ownership of its partition: a saga whose replies another instance
// applied meanwhile is not found here in a state they moved it from, and
// a saga started here but run elsewhere leaves nothing here. The one
// move another instance makes without a reply from a state cached here, a
// retry node disabling a saga, comes only after the saga's transaction
// lifetime, and handleRecord does not trust the cached state of a saga
// past it. A reply that comes on another partition than the
// one computed (a custom partitioner, partitions added) turns the cache
// off until the next assignment. A share group, where any instance applies
// any reply and each reads the saga under its claim, keeps no cache.
//
// Entries are dropped when a saga ends, parks or fails to persist.
type stateCache struct {
	limit int64
	n     atomic.Int64 // entries in every shard
	part  kgo.TopicPartitioner

	mu sync.Mutex // serialises the changes of view
	// view is what the cache holds now (nil: nothing, the cache is off).
	// It is replaced, never modified: lookups take no lock.
	view atomic.Pointer[cacheView]
}

// cacheView is the cache's shards at one time.
type cacheView struct {
	// pending is set until Run's first assignment: nothing is cached
	// then (which partitions are owned, and since when, is unknown).
	pending bool
	// parts maps each owned callback partition to its shard, of a topic
	// of n partitions.
	parts map[int32]*shard
	n     int32
}

// shard holds the sagas of one owned callback partition.
type shard struct {
	m sync.Map // txID -> eventstore.Transaction
	n atomic.Int64
	// mu is read-held by a put or drop, and held to mark the shard dead
	// when its partition goes, so that nothing lands in a dropped shard
	// after its entries were uncounted.
	mu   sync.RWMutex
	dead bool
}

// enabled reports whether the cache may hold anything.
func (c *stateCache) enabled() bool { return c.limit > 0 }

// partitionOf is the callback partition of txID's replies in a topic of n
// partitions (n > 0).
func (c *stateCache) partitionOf(txID string, n int32) int32 {
	return int32(c.part.Partition(&kgo.Record{Key: []byte(txID)}, int(n)))
}

// shardOf returns the shard txID goes to and the partition of its
// replies; nil if it is not cached here.
func (c *stateCache) shardOf(txID string) (*shard, int32) {
	v := c.view.Load()
	if v == nil || v.pending {
		return nil, -1
	}
	p := c.partitionOf(txID, v.n)
	return v.parts[p], p
}

// owns reports whether txID's callback partition is known to be owned
// here (false when the cache is off or has no assignment yet).
func (c *stateCache) owns(txID string) bool {
	if !c.enabled() {
		return false
	}
	s, _ := c.shardOf(txID)
	return s != nil
}

// get returns the cached state of txID, whose reply came on partition.
func (c *stateCache) get(txID string, partition int32) (eventstore.Transaction, bool) {
	if !c.enabled() {
		return eventstore.Transaction{}, false
	}
	s, p := c.shardOf(txID)
	if s == nil {
		return eventstore.Transaction{}, false
	}
	if p != partition {
		// Replies are not partitioned as computed: nothing here can be
		// trusted.
		c.off()
		return eventstore.Transaction{}, false
	}
	v, ok := s.m.Load(txID)
	if !ok {
		return eventstore.Transaction{}, false
	}
	return v.(eventstore.Transaction), true
}

// put caches tx if it waits for a reply and its partition is owned here,
// and forgets it otherwise.
func (c *stateCache) put(tx *eventstore.Transaction) {
	if !c.enabled() {
		return
	}
	if !awaitsReply(tx.State) {
		c.drop(tx.TxID)
		return
	}
	s, _ := c.shardOf(tx.TxID)
	if s == nil {
		return
	}
	cp := *tx
	// The caller goes on mutating its slices (append to Completed): keep
	// a copy of what was persisted.
	cp.Completed = append([]eventstore.CompletedSpan(nil), tx.Completed...)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.dead {
		return
	}
	if _, loaded := s.m.Swap(tx.TxID, cp); !loaded {
		if c.n.Add(1) > c.limit {
			s.m.Delete(tx.TxID)
			c.n.Add(-1)
			return
		}
		s.n.Add(1)
	}
}

// drop forgets txID.
func (c *stateCache) drop(txID string) {
	if !c.enabled() {
		return
	}
	s, _ := c.shardOf(txID)
	if s == nil {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, loaded := s.m.LoadAndDelete(txID); loaded && !s.dead {
		s.n.Add(-1)
		c.n.Add(-1)
	}
}

// pending reports whether the cache waits for Run's first assignment.
func (c *stateCache) pending() bool {
	v := c.view.Load()
	return v != nil && v.pending
}

// expectAssignment makes the cache hold nothing until Run's first
// assignment (see cacheView.pending).
func (c *stateCache) expectAssignment() {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(&cacheView{pending: true})
}

// assign starts shards for the newly owned partitions, of a callback
// topic of n partitions (0: unknown, which turns the cache off until the
// next assignment).
func (c *stateCache) assign(partitions []int32, n int32) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.view.Load()
	if n <= 0 {
		c.setLocked(nil)
		return
	}
	next := &cacheView{parts: map[int32]*shard{}, n: n}
	if cur != nil && !cur.pending && cur.n == n {
		for p, s := range cur.parts {
			next.parts[p] = s
		}
	}
	for _, p := range partitions {
		next.parts[p] = &shard{} // newly owned: whatever was here is stale
	}
	c.setLocked(next)
}

// revoke drops the shards of partitions no longer owned.
func (c *stateCache) revoke(partitions []int32) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.view.Load()
	if cur == nil || cur.pending {
		return
	}
	next := &cacheView{parts: make(map[int32]*shard, len(cur.parts)), n: cur.n}
	for p, s := range cur.parts {
		next.parts[p] = s
	}
	for _, p := range partitions {
		if s := next.parts[p]; s != nil {
			delete(next.parts, p)
			c.kill(s)
		}
	}
	c.view.Store(next)
}

// off drops everything: nothing is cached until the next assignment (which
// learns the partition count again).
func (c *stateCache) off() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(nil)
}

// setLocked replaces the view by next, dropping the shards next does not
// keep.
func (c *stateCache) setLocked(next *cacheView) {
	cur := c.view.Swap(next)
	if cur == nil {
		return
	}
	for p, s := range cur.parts {
		if next == nil || next.parts[p] != s {
			c.kill(s)
		}
	}
}

// kill marks s dropped and uncounts its entries.
func (c *stateCache) kill(s *shard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dead {
		s.dead = true
		c.n.Add(-s.n.Load())
	}
}

// len is how many sagas the cache holds.
func (c *stateCache) len() int { return int(c.n.Load()) }
