package kafkaloop

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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

// The failure map keeps at most max entries, evicting the one idle
// longest; the finished-ahead set is dropped when full; forget drops the
// state of lost partitions.
func TestTrackerBounds(t *testing.T) {
	tr := newTracker(3)
	t0 := time.Now()
	for i := range 3 {
		tr.fail(recKey{"t", 0, int64(i)}, t0.Add(time.Duration(i)*time.Second))
	}
	tr.fail(recKey{"t", 0, 0}, t0.Add(10*time.Second)) // 1 is now the idlest
	tr.fail(recKey{"t", 1, 9}, t0.Add(11*time.Second))
	if len(tr.failures) != 3 {
		t.Fatalf("%d failures tracked, want 3", len(tr.failures))
	}
	if _, ok := tr.failure(recKey{"t", 0, 1}); ok {
		t.Error("the idlest failure was not evicted")
	}
	if f, _ := tr.failure(recKey{"t", 0, 0}); f.tries != 2 || !f.first.Equal(t0) {
		t.Errorf("failure state %+v, want 2 tries since t0", f)
	}

	rec := func(p int32, o int64) *kgo.Record { return &kgo.Record{Topic: "t", Partition: p, Offset: o} }
	for o := range int64(3) {
		tr.setDoneAhead(rec(0, o))
	}
	tr.setDoneAhead(rec(0, 1)) // already there
	if tr.nAhead != 3 || !tr.doneAhead(rec(0, 2)) {
		t.Fatalf("%d finished records tracked", tr.nAhead)
	}
	tr.setDoneAhead(rec(1, 5)) // full: dropped, then added
	if tr.nAhead != 1 || tr.doneAhead(rec(0, 0)) || !tr.doneAhead(rec(1, 5)) {
		t.Errorf("after overflow: %d tracked", tr.nAhead)
	}
	tr.setDoneAhead(rec(1, 6))
	tr.advance(map[tp]int64{{"t", 1}: 6})
	if tr.nAhead != 1 || tr.doneAhead(rec(1, 5)) || !tr.doneAhead(rec(1, 6)) {
		t.Errorf("after advance: %d tracked", tr.nAhead)
	}

	tr.forget(map[string][]int32{"t": {1}})
	if tr.nAhead != 0 || len(tr.ahead) != 0 {
		t.Errorf("forget left %d finished records", tr.nAhead)
	}
	if _, ok := tr.failure(recKey{"t", 1, 9}); ok {
		t.Error("forget left a failure of partition 1")
	}
	if _, ok := tr.failure(recKey{"t", 0, 0}); !ok {
		t.Error("forget dropped a failure of partition 0")
	}
}

// interrupt closes the current batch's stop signal only.
func TestInterrupt(t *testing.T) {
	tr := newTracker(1)
	tr.interrupt() // between batches: pending until allowed
	tr.allowed()
	b := tr.startBatch()
	if closed(b.c) {
		t.Fatal("an interrupt cleared by allowed ended a batch")
	}
	tr.interrupt()
	tr.interrupt()
	select {
	case <-b.c:
	default:
		t.Fatal("batch not interrupted")
	}
	tr.endBatch()
	b2 := tr.startBatch()
	if closed(b2.c) {
		t.Fatal("a new batch starts interrupted")
	}
	tr.endBatch()
	tr.interrupt()
	if closed(b2.c) {
		t.Fatal("an ended batch was interrupted")
	}
	if b3 := tr.startBatch(); !closed(b3.c) {
		t.Fatal("an interrupt between batches did not end the next one")
	}
}
