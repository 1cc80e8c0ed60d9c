package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// scanBucket re-drives the rows of one tier-5 partition and drops it (then
// its tier-4 row) if every row was re-driven and the pass was not halted.
// It reports whether the bucket is gone.
func (p *pass) scanBucket(ctx context.Context, path eventstore.RecoveryPath) bool {
	e := p.e
	k := keyOf(path)
	p.count(func(r *Result) { r.Buckets++ })
	var (
		wg       sync.WaitGroup
		failed   atomic.Int64
		complete = true
		after    string
	)
pages:
	for {
		if p.halted(ctx) {
			complete = false
			break
		}
		page, err := e.dir.ListRecoveryEntries(ctx, e.scope, path, after, e.cfg.PageSize)
		if err != nil {
			p.fail(fmt.Errorf("recovery: list bucket %s: %w", fmtPath(path), err))
			complete = false
			break
		}
		for _, en := range page {
			after = en.TxID
			if e.remembered(k, en.TxID) {
				p.count(func(r *Result) { r.Skipped++ })
				continue
			}
			select {
			case e.sem <- struct{}{}:
			case <-ctx.Done():
				complete = false
				break pages
			}
			if p.halted(ctx) {
				<-e.sem
				complete = false
				break pages
			}
			wg.Go(func() {
				defer func() { <-e.sem }()
				if p.dispatch(ctx, en) {
					e.remember(k, en.TxID)
				} else {
					failed.Add(1)
				}
			})
		}
		if len(page) < e.cfg.PageSize {
			break
		}
	}
	wg.Wait()
	if !complete || failed.Load() > 0 || p.halted(ctx) {
		p.count(func(r *Result) { r.BucketsKept++ })
		return false
	}
	if err := e.dir.DropBucket(ctx, e.scope, path); err != nil {
		p.fail(fmt.Errorf("recovery: drop bucket %s: %w", fmtPath(path), err))
		p.count(func(r *Result) { r.BucketsKept++ })
		return false
	}
	// A crash here leaves a tier-4 row whose partition is empty: the next
	// scan finds no row in it and ends up here again.
	if err := e.dir.DeleteBucket(ctx, e.scope, path); err != nil {
		p.fail(fmt.Errorf("recovery: delete bucket %s: %w", fmtPath(path), err))
		p.count(func(r *Result) { r.BucketsKept++ })
		return false
	}
	e.forget(k)
	p.count(func(r *Result) { r.BucketsDropped++ })
	return true
}

// dispatch re-drives one entry and reports whether it is handled.
func (p *pass) dispatch(ctx context.Context, en eventstore.RecoveryEntry) (ok bool) {
	e := p.e
	p.count(func(r *Result) { r.Dispatched++ })
	defer func() {
		if v := recover(); v != nil {
			e.log.Error("recovery: Redrive panicked", "tx", en.TxID, "path", fmtPath(en.RecoveryPath), "panic", v)
			p.count(func(r *Result) { r.Failed++ })
			ok = false
		}
	}()
	err := e.redriver.Redrive(ctx, en)
	switch {
	case err == nil:
		p.count(func(r *Result) {
			if en.Restore() {
				r.Restored++
			} else {
				r.Retried++
			}
		})
		return true
	case errors.Is(err, ErrLater) && e.writer != nil:
		delay := 0
		var le *LaterError
		if errors.As(err, &le) {
			delay = le.DelayWindows
		}
		path, rerr := e.writer.reregister(ctx, e.scope, en, delay)
		if rerr != nil {
			e.log.Warn("recovery: could not register an entry again", "tx", en.TxID, "err", rerr)
			p.count(func(r *Result) { r.Failed++ })
			return false
		}
		e.log.Debug("recovery: entry registered again", "tx", en.TxID, "reason", err, "path", fmtPath(path))
		p.count(func(r *Result) { r.Rescheduled++ })
		return true
	default:
		if ctx.Err() == nil {
			e.log.Warn("recovery: re-drive failed; the bucket is kept", "tx", en.TxID, "path", fmtPath(en.RecoveryPath), "err", err)
		}
		p.count(func(r *Result) { r.Failed++ })
		return false
	}
}

// fmtPath formats a recovery path for logs and errors.
func fmtPath(p eventstore.RecoveryPath) string {
	return fmt.Sprintf("%s/%04d/%s/%d", p.Day.Format("2006-01-02"), p.MinuteOfDay, p.InstanceID, p.Bucket)
}
