package kafkaloop

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type tp struct {
	topic     string
	partition int32
}

type recKey struct {
	topic     string
	partition int32
	offset    int64
}

// failure is the retry state of a record that failed and is not finished.
type failure struct {
	first, last time.Time
	tries       int
}

// batchStop is closed when a batch must end.
type batchStop struct {
	c    chan struct{}
	once sync.Once
}

func (b *batchStop) close() { b.once.Do(func() { close(b.c) }) }

// tracker is what Run remembers across batches: the retry state of failing
// records (so budgets and backoffs survive a rewind), the records finished
// behind an unfinished one (so a rewind does not run them again), and the
// current batch's stop signal. Both maps are bounded by max entries (the
// oldest failure is evicted; the finished set is dropped, which only costs
// re-running those records) and forget partitions this consumer loses.
type tracker struct {
	mu       sync.Mutex
	max      int
	failures map[recKey]failure
	ahead    map[tp]map[int64]struct{}
	nAhead   int
	cur      *batchStop
	// pending is an interrupt that came between batches (a rebalance that
	// waits for a batch polled but not started yet); cleared once
	// rebalances are allowed.
	pending bool
}

func newTracker(max int) *tracker {
	return &tracker{max: max, failures: make(map[recKey]failure), ahead: make(map[tp]map[int64]struct{})}
}

// startBatch returns the stop signal of a new batch: closed by interrupt
// or by the caller, and already closed if an interrupt is pending.
func (t *tracker) startBatch() *batchStop {
	b := &batchStop{c: make(chan struct{})}
	t.mu.Lock()
	t.cur = b
	if t.pending {
		t.pending = false
		b.close()
	}
	t.mu.Unlock()
	return b
}

// allowed clears a pending interrupt: the rebalance it announced can run.
func (t *tracker) allowed() {
	t.mu.Lock()
	t.pending = false
	t.mu.Unlock()
}

func (t *tracker) endBatch() {
	t.mu.Lock()
	t.cur = nil
	t.mu.Unlock()
}

// interrupt ends the current batch, or the next one to start before
// allowed is called.
func (t *tracker) interrupt() {
	t.mu.Lock()
	b := t.cur
	if b == nil {
		t.pending = true
	}
	t.mu.Unlock()
	if b != nil {
		b.close()
	}
}

func (t *tracker) failure(k recKey) (failure, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.failures[k]
	return f, ok
}

// fail records a failure of k at now and returns its state.
func (t *tracker) fail(k recKey, now time.Time) failure {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.failures[k]
	if !ok {
		if len(t.failures) >= t.max {
			t.evictOldestLocked()
		}
		f.first = now
	}
	f.last = now
	f.tries++
	t.failures[k] = f
	return f
}

func (t *tracker) evictOldestLocked() {
	var oldest recKey
	var at time.Time
	first := true
	for k, f := range t.failures {
		if first || f.last.Before(at) {
			oldest, at, first = k, f.last, false
		}
	}
	delete(t.failures, oldest)
}

func (t *tracker) clear(k recKey) {
	t.mu.Lock()
	delete(t.failures, k)
	t.mu.Unlock()
}

// doneAhead reports whether r finished in an earlier batch.
func (t *tracker) doneAhead(r *kgo.Record) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.ahead[tp{r.Topic, r.Partition}][r.Offset]
	return ok
}

// setDoneAhead remembers that r finished while an earlier record of its
// partition did not.
func (t *tracker) setDoneAhead(r *kgo.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := tp{r.Topic, r.Partition}
	offs := t.ahead[k]
	if offs == nil {
		offs = make(map[int64]struct{})
		t.ahead[k] = offs
	}
	if _, ok := offs[r.Offset]; ok {
		return
	}
	if t.nAhead >= t.max {
		clear(t.ahead)
		t.nAhead = 0
		offs = map[int64]struct{}{}
		t.ahead[k] = offs
	}
	offs[r.Offset] = struct{}{}
	t.nAhead++
}

// advance forgets the finished records of each partition below its
// offset in next: they are marked.
func (t *tracker) advance(next map[tp]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, end := range next {
		offs := t.ahead[k]
		for o := range offs {
			if o < end {
				delete(offs, o)
				t.nAhead--
			}
		}
		if len(offs) == 0 {
			delete(t.ahead, k)
		}
	}
}

// forget drops the state of partitions this consumer no longer owns.
func (t *tracker) forget(parts map[string][]int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			k := tp{topic, p}
			t.nAhead -= len(t.ahead[k])
			delete(t.ahead, k)
		}
	}
	for k := range t.failures {
		for _, p := range parts[k.topic] {
			if p == k.partition {
				delete(t.failures, k)
				break
			}
		}
	}
}
