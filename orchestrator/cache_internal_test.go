package orchestrator

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// A saga put before Run's first assignment may be run by another
// instance that owned its partition then (and ended, or moved on, by the
// time this one is given the partition): after the assignment, its
// entry must not be found, or a duplicate reply would be applied to the
// state Start cached.
func TestCacheTrustsNothingPutBeforeTheFirstAssignment(t *testing.T) {
	c := &stateCache{limit: 100, part: kgo.StickyKeyPartitioner(nil).ForTopic("cb")}
	c.expectAssignment()
	tx := eventstore.Transaction{TxID: "early", State: eventstore.StateStarted, Version: 1}
	c.put(&tx)
	const n = 4
	p := c.partitionOf(tx.TxID, n)
	c.assign([]int32{0, 1, 2, 3}, n)
	if got, ok := c.get(tx.TxID, p); ok {
		t.Fatalf("after the first assignment the cache holds %+v, put before it", got)
	}
	if c.len() != 0 {
		t.Fatalf("cache holds %d entries, want 0", c.len())
	}
	// A saga put once the partitions are known is cached.
	late := eventstore.Transaction{TxID: "late", State: eventstore.StateStarted, Version: 1}
	c.put(&late)
	if _, ok := c.get(late.TxID, c.partitionOf(late.TxID, n)); !ok {
		t.Fatal("a saga put after the assignment is not cached")
	}
}
