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

// Room is the stack Grow makes room for: a store round trip through gocql,
// or a produce through kgo, goes this deep.
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
	grows uint32 // how many times it grew
	cycle uint32 // cycles when it last grew
}

// Ensure grows the calling goroutine's stack unless it did since the last
// garbage collection. A collection is noticed a little after it ended (see
// cycles), so a task may still grow the stack itself now and then.
func (k *Keeper) Ensure() {
	c := cycles.Load()
	if k.grows > 0 && c == k.cycle {
		return
	}
	Grow()
	k.grows++
	k.cycle = c
}

// cycles counts garbage collections, at most once per collection: a
// cleanup of an object that nothing references runs after the collection
// that frees it, and arms the next object. An object armed while a
// collection is marking survives that one, which is then not counted: a
// growth missed, nothing worse.
var cycles atomic.Uint32

// sentinel is the object whose cleanup counts. It must be a heap object of
// its own: a zero-size type would be the runtime's shared zerobase, and a
// small pointer-free one could share a tiny block with other allocations,
// whose cleanups then run late or never; the pointer field prevents both.
type sentinel struct{ _ *byte }

func arm() {
	runtime.AddCleanup(new(sentinel), func(struct{}) {
		cycles.Add(1)
		arm()
	}, struct{}{})
}

func init() { arm() }
