package kafkaloop

import (
	"testing"
	"time"
)

func TestBackoffDoublesToTheCap(t *testing.T) {
	l := &loop{o: Options{RetryBackoff: 100 * time.Millisecond}}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := l.backoff(i + 1); got != w*time.Millisecond {
			t.Errorf("backoff after %d failures = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
}

func TestDefaults(t *testing.T) {
	var o Options
	o.defaults()
	if o.RetryBudget != DefaultRetryBudget || o.MaxBatchTime != DefaultMaxBatchTime || o.Concurrency != DefaultConcurrency ||
		o.MaxPollRecords != DefaultMaxPollRecords || o.RetryBackoff != DefaultRetryBackoff || o.Logger == nil {
		t.Errorf("defaults: %+v", o)
	}
	o = Options{RetryBudget: -1, MaxBatchTime: -1}
	o.defaults()
	if o.RetryBudget != -1 || o.MaxBatchTime != -1 {
		t.Errorf("negative (unlimited) values changed: %+v", o)
	}
}

// The entry queue keeps FIFO order across its compactions and does not
// keep popped entries reachable.
func TestQueueOrderAndCompaction(t *testing.T) {
	var q queue
	next := int64(0)
	for round := range 5 {
		for range 3000 {
			q.push(&entry{off: int64(q.len()) + next})
		}
		for range 2500 + round {
			if e := q.pop(); e.off != next {
				t.Fatalf("popped offset %d, want %d", e.off, next)
			}
			next++
		}
		for i := range q.head {
			if q.s[i] != nil {
				t.Fatalf("popped slot %d still holds an entry", i)
			}
		}
		if q.head > len(q.s)/2 && q.head >= 1024 {
			t.Fatalf("queue not compacted: head %d of %d", q.head, len(q.s))
		}
	}
	for q.len() > 0 {
		if e := q.pop(); e.off != next {
			t.Fatalf("popped offset %d, want %d", e.off, next)
		}
		next++
	}
	if q.head != 0 || len(q.s) != 0 {
		t.Errorf("empty queue: head %d, len %d", q.head, len(q.s))
	}
}
