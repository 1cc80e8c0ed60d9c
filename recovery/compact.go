package recovery

import (
	"context"
	"fmt"
	"time"
)

// compactWindow is Node-0's deletion of a tier-2 row, after both gates:
// no tier-3 row of the window is left on the whole ring (gate 1), and the
// window is over by the wall clock (gate 2). It reports whether the row
// was deleted. Other nodes never delete tiers 2 and 1: a node that
// finished its own part of a window cannot know that the others did.
func (p *pass) compactWindow(ctx context.Context, d time.Time, slot int, w Window) bool {
	e := p.e
	if r, _, ok := e.lease(); !ok || !IsNode0(r) {
		return false
	}
	left, err := e.dir.HasInstances(ctx, e.scope, d, slot)
	if err != nil {
		p.fail(fmt.Errorf("recovery: gate 1 of %s/%d: %w", d.Format(time.DateOnly), slot, err))
		return false
	}
	if left || !w.Sealed(e.now()) {
		return false
	}
	if err := e.dir.DeleteWindow(ctx, e.scope, d, slot); err != nil {
		p.fail(fmt.Errorf("recovery: delete window %s/%d: %w", d.Format(time.DateOnly), slot, err))
		return false
	}
	p.count(func(r *Result) { r.WindowsDeleted++ })
	return true
}

// compactDay is Node-0's deletion of a tier-1 row: only once the day is
// over and no window of it is left (read again, not assumed).
func (p *pass) compactDay(ctx context.Context, d time.Time) {
	e := p.e
	if r, _, ok := e.lease(); !ok || !IsNode0(r) || e.now().Before(e.ws.DayEnd(d)) {
		return
	}
	slots, err := e.dir.ListWindows(ctx, e.scope, d)
	if err != nil {
		p.fail(fmt.Errorf("recovery: list windows of %s: %w", d.Format(time.DateOnly), err))
		return
	}
	if len(slots) > 0 {
		return
	}
	if err := e.dir.DeleteDay(ctx, e.scope, d); err != nil {
		p.fail(fmt.Errorf("recovery: delete day %s: %w", d.Format(time.DateOnly), err))
		return
	}
	p.count(func(r *Result) { r.DaysDeleted++ })
}
