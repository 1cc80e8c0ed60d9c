// Package wait pauses a goroutine for a while unless its context ends
// first: the one sleep of the framework's retry and backoff loops.
package wait

import (
	"context"
	"time"
)

// Sleep waits for d, or until ctx ends if that comes first, and reports
// whether ctx was still live when the wait ended. A d of zero or less does
// not wait.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return ctx.Err() == nil // it may have ended at the same moment
	case <-ctx.Done():
		return false
	}
}
