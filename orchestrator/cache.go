package orchestrator

import (
	"sync"
	"sync/atomic"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// DefaultStateCacheSize bounds the sagas whose state an orchestrator keeps
// in memory (WithStateCacheSize).
const DefaultStateCacheSize = 200_000

// stateCache keeps the last persisted state of the sagas this orchestrator
// is driving, so that applying a reply costs no read of the saga row. It is
// an optimisation only: a reply that does not match the cached state (a
// duplicate, or a saga another instance moved on) is checked against the
// store, and a stale cached state that does match can only make the
// orchestrator repeat a transition, whose write is then fenced by its
// version (eventstore.Store.Transition) and whose command the worker's guard
// deduplicates. Entries are dropped when a saga ends, parks or fails to
// persist.
type stateCache struct {
	m     sync.Map // txID -> eventstore.Transaction
	n     atomic.Int64
	limit int64
}

func (c *stateCache) get(txID string) (eventstore.Transaction, bool) {
	if c.limit <= 0 {
		return eventstore.Transaction{}, false
	}
	v, ok := c.m.Load(txID)
	if !ok {
		return eventstore.Transaction{}, false
	}
	return v.(eventstore.Transaction), true
}

// put caches tx if it waits for a reply, and forgets it otherwise.
func (c *stateCache) put(tx *eventstore.Transaction) {
	if c.limit <= 0 {
		return
	}
	if !awaitsReply(tx.State) {
		c.drop(tx.TxID)
		return
	}
	cp := *tx
	// The caller goes on mutating its slices (append to Completed): keep
	// a copy of what was persisted.
	cp.Completed = append([]eventstore.CompletedSpan(nil), tx.Completed...)
	if _, loaded := c.m.Swap(tx.TxID, cp); !loaded {
		if c.n.Add(1) > c.limit {
			c.m.Delete(tx.TxID)
			c.n.Add(-1)
		}
	}
}

func (c *stateCache) drop(txID string) {
	if c.limit <= 0 {
		return
	}
	if _, loaded := c.m.LoadAndDelete(txID); loaded {
		c.n.Add(-1)
	}
}
