package main

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceClock times the produce requests of a run's Kafka clients, the
// framework's and the floor's alike: from the request being queued on its
// connection to its response read (kgo's BrokerE2E). A hop's latency is
// mostly this round trip, and on a shared machine the broker's answer
// drifts from run to run, so comparing it between the framework and the
// floor of one round tells how much of a latency gap is the round trip
// rather than the framework's work between hops.
type produceClock struct {
	n     atomic.Int64
	total atomic.Int64 // nanoseconds
}

var _ kgo.HookBrokerE2E = (*produceClock)(nil)

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (c *produceClock) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != int16(kmsg.Produce) || e2e.Err() != nil {
		return
	}
	c.n.Add(1)
	c.total.Add(int64(e2e.DurationE2E()))
}

// opt is the client option that installs c.
func (c *produceClock) opt() kgo.Opt { return kgo.WithHooks(c) }

// reset forgets what was timed so far (the warm-up's requests).
func (c *produceClock) reset() {
	c.n.Store(0)
	c.total.Store(0)
}

// meanMs is the mean produce round trip since the last reset, in
// milliseconds (0 when none was timed).
func (c *produceClock) meanMs() float64 {
	n := c.n.Load()
	if n == 0 {
		return 0
	}
	return ms(time.Duration(c.total.Load() / n))
}
