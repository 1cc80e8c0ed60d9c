package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// scanBucket re-drives the rows of one tier-5 partition of the instance of
// token and drops it (then its tier-4 row) if every row was re-driven and
// the pass was not halted. It reports whether the bucket is gone.
func (p *pass) scanBucket(ctx context.Context, path eventstore.RecoveryPath, token int64) bool {
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
		if _, ok := p.owns(ctx, token); !ok {
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
			until, ok := p.owns(ctx, token)
			if !ok {
				<-e.sem
				complete = false
				break pages
			}
			wg.Go(func() {
				defer func() { <-e.sem }()
				if p.dispatch(ctx, en, until) {
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
	if _, ok := p.owns(ctx, token); !complete || failed.Load() > 0 || !ok {
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

// dispatch re-drives one entry and reports whether it is handled. The
// Redrive call's context ends when the pass stops or the node's range
// expires (at until, on the engine's clock); registering a Later entry
// again uses ctx.
func (p *pass) dispatch(ctx context.Context, en eventstore.RecoveryEntry, until time.Time) (ok bool) {
	e := p.e
	p.count(func(r *Result) { r.Dispatched++ })
	rctx, cancel := context.WithTimeout(p.rctx, until.Sub(e.now()))
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			e.log.Error("recovery: Redrive panicked", "tx", en.TxID, "path", fmtPath(en.RecoveryPath), "panic", v)
			p.count(func(r *Result) { r.Failed++ })
			ok = false
		}
	}()
	err := e.redriver.Redrive(rctx, en)
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
		if rctx.Err() == nil {
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
