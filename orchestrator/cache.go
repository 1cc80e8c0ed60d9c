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
// partition is owned, and a shard is dropped whole the moment its
// partition is revoked or lost, before the partition's last replies are
// drained. So an entry never outlives this instance's ownership of its
// partition: a saga that another instance moved on since cannot be found
// here in a state it left, and a saga started here but run elsewhere
// leaves nothing here. A reply that comes on another partition than the
// one computed (a custom partitioner, partitions added) turns the cache
// off until the next assignment. A share group, where any instance applies
// any reply and each reads the saga under its claim, keeps no cache.
//
// Entries are dropped when a saga ends, parks or fails to persist.
type stateCache struct {
	limit int64
	n     atomic.Int64 // entries in every shard
	part  kgo.TopicPartitioner

	mu sync.Mutex // serialises assign, revoke and off
	// shards maps each owned partition to its shard; nil while the cache
	// is off. It is replaced, never modified: lookups take no lock.
	shards     atomic.Pointer[map[int32]*shard]
	partitions atomic.Int32 // of the callback topic; 0 while unknown
}

// shard holds the sagas of one owned callback partition.
type shard struct {
	m sync.Map // txID -> eventstore.Transaction
	n atomic.Int64
	// live is read-held by a put, and cleared under the write lock when
	// the partition goes, so that no put lands in a dropped shard after
	// its entries were uncounted.
	mu   sync.RWMutex
	dead bool
}

// enabled reports whether the cache may hold anything.
func (c *stateCache) enabled() bool { return c.limit > 0 }

// partitionOf is the callback partition of txID's replies (-1 while the
// partition count is unknown).
func (c *stateCache) partitionOf(txID string) int32 {
	n := c.partitions.Load()
	if n <= 0 {
		return -1
	}
	return int32(c.part.Partition(&kgo.Record{Key: []byte(txID)}, int(n)))
}

// shardOf returns the shard of txID's partition, nil if it is not owned.
func (c *stateCache) shardOf(txID string) (*shard, int32) {
	m := c.shards.Load()
	if m == nil {
		return nil, -1
	}
	p := c.partitionOf(txID)
	return (*m)[p], p
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

// assign starts empty shards for the newly owned partitions, of a callback
// topic of n partitions.
func (c *stateCache) assign(partitions []int32, n int32) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n != c.partitions.Load() {
		// Replies are partitioned anew: forget everything.
		c.clearLocked()
		c.partitions.Store(n)
	}
	if n <= 0 {
		return
	}
	next := map[int32]*shard{}
	if cur := c.shards.Load(); cur != nil {
		for p, s := range *cur {
			next[p] = s
		}
	}
	for _, p := range partitions {
		if old := next[p]; old != nil {
			c.kill(old)
		}
		next[p] = &shard{}
	}
	c.shards.Store(&next)
}

// revoke drops the shards of partitions no longer owned.
func (c *stateCache) revoke(partitions []int32) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.shards.Load()
	if cur == nil {
		return
	}
	next := make(map[int32]*shard, len(*cur))
	for p, s := range *cur {
		next[p] = s
	}
	for _, p := range partitions {
		if s := next[p]; s != nil {
			delete(next, p)
			c.kill(s)
		}
	}
	c.shards.Store(&next)
}

// off drops every shard and keeps the cache off until the next assignment
// (which learns the partition count again).
func (c *stateCache) off() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
	c.partitions.Store(0)
}

// clearLocked drops every shard.
func (c *stateCache) clearLocked() {
	if cur := c.shards.Swap(nil); cur != nil {
		for _, s := range *cur {
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
