// Package stack gives a goroutine room on its stack before it calls into a
// driver, so that the call does not grow the stack midway.
//
// A goroutine's stack starts small and is halved by a garbage collection
// that finds it mostly unused. A goroutine that then calls through gocql
// or kgo grows it back midway through the call, and each growth copies the
// stack and adjusts every frame on it. Growing it first, while the
// goroutine has only a frame or two, costs a copy of almost nothing (kgo
// and CockroachDB grow their workers' stacks the same way).
package stack

import (
	"runtime"
	"sync/atomic"
)

// Room is the stack a handler is given room for before it runs: a store
// round trip through gocql, or a produce through kgo, goes this deep.
const Room = 8 << 10

// Grow makes Room bytes of stack available to the calling goroutine.
//
//go:noinline
func Grow() {
	var b [Room]byte
	b[0] = 1
	runtime.KeepAlive(&b)
}

// Keeper grows the stack of a goroutine that runs one task after another
// only when a garbage collection may have shrunk it since the last growth:
// Grow clears Room bytes, which a pool goroutine running a record every few
// microseconds would otherwise pay on every record. Its zero value grows
// on the first call. A Keeper belongs to one goroutine.
type Keeper struct {
	grown bool
	cycle uint32
}

// Ensure grows the calling goroutine's stack unless it did since the last
// garbage collection. A collection is noticed a little after it ended (see
// cycles), so a task may still grow the stack itself now and then.
func (k *Keeper) Ensure() {
	c := cycles.Load()
	if k.grown && c == k.cycle {
		return
	}
	Grow()
	k.grown, k.cycle = true, c
}

// cycles counts garbage collections: a cleanup of an object that nothing
// references runs after each collection that frees it, and arms the next.
var cycles atomic.Uint32

type sentinel struct{ _ *byte }

func arm() {
	runtime.AddCleanup(new(sentinel), func(struct{}) {
		cycles.Add(1)
		arm()
	}, struct{}{})
}

func init() { arm() }
