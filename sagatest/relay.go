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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/wait"
	"github.com/stacksaga-go/stacksaga/topics"
)

// HeaderCopy marks a record the harness wrote as a copy of another; its
// value is the copy's number, from 1.
const HeaderCopy = "sagatest-copy"

// HeaderStale marks the stale reply ReorderReplies writes after a newer
// reply of the same saga; its value names that newer reply as
// "span/kind/attempt".
const HeaderStale = "sagatest-stale"

// relay copies the records of one topic to another (or to the same topic,
// skipping its own copies): each record once if the topics differ, plus
// copies more times. With reorder (replies only) it also keeps a copy of
// the latest reply of each saga and writes it again right after the
// saga's next reply with another (span, kind, attempt): a stale reply
// arriving after a newer one.
type relay struct {
	from, to string
	copies   int
	reorder  bool
	copied   *atomic.Int64
	cl       *kgo.Client
	cancel   context.CancelFunc
	done     chan struct{}

	sagas map[string]*sagaReplies // by record key (transaction id); run's goroutine only

	mu  sync.Mutex
	pos map[int32]int64 // next offset to relay, per partition of from
}

// replyID names one reply of a saga; a new one means the saga moved on.
type replyID struct {
	span    int
	kind    topics.Kind
	attempt int
}

func (id replyID) String() string { return fmt.Sprintf("%d/%s/%d", id.span, id.kind, id.attempt) }

// sagaReplies is what the reordering relay knows of one saga's replies.
type sagaReplies struct {
	seen map[replyID]bool
	held *kgo.Record // copy of the latest new reply, released after the next one
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
	// On a cluster a topic just created may not have its leaders known
	// to every broker yet (NOT_LEADER_FOR_PARTITION, a retriable error):
	// asked again until the env's timeout.
	var (
		ends kadm.ListedOffsets
		err  error
	)
	for {
		ends, err = e.adm.ListEndOffsets(ctx, from)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			break
		}
		if !kerr.IsRetriable(err) || !wait.Sleep(ctx, 100*time.Millisecond) {
			return fmt.Errorf("sagatest: relay %s: %w", from, err)
		}
	}
	start := make(map[int32]kgo.Offset)
	r := &relay{from: from, to: to, copies: copies, reorder: reorder, copied: copied,
		sagas: make(map[string]*sagaReplies), pos: make(map[int32]int64), done: make(chan struct{})}
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
		out, stale := r.plan(in)
		if len(out) > 0 {
			// Records of one key go to one partition, in this order.
			if err := r.cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
				if ctx.Err() == nil {
					e.t.Errorf("sagatest: relay %s -> %s: %v", r.from, r.to, err)
				}
				return
			}
		}
		e.stats.reordered.Add(stale)
		r.mu.Lock()
		for _, rec := range in {
			if rec.Offset+1 > r.pos[rec.Partition] {
				r.pos[rec.Partition] = rec.Offset + 1
			}
		}
		r.mu.Unlock()
	}
}

// plan returns the records to write for in, in order, and how many of
// them are stale replies written after a newer reply of their saga.
func (r *relay) plan(in []*kgo.Record) (out []*kgo.Record, stale int64) {
	for _, rec := range in {
		if isCopy(rec) && r.from == r.to {
			continue
		}
		if r.from != r.to {
			out = append(out, clone(rec, r.to, 0))
		}
		for c := 1; c <= r.copies; c++ {
			out = append(out, clone(rec, r.to, c))
			r.copied.Add(1)
		}
		if r.reorder {
			if held := r.hold(rec); held != nil {
				out = append(out, held)
				stale++
			}
		}
	}
	return out, stale
}

// hold keeps a copy of rec if it is a new reply of its saga, and returns
// the copy of the saga's previous reply, marked stale, to be written
// after rec (nil if rec is not new or is the saga's first reply).
func (r *relay) hold(rec *kgo.Record) *kgo.Record {
	env, err := topics.Decode(rec.Value)
	if err != nil || env.Type != topics.TypeReply {
		return nil
	}
	id := replyID{env.Span, env.Kind, env.Attempt}
	s := r.sagas[string(rec.Key)]
	if s == nil {
		s = &sagaReplies{seen: make(map[replyID]bool)}
		r.sagas[string(rec.Key)] = s
	}
	if s.seen[id] {
		return nil // a duplicate of a reply relayed already
	}
	s.seen[id] = true
	prev := s.held
	s.held = clone(rec, r.to, 0)
	if prev == nil {
		return nil
	}
	prev.Headers = append(prev.Headers, kgo.RecordHeader{Key: HeaderStale, Value: []byte(id.String())})
	return prev
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
