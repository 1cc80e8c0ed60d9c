package storetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

func day(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

func entry(d time.Time, minute int, inst eventstore.Instance, bucket int, txID string) eventstore.RecoveryEntry {
	return eventstore.RecoveryEntry{
		RecoveryPath:  eventstore.RecoveryPath{Day: d, MinuteOfDay: minute, InstanceID: inst.ID, Bucket: bucket},
		TxID:          txID,
		Domain:        "order-saga",
		Status:        "IN_PROGRESS",
		InstanceToken: inst.Token,
	}
}

func fmtDays(days []time.Time) string {
	var s []string
	for _, d := range days {
		s = append(s, d.UTC().Format(time.DateOnly))
	}
	return fmt.Sprint(s)
}

func fmtInstances(list []eventstore.Instance) string {
	var s []string
	for _, i := range list {
		s = append(s, fmt.Sprintf("%d:%s", i.Token, i.ID))
	}
	return fmt.Sprint(s)
}

func txIDs(list []eventstore.RecoveryEntry) string {
	var s []string
	for _, e := range list {
		s = append(s, e.TxID)
	}
	return fmt.Sprint(s)
}

func testDirectoryOrder(t *testing.T, e *env) {
	ctx := t.Context()
	d1, d2, d3 := day(2025, 12, 31), day(2026, 1, 1), day(2026, 1, 2)
	instances := []eventstore.Instance{
		{Token: 5, ID: "pod-b"},
		{Token: -9_000_000_000_000_000_000, ID: "pod-z"},
		{Token: 5, ID: "pod-a"},
		{Token: math.MaxInt64, ID: "pod-m"},
		{Token: math.MinInt64, ID: "pod-n"},
		{Token: 0, ID: "pod-0"},
	}
	var entries []eventstore.RecoveryEntry
	for _, d := range []time.Time{d2, d3, d1} {
		entries = append(entries, entry(d, 700, instances[0], 0, "tx-"+d.Format("0102")))
	}
	for _, m := range []int{1439, 0, 5, 700} {
		entries = append(entries, entry(d2, m, instances[0], 2, fmt.Sprintf("tx-m%d", m)))
	}
	for i, inst := range instances {
		entries = append(entries, entry(d2, 5, inst, 1, fmt.Sprintf("tx-i%d", i)))
	}
	for _, b := range []int{4, 1, 0, 3, 2, 11} {
		entries = append(entries, entry(d2, 5, instances[2], b, fmt.Sprintf("tx-b%d", b)))
	}
	for _, id := range []string{"tx-k9", "tx-k1", "tx-k5", "tx-k3"} {
		entries = append(entries, entry(d2, 5, instances[2], 7, id))
	}
	// Insertion order must not matter.
	rand.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	for _, en := range entries {
		// Times of day on Day are ignored: only the calendar day counts.
		en.Day = en.Day.Add(13 * time.Hour)
		must(t, e.store.RegisterRecovery(ctx, e.scope, en), "RegisterRecovery")
	}

	days, err := e.store.ListDays(ctx, e.scope, day(2025, 12, 1), day(2026, 12, 31))
	must(t, err, "ListDays across a year boundary")
	if got, want := fmtDays(days), "[2025-12-31 2026-01-01 2026-01-02]"; got != want {
		t.Fatalf("ListDays %s, want %s", got, want)
	}
	days, err = e.store.ListDays(ctx, e.scope, d2.Add(5*time.Hour), d2.Add(6*time.Hour))
	must(t, err, "ListDays of one day")
	if got, want := fmtDays(days), "[2026-01-01]"; got != want {
		t.Fatalf("ListDays of one day %s, want %s", got, want)
	}
	days, err = e.store.ListDays(ctx, e.scope, d3.AddDate(0, 0, 1), d3.AddDate(0, 1, 0))
	must(t, err, "ListDays of an empty range")
	if len(days) != 0 {
		t.Fatalf("ListDays of an empty range: %s", fmtDays(days))
	}

	windows, err := e.store.ListWindows(ctx, e.scope, d2)
	must(t, err, "ListWindows")
	if got, want := fmt.Sprint(windows), "[0 5 700 1439]"; got != want {
		t.Fatalf("ListWindows %s, want %s", got, want)
	}
	windows, err = e.store.ListWindows(ctx, e.scope, d1)
	must(t, err, "ListWindows of the other year")
	if got, want := fmt.Sprint(windows), "[700]"; got != want {
		t.Fatalf("ListWindows of 2025-12-31 %s, want %s", got, want)
	}

	insts, err := e.store.ListInstances(ctx, e.scope, d2, 5, eventstore.FullRing)
	must(t, err, "ListInstances")
	wantAll := "[-9223372036854775808:pod-n -9000000000000000000:pod-z 0:pod-0 5:pod-a 5:pod-b 9223372036854775807:pod-m]"
	if got := fmtInstances(insts); got != wantAll {
		t.Fatalf("ListInstances %s, want %s", got, wantAll)
	}
	insts, err = e.store.ListInstances(ctx, e.scope, d2, 5, eventstore.TokenRange{Min: 0, Max: 5})
	must(t, err, "ListInstances [0, 5]")
	if got, want := fmtInstances(insts), "[0:pod-0 5:pod-a 5:pod-b]"; got != want {
		t.Fatalf("ListInstances [0, 5] %s, want %s (bounds inclusive)", got, want)
	}
	insts, err = e.store.ListInstances(ctx, e.scope, d2, 5, eventstore.TokenRange{Min: 6, Max: math.MaxInt64})
	must(t, err, "ListInstances [6, max]")
	if got, want := fmtInstances(insts), "[9223372036854775807:pod-m]"; got != want {
		t.Fatalf("ListInstances [6, max] %s, want %s", got, want)
	}
	for _, m := range []int{5, 700} {
		ok, err := e.store.HasInstances(ctx, e.scope, d2, m)
		must(t, err, "HasInstances")
		if !ok {
			t.Fatalf("HasInstances(%d) false", m)
		}
	}
	ok, err := e.store.HasInstances(ctx, e.scope, d2, 6)
	must(t, err, "HasInstances of an empty window")
	if ok {
		t.Fatal("HasInstances of an empty window is true")
	}

	buckets, err := e.store.ListBuckets(ctx, e.scope, d2, 5, "pod-a")
	must(t, err, "ListBuckets")
	if got, want := fmt.Sprint(buckets), "[0 1 2 3 4 7 11]"; got != want {
		t.Fatalf("ListBuckets %s, want %s", got, want)
	}

	path := eventstore.RecoveryPath{Day: d2, MinuteOfDay: 5, InstanceID: "pod-a", Bucket: 7}
	got, err := e.store.ListRecoveryEntries(ctx, e.scope, path, "", 0)
	must(t, err, "ListRecoveryEntries")
	if ids, want := txIDs(got), "[tx-k1 tx-k3 tx-k5 tx-k9]"; ids != want {
		t.Fatalf("ListRecoveryEntries %s, want %s", ids, want)
	}
	want := entry(d2, 5, instances[2], 7, "tx-k1")
	if g := got[0]; !reflect.DeepEqual(canonEntry(g), canonEntry(want)) {
		t.Fatalf("tier-5 row %+v, want %+v", g, want)
	}
	// Entries of one bucket stay in their bucket.
	got, err = e.store.ListRecoveryEntries(ctx, e.scope, eventstore.RecoveryPath{Day: d2, MinuteOfDay: 5, InstanceID: "pod-a", Bucket: 1}, "", 0)
	must(t, err, "ListRecoveryEntries bucket 1")
	if ids, want := txIDs(got), "[tx-b1 tx-i2]"; ids != want {
		t.Fatalf("ListRecoveryEntries bucket 1: %s, want %s", ids, want)
	}
}

func canonEntry(e eventstore.RecoveryEntry) eventstore.RecoveryEntry {
	e.Day = canonTime(e.Day)
	return e
}

func testDirectoryPaging(t *testing.T, e *env) {
	ctx := t.Context()
	inst := eventstore.Instance{Token: 42, ID: "pod-page"}
	d := day(2026, 2, 28)
	const n = 23
	for i := range n {
		must(t, e.store.RegisterRecovery(ctx, e.scope, entry(d, 1000, inst, 4, fmt.Sprintf("tx-%03d", (i*7)%n))), "RegisterRecovery")
	}
	path := eventstore.RecoveryPath{Day: d, MinuteOfDay: 1000, InstanceID: inst.ID, Bucket: 4}
	var all []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("paging does not end")
		}
		page, err := e.store.ListRecoveryEntries(ctx, e.scope, path, after, 5)
		must(t, err, "ListRecoveryEntries page")
		if len(page) > 5 {
			t.Fatalf("page of %d rows, limit 5", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, en := range page {
			all = append(all, en.TxID)
		}
		after = page[len(page)-1].TxID
	}
	if len(all) != n {
		t.Fatalf("paged %d rows, want %d: %v", len(all), n, all)
	}
	for i, id := range all {
		if want := fmt.Sprintf("tx-%03d", i); id != want {
			t.Fatalf("row %d is %s, want %s (ascending transaction id)", i, id, want)
		}
	}
}

func testDirectoryDeletes(t *testing.T, e *env) {
	ctx := t.Context()
	d := day(2026, 5, 1)
	a, b := eventstore.Instance{Token: -10, ID: "pod-a"}, eventstore.Instance{Token: 10, ID: "pod-b"}
	for _, en := range []eventstore.RecoveryEntry{
		entry(d, 60, a, 0, "tx-1"), entry(d, 60, a, 0, "tx-2"), entry(d, 60, a, 0, "tx-3"),
		entry(d, 60, a, 2, "tx-4"),
		entry(d, 60, b, 1, "tx-5"),
		entry(d, 61, b, 0, "tx-6"),
	} {
		must(t, e.store.RegisterRecovery(ctx, e.scope, en), "RegisterRecovery")
	}
	p0 := eventstore.RecoveryPath{Day: d, MinuteOfDay: 60, InstanceID: "pod-a", Bucket: 0}
	p2 := p0
	p2.Bucket = 2

	must(t, e.store.DeleteRecoveryEntry(ctx, e.scope, p0, "tx-2"), "DeleteRecoveryEntry")
	must(t, e.store.DeleteRecoveryEntry(ctx, e.scope, p0, "tx-2"), "DeleteRecoveryEntry twice")
	rows, err := e.store.ListRecoveryEntries(ctx, e.scope, p0, "", 0)
	must(t, err, "ListRecoveryEntries")
	if got := txIDs(rows); got != "[tx-1 tx-3]" {
		t.Fatalf("bucket 0 after a row delete: %s", got)
	}

	// Retry node: drop the bucket partition, then its tier-4 row.
	must(t, e.store.DropBucket(ctx, e.scope, p0), "DropBucket")
	rows, err = e.store.ListRecoveryEntries(ctx, e.scope, p0, "", 0)
	must(t, err, "ListRecoveryEntries after DropBucket")
	if len(rows) != 0 {
		t.Fatalf("rows left after DropBucket: %s", txIDs(rows))
	}
	rows, err = e.store.ListRecoveryEntries(ctx, e.scope, p2, "", 0)
	must(t, err, "ListRecoveryEntries of bucket 2")
	if got := txIDs(rows); got != "[tx-4]" {
		t.Fatalf("DropBucket touched bucket 2: %s", got)
	}
	must(t, e.store.DeleteBucket(ctx, e.scope, p0), "DeleteBucket")
	buckets, err := e.store.ListBuckets(ctx, e.scope, d, 60, "pod-a")
	must(t, err, "ListBuckets")
	if fmt.Sprint(buckets) != "[2]" {
		t.Fatalf("buckets after DeleteBucket: %v", buckets)
	}
	// Crash between steps: the stale tier-4 row of a dropped bucket reads
	// an empty partition, and dropping it again is a no-op.
	must(t, e.store.DropBucket(ctx, e.scope, p2), "DropBucket 2")
	must(t, e.store.DropBucket(ctx, e.scope, p2), "DropBucket 2 again")
	must(t, e.store.DeleteBucket(ctx, e.scope, p2), "DeleteBucket 2")
	must(t, e.store.DeleteBucket(ctx, e.scope, p2), "DeleteBucket 2 again")
	buckets, err = e.store.ListBuckets(ctx, e.scope, d, 60, "pod-a")
	must(t, err, "ListBuckets")
	if len(buckets) != 0 {
		t.Fatalf("buckets left: %v", buckets)
	}

	must(t, e.store.DeleteInstance(ctx, e.scope, d, 60, a), "DeleteInstance a")
	insts, err := e.store.ListInstances(ctx, e.scope, d, 60, eventstore.FullRing)
	must(t, err, "ListInstances")
	if got := fmtInstances(insts); got != "[10:pod-b]" {
		t.Fatalf("instances after DeleteInstance: %s", got)
	}
	// Gate 1: the window is not empty until every instance is gone.
	ok, err := e.store.HasInstances(ctx, e.scope, d, 60)
	must(t, err, "HasInstances")
	if !ok {
		t.Fatal("HasInstances false while pod-b is left")
	}
	must(t, e.store.DeleteInstance(ctx, e.scope, d, 60, b), "DeleteInstance b")
	must(t, e.store.DeleteInstance(ctx, e.scope, d, 60, b), "DeleteInstance b twice")
	ok, err = e.store.HasInstances(ctx, e.scope, d, 60)
	must(t, err, "HasInstances")
	if ok {
		t.Fatal("HasInstances true after every instance was deleted")
	}

	// Node-0: tier 2 then tier 1.
	must(t, e.store.DeleteWindow(ctx, e.scope, d, 60), "DeleteWindow")
	windows, err := e.store.ListWindows(ctx, e.scope, d)
	must(t, err, "ListWindows")
	if fmt.Sprint(windows) != "[61]" {
		t.Fatalf("windows after DeleteWindow: %v", windows)
	}
	must(t, e.store.DeleteWindow(ctx, e.scope, d, 61), "DeleteWindow 61")
	must(t, e.store.DeleteDay(ctx, e.scope, d.Add(23*time.Hour)), "DeleteDay")
	must(t, e.store.DeleteDay(ctx, e.scope, d), "DeleteDay twice")
	days, err := e.store.ListDays(ctx, e.scope, d.AddDate(0, 0, -1), d.AddDate(0, 0, 1))
	must(t, err, "ListDays")
	if len(days) != 0 {
		t.Fatalf("days after DeleteDay: %s", fmtDays(days))
	}
	// Deleting tiers 1-2 does not touch tier-5 rows of the other window.
	rows, err = e.store.ListRecoveryEntries(ctx, e.scope, eventstore.RecoveryPath{Day: d, MinuteOfDay: 61, InstanceID: "pod-b", Bucket: 0}, "", 0)
	must(t, err, "ListRecoveryEntries")
	if got := txIDs(rows); got != "[tx-6]" {
		t.Fatalf("tier-5 rows of window 61: %s", got)
	}
}

func testDirectorySplitWrites(t *testing.T, e *env) {
	ctx := t.Context()
	d := day(2026, 7, 4)
	p := eventstore.RecoveryPath{Day: d, MinuteOfDay: 720, InstanceID: "pod-s", Bucket: 6}
	must(t, e.store.PutDirectoryPath(ctx, e.scope, p, 77), "PutDirectoryPath")
	must(t, e.store.PutDirectoryPath(ctx, e.scope, p, 77), "PutDirectoryPath again")
	days, err := e.store.ListDays(ctx, e.scope, d, d)
	must(t, err, "ListDays")
	windows, err := e.store.ListWindows(ctx, e.scope, d)
	must(t, err, "ListWindows")
	insts, err := e.store.ListInstances(ctx, e.scope, d, 720, eventstore.FullRing)
	must(t, err, "ListInstances")
	buckets, err := e.store.ListBuckets(ctx, e.scope, d, 720, "pod-s")
	must(t, err, "ListBuckets")
	if fmtDays(days) != "[2026-07-04]" || fmt.Sprint(windows) != "[720]" || fmtInstances(insts) != "[77:pod-s]" || fmt.Sprint(buckets) != "[6]" {
		t.Fatalf("tiers 1-4 after PutDirectoryPath: %s %v %s %v", fmtDays(days), windows, fmtInstances(insts), buckets)
	}
	rows, err := e.store.ListRecoveryEntries(ctx, e.scope, p, "", 0)
	must(t, err, "ListRecoveryEntries")
	if len(rows) != 0 {
		t.Fatalf("PutDirectoryPath wrote tier 5: %s", txIDs(rows))
	}
	en := eventstore.RecoveryEntry{RecoveryPath: p, TxID: "tx-split", Domain: "d", Status: "STARTED", InstanceToken: 77}
	must(t, e.store.PutRecoveryEntry(ctx, e.scope, en), "PutRecoveryEntry")
	rows, err = e.store.ListRecoveryEntries(ctx, e.scope, p, "", 0)
	must(t, err, "ListRecoveryEntries")
	if len(rows) != 1 || !reflect.DeepEqual(canonEntry(rows[0]), canonEntry(en)) {
		t.Fatalf("tier 5 after PutRecoveryEntry: %+v, want %+v", rows, en)
	}
	// Upsert: the same id again replaces the row.
	en.Status = "RETRY_PENDING"
	must(t, e.store.PutRecoveryEntry(ctx, e.scope, en), "PutRecoveryEntry again")
	rows, err = e.store.ListRecoveryEntries(ctx, e.scope, p, "", 0)
	must(t, err, "ListRecoveryEntries")
	if len(rows) != 1 || rows[0].Status != "RETRY_PENDING" {
		t.Fatalf("tier 5 after the upsert: %+v", rows)
	}
	// PutRecoveryEntry alone writes no directory keys.
	other := eventstore.RecoveryEntry{RecoveryPath: eventstore.RecoveryPath{Day: d, MinuteOfDay: 721, InstanceID: "pod-s", Bucket: 0}, TxID: "tx-x"}
	must(t, e.store.PutRecoveryEntry(ctx, e.scope, other), "PutRecoveryEntry in another window")
	windows, err = e.store.ListWindows(ctx, e.scope, d)
	must(t, err, "ListWindows")
	if fmt.Sprint(windows) != "[720]" {
		t.Fatalf("PutRecoveryEntry wrote tier 2: %v", windows)
	}
}

func testRestoreWatchdog(t *testing.T, e *env) {
	ctx := t.Context()
	// Saga start: register the watchdog in a far-future odd bucket and keep
	// its path on the saga row.
	path := eventstore.RecoveryPath{Day: day(2026, 3, 15), MinuteOfDay: 1200, InstanceID: "order-7f9c", Bucket: 1}
	if !path.Restore() {
		t.Fatal("odd bucket is not a restore bucket")
	}
	tx := fullTx(e.scope, "tx-watchdog")
	tx.RestorePath = &path
	must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction")
	must(t, e.store.RegisterRecovery(ctx, e.scope, eventstore.RecoveryEntry{RecoveryPath: path, TxID: tx.TxID, Domain: tx.Domain, Status: string(tx.State), InstanceToken: -3}), "RegisterRecovery")
	neighbour := eventstore.RecoveryEntry{RecoveryPath: path, TxID: "tx-neighbour", Domain: tx.Domain, Status: "STARTED", InstanceToken: -3}
	must(t, e.store.RegisterRecovery(ctx, e.scope, neighbour), "RegisterRecovery neighbour")

	// Saga end: read the path back and delete exactly that row.
	got, err := e.store.LoadTransaction(ctx, e.scope, tx.TxID)
	must(t, err, "LoadTransaction")
	if got.RestorePath == nil {
		t.Fatal("restore path not stored with the saga")
	}
	must(t, e.store.DeleteRecoveryEntry(ctx, e.scope, *got.RestorePath, tx.TxID), "DeleteRecoveryEntry")
	rows, err := e.store.ListRecoveryEntries(ctx, e.scope, path, "", 0)
	must(t, err, "ListRecoveryEntries")
	if ids := txIDs(rows); ids != "[tx-neighbour]" {
		t.Fatalf("watchdog bucket after the delete: %s, want [tx-neighbour]", ids)
	}
	if en := rows[0]; en.Status != "STARTED" || en.InstanceToken != -3 || en.Domain != tx.Domain {
		t.Fatalf("neighbour row %+v", en)
	}
}
