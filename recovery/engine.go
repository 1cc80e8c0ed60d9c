package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// instanceParallelism is how many instances of a window one scan walks at
// once (their re-drives share the Concurrency bound).
const instanceParallelism = 4

// maxRemembered bounds the entries of kept buckets an Engine remembers as
// already re-driven; past it, it forgets them all (they are then re-driven
// again, which Redrivers tolerate).
const maxRemembered = 1 << 20

// Engine is the retry-node side of recovery: it walks the directory of one
// scope top-down, re-drives what it finds through a Redriver and cleans up
// bottom-up; when it is Node-0 it also compacts tiers 2 and 1. See the
// package documentation for the traversal.
//
// Scan runs one pass; Run scans after each window is sealed until its
// context ends. One Scan runs at a time; Engine is safe for concurrent use.
type Engine struct {
	dir       eventstore.Directory
	scope     eventstore.Scope
	redriver  Redriver
	cfg       Config
	ws        Windows
	now       func() time.Time
	log       *slog.Logger
	ranges    RangeSource
	writer    *Writer
	scanEvery time.Duration
	margin    time.Duration // of the range's validity needed to start work
	sem       chan struct{}

	scanMu sync.Mutex

	doneMu sync.Mutex
	done   map[bucketKey]map[string]struct{} // entries of unfinished buckets already re-driven
	nDone  int

	totalMu sync.Mutex
	total   Result
	scans   int64
}

// bucketKey identifies a tier-5 partition within the engine's scope.
type bucketKey struct {
	day    time.Time
	slot   int
	id     string
	bucket int
}

func keyOf(p eventstore.RecoveryPath) bucketKey {
	return bucketKey{eventstore.DayOf(p.Day), p.MinuteOfDay, p.InstanceID, p.Bucket}
}

// NewEngine returns the engine of scope over dir, re-driving through r,
// with configuration cfg (validated). Options: WithClock, WithLogger,
// WithRanges, WithWriter, WithScanEvery, WithRedriveMargin.
func NewEngine(dir eventstore.Directory, scope eventstore.Scope, r Redriver, cfg Config, opts ...Option) (*Engine, error) {
	var errs []error
	if dir == nil {
		errs = append(errs, errors.New("recovery: NewEngine: nil directory"))
	}
	if r == nil {
		errs = append(errs, errors.New("recovery: NewEngine: nil redriver"))
	}
	if err := scope.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	o := defaultOptions()
	o.ranges = StaticRange(eventstore.FullRing)
	for _, opt := range opts {
		opt(&o)
	}
	if o.ranges == nil {
		return nil, errors.New("recovery: NewEngine: WithRanges(nil)")
	}
	if o.margin < 0 {
		return nil, fmt.Errorf("recovery: NewEngine: WithRedriveMargin(%v): must be at least 0", o.margin)
	}
	ws, err := cfg.Windows()
	if err != nil {
		return nil, err
	}
	return &Engine{
		dir: dir, scope: scope, redriver: r, cfg: cfg, ws: ws, now: o.now, log: o.logger,
		ranges: o.ranges, writer: o.writer, scanEvery: o.scanEvery, margin: o.margin,
		sem:  make(chan struct{}, cfg.Concurrency),
		done: make(map[bucketKey]map[string]struct{}),
	}, nil
}

// Result counts what one Scan did (Totals sums them).
type Result struct {
	// NoRange: the node held no valid token range, so nothing was scanned.
	NoRange bool
	// Node0: the node held the lowest range and compacted tiers 2 and 1.
	Node0 bool
	// Stopped: the context ended or the range expired mid-scan; the
	// unfinished buckets were kept.
	Stopped bool

	// Days, Windows, Instances and Buckets visited (sealed windows only).
	Days, Windows, Instances, Buckets int
	// Dispatched counts Redrive calls.
	Dispatched int
	// Retried and Restored count entries of even and odd buckets whose
	// Redrive returned nil.
	Retried, Restored int
	// Rescheduled counts entries the Redriver answered with Later that were
	// registered again.
	Rescheduled int
	// Failed counts entries whose Redrive failed (or whose Later could not
	// be registered); their buckets were kept.
	Failed int
	// Skipped counts entries of kept buckets that this engine had already
	// re-driven in an earlier scan and did not re-drive again.
	Skipped int

	// Clean-up: tier-5 partitions dropped with their tier-4 rows, buckets
	// kept, tier-3 rows deleted, and (Node-0) tier-2 and tier-1 rows deleted.
	BucketsDropped, BucketsKept, InstancesDeleted, WindowsDeleted, DaysDeleted int
}

func (r *Result) add(o Result) {
	r.Days += o.Days
	r.Windows += o.Windows
	r.Instances += o.Instances
	r.Buckets += o.Buckets
	r.Dispatched += o.Dispatched
	r.Retried += o.Retried
	r.Restored += o.Restored
	r.Rescheduled += o.Rescheduled
	r.Failed += o.Failed
	r.Skipped += o.Skipped
	r.BucketsDropped += o.BucketsDropped
	r.BucketsKept += o.BucketsKept
	r.InstancesDeleted += o.InstancesDeleted
	r.WindowsDeleted += o.WindowsDeleted
	r.DaysDeleted += o.DaysDeleted
}

// Totals returns the sums of the counters of every Scan so far (the flags
// are those of the last scan) and the number of scans.
func (e *Engine) Totals() (Result, int64) {
	e.totalMu.Lock()
	defer e.totalMu.Unlock()
	return e.total, e.scans
}

// Windows returns the engine's window arithmetic.
func (e *Engine) Windows() Windows { return e.ws }

// lease returns the node's range and until when it is valid, if it is
// usable now: valid, with more than the margin of its validity left.
func (e *Engine) lease() (eventstore.TokenRange, time.Time, bool) {
	now := e.now()
	r, until, ok := e.ranges.Range(now)
	return r, until, ok && now.Before(until) && until.Sub(now) > e.margin
}

// Run scans until ctx ends, then returns nil. A scan's error is logged and
// the next scan tries again. Between scans it waits as WithScanEvery says
// (by default until the current window is sealed).
func (e *Engine) Run(ctx context.Context) error {
	for {
		res, err := e.Scan(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			e.log.Warn("recovery: scan failed", "scope", e.scope, "err", err)
		}
		if res.Dispatched > 0 || res.WindowsDeleted > 0 {
			e.log.Debug("recovery: scan", "scope", e.scope, "retried", res.Retried, "restored", res.Restored,
				"rescheduled", res.Rescheduled, "failed", res.Failed, "buckets_dropped", res.BucketsDropped,
				"windows_deleted", res.WindowsDeleted)
		}
		t := time.NewTimer(e.nextWait(res))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// nextWait is the pause after a scan.
func (e *Engine) nextWait(res Result) time.Duration {
	if e.scanEvery > 0 {
		return e.scanEvery
	}
	now := e.now()
	d := e.ws.At(now).End.Sub(now) + 10*time.Millisecond
	d = min(max(d, 100*time.Millisecond), e.ws.Interval())
	if res.NoRange {
		d = min(d, time.Second) // a range may arrive any moment
	}
	return d
}

// remembered reports whether txID of bucket k was re-driven already.
func (e *Engine) remembered(k bucketKey, txID string) bool {
	e.doneMu.Lock()
	defer e.doneMu.Unlock()
	_, ok := e.done[k][txID]
	return ok
}

// remember records that txID of bucket k was re-driven.
func (e *Engine) remember(k bucketKey, txID string) {
	e.doneMu.Lock()
	defer e.doneMu.Unlock()
	if e.nDone >= maxRemembered {
		e.log.Warn("recovery: forgetting re-driven entries of unfinished buckets", "count", e.nDone)
		clear(e.done)
		e.nDone = 0
	}
	set := e.done[k]
	if set == nil {
		set = make(map[string]struct{})
		e.done[k] = set
	}
	if _, ok := set[txID]; !ok {
		set[txID] = struct{}{}
		e.nDone++
	}
}

// forget drops what was remembered of bucket k.
func (e *Engine) forget(k bucketKey) {
	e.doneMu.Lock()
	defer e.doneMu.Unlock()
	e.nDone -= len(e.done[k])
	delete(e.done, k)
}

// forgetBefore drops what was remembered of buckets of days before day.
func (e *Engine) forgetBefore(day time.Time) {
	e.doneMu.Lock()
	defer e.doneMu.Unlock()
	for k, set := range e.done {
		if k.day.Before(day) {
			e.nDone -= len(set)
			delete(e.done, k)
		}
	}
}
