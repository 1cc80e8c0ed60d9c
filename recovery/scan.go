package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// maxScanErrors bounds the errors one Scan returns (joined).
const maxScanErrors = 10

// pass is the state of one Scan.
type pass struct {
	e *Engine
	// rctx is the parent of the re-drives' contexts: cancel ends it when
	// the pass stops, so that no re-drive outlives the node's range.
	rctx    context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex // guards res, errs, stopped
	res     Result
	errs    []error
	stopped bool
}

func (p *pass) count(f func(r *Result)) {
	p.mu.Lock()
	f(&p.res)
	p.mu.Unlock()
}

func (p *pass) fail(err error) {
	p.mu.Lock()
	if len(p.errs) < maxScanErrors {
		p.errs = append(p.errs, err)
	}
	p.mu.Unlock()
}

// stop marks the pass stopped: no new instance, bucket or entry is
// started, and the re-drives in flight are cancelled.
func (p *pass) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	if p.cancel != nil {
		p.cancel()
	}
}

// halted reports whether the pass must not start new work: ctx ended, the
// pass was stopped, or the node's range is no longer usable (expired, or
// less than the margin of it left).
func (p *pass) halted(ctx context.Context) bool {
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		return true
	}
	if ctx.Err() != nil {
		p.stop()
		return true
	}
	if _, _, ok := p.e.lease(); !ok {
		p.e.log.Info("recovery: token range expiring; stopping the scan", "scope", p.e.scope, "margin", p.e.margin)
		p.stop()
		return true
	}
	return false
}

// owns reports whether the pass may start work on the instance of token:
// it is not halted and the node's range still holds token (a range of a
// later minute may not); until is when the range expires.
func (p *pass) owns(ctx context.Context, token int64) (until time.Time, ok bool) {
	if p.halted(ctx) {
		return time.Time{}, false
	}
	r, until, ok := p.e.lease()
	if !ok {
		p.stop()
		return time.Time{}, false
	}
	return until, r.Contains(token)
}

// Scan runs one pass over the directory of the engine's scope:
//
//  1. without a valid token range it does nothing (Result.NoRange);
//  2. tier 1: the days from today − LookbackDays to today, ascending;
//  3. tier 2: each day's windows, ascending, up to the first that is not
//     sealed (End > now);
//  4. tier 3: the window's instances whose token lies in the node's range;
//  5. tier 4: each instance's buckets, ascending; tier 5: each bucket's
//     rows in pages of PageSize, re-driven with at most Concurrency
//     Redrive calls at once, each under a context that ends when the
//     node's range expires (or the scan stops), none started with less
//     than the margin (WithRedriveMargin) of the range left or once the
//     range no longer holds the instance;
//  6. a bucket whose every row was re-driven (Redrive returned nil, or
//     Later and the row was registered again) is dropped: its tier-5
//     partition, then its tier-4 row. A bucket with a failed row, or
//     interrupted (ctx ended, range expired), is kept; rows this engine
//     already re-drove are not re-driven again by its later scans. An
//     empty bucket (a crash between the two deletes) is dropped the same
//     way;
//  7. an instance none of whose buckets was kept loses its tier-3 row;
//  8. Node-0 (IsNode0 of its range) then deletes the window's tier-2 row
//     if no tier-3 row of it is left on the whole ring and the window is
//     over, and a day's tier-1 row once the day is over and has no window
//     left.
//
// The error joins the directory errors met (at most 10); the scan goes on
// past them, keeping whatever they left unfinished.
func (e *Engine) Scan(ctx context.Context) (Result, error) {
	e.scanMu.Lock()
	defer e.scanMu.Unlock()
	p := &pass{e: e}
	p.rctx, p.cancel = context.WithCancel(ctx)
	defer p.cancel()
	p.scan(ctx)
	if ctx.Err() != nil {
		p.res.Stopped = true
	}
	p.res.Stopped = p.res.Stopped || p.stopped
	e.totalMu.Lock()
	flags := p.res
	e.total.add(p.res)
	e.total.NoRange, e.total.Node0, e.total.Stopped = flags.NoRange, flags.Node0, flags.Stopped
	e.scans++
	e.totalMu.Unlock()
	return p.res, errors.Join(p.errs...)
}

func (p *pass) scan(ctx context.Context) {
	e := p.e
	r, _, ok := e.lease()
	if !ok {
		p.res.NoRange = true
		return
	}
	p.res.Node0 = IsNode0(r)
	today := e.ws.At(e.now()).Day
	from := e.ws.AddDays(today, -e.cfg.LookbackDays)
	e.forgetBefore(from)
	days, err := e.dir.ListDays(ctx, e.scope, from, today)
	if err != nil {
		p.fail(fmt.Errorf("recovery: list days %s..%s: %w", from.Format(time.DateOnly), today.Format(time.DateOnly), err))
		return
	}
	for _, d := range days {
		if p.halted(ctx) {
			return
		}
		p.count(func(r *Result) { r.Days++ })
		p.scanDay(ctx, d)
	}
}

func (p *pass) scanDay(ctx context.Context, d time.Time) {
	e := p.e
	slots, err := e.dir.ListWindows(ctx, e.scope, d)
	if err != nil {
		p.fail(fmt.Errorf("recovery: list windows of %s: %w", d.Format(time.DateOnly), err))
		return
	}
	left := len(slots)
	for _, slot := range slots {
		w := e.ws.FromSlot(d, slot)
		if !w.Sealed(e.now()) {
			break // later windows are not sealed either
		}
		if p.halted(ctx) {
			return
		}
		p.count(func(r *Result) { r.Windows++ })
		p.scanWindow(ctx, d, slot)
		if p.halted(ctx) {
			return
		}
		if p.compactWindow(ctx, d, slot, w) {
			left--
		}
	}
	if left == 0 {
		p.compactDay(ctx, d)
	}
}

// scanWindow walks the instances of one sealed window in the node's range.
func (p *pass) scanWindow(ctx context.Context, d time.Time, slot int) {
	e := p.e
	r, _, ok := e.lease()
	if !ok {
		p.stop()
		return
	}
	insts, err := e.dir.ListInstances(ctx, e.scope, d, slot, r)
	if err != nil {
		p.fail(fmt.Errorf("recovery: list instances of %s/%d: %w", d.Format(time.DateOnly), slot, err))
		return
	}
	work := make(chan eventstore.Instance)
	var wg sync.WaitGroup
	for range min(instanceParallelism, len(insts)) {
		wg.Go(func() {
			for inst := range work {
				p.scanInstance(ctx, d, slot, inst)
			}
		})
	}
	for _, inst := range insts {
		if p.halted(ctx) {
			break
		}
		// The range may have moved since the instances were listed.
		if r, _, ok := e.lease(); !ok || !r.Contains(inst.Token) {
			continue
		}
		work <- inst
	}
	close(work)
	wg.Wait()
}

// scanInstance walks the buckets of one instance in one window and deletes
// its tier-3 row when none is left.
func (p *pass) scanInstance(ctx context.Context, d time.Time, slot int, inst eventstore.Instance) {
	e := p.e
	p.count(func(r *Result) { r.Instances++ })
	buckets, err := e.dir.ListBuckets(ctx, e.scope, d, slot, inst.ID)
	if err != nil {
		p.fail(fmt.Errorf("recovery: list buckets of %s in %s/%d: %w", inst.ID, d.Format(time.DateOnly), slot, err))
		return
	}
	complete := true
	for _, b := range buckets {
		if _, ok := p.owns(ctx, inst.Token); !ok {
			return // keep the instance: halted, or no longer in the range
		}
		path := eventstore.RecoveryPath{Day: d, MinuteOfDay: slot, InstanceID: inst.ID, Bucket: b}
		if !p.scanBucket(ctx, path, inst.Token) {
			complete = false // keep the instance: a bucket of it is left
		}
	}
	if !complete {
		return
	}
	if _, ok := p.owns(ctx, inst.Token); !ok {
		return
	}
	if err := e.dir.DeleteInstance(ctx, e.scope, d, slot, inst); err != nil {
		p.fail(fmt.Errorf("recovery: delete instance %s of %s/%d: %w", inst.ID, d.Format(time.DateOnly), slot, err))
		return
	}
	p.count(func(r *Result) { r.InstancesDeleted++ })
}
