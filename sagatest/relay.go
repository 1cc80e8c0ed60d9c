package sagatest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// HeaderCopy marks a record the harness wrote as a copy of another; its
// value is the copy's number, from 1.
const HeaderCopy = "sagatest-copy"

// relay copies the records of one topic to another (or to the same topic,
// skipping its own copies): each record once if the topics differ, plus
// copies more times. With reorder it gathers records for ReorderWindow and
// writes them in reverse order.
type relay struct {
	from, to string
	copies   int
	reorder  bool
	copied   *atomic.Int64
	cl       *kgo.Client
	cancel   context.CancelFunc
	done     chan struct{}

	mu  sync.Mutex
	pos map[int32]int64 // next offset to relay, per partition of from
}

// startRelay starts a relay from the current end of from. It is a no-op if
// a relay of from runs already.
func (e *Env) startRelay(from, to string, copies int, reorder bool, copied *atomic.Int64) error {
	e.mu.Lock()
	_, running := e.relays[from]
	e.mu.Unlock()
	if running {
		return nil
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.timeout)
	defer cancel()
	ends, err := e.adm.ListEndOffsets(ctx, from)
	if err != nil {
		return fmt.Errorf("sagatest: relay %s: %w", from, err)
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("sagatest: relay %s: %w", from, err)
	}
	start := make(map[int32]kgo.Offset)
	r := &relay{from: from, to: to, copies: copies, reorder: reorder, copied: copied, pos: make(map[int32]int64), done: make(chan struct{})}
	ends.Each(func(o kadm.ListedOffset) {
		start[o.Partition] = kgo.NewOffset().At(o.Offset)
		r.pos[o.Partition] = o.Offset
	})
	if len(start) == 0 {
		return fmt.Errorf("sagatest: relay %s: topic has no partitions", from)
	}
	r.cl, err = kgo.NewClient(
		kgo.SeedBrokers(e.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{from: start}),
		kgo.ProducerLinger(0),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		return fmt.Errorf("sagatest: relay %s: %w", from, err)
	}
	rctx, rcancel := context.WithCancel(e.ctx)
	r.cancel = rcancel
	e.mu.Lock()
	e.relays[from] = r
	e.mu.Unlock()
	e.onStop(r.stop)
	go r.run(rctx, e)
	return nil
}

func (r *relay) stop() {
	r.cancel()
	<-r.done
	r.cl.Close()
}

// position returns the next offset of partition p the relay has not yet
// relayed.
func (r *relay) position(p int32) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pos[p]
}

func (r *relay) run(ctx context.Context, e *Env) {
	defer close(r.done)
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				e.log.Warn("sagatest: relay fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		in := fs.Records()
		if r.reorder && len(in) > 0 {
			in = r.gather(ctx, in)
		}
		out, reordered := r.plan(in)
		if len(out) > 0 {
			if err := r.cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
				if ctx.Err() == nil {
					e.t.Errorf("sagatest: relay %s -> %s: %v", r.from, r.to, err)
				}
				return
			}
		}
		e.stats.reordered.Add(reordered)
		r.mu.Lock()
		for _, rec := range in {
			if rec.Offset+1 > r.pos[rec.Partition] {
				r.pos[rec.Partition] = rec.Offset + 1
			}
		}
		r.mu.Unlock()
	}
}

// gather polls for more records during ReorderWindow.
func (r *relay) gather(ctx context.Context, in []*kgo.Record) []*kgo.Record {
	wctx, cancel := context.WithTimeout(ctx, ReorderWindow)
	defer cancel()
	for wctx.Err() == nil {
		fs := r.cl.PollFetches(wctx)
		if fs.IsClientClosed() {
			break
		}
		in = append(in, fs.Records()...)
	}
	return in
}

// plan returns the records to write for in, and how many of them overtake
// an earlier record (not a copy of themselves) of the same key.
func (r *relay) plan(in []*kgo.Record) (out []*kgo.Record, reordered int64) {
	type item struct {
		rec *kgo.Record
		src int
	}
	var items []item
	for i, rec := range in {
		if isCopy(rec) && r.from == r.to {
			continue
		}
		if r.from != r.to {
			items = append(items, item{clone(rec, r.to, 0), i})
		}
		for c := 1; c <= r.copies; c++ {
			items = append(items, item{clone(rec, r.to, c), i})
			r.copied.Add(1)
		}
	}
	if r.reorder {
		// Reverse: every record overtakes the earlier ones of its key.
		seen := make(map[string]map[int]bool)
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
		}
		for _, it := range items {
			k := string(it.rec.Key)
			if seen[k] == nil {
				seen[k] = make(map[int]bool)
			}
			seen[k][it.src] = true
		}
		for _, srcs := range seen {
			reordered += int64(len(srcs) - 1)
		}
	}
	out = make([]*kgo.Record, len(items))
	for i, it := range items {
		out[i] = it.rec
	}
	return out, reordered
}

func isCopy(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == HeaderCopy {
			return true
		}
	}
	return false
}

// clone returns a record for topic with r's key, value and headers, marked
// as copy n (n > 0).
func clone(r *kgo.Record, topic string, n int) *kgo.Record {
	c := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value}
	c.Headers = append(c.Headers, r.Headers...)
	if n > 0 {
		c.Headers = append(c.Headers, kgo.RecordHeader{Key: HeaderCopy, Value: []byte(strconv.Itoa(n))})
	}
	return c
}
