// Package kafkaloop is the at-least-once consume loop shared by the worker
// and the orchestrator: poll a batch with rebalances blocked, run the handler
// on every record (records with the same key in order, different keys
// concurrently), mark only records whose effects are durable, commit marked
// offsets on revoke and on shutdown, then allow the rebalance.
package kafkaloop

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Handler processes one record. It returns nil once the record's effects
// are durable (the reply produced, the state persisted). A non-nil error
// means "try again": the loop retries the record with backoff and never
// marks it until it succeeds. Records that can never succeed (malformed,
// unknown endpoint) must be dead-lettered by the handler, which then
// returns nil.
type Handler func(ctx context.Context, r *kgo.Record) error

// Options tune Run.
type Options struct {
	// Concurrency bounds the records handled at once (default 64).
	Concurrency int
	// MaxPollRecords bounds one poll (default 2000).
	MaxPollRecords int
	// Logger receives retry and commit errors (default slog.Default()).
	Logger *slog.Logger
	// RetryBackoff is the first pause before retrying a failed record,
	// doubled up to one second (default 20ms).
	RetryBackoff time.Duration
}

func (o *Options) defaults() {
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	if o.MaxPollRecords <= 0 {
		o.MaxPollRecords = 2000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 20 * time.Millisecond
	}
}

// ClientOpts returns the kgo options Run relies on: no producer linger,
// rebalances blocked while a polled batch is processed, offsets committed only for marked records,
// and marked offsets committed when partitions are revoked.
func ClientOpts() []kgo.Opt {
	return []kgo.Opt{
		// Handlers produce synchronously before a batch can be marked, so a
		// linger only adds latency: concurrent records still share produce
		// requests while one is in flight.
		kgo.ProducerLinger(0),
		kgo.BlockRebalanceOnPoll(),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(500 * time.Millisecond),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, _ map[string][]int32) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = cl.CommitMarkedOffsets(ctx)
		}),
	}
}

// Run consumes with cl (built with ClientOpts) until ctx ends, then finishes
// the in-flight batch, commits what is marked and returns nil. It returns an
// error only if the client was closed under it.
func Run(ctx context.Context, cl *kgo.Client, h Handler, o Options) error {
	o.defaults()
	sem := make(chan struct{}, o.Concurrency)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cl.CommitMarkedOffsets(cctx); err != nil {
			o.Logger.Warn("kafkaloop: final commit failed", "err", err)
		}
	}()
	for {
		fetches := cl.PollRecords(ctx, o.MaxPollRecords)
		if fetches.IsClientClosed() {
			return errors.New("kafkaloop: client closed")
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				o.Logger.Warn("kafkaloop: fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		recs := fetches.Records()
		if len(recs) > 0 {
			done := processBatch(ctx, recs, h, sem, &o)
			markPrefix(cl, recs, done)
		}
		cl.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// processBatch runs h on recs; records sharing topic, partition and key run
// in order. It returns which records finished.
func processBatch(ctx context.Context, recs []*kgo.Record, h Handler, sem chan struct{}, o *Options) []bool {
	type group struct{ idx []int }
	groups := make(map[string]*group)
	var order []*group
	for i, r := range recs {
		k := r.Topic + "\x00" + strconv.Itoa(int(r.Partition)) + "\x00" + string(r.Key)
		g := groups[k]
		if g == nil {
			g = &group{}
			groups[k] = g
			order = append(order, g)
		}
		g.idx = append(g.idx, i)
	}
	done := make([]bool, len(recs))
	// Handlers run to completion even when ctx ends: a shutdown finishes
	// in-flight work instead of abandoning it half way. Records not yet
	// started when ctx ends are left unmarked, for the next owner of the
	// partition.
	hctx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for _, g := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func(g *group) {
			defer wg.Done()
			defer func() { <-sem }()
			for _, i := range g.idx {
				if ctx.Err() != nil || !runOne(ctx, hctx, recs[i], h, o) {
					return
				}
				done[i] = true
			}
		}(g)
	}
	wg.Wait()
	return done
}

// runOne runs h until it succeeds or ctx ends between tries.
func runOne(ctx, hctx context.Context, r *kgo.Record, h Handler, o *Options) bool {
	backoff := o.RetryBackoff
	for {
		err := h(hctx, r)
		if err == nil {
			return true
		}
		o.Logger.Warn("kafkaloop: record failed, retrying", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// markPrefix marks, per partition, the records up to the first unfinished
// one, so a committed offset never skips an unprocessed record.
func markPrefix(cl *kgo.Client, recs []*kgo.Record, done []bool) {
	type tp struct {
		t string
		p int32
	}
	blocked := make(map[tp]bool)
	var mark []*kgo.Record
	for i, r := range recs {
		k := tp{r.Topic, r.Partition}
		if blocked[k] {
			continue
		}
		if !done[i] {
			blocked[k] = true
			continue
		}
		mark = append(mark, r)
	}
	cl.MarkCommitRecords(mark...)
}
