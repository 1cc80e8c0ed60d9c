package orchestrator_test

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// TestCassandraEndedSagasRetainNothing runs an orchestrator (a retry node
// too) and both workers in this process on real Kafka and Cassandra, in
// each write-protection mode, and checks that an ended saga leaves nothing
// behind in memory: after a warm-up, 2,000 more sagas (one in ten
// compensated) may grow the live heap by less than retainedPerSagaLimit
// bytes per saga, and the goroutines (but for the consume loops' pools,
// which grow with load up to their concurrency) by at most goroutineSlack
// (a commit or a request in flight). On the development box the heap grew
// by -1 to 20 bytes per saga, with -race and two CPU hogs beside it.
// Growth over the limit is measured again over as many sagas, and only
// growth in both rounds fails (what is retained per saga grows in every
// round; a buffer that grew once does not). Mutation-checked: a map of
// ended sagas' ids in the orchestrator (76-96
// bytes per saga with -race), a saga state kept per ended saga (1.6 KB)
// and a goroutine left by one step in ten each fail it.
func TestCassandraEndedSagasRetainNothing(t *testing.T) {
	const (
		wave, warmup, measured = 250, 1000, 2000
		retainedPerSagaLimit   = 40
		goroutineSlack         = 8
	)
	for _, mode := range []writeprotect.Mode{writeprotect.RelaxedWithDedup, writeprotect.Strict} {
		t.Run(string(mode), func(t *testing.T) {
			r := newRig(t, "cassandra")
			r.guarded, r.guardMode, r.lean = true, mode, true
			r.startWorker(r.svcStock)
			r.startWorker(r.svcPay)
			o, _ := r.startOrchestrator(orchestrator.WithRetryNode())
			var total int64
			// Sagas start in waves, each ending before the next begins: the
			// in-flight high-water marks (the consume loops' key maps and
			// queues, which keep their capacity) are then reached in the
			// warm-up and not mistaken for retention.
			run := func(n int) {
				for range n / wave {
					startConcurrently(t, o, wave)
					total += wave
					waitFor(t, 5*time.Minute, "every saga ended", func() bool {
						st := o.Stats()
						return st.Completed+st.Compensated >= total
					})
				}
				if st := o.Stats(); st.Compensated != total/10 || st.Completed != total-total/10 {
					t.Fatalf("completed %d, compensated %d of %d, want one in ten compensated", st.Completed, st.Compensated, total)
				}
			}
			run(warmup)
			heap0, goroutines0 := settledLiveHeap()
			run(measured)
			heap1, goroutines1 := settledLiveHeap()
			grown := int64(heap1) - int64(heap0)
			t.Logf("live heap %d -> %d bytes over %d sagas (%.1f B per saga); goroutines %d -> %d",
				heap0, heap1, measured, float64(grown)/measured, goroutines0, goroutines1)
			if grown > retainedPerSagaLimit*measured {
				// One-off growth (a client's buffer or pool that grew once,
				// up to 110 KB seen on a loaded CI box) does not recur;
				// retention does: measure another round and judge by it.
				run(measured)
				heap2, _ := settledLiveHeap()
				again := int64(heap2) - int64(heap1)
				t.Logf("over the limit: measured again, live heap %d -> %d bytes over %d more sagas (%.1f B per saga)",
					heap1, heap2, measured, float64(again)/measured)
				grown = min(grown, again)
			}
			if grown > retainedPerSagaLimit*measured {
				t.Errorf("live heap grew %d bytes over %d ended sagas (%.1f per saga), want under %d per saga",
					grown, measured, float64(grown)/measured, retainedPerSagaLimit)
			}
			if goroutines1 > goroutines0+goroutineSlack {
				t.Errorf("goroutines %d -> %d over %d ended sagas", goroutines0, goroutines1, measured)
			}
		})
	}
}

// settledLiveHeap returns the smallest live heap (after a collection) and
// count of goroutines outside the consume loops' pools of three samples
// 100ms apart: what is only in flight (a batched delete waiting for its
// round trip, a record being acknowledged) is then not counted, while
// anything retained is.
func settledLiveHeap() (heap uint64, goroutines int) {
	heap, goroutines = ^uint64(0), int(^uint(0)>>1)
	for range 3 {
		time.Sleep(100 * time.Millisecond)
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap, goroutines = min(heap, ms.HeapAlloc), min(goroutines, goroutinesBesidePools())
	}
	return heap, goroutines
}

// goroutinesBesidePools counts the goroutines but for the consume loops'
// pool workers, which live until their loop stops.
func goroutinesBesidePools() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if !bytes.Contains(g, []byte("internal/kafkaloop.(*loop).worker(")) {
			n++
		}
	}
	return n
}
