// Package duplicator is a fault injector for demos and tests: a relay that
// reads topics and appends every original record k more times to the same
// topic (same key, so the same partition, behind the original), the way
// Kafka redelivers after a rebalance or a producer retry.
package duplicator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header marks a copy, so copies are not copied again.
const Header = "stacksaga-duplicate"

// Relay copies records. Build it with New, run it with Run.
type Relay struct {
	cl     *kgo.Client
	copies int
	copied atomic.Int64
}

// New returns a relay that appends copies copies of every record produced
// to topics from now on. copies must be at least 1.
func New(brokers []string, topics []string, copies int, opts ...kgo.Opt) (*Relay, error) {
	if copies < 1 {
		return nil, fmt.Errorf("duplicator: copies %d, want at least 1", copies)
	}
	if len(topics) == 0 {
		return nil, errors.New("duplicator: no topics")
	}
	start := time.Now().Add(-time.Second).UnixMilli()
	all := append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(start)),
		kgo.ProducerLinger(0),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("duplicator: %w", err)
	}
	return &Relay{cl: cl, copies: copies}, nil
}

// Copied returns how many copies the relay has written.
func (r *Relay) Copied() int64 { return r.copied.Load() }

// Run relays until ctx ends, then closes the relay's client.
func (r *Relay) Run(ctx context.Context) error {
	defer r.cl.Close()
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		var out []*kgo.Record
		fs.EachRecord(func(rec *kgo.Record) {
			for _, h := range rec.Headers {
				if h.Key == Header {
					return
				}
			}
			for i := range r.copies {
				out = append(out, &kgo.Record{
					Topic: rec.Topic, Key: rec.Key, Value: rec.Value,
					Headers: append(append([]kgo.RecordHeader(nil), rec.Headers...), kgo.RecordHeader{Key: Header, Value: []byte{byte('1' + i)}}),
				})
			}
		})
		if len(out) == 0 {
			continue
		}
		if err := r.cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("duplicator: %w", err)
		}
		r.copied.Add(int64(len(out)))
	}
}
