package recovery

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
)

var scenarios = []scenario{
	{"BucketRollover", testBucketRollover},
	{"ConcurrentRegistrations", testConcurrentRegistrations},
	{"LateRegistrationIsWrittenAgain", testLateRegistration},
	{"RegisterRestoreVia", testRegisterRestoreVia},
	{"UnregisterDeletesTheWatchdog", testUnregister},
	{"ScanRedrivesEachEntryOnceAndEmptiesSealedWindows", testScanOnce},
	{"UnsealedWindowsAreNotTouched", testUnsealed},
	{"ShutdownMidBucketKeepsTheBucket", testShutdownSameEngine},
	{"RestartAfterShutdownRedrivesHarmlessly", testShutdownRestart},
	{"FailedRedriveKeepsTheBucket", testFailedRedrive},
	{"LaterRegistersAgain", testLater},
	{"CrashBetweenDropAndDelete", testCrashBetweenDropAndDelete},
	{"Node0Gates", testNode0Gates},
	{"LookbackRecoversABacklogTwoDaysOld", testLookback},
	{"LastWindowOfADayIsScannedAfterMidnight", testLastWindowOfADay},
	{"TokenRangeExcludingAnInstance", testTokenRange},
	{"LeaseExpiringMidScan", testLeaseExpiring},
	{"SecondWindows", testSecondWindows},
	{"RedriveBoundedByRange", testRedriveBoundedByRange},
	{"RedriveCancelledWhenRangeExpires", testRedriveCancelledWhenRangeExpires},
	{"RedriveMargin", testRedriveMargin},
	{"RangeMovesMidBucket", testRangeMovesMidBucket},
}

// Bucket indexes roll over every bucket-size rows per instance, window and
// parity: even 0, 2, 4 for retries, odd 1, 3 for watchdogs. The first row
// of a bucket costs one batch (tiers 1-5), each later one one write.
func testBucketRollover(t *testing.T, e *env) {
	e.cfg.BucketSize = 3
	e.cfg.Restore.DefaultDelayWindows = 1 // watchdogs in the same window as the retries
	w := e.writer()
	if e.cass != nil {
		e.cass.ResetStats()
	}
	var retryPaths, restorePaths []eventstore.RecoveryPath
	for _, id := range ids("r", 7) {
		retryPaths = append(retryPaths, e.retry(w, id, 1))
	}
	for _, id := range ids("w", 5) {
		restorePaths = append(restorePaths, e.restore(w, id))
	}
	var st cassandra.Stats
	if e.cass != nil {
		st = e.cass.Stats()
	}
	wantBuckets := func(paths []eventstore.RecoveryPath, want ...int) {
		t.Helper()
		var got []int
		for _, p := range paths {
			got = append(got, p.Bucket)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("buckets %v, want %v", got, want)
		}
	}
	wantBuckets(retryPaths, 0, 0, 0, 2, 2, 2, 4)
	wantBuckets(restorePaths, 1, 1, 1, 3, 3)
	win := MustWindows(e.cfg.Interval).RetryWindow(base, 1)
	for _, p := range append(retryPaths, restorePaths...) {
		if !p.Day.Equal(win.Day) || p.MinuteOfDay != win.Slot || p.InstanceID != w.InstanceID() {
			t.Fatalf("path %s, want window %v of %s", fmtPath(p), win, w.InstanceID())
		}
	}
	if got := e.buckets(retryPaths[0]); !reflect.DeepEqual(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("tier 4: %v", got)
	}
	for b, n := range map[int]int{0: 3, 1: 3, 2: 3, 3: 2, 4: 1} {
		p := win.Path(w.InstanceID(), b)
		if got := len(e.entries(p)); got != n {
			t.Errorf("bucket %d holds %d rows, want %d", b, got, n)
		}
		for _, en := range e.entries(p) {
			wantStatus := map[bool]string{false: StatusRetry, true: StatusRestore}[b%2 == 1]
			if en.InstanceToken != w.InstanceToken() || en.Domain != "order-saga" || en.Status != wantStatus {
				t.Errorf("entry %+v", en)
			}
		}
	}
	if got, want := w.Stats(), (WriterStats{Registrations: 12, Batches: 5, Writes: 7}); got != want {
		t.Errorf("writer stats %+v, want %+v", got, want)
	}
	if e.cass != nil {
		t.Logf("Cassandra statements for 12 registrations in 5 buckets: %+v", st)
		if st.Batches != 5 || st.Writes != 7 || st.RoundTrips() != 12 {
			t.Errorf("statements: %d batches, %d writes, %d round trips; want 5, 7, 12 (one per registration)", st.Batches, st.Writes, st.RoundTrips())
		}
		if tb := st.Tables[cassandra.TableRecoveryByInstance]; tb.Writes != 12 {
			t.Errorf("tier-5 writes %d, want 12", tb.Writes)
		}
		if tb := st.Tables[cassandra.TableBucketsByInstance]; tb.Writes != 5 {
			t.Errorf("tier-4 writes %d, want 5 (one per bucket)", tb.Writes)
		}
	}
	// The next window starts its counters again.
	e.windows(1)
	if p := e.retry(w, "next", 1); p.Bucket != 0 || p.MinuteOfDay != win.Slot+1 {
		t.Fatalf("next window: %s", fmtPath(p))
	}
}

// Concurrent registrations in one window fill each bucket exactly and
// write each bucket's tiers 1-4 once.
func testConcurrentRegistrations(t *testing.T, e *env) {
	e.cfg.BucketSize = 25
	w := e.writer()
	if e.cass != nil {
		e.cass.ResetStats()
	}
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, id := range ids("c", n) {
		wg.Go(func() {
			if _, err := w.RegisterRetry(t.Context(), e.scope, id, "order-saga", 1); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	var st cassandra.Stats
	if e.cass != nil {
		st = e.cass.Stats()
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	win := MustWindows(e.cfg.Interval).RetryWindow(base, 1)
	if got := e.buckets(win.Path(w.InstanceID(), 0)); !reflect.DeepEqual(got, []int{0, 2, 4, 6}) {
		t.Fatalf("buckets %v", got)
	}
	for _, b := range []int{0, 2, 4, 6} {
		if got := len(e.entries(win.Path(w.InstanceID(), b))); got != 25 {
			t.Errorf("bucket %d: %d rows", b, got)
		}
	}
	if st := w.Stats(); st.Batches != 4 || st.Writes != n-4 {
		t.Errorf("writer stats %+v", st)
	}
	if e.cass != nil {
		if st.RoundTrips() != n || st.Batches != 4 {
			t.Errorf("Cassandra: %d round trips, %d batches; want %d, 4", st.RoundTrips(), st.Batches, n)
		}
	}
}

// A registration that completes after its window started (a stalled
// write) is written again to a later window.
func testLateRegistration(t *testing.T, e *env) {
	calls := 0
	dir := &faultyDir{Directory: e.store}
	dir.beforeWrite = func() {
		calls++
		if calls == 1 {
			e.windows(2) // the first write "takes" two windows
		}
	}
	w, err := NewWriter(dir, e.cfg, WithClock(e.clock.Now), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	p, err := w.RegisterRetry(t.Context(), e.scope, "slow", "order-saga", 1)
	if err != nil {
		t.Fatal(err)
	}
	ws := MustWindows(e.cfg.Interval)
	if want := ws.RetryWindow(base.Add(2*e.cfg.Interval), 1); p.MinuteOfDay != want.Slot {
		t.Fatalf("path %s, want window %v", fmtPath(p), want)
	}
	if st := w.Stats(); st.Late != 1 || st.Registrations != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Both rows are found; re-driving the saga twice is harmless.
	e.windows(3)
	s := newSagas("slow")
	res := e.scan(e.engine(s))
	if res.Retried != 2 {
		t.Fatalf("result %+v", res)
	}
	s.check(t, 2, "slow")
}

// RegisterRestoreVia: the first watchdog of a bucket is written by the
// writer with its directory keys; later ones go through the caller's write
// (here the store's CreateTransactionWatched, as the orchestrator does),
// in the same buckets and counted the same. A failing write is returned
// and writes nothing; a late one is registered again in a later window
// while the first path is returned.
func testRegisterRestoreVia(t *testing.T, e *env) {
	e.cfg.BucketSize = 3
	e.cfg.Restore.DefaultDelayWindows = 1
	w := e.writer()
	wc, ok := e.store.(eventstore.WatchedCreator)
	if !ok {
		t.Fatalf("%T does not implement eventstore.WatchedCreator", e.store)
	}
	var during func()
	create := func(txID string, fail error) (eventstore.RecoveryPath, bool, error) {
		tx := eventstore.Transaction{Scope: e.scope, TxID: txID, Domain: "order-saga", State: eventstore.StateInProgress, Version: 1, CreatedAt: base, UpdatedAt: base}
		return w.RegisterRestoreVia(t.Context(), e.scope, txID, "order-saga", func(ctx context.Context, en eventstore.RecoveryEntry) error {
			if during != nil {
				during()
			}
			if fail != nil {
				return fail
			}
			tx.RestorePath = &en.RecoveryPath
			return wc.CreateTransactionWatched(ctx, tx, nil, en)
		})
	}
	win := MustWindows(e.cfg.Interval).RetryWindow(base, 1)
	for i, want := range []struct {
		bucket int
		via    bool
	}{{1, false}, {1, true}, {1, true}, {3, false}} {
		id := ids("v", 4)[i]
		p, via, err := create(id, nil)
		if err != nil || via != want.via || p.Bucket != want.bucket || p.MinuteOfDay != win.Slot || p.InstanceID != w.InstanceID() {
			t.Fatalf("%s: path %s, via %v, %v; want bucket %d of %v, via %v", id, fmtPath(p), via, err, want.bucket, win, want.via)
		}
		if via {
			tx, err := e.store.LoadTransaction(t.Context(), e.scope, id)
			if err != nil || tx.RestorePath == nil || !tx.RestorePath.Equal(p) {
				t.Fatalf("%s: saga %+v, %v; want it written with restore path %s", id, tx, err, fmtPath(p))
			}
		}
	}
	if got, want := w.Stats(), (WriterStats{Registrations: 4, Batches: 2, Writes: 2}); got != want {
		t.Errorf("writer stats %+v, want %+v", got, want)
	}
	boom := errors.New("boom")
	if _, via, err := create("v-fails", boom); !via || !errors.Is(err, boom) {
		t.Fatalf("failing write: via %v, %v; want via and boom", via, err)
	}
	if got := w.Stats().Registrations; got != 4 {
		t.Errorf("%d registrations after a failed write, want 4", got)
	}
	var got []string
	for _, b := range []int{1, 3} {
		for _, en := range e.entries(win.Path(w.InstanceID(), b)) {
			got = append(got, en.TxID)
			if en.Status != StatusRestore || en.InstanceToken != w.InstanceToken() || en.Domain != "order-saga" {
				t.Errorf("entry %+v", en)
			}
		}
	}
	if want := []string{"v-000", "v-001", "v-002", "v-003"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("watchdogs %v, want %v", got, want)
	}

	// A write that "takes" two windows completes late: the writer writes
	// a second row forward, and the caller keeps the first path.
	during = func() { during = nil; e.windows(2) }
	p, via, err := create("v-late", nil)
	if err != nil || !via || p.MinuteOfDay != win.Slot {
		t.Fatalf("late write: path %s, via %v, %v; want the first window's, via", fmtPath(p), via, err)
	}
	later := MustWindows(e.cfg.Interval).RetryWindow(e.clock.Now(), 1)
	if rows := e.entries(later.Path(w.InstanceID(), 1)); len(rows) != 1 || rows[0].TxID != "v-late" {
		t.Fatalf("rows of the later window %v: %+v, want v-late's", later, rows)
	}
	if st := w.Stats(); st.Late != 1 || st.Registrations != 6 {
		t.Errorf("stats after the late write %+v, want 1 late of 6", st)
	}

	// Late, and registering again fails: the caller's writes landed, so
	// the error wraps ErrLate (and the cause) and the path is returned.
	dir := &faultyDir{Directory: e.store}
	w2, err := NewWriter(dir, e.cfg, WithClock(e.clock.Now), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if _, via, err := w2.RegisterRestoreVia(t.Context(), e.scope, "w2-first", "order-saga", func(context.Context, eventstore.RecoveryEntry) error {
		t.Fatal("write called for the first row of a bucket")
		return nil
	}); via || err != nil {
		t.Fatalf("first row of w2: via %v, %v", via, err)
	}
	dir.failWrites.Store(true)
	p, via, err = w2.RegisterRestoreVia(t.Context(), e.scope, "w2-late", "order-saga", func(context.Context, eventstore.RecoveryEntry) error {
		e.windows(2)
		return nil
	})
	if !via || !errors.Is(err, ErrLate) || !errors.Is(err, errCrash) || p.InstanceID != w2.InstanceID() {
		t.Fatalf("late write, failing re-registration: path %s, via %v, %v; want the path, via, ErrLate wrapping the failure", fmtPath(p), via, err)
	}
}

// A saga that ended deletes its watchdog by the path it stored.
func testUnregister(t *testing.T, e *env) {
	e.cfg.Restore.DefaultDelayWindows = 2
	w := e.writer()
	paths := map[string]eventstore.RecoveryPath{}
	for _, id := range ids("s", 3) {
		paths[id] = e.restore(w, id)
	}
	for _, id := range []string{"s-000", "s-002"} {
		if err := w.Unregister(t.Context(), e.scope, paths[id], id); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Unregister(t.Context(), e.scope, eventstore.RecoveryPath{}, "none"); err != nil {
		t.Fatalf("zero path: %v", err)
	}
	e.windows(3)
	s := newSagas(ids("s", 3)...)
	res := e.scan(e.engine(s))
	if res.Dispatched != 1 || res.Restored != 1 || s.callsOf("s-001") != 1 {
		t.Fatalf("result %+v, calls %v", res, s.calls)
	}
	if left := e.dumpAround(); len(only(left, "t2")) != 0 {
		t.Fatalf("left: %v", left)
	}
}

// A scan re-drives every entry of the sealed windows exactly once and
// leaves no row of them behind; the next scan finds nothing.
func testScanOnce(t *testing.T, e *env) {
	e.cfg.BucketSize = 4
	e.cfg.Concurrency = 3
	e.cfg.PageSize = 2
	e.cfg.Restore.DefaultDelayWindows = 2
	w1, w2 := e.writer(), e.writer()
	retries, restores := ids("r", 20), ids("w", 6)
	for i, id := range retries {
		e.retry([]*Writer{w1, w2}[i%2], id, 1+i%3)
	}
	for i, id := range restores {
		e.restore([]*Writer{w1, w2}[i%2], id)
	}
	if got := len(only(e.dumpAround(), "t2")); got != 3 {
		t.Fatalf("%d windows registered, want 3", got)
	}
	e.windows(4) // W+1..W+3 sealed
	s := newSagas(append(retries, restores...)...)
	en := e.engine(s)
	res := e.scan(en)
	s.check(t, 1, append(retries, restores...)...)
	if res.Retried != 20 || res.Restored != 6 || res.Dispatched != 26 || res.Failed != 0 || res.BucketsKept != 0 ||
		res.InstancesDeleted != 6 || res.WindowsDeleted != 3 || !res.Node0 || res.Stopped {
		t.Fatalf("result %+v", res)
	}
	// Today is not over: its tier-1 row stays, nothing below it.
	if left := e.dumpAround(); !reflect.DeepEqual(left, []string{"t1 2026-03-10"}) {
		t.Fatalf("left: %v", left)
	}
	if res := e.scan(en); res.Dispatched != 0 || res.Windows != 0 {
		t.Fatalf("second scan %+v", res)
	}
	tot, scans := en.Totals()
	if scans != 2 || tot.Retried != 20 || tot.Restored != 6 {
		t.Fatalf("totals %+v after %d scans", tot, scans)
	}
}

// Windows that are not over are left alone, whatever they hold.
func testUnsealed(t *testing.T, e *env) {
	w := e.writer()
	ws := MustWindows(e.cfg.Interval)
	e.retry(w, "soon", 1)
	e.retry(w, "later", 5)
	s := newSagas("soon", "later", "next")
	en := e.engine(s)
	// One nanosecond before W+1 ends: nothing is sealed.
	e.clock.Set(ws.RetryWindow(base, 1).End.Add(-time.Nanosecond))
	if res := e.scan(en); res.Dispatched != 0 || res.Windows != 0 {
		t.Fatalf("before W+1 ends: %+v", res)
	}
	// W+1 ends: only it is read.
	e.clock.Set(ws.RetryWindow(base, 1).End)
	e.retry(w, "next", 1) // into the window after the new read window
	res := e.scan(en)
	if res.Dispatched != 1 || s.callsOf("soon") != 1 || res.WindowsDeleted != 1 {
		t.Fatalf("W+1 sealed: %+v (calls %v)", res, s.calls)
	}
	left := only(e.dumpAround(), "t5")
	if want := []string{
		"t5 " + fmtPath(ws.RetryWindow(base, 5).Path(w.InstanceID(), 0)) + " later",
		"t5 " + fmtPath(ws.RetryWindow(e.clock.Now(), 1).Path(w.InstanceID(), 0)) + " next",
	}; !reflect.DeepEqual(left, sorted(want)) {
		t.Fatalf("left %v, want %v", left, want)
	}
}

// ctx ends after the 4th of 10 re-drives (one at a time): the bucket is
// kept whole; the same engine's next scan re-drives only the other 6, so
// no entry is dispatched twice, and drops the bucket.
func testShutdownSameEngine(t *testing.T, e *env) {
	e.cfg.Concurrency = 1
	w := e.writer()
	list := ids("t", 10)
	for _, id := range list {
		e.retry(w, id, 1)
	}
	e.windows(2)
	s := newSagas(list...)
	en := e.engine(s)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s.hook = func(n int, _ eventstore.RecoveryEntry) {
		if n == 4 {
			cancel()
		}
	}
	res, _ := en.Scan(ctx)
	if !res.Stopped || res.Dispatched != 4 || res.BucketsKept != 1 || res.BucketsDropped != 0 || res.InstancesDeleted != 0 || res.WindowsDeleted != 0 {
		t.Fatalf("interrupted scan %+v", res)
	}
	if got := len(only(e.dumpAround(), "t5")); got != 10 {
		t.Fatalf("%d rows left in the kept bucket, want 10", got)
	}
	s.hook = nil
	res = e.scan(en)
	if res.Dispatched != 6 || res.Skipped != 4 || res.BucketsDropped != 1 || res.WindowsDeleted != 1 {
		t.Fatalf("resumed scan %+v", res)
	}
	s.check(t, 1, list...)
	if left := only(e.dumpAround(), "t2"); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}

// After a shutdown mid-bucket a new engine (a restarted process) scans the
// kept bucket from its first row: the 4 entries re-driven before the stop
// are dispatched again, which the orchestrator's idempotent Redrive turns
// into no-ops: every saga still completes exactly once.
func testShutdownRestart(t *testing.T, e *env) {
	e.cfg.Concurrency = 1
	w := e.writer()
	list := ids("t", 10)
	for _, id := range list {
		e.retry(w, id, 1)
	}
	e.windows(2)
	s := newSagas(list...)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s.hook = func(n int, _ eventstore.RecoveryEntry) {
		if n == 4 {
			cancel()
		}
	}
	if res, _ := e.engine(s).Scan(ctx); res.Dispatched != 4 || res.BucketsKept != 1 {
		t.Fatalf("interrupted scan %+v", res)
	}
	s.hook = nil
	res := e.scan(e.engine(s))
	if res.Dispatched != 10 || res.Skipped != 0 || res.BucketsDropped != 1 {
		t.Fatalf("scan after restart %+v", res)
	}
	s.check(t, -1, list...)
	again := 0
	for _, id := range list {
		again += s.callsOf(id) - 1
	}
	if again != 4 {
		t.Fatalf("%d entries dispatched twice, want the 4 dispatched before the stop", again)
	}
}

// One failing re-drive keeps its bucket, its instance and (gate 1) its
// window; the next scan re-drives only that entry.
func testFailedRedrive(t *testing.T, e *env) {
	w := e.writer()
	list := ids("f", 6)
	for _, id := range list {
		e.retry(w, id, 1)
	}
	e.windows(2)
	s := newSagas(list...)
	s.failures["f-003"] = 1
	en := e.engine(s)
	res := e.scan(en)
	if res.Failed != 1 || res.Retried != 5 || res.BucketsKept != 1 || res.InstancesDeleted != 0 || res.WindowsDeleted != 0 {
		t.Fatalf("first scan %+v", res)
	}
	if got := len(only(e.dumpAround(), "t5")); got != 6 {
		t.Fatalf("kept bucket holds %d rows, want 6", got)
	}
	res = e.scan(en)
	if res.Dispatched != 1 || res.Skipped != 5 || res.BucketsDropped != 1 || res.WindowsDeleted != 1 {
		t.Fatalf("second scan %+v", res)
	}
	s.check(t, 1, "f-000", "f-001", "f-002", "f-004", "f-005")
	s.check(t, 2, "f-003")
}

// A Redriver answering Later has the entry registered again forward (same
// parity); without a Writer that is a failure.
func testLater(t *testing.T, e *env) {
	e.cfg.Restore.DefaultDelayWindows = 2
	w := e.writer()
	list := ids("l", 3)
	for _, id := range list {
		e.restore(w, id)
	}
	e.windows(3)
	s := newSagas(list...)
	for _, id := range list {
		s.later[id] = 1
	}
	// Without a writer: failed, kept.
	if res := e.scan(e.engine(s)); res.Failed != 3 || res.BucketsKept != 1 {
		t.Fatalf("without writer %+v", res)
	}
	for _, id := range list {
		s.later[id] = 1
	}
	node := e.writer() // the retry node's own writer
	res := e.scan(e.engine(s, WithWriter(node)))
	if res.Rescheduled != 3 || res.BucketsDropped != 1 || res.Restored != 0 {
		t.Fatalf("with writer %+v", res)
	}
	t5 := only(e.dumpAround(), "t5")
	want := MustWindows(e.cfg.Interval).RestoreWindow(e.clock.Now(), 2)
	for _, l := range t5 {
		if prefix := "t5 " + fmtPath(want.Path(node.InstanceID(), 1)) + " "; !strings.HasPrefix(l, prefix) {
			t.Fatalf("re-registered row %s, want in %s", l, prefix)
		}
	}
	if len(t5) != 3 {
		t.Fatalf("rows %v", t5)
	}
	e.windows(3)
	if res := e.scan(e.engine(s, WithWriter(node))); res.Restored != 3 {
		t.Fatalf("after the new window %+v", res)
	}
	s.check(t, 3, list...)
}

// A crash after a bucket's tier-5 partition was dropped and before its
// tier-4 row was deleted leaves a tier-4 row over an empty partition: the
// next scan deletes it (the empty-bucket branch) without re-driving
// anything.
func testCrashBetweenDropAndDelete(t *testing.T, e *env) {
	w := e.writer()
	list := ids("x", 5)
	for _, id := range list {
		e.retry(w, id, 1)
	}
	e.windows(2)
	s := newSagas(list...)
	crashing := &faultyDir{Directory: e.store, failDeleteBucket: 1}
	res, err := e.engineOn(crashing, s).Scan(t.Context())
	if !errors.Is(err, errCrash) || res.Retried != 5 || res.BucketsKept != 1 || res.InstancesDeleted != 0 {
		t.Fatalf("crashing scan %+v, %v", res, err)
	}
	left := e.dumpAround()
	if len(only(left, "t5")) != 0 || len(only(left, "t4")) != 1 || len(only(left, "t3")) != 1 {
		t.Fatalf("after the crash: %v", left)
	}
	res = e.scan(e.engine(s))
	if res.Dispatched != 0 || res.BucketsDropped != 1 || res.InstancesDeleted != 1 || res.WindowsDeleted != 1 {
		t.Fatalf("recovering scan %+v", res)
	}
	s.check(t, 1, list...)
	if left := e.dumpAround(); len(left) != 1 {
		t.Fatalf("left %v", left)
	}
}

// Node-0 (the owner of the lowest range) deletes a window only when no
// tier-3 row of it is left on the whole ring and the window is over, and a
// day only when it is over and has no window left. Other nodes delete
// neither.
func testNode0Gates(t *testing.T, e *env) {
	e.cfg.Restore.DefaultDelayWindows = 5
	ws := MustWindows(e.cfg.Interval)
	wa := e.writer(WithInstanceID(instanceIn(lowHalf, "pod-a")))
	wb := e.writer(WithInstanceID(instanceIn(highHalf, "pod-b")))
	for _, id := range ids("a", 3) {
		e.retry(wa, id, 1)
	}
	for _, id := range ids("b", 3) {
		e.retry(wb, id, 1)
	}
	future := e.restore(wa, "watch") // W+5
	s := newSagas(append(append(ids("a", 3), ids("b", 3)...), "watch")...)
	node0 := e.engine(s, WithRanges(StaticRange(lowHalf)))
	node1 := e.engine(s, WithRanges(StaticRange(highHalf)))
	e.windows(2)
	w1 := ws.RetryWindow(base, 1)

	res := e.scan(node0)
	if !res.Node0 || res.Retried != 3 || res.InstancesDeleted != 1 || res.WindowsDeleted != 0 {
		t.Fatalf("node 0 while pod-b's row is left: %+v", res)
	}
	if got := e.windowsOf(w1.Day); len(got) != 2 {
		t.Fatalf("windows %v", got)
	}
	res = e.scan(node1)
	if res.Node0 || res.Retried != 3 || res.InstancesDeleted != 1 || res.WindowsDeleted != 0 {
		t.Fatalf("node 1: %+v", res)
	}
	res = e.scan(node0)
	if res.Dispatched != 0 || res.WindowsDeleted != 1 {
		t.Fatalf("node 0 once the ring is clear: %+v", res)
	}

	// Gate 2: a window with no tier-3 row left is still not deleted before
	// it ends.
	if err := e.store.DeleteInstance(t.Context(), e.scope, future.Day, future.MinuteOfDay,
		eventstore.Instance{Token: wa.InstanceToken(), ID: wa.InstanceID()}); err != nil {
		t.Fatal(err)
	}
	fw := ws.FromSlot(future.Day, future.MinuteOfDay)
	if res := e.scan(node0); res.WindowsDeleted != 0 {
		t.Fatalf("unsealed window compacted: %+v", res)
	}
	p := &pass{e: node0}
	if p.compactWindow(t.Context(), future.Day, future.MinuteOfDay, fw) {
		t.Fatal("compactWindow passed gate 2 before the window ended")
	}
	e.clock.Set(fw.End)
	if res := e.scan(node0); res.WindowsDeleted != 1 || res.Dispatched != 0 {
		t.Fatalf("after the window ended: %+v", res)
	}
	// The day's tier-1 row goes once the day is over, and only on Node-0.
	if got := only(e.dumpAround(), "t1"); len(got) != 1 {
		t.Fatalf("days %v", got)
	}
	e.clock.Set(ws.DayEnd(w1.Day).Add(time.Second))
	if res := e.scan(node1); res.DaysDeleted != 0 {
		t.Fatalf("node 1 deleted a day: %+v", res)
	}
	if res := e.scan(node0); res.DaysDeleted != 1 {
		t.Fatalf("node 0 kept an empty, finished day: %+v", res)
	}
	if left := e.dumpAround(); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}

// Work registered two days ago (the service was down since) is found with
// lookback-days 2, not with 1.
func testLookback(t *testing.T, e *env) {
	e.cfg.Restore.DefaultDelayWindows = 2
	e.clock.Set(base.AddDate(0, 0, -2))
	w := e.writer()
	for _, id := range ids("old", 5) {
		e.retry(w, id, 1)
	}
	e.restore(w, "old-watch")
	e.clock.Set(base)
	s := newSagas(append(ids("old", 5), "old-watch")...)
	e.cfg.LookbackDays = 1
	if res := e.scan(e.engine(s)); res.Dispatched != 0 || res.Days != 0 {
		t.Fatalf("lookback 1: %+v", res)
	}
	if got := len(only(e.dumpAround(), "t5")); got != 6 {
		t.Fatalf("%d rows left, want 6", got)
	}
	e.cfg.LookbackDays = 2
	res := e.scan(e.engine(s))
	if res.Retried != 5 || res.Restored != 1 || res.WindowsDeleted != 2 || res.DaysDeleted != 1 {
		t.Fatalf("lookback 2: %+v", res)
	}
	s.check(t, 1, append(ids("old", 5), "old-watch")...)
	if left := e.dumpAround(); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}

// The last window of a day is sealed at midnight: the first scan of the
// next day re-drives it with the smallest lookback allowed (1; 0 is refused
// because it would read today only, issue 35.11).
func testLastWindowOfADay(t *testing.T, e *env) {
	e.cfg.LookbackDays = 1
	e.clock.Set(at("2026-03-10T23:58:20Z"))
	w := e.writer()
	p := e.retry(w, "midnight", 1)
	if got := p.Day.Format(time.DateOnly) + "/" + fmt.Sprint(p.MinuteOfDay); got != "2026-03-10/1439" {
		t.Fatalf("registered in %s, want the day's last window", got)
	}
	e.clock.Set(at("2026-03-11T00:00:05Z"))
	s := newSagas("midnight")
	res := e.scan(e.engine(s))
	if res.Retried != 1 || res.WindowsDeleted != 1 || res.DaysDeleted != 1 {
		t.Fatalf("scan after midnight: %+v", res)
	}
	s.check(t, 1, "midnight")
}

// A node scans only the instances whose token lies in its range, and only
// while it holds a valid range.
func testTokenRange(t *testing.T, e *env) {
	w := e.writer(WithInstanceID(instanceIn(highHalf, "pod")))
	for _, id := range ids("k", 3) {
		e.retry(w, id, 1)
	}
	e.windows(2)
	s := newSagas(ids("k", 3)...)
	// Node-0 of the low half: the instance is not its own, and its row
	// blocks gate 1.
	res := e.scan(e.engine(s, WithRanges(StaticRange(lowHalf))))
	if res.Dispatched != 0 || res.Instances != 0 || res.WindowsDeleted != 0 || !res.Node0 {
		t.Fatalf("foreign instance: %+v", res)
	}
	// No range, or an expired one: no scan at all.
	none := RangeFunc(func(time.Time) (eventstore.TokenRange, time.Time, bool) {
		return eventstore.TokenRange{}, time.Time{}, false
	})
	if res := e.scan(e.engine(s, WithRanges(none))); !res.NoRange || res.Days != 0 {
		t.Fatalf("no range: %+v", res)
	}
	var lease Lease
	if res := e.scan(e.engine(s, WithRanges(&lease))); !res.NoRange {
		t.Fatalf("zero lease: %+v", res)
	}
	lease.Set(eventstore.FullRing, e.clock.Now())
	if res := e.scan(e.engine(s, WithRanges(&lease))); !res.NoRange {
		t.Fatalf("expired lease: %+v", res)
	}
	if got := len(only(e.dumpAround(), "t5")); got != 3 {
		t.Fatalf("rows touched: %d left", got)
	}
	// The owner of the high half re-drives them (it is not Node-0).
	lease.Set(highHalf, e.clock.Now().Add(time.Minute))
	res = e.scan(e.engine(s, WithRanges(&lease)))
	if res.Retried != 3 || res.Node0 || res.InstancesDeleted != 1 || res.WindowsDeleted != 0 {
		t.Fatalf("owner: %+v", res)
	}
	s.check(t, 1, ids("k", 3)...)
}

// A lease that expires mid-scan stops the scan: the bucket in progress is
// kept for whoever holds the range next.
func testLeaseExpiring(t *testing.T, e *env) {
	e.cfg.Concurrency = 1
	w := e.writer()
	list := ids("e", 5)
	for _, id := range list {
		e.retry(w, id, 1)
	}
	e.windows(2)
	var lease Lease
	lease.Set(eventstore.FullRing, e.clock.Now().Add(30*time.Second))
	s := newSagas(list...)
	s.hook = func(n int, _ eventstore.RecoveryEntry) {
		if n == 2 {
			e.clock.Advance(time.Minute) // the lease runs out
		}
	}
	res := e.scan(e.engine(s, WithRanges(&lease)))
	if !res.Stopped || res.Dispatched != 2 || res.BucketsKept != 1 {
		t.Fatalf("scan %+v", res)
	}
	s.hook = nil
	lease.Set(eventstore.FullRing, e.clock.Now().Add(time.Minute))
	if res := e.scan(e.engine(s, WithRanges(&lease))); res.BucketsDropped != 1 || res.WindowsDeleted != 1 {
		t.Fatalf("next holder %+v", res)
	}
	s.check(t, -1, list...)
}

// Windows of 2 seconds (tests, demos) use synthetic recovery days: the
// whole cycle works on them as on minute windows.
func testSecondWindows(t *testing.T, e *env) {
	e.cfg.Interval = 2 * time.Second
	e.cfg.Restore.DefaultDelayWindows = 3
	e.cfg.BucketSize = 2
	w := e.writer()
	list := ids("q", 5)
	for _, id := range list {
		e.retry(w, id, 1)
	}
	e.restore(w, "q-watch")
	if e.cass != nil {
		e.cass.ResetStats()
	}
	e.windows(4)
	s := newSagas(append(list, "q-watch")...)
	res := e.scan(e.engine(s))
	if res.Retried != 5 || res.Restored != 1 || res.BucketsDropped != 4 || res.WindowsDeleted != 2 {
		t.Fatalf("scan %+v", res)
	}
	if e.cass != nil {
		st := e.cass.Stats()
		t.Logf("Cassandra statements of a scan of 2 windows, 1 instance, 4 buckets, 6 rows: %d round trips (%d reads, %d writes)",
			st.RoundTrips(), st.Reads, st.Writes)
	}
	s.check(t, 1, append(list, "q-watch")...)
	if left := e.dumpAround(); len(only(left, "t2")) != 0 {
		t.Fatalf("left %v", left)
	}
}
