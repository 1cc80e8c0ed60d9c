package memory_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
)

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestConformance(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		return memory.New(memory.WithClock(clock.Now))
	}, storetest.WithFeatures(storetest.Features{Advance: clock.Advance, Now: clock.Now}))
}

// The suite also passes on the wall clock, waiting for TTLs in real time.
func TestConformanceRealClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store { return memory.New() })
}
