package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// base is a millisecond-precise UTC instant the fixtures start from.
var base = time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC)

func fullTx(scope eventstore.Scope, id string) eventstore.Transaction {
	return eventstore.Transaction{
		Scope:    scope,
		TxID:     id,
		Domain:   "order-saga",
		State:    eventstore.StateInProgress,
		Version:  7,
		Span:     2,
		Kind:     "process",
		Endpoint: "payment-service/charge",
		Attempt:  3,
		Payload:  []byte(`{"order":42,"amount":"12.50"}`),
		Completed: []eventstore.CompletedSpan{
			{Span: 0, Endpoint: "inventory-service/reserve", Compensable: true},
			{Span: 1, Endpoint: "customer-service/lookup", Compensable: false},
		},
		Hints:         map[string]string{"reservation": "R-17", "currency": "EUR"},
		Error:         "payment-service: timeout",
		RestorePath:   &eventstore.RecoveryPath{Day: time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC), MinuteOfDay: 189, InstanceID: "order-7f9c", Bucket: 3},
		PausedUntil:   base.Add(time.Hour),
		LifetimeStart: base.Add(2 * time.Hour),
		Definition:    3,
		PauseEvent:    "PAYMENT_AUTHORISED",
		TraceID:       "4bf92f3577b34da6a3ce929d0e0e4736",
		TraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		CreatedAt:     base,
		UpdatedAt:     base.Add(1500 * time.Millisecond),
	}
}

func fullTryout(id string, index int) eventstore.Tryout {
	return eventstore.Tryout{
		TxID:          id,
		Index:         index,
		Span:          index / 2,
		Kind:          "process",
		Endpoint:      fmt.Sprintf("svc/endpoint-%d", index),
		Attempt:       index%2 + 1,
		Outcome:       "retryable",
		Error:         fmt.Sprintf("attempt %d failed", index),
		Before:        []byte(fmt.Sprintf("before-%d", index)),
		After:         []byte(fmt.Sprintf("after-%d", index)),
		ResumeContext: []byte(fmt.Sprintf("resume-%d", index)),
		StartedAt:     base.Add(time.Duration(index) * time.Second),
		FinishedAt:    base.Add(time.Duration(index)*time.Second + 250*time.Millisecond),
	}
}

// canonTime compares instants only (not locations or monotonic readings).
func canonTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

func canonTx(tx eventstore.Transaction) eventstore.Transaction {
	tx.PausedUntil = canonTime(tx.PausedUntil)
	tx.LifetimeStart = canonTime(tx.LifetimeStart)
	tx.CreatedAt = canonTime(tx.CreatedAt)
	tx.UpdatedAt = canonTime(tx.UpdatedAt)
	if tx.RestorePath != nil {
		p := *tx.RestorePath
		p.Day = canonTime(p.Day)
		tx.RestorePath = &p
	}
	return tx
}

func canonTryout(t eventstore.Tryout) eventstore.Tryout {
	t.StartedAt = canonTime(t.StartedAt)
	t.FinishedAt = canonTime(t.FinishedAt)
	return t
}

func checkTx(t *testing.T, what string, got, want eventstore.Transaction) {
	t.Helper()
	g, w := canonTx(got), canonTx(want)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, describeTx(g), describeTx(w))
	}
}

func describeTx(tx eventstore.Transaction) string {
	rp := "<nil>"
	if tx.RestorePath != nil {
		rp = fmt.Sprintf("%+v", *tx.RestorePath)
	}
	return fmt.Sprintf("%+v RestorePath=%s", tx, rp)
}

func checkTryouts(t *testing.T, what string, got, want []eventstore.Tryout) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tryouts, want %d: %+v", what, len(got), len(want), got)
	}
	for i := range got {
		if g, w := canonTryout(got[i]), canonTryout(want[i]); !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: tryout %d:\n got %+v\nwant %+v", what, i, g, w)
		}
	}
}

// checkCreated checks that the saga tx was created with its first tryout.
func checkCreated(t *testing.T, e *env, what string, tx eventstore.Transaction, first eventstore.Tryout) {
	t.Helper()
	got, err := e.store.LoadTransaction(t.Context(), e.scope, tx.TxID)
	must(t, err, "LoadTransaction "+what)
	checkTx(t, "transaction "+what, got, tx)
	tries, err := e.store.Tryouts(t.Context(), e.scope, tx.TxID)
	must(t, err, "Tryouts "+what)
	checkTryouts(t, "tryouts "+what, tries, []eventstore.Tryout{first})
}

func testTransactionRoundTrip(t *testing.T, e *env) {
	ctx := t.Context()
	tx := fullTx(e.scope, "tx-roundtrip")
	first := fullTryout("tx-roundtrip", 0)
	must(t, e.store.CreateTransaction(ctx, tx, &first), "CreateTransaction")
	checkCreated(t, e, "after create", tx, first)

	// A minimal saga: no optional field set.
	small := eventstore.Transaction{Scope: e.scope, TxID: "tx-minimal", Domain: "d", State: eventstore.StateStarted, Version: 1}
	must(t, e.store.CreateTransaction(ctx, small, nil), "CreateTransaction minimal")
	got, err := e.store.LoadTransaction(ctx, e.scope, small.TxID)
	must(t, err, "LoadTransaction minimal")
	checkTx(t, "minimal transaction", got, small)
	tries, err := e.store.Tryouts(ctx, e.scope, small.TxID)
	must(t, err, "Tryouts minimal")
	if len(tries) != 0 {
		t.Fatalf("minimal saga has tryouts %+v", tries)
	}
}

func testCreateExisting(t *testing.T, e *env) {
	if e.f.BlindCreate {
		t.Log("the store does not detect a taken transaction id (BlindCreate)")
		return
	}
	ctx := t.Context()
	tx := fullTx(e.scope, "tx-dup")
	must(t, e.store.CreateTransaction(ctx, tx, nil), "first CreateTransaction")
	again := tx
	again.Payload = []byte("other")
	again.State = eventstore.StateStarted
	tr := fullTryout(tx.TxID, 0)
	mustIs(t, e.store.CreateTransaction(ctx, again, &tr), eventstore.ErrExists, "second CreateTransaction")
	got, err := e.store.LoadTransaction(ctx, e.scope, tx.TxID)
	must(t, err, "LoadTransaction")
	checkTx(t, "transaction after refused create", got, tx)
	tries, err := e.store.Tryouts(ctx, e.scope, tx.TxID)
	must(t, err, "Tryouts")
	if len(tries) != 0 {
		t.Fatalf("refused create wrote tryouts %+v", tries)
	}
}

func testLoadMissing(t *testing.T, e *env) {
	ctx := t.Context()
	_, err := e.store.LoadTransaction(ctx, e.scope, "tx-missing")
	mustIs(t, err, eventstore.ErrNotFound, "LoadTransaction of a missing saga")
	tries, err := e.store.Tryouts(ctx, e.scope, "tx-missing")
	must(t, err, "Tryouts of a missing saga")
	if len(tries) != 0 {
		t.Fatalf("missing saga has tryouts %+v", tries)
	}
}

// optional returns the store as its optional part I, or logs that it has
// none (the part's tests then pass without checking anything).
func optional[I any](t *testing.T, e *env) (I, bool) {
	i, ok := any(e.store).(I)
	if !ok {
		t.Logf("the store does not implement %v", reflect.TypeFor[I]())
	}
	return i, ok
}

// testTransactionState checks the optional eventstore.StateReader: the
// state LoadTransaction would return, with the same errors.
func testTransactionState(t *testing.T, e *env) {
	sr, ok := optional[eventstore.StateReader](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	_, err := sr.TransactionState(ctx, e.scope, "tx-state")
	mustIs(t, err, eventstore.ErrNotFound, "TransactionState of a missing saga")
	tx := fullTx(e.scope, "tx-state")
	must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction")
	st, err := sr.TransactionState(ctx, e.scope, tx.TxID)
	must(t, err, "TransactionState")
	if st != tx.State {
		t.Fatalf("TransactionState %q, want %q", st, tx.State)
	}
	tx.State, tx.Version = eventstore.StateCompensated, tx.Version+1
	must(t, e.store.Transition(ctx, tx, nil), "Transition")
	if st, err = sr.TransactionState(ctx, e.scope, tx.TxID); err != nil || st != eventstore.StateCompensated {
		t.Fatalf("TransactionState after Transition: %q, %v; want %q", st, err, eventstore.StateCompensated)
	}
	other := e.scope
	other.Service += "-other"
	_, err = sr.TransactionState(ctx, other, tx.TxID)
	mustIs(t, err, eventstore.ErrNotFound, "TransactionState in another scope")
	bad := e.scope
	bad.Region = ""
	_, err = sr.TransactionState(ctx, bad, tx.TxID)
	mustIs(t, err, eventstore.ErrInvalid, "TransactionState with an empty region")
	_, err = sr.TransactionState(ctx, e.scope, "")
	mustIs(t, err, eventstore.ErrInvalid, "TransactionState with an empty id")
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = sr.TransactionState(canceled, e.scope, tx.TxID)
	mustIs(t, err, context.Canceled, "TransactionState with a canceled context")
	must(t, e.store.Close(), "Close")
	_, err = sr.TransactionState(ctx, e.scope, tx.TxID)
	mustIs(t, err, eventstore.ErrClosed, "TransactionState after Close")
}

// testCreateWatched checks the optional eventstore.WatchedCreator: the saga
// (with its first tryout) and its watchdog row written together, each as
// CreateTransaction and PutRecoveryEntry would; bad arguments fail with
// ErrInvalid and write neither.
func testCreateWatched(t *testing.T, e *env) {
	wc, ok := optional[eventstore.WatchedCreator](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	tx := fullTx(e.scope, "tx-watched")
	dog := eventstore.RecoveryEntry{RecoveryPath: *tx.RestorePath, TxID: tx.TxID, Domain: tx.Domain, Status: "RESTORE", InstanceToken: -42}
	first := fullTryout(tx.TxID, 0)
	must(t, wc.CreateTransactionWatched(ctx, tx, &first, dog), "CreateTransactionWatched")
	checkCreated(t, e, "after a watched create", tx, first)
	rows, err := e.store.ListRecoveryEntries(ctx, e.scope, *tx.RestorePath, "", 0)
	must(t, err, "ListRecoveryEntries")
	if len(rows) != 1 || rows[0].TxID != tx.TxID || rows[0].Domain != tx.Domain || rows[0].Status != "RESTORE" ||
		rows[0].InstanceToken != -42 || !rows[0].RecoveryPath.Equal(*tx.RestorePath) {
		t.Fatalf("watchdog rows %+v, want the one written with the saga", rows)
	}

	// Without a first tryout.
	bare := fullTx(e.scope, "tx-watched-bare")
	bareDog := dog
	bareDog.TxID = bare.TxID
	must(t, wc.CreateTransactionWatched(ctx, bare, nil, bareDog), "CreateTransactionWatched without a tryout")
	if tries, err := e.store.Tryouts(ctx, e.scope, bare.TxID); err != nil || len(tries) != 0 {
		t.Fatalf("tryouts of a watched create without one: %+v, %v", tries, err)
	}
	if rows, err = e.store.ListRecoveryEntries(ctx, e.scope, *tx.RestorePath, "", 0); err != nil || len(rows) != 2 {
		t.Fatalf("watchdog rows after the second create: %+v, %v; want 2", rows, err)
	}

	if !e.f.BlindCreate {
		again := tx
		elsewhere := dog
		elsewhere.Bucket = 5
		again.RestorePath = &elsewhere.RecoveryPath
		mustIs(t, wc.CreateTransactionWatched(ctx, again, nil, elsewhere), eventstore.ErrExists, "CreateTransactionWatched of a taken id")
		if rows, err = e.store.ListRecoveryEntries(ctx, e.scope, elsewhere.RecoveryPath, "", 0); err != nil || len(rows) != 0 {
			t.Fatalf("a refused watched create of a taken id wrote its watchdog: %+v, %v", rows, err)
		}
	}

	bad := func(what string, tx eventstore.Transaction, dog eventstore.RecoveryEntry) {
		t.Helper()
		err := wc.CreateTransactionWatched(ctx, tx, nil, dog)
		mustIs(t, err, eventstore.ErrInvalid, "CreateTransactionWatched with "+what)
		_, err = e.store.LoadTransaction(ctx, e.scope, tx.TxID)
		mustIs(t, err, eventstore.ErrNotFound, "LoadTransaction after a refused watched create ("+what+")")
	}
	other := fullTx(e.scope, "tx-watched-bad")
	dog.TxID = other.TxID
	wrongTx := dog
	wrongTx.TxID = "tx-someone-else"
	bad("the watchdog of another saga", other, wrongTx)
	retry := dog
	retry.Bucket = 2
	noPath := other
	noPath.RestorePath = nil
	bad("no restore path", noPath, dog)
	moved := other
	p := *other.RestorePath
	p.MinuteOfDay++
	moved.RestorePath = &p
	bad("a restore path elsewhere", moved, dog)
	retryTx := other
	retryTx.RestorePath = &retry.RecoveryPath
	bad("a retry bucket", retryTx, retry)
	noInstance := dog
	noInstance.InstanceID = ""
	bad("a watchdog without an instance", other, noInstance)
	if rows, err = e.store.ListRecoveryEntries(ctx, e.scope, *tx.RestorePath, "", 0); err != nil || len(rows) != 2 {
		t.Fatalf("watchdog rows after refused creates: %+v, %v; want the 2 written", rows, err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	mustIs(t, wc.CreateTransactionWatched(canceled, other, nil, dog), context.Canceled, "CreateTransactionWatched with a canceled context")
	must(t, e.store.Close(), "Close")
	mustIs(t, wc.CreateTransactionWatched(ctx, other, nil, dog), eventstore.ErrClosed, "CreateTransactionWatched after Close")
}

// testTransitionBeforeCreate: a Transition of a saga whose create has not
// landed creates the row (an upsert), and the create landing afterwards
// (an older version) does not override it, whether plain or watched. The
// orchestrator relies on this to mark failed a saga whose create failed
// but may land later.
func testTransitionBeforeCreate(t *testing.T, e *env) {
	ctx := t.Context()
	tx := fullTx(e.scope, "tx-late-create")
	tx.Version = 1
	next := tx
	next.Version, next.State, next.Error, next.Endpoint = 2, eventstore.StateCompensated, "start failed: timeout", ""
	must(t, e.store.Transition(ctx, next, nil), "Transition before the create")
	got, err := e.store.LoadTransaction(ctx, e.scope, tx.TxID)
	must(t, err, "LoadTransaction")
	checkTx(t, "transaction written by a Transition alone", got, next)
	late := func(what string, err error) {
		t.Helper()
		if e.f.BlindCreate {
			must(t, err, what+" after a newer Transition")
		} else {
			mustIs(t, err, eventstore.ErrExists, what+" after a newer Transition")
		}
		got, err := e.store.LoadTransaction(ctx, e.scope, tx.TxID)
		must(t, err, "LoadTransaction after "+what)
		checkTx(t, "transaction after a late "+what, got, next)
	}
	late("CreateTransaction", e.store.CreateTransaction(ctx, tx, nil))
	if wc, ok := optional[eventstore.WatchedCreator](t, e); ok {
		dog := eventstore.RecoveryEntry{RecoveryPath: *tx.RestorePath, TxID: tx.TxID, Domain: tx.Domain, Status: "RESTORE"}
		late("CreateTransactionWatched", wc.CreateTransactionWatched(ctx, tx, nil, dog))
	}
}

func testTransitionOverwrites(t *testing.T, e *env) {
	ctx := t.Context()
	tx := fullTx(e.scope, "tx-transition")
	must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction")

	next := tx
	next.State = eventstore.StateCompensating
	next.Version = 8
	next.Span, next.Kind, next.Endpoint, next.Attempt = 1, "revert", "inventory-service/release", 0
	next.Payload = []byte("p2")
	next.Completed = next.Completed[:1]
	next.Hints = map[string]string{"only": "one"}
	next.Error = ""
	next.RestorePath = nil
	next.PausedUntil = time.Time{}
	next.UpdatedAt = base.Add(time.Minute)
	tr := fullTryout(tx.TxID, 1)
	tr.TxID = "" // takes the saga's id
	must(t, e.store.Transition(ctx, next, &tr), "Transition")

	got, err := e.store.LoadTransaction(ctx, e.scope, tx.TxID)
	must(t, err, "LoadTransaction")
	checkTx(t, "transaction after transition clearing fields", got, next)
	tries, err := e.store.Tryouts(ctx, e.scope, tx.TxID)
	must(t, err, "Tryouts")
	tr.TxID = tx.TxID
	checkTryouts(t, "tryouts after transition", tries, []eventstore.Tryout{tr})

	// Empty collections clear the stored ones.
	last := next
	last.Completed, last.Hints, last.Payload = nil, map[string]string{}, nil
	last.Version = 9
	must(t, e.store.Transition(ctx, last, nil), "Transition without tryout")
	got, err = e.store.LoadTransaction(ctx, e.scope, tx.TxID)
	must(t, err, "LoadTransaction")
	last.Hints = nil
	checkTx(t, "transaction after transition emptying collections", got, last)
	tries, err = e.store.Tryouts(ctx, e.scope, tx.TxID)
	must(t, err, "Tryouts")
	if len(tries) != 1 {
		t.Fatalf("transition without tryout changed history: %+v", tries)
	}
}

func testTryoutsOrdered(t *testing.T, e *env) {
	ctx := t.Context()
	tx := fullTx(e.scope, "tx-tryouts")
	first := fullTryout(tx.TxID, 2)
	must(t, e.store.CreateTransaction(ctx, tx, &first), "CreateTransaction")
	for _, i := range []int{4, 0, 3, 1} {
		tr := fullTryout(tx.TxID, i)
		tx.Version++
		must(t, e.store.Transition(ctx, tx, &tr), fmt.Sprintf("Transition with tryout %d", i))
	}
	want := make([]eventstore.Tryout, 5)
	for i := range want {
		want[i] = fullTryout(tx.TxID, i)
	}
	got, err := e.store.Tryouts(ctx, e.scope, tx.TxID)
	must(t, err, "Tryouts")
	checkTryouts(t, "tryouts in index order", got, want)

	// Writing an index again overwrites it.
	re := fullTryout(tx.TxID, 3)
	re.Outcome, re.Error, re.After = "ok", "", []byte("final")
	must(t, e.store.Transition(ctx, tx, &re), "Transition rewriting tryout 3")
	want[3] = re
	got, err = e.store.Tryouts(ctx, e.scope, tx.TxID)
	must(t, err, "Tryouts")
	checkTryouts(t, "tryouts after rewrite", got, want)

	other := fullTryout("another-saga", 9)
	mustIs(t, e.store.Transition(ctx, tx, &other), eventstore.ErrInvalid, "Transition with another saga's tryout")
	got, err = e.store.Tryouts(ctx, e.scope, tx.TxID)
	must(t, err, "Tryouts")
	checkTryouts(t, "tryouts after refused transition", got, want)
}

func testScopeIsolation(t *testing.T, e *env) {
	ctx := t.Context()
	other := e.scope
	other.Cluster = "other-cluster"
	third := e.scope
	third.Region = "other-region"
	a, b := fullTx(e.scope, "tx-shared"), fullTx(other, "tx-shared")
	b.Payload = []byte("b")
	must(t, e.store.CreateTransaction(ctx, a, nil), "CreateTransaction a")
	must(t, e.store.CreateTransaction(ctx, b, nil), "CreateTransaction b with the same id in another cluster")
	got, err := e.store.LoadTransaction(ctx, other, "tx-shared")
	must(t, err, "LoadTransaction b")
	checkTx(t, "saga of the other cluster", got, b)
	_, err = e.store.LoadTransaction(ctx, third, "tx-shared")
	mustIs(t, err, eventstore.ErrNotFound, "LoadTransaction in a third scope")

	ka := eventstore.MarkerKey{Scope: e.scope, TxID: "tx-shared", Span: 0, Kind: "process", Site: "orchestrator"}
	kb := ka
	kb.Scope = other
	must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: ka, State: eventstore.MarkerCommitted, Owner: "a"}), "PutMarker a")
	must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: kb, State: eventstore.MarkerCommitted, Owner: "b"}), "PutMarker b")
	must(t, e.store.DeleteMarkers(ctx, e.scope, "tx-shared"), "DeleteMarkers a")
	m, err := e.store.GetMarker(ctx, kb)
	must(t, err, "GetMarker b after deleting a's markers")
	if m.Owner != "b" {
		t.Fatalf("marker of the other scope: owner %q, want b", m.Owner)
	}

	must(t, e.store.Freeze(ctx, a, "r"), "Freeze a")
	fz, err := e.store.ListFrozen(ctx, other, 0)
	must(t, err, "ListFrozen other")
	if len(fz) != 0 {
		t.Fatalf("frozen saga leaked into another scope: %+v", fz)
	}
}

func testCopiesValues(t *testing.T, e *env) {
	ctx := t.Context()
	tx := fullTx(e.scope, "tx-alias")
	want := fullTx(e.scope, "tx-alias")
	tr := fullTryout(tx.TxID, 0)
	must(t, e.store.CreateTransaction(ctx, tx, &tr), "CreateTransaction")
	// Modify what was passed in.
	tx.Payload[0] = 'X'
	tx.Completed[0].Endpoint = "changed"
	tx.Hints["reservation"] = "changed"
	tx.RestorePath.Bucket = 99
	tr.Before[0] = 'X'

	got, err := e.store.LoadTransaction(ctx, e.scope, tx.TxID)
	must(t, err, "LoadTransaction")
	checkTx(t, "stored saga after the caller modified its input", got, want)
	// Modify what came out.
	got.Payload[0] = 'Y'
	got.Completed[0].Endpoint = "changed"
	got.Hints["reservation"] = "changed"
	got.RestorePath.Bucket = 98
	again, err := e.store.LoadTransaction(ctx, e.scope, tx.TxID)
	must(t, err, "LoadTransaction again")
	checkTx(t, "stored saga after the caller modified its output", again, want)

	tries, err := e.store.Tryouts(ctx, e.scope, tx.TxID)
	must(t, err, "Tryouts")
	checkTryouts(t, "stored tryout after the caller modified its input", tries, []eventstore.Tryout{fullTryout(tx.TxID, 0)})
	tries[0].After[0] = 'Z'
	tries, err = e.store.Tryouts(ctx, e.scope, tx.TxID)
	must(t, err, "Tryouts again")
	checkTryouts(t, "stored tryout after the caller modified its output", tries, []eventstore.Tryout{fullTryout(tx.TxID, 0)})

	k := eventstore.MarkerKey{Scope: e.scope, TxID: tx.TxID, Span: 0, Kind: "process", Site: "orchestrator"}
	reply := []byte("reply")
	must(t, e.store.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "o", Reply: reply}), "PutMarker")
	reply[0] = 'X'
	m, err := e.store.GetMarker(ctx, k)
	must(t, err, "GetMarker")
	if string(m.Reply) != "reply" {
		t.Fatalf("marker reply %q after the caller modified its input, want %q", m.Reply, "reply")
	}
	m.Reply[0] = 'Y'
	m, err = e.store.GetMarker(ctx, k)
	must(t, err, "GetMarker again")
	if string(m.Reply) != "reply" {
		t.Fatalf("marker reply %q after the caller modified its output, want %q", m.Reply, "reply")
	}
}

func testNormalization(t *testing.T, e *env) {
	ctx := t.Context()
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	tx := eventstore.Transaction{
		Scope: e.scope, TxID: "tx-norm", Domain: "d", State: eventstore.StateStarted, Version: 1,
		Payload:     []byte{},
		Completed:   []eventstore.CompletedSpan{},
		Hints:       map[string]string{},
		RestorePath: &eventstore.RecoveryPath{Day: time.Date(2026, 3, 15, 23, 59, 59, 0, time.UTC), MinuteOfDay: 0, InstanceID: "i", Bucket: 1},
		CreatedAt:   time.Date(2026, 3, 14, 20, 0, 0, 123_456_789, zone),
	}
	must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction")
	got, err := e.store.LoadTransaction(ctx, e.scope, tx.TxID)
	must(t, err, "LoadTransaction")
	if got.Payload != nil || got.Completed != nil || got.Hints != nil {
		t.Errorf("empty collections read back non-nil: payload %#v completed %#v hints %#v", got.Payload, got.Completed, got.Hints)
	}
	wantCreated := time.Date(2026, 3, 14, 14, 30, 0, 123_000_000, time.UTC)
	if !got.CreatedAt.Equal(wantCreated) || got.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt %v, want %v (UTC, milliseconds)", got.CreatedAt, wantCreated)
	}
	if !got.UpdatedAt.IsZero() || !got.PausedUntil.IsZero() {
		t.Errorf("zero times read back as %v and %v", got.UpdatedAt, got.PausedUntil)
	}
	if got.RestorePath == nil || !got.RestorePath.Day.Equal(time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("RestorePath %+v, want the calendar day 2026-03-15", got.RestorePath)
	}
}

func testValidation(t *testing.T, e *env) {
	ctx := t.Context()
	bad := e.scope
	bad.Region = ""
	_, err := e.store.LoadTransaction(ctx, bad, "tx")
	mustIs(t, err, eventstore.ErrInvalid, "LoadTransaction with an empty region")
	mustIs(t, e.store.CreateTransaction(ctx, eventstore.Transaction{Scope: e.scope}, nil), eventstore.ErrInvalid, "CreateTransaction with an empty id")
	noService := e.scope
	noService.Service = ""
	mustIs(t, e.store.Transition(ctx, eventstore.Transaction{Scope: noService, TxID: "tx"}, nil), eventstore.ErrInvalid, "Transition with an empty service")
	_, _, err = e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: eventstore.MarkerKey{Scope: e.scope, TxID: "tx", Kind: "process"}}, time.Second)
	mustIs(t, err, eventstore.ErrInvalid, "InsertMarker with an empty site")
	_, _, err = e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: eventstore.MarkerKey{Scope: e.scope, TxID: "tx", Kind: "process", Site: "s"}}, -time.Second)
	mustIs(t, err, eventstore.ErrInvalid, "InsertMarker with a negative lease")
	p := eventstore.RecoveryPath{Day: base, MinuteOfDay: eventstore.MinutesPerDay, InstanceID: "i", Bucket: 0}
	mustIs(t, e.store.RegisterRecovery(ctx, e.scope, eventstore.RecoveryEntry{RecoveryPath: p, TxID: "tx"}), eventstore.ErrInvalid, "RegisterRecovery at minute 1440")
	p.MinuteOfDay, p.Bucket = 0, -1
	mustIs(t, e.store.RegisterRecovery(ctx, e.scope, eventstore.RecoveryEntry{RecoveryPath: p, TxID: "tx"}), eventstore.ErrInvalid, "RegisterRecovery in bucket -1")
	p.Bucket, p.InstanceID = 0, ""
	mustIs(t, e.store.PutDirectoryPath(ctx, e.scope, p, 0), eventstore.ErrInvalid, "PutDirectoryPath without instance")
	badPath := fullTx(e.scope, "tx-bad-path")
	badPath.RestorePath.InstanceID = ""
	mustIs(t, e.store.CreateTransaction(ctx, badPath, nil), eventstore.ErrInvalid, "CreateTransaction with a restore path without instance")
	_, err = e.store.ListWindows(ctx, bad, base)
	mustIs(t, err, eventstore.ErrInvalid, "ListWindows with an empty region")
	_, err = e.store.ListDays(ctx, e.scope, base.AddDate(-(eventstore.MaxListDaysYears+1), 0, 0), base)
	mustIs(t, err, eventstore.ErrInvalid, "ListDays over too many years")
}

func testFrozen(t *testing.T, e *env) {
	ctx := t.Context()
	for _, id := range []string{"tx-b", "tx-a", "tx-c"} {
		tx := fullTx(e.scope, id)
		must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction "+id)
		must(t, e.store.Freeze(ctx, tx, "terminated: "+id), "Freeze "+id)
	}
	list, err := e.store.ListFrozen(ctx, e.scope, 0)
	must(t, err, "ListFrozen")
	if ids := frozenIDs(list); fmt.Sprint(ids) != "[tx-a tx-b tx-c]" {
		t.Fatalf("ListFrozen ids %v, want [tx-a tx-b tx-c]", ids)
	}
	for _, f := range list {
		checkTx(t, "frozen copy of "+f.TxID, f.Transaction, fullTx(e.scope, f.TxID))
		if f.Reason != "terminated: "+f.TxID {
			t.Errorf("frozen %s reason %q", f.TxID, f.Reason)
		}
		if f.FrozenAt.IsZero() {
			t.Errorf("frozen %s has no FrozenAt", f.TxID)
		}
	}
	list, err = e.store.ListFrozen(ctx, e.scope, 2)
	must(t, err, "ListFrozen limit 2")
	if ids := frozenIDs(list); fmt.Sprint(ids) != "[tx-a tx-b]" {
		t.Fatalf("ListFrozen limit 2: %v", ids)
	}
	list, err = e.store.ListFrozenAfter(ctx, e.scope, "tx-b", 10)
	must(t, err, "ListFrozenAfter tx-b")
	if ids := frozenIDs(list); fmt.Sprint(ids) != "[tx-c]" {
		t.Fatalf("ListFrozenAfter tx-b: %v", ids)
	}
	f, err := e.store.GetFrozen(ctx, e.scope, "tx-b")
	must(t, err, "GetFrozen")
	checkTx(t, "GetFrozen", f.Transaction, fullTx(e.scope, "tx-b"))

	must(t, e.store.Unfreeze(ctx, fullTx(e.scope, "tx-b")), "Unfreeze")
	must(t, e.store.Unfreeze(ctx, fullTx(e.scope, "tx-b")), "Unfreeze twice")
	_, err = e.store.GetFrozen(ctx, e.scope, "tx-b")
	mustIs(t, err, eventstore.ErrNotFound, "GetFrozen after Unfreeze")
	list, err = e.store.ListFrozen(ctx, e.scope, 0)
	must(t, err, "ListFrozen after Unfreeze")
	if ids := frozenIDs(list); fmt.Sprint(ids) != "[tx-a tx-c]" {
		t.Fatalf("ListFrozen after Unfreeze: %v", ids)
	}
	if _, err := e.store.LoadTransaction(ctx, e.scope, "tx-b"); err != nil {
		t.Fatalf("unfrozen saga not loadable: %v", err)
	}
}

func frozenIDs(list []eventstore.FrozenTransaction) []string {
	ids := make([]string, len(list))
	for i, f := range list {
		ids[i] = f.TxID
	}
	return ids
}

func testCanceledContext(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := e.store.LoadTransaction(ctx, e.scope, "tx")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("LoadTransaction with a canceled context: %v, want context.Canceled", err)
	}
	err = e.store.Transition(ctx, fullTx(e.scope, "tx"), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Transition with a canceled context: %v, want context.Canceled", err)
	}
}

func testClose(t *testing.T, e *env) {
	ctx := t.Context()
	must(t, e.store.CreateTransaction(ctx, fullTx(e.scope, "tx-close"), nil), "CreateTransaction")
	must(t, e.store.Close(), "Close")
	must(t, e.store.Close(), "Close twice")
	_, err := e.store.LoadTransaction(ctx, e.scope, "tx-close")
	mustIs(t, err, eventstore.ErrClosed, "LoadTransaction after Close")
	_, _, err = e.store.InsertMarker(ctx, eventstore.Marker{MarkerKey: eventstore.MarkerKey{Scope: e.scope, TxID: "tx-close", Kind: "process", Site: "s"}}, time.Second)
	mustIs(t, err, eventstore.ErrClosed, "InsertMarker after Close")
}

// tryoutAt returns a tryout of tx's saga at Index tx.Version (the slot of
// that version, as the orchestrator writes them) with outcome outcome.
func tryoutAt(tx eventstore.Transaction, outcome string) *eventstore.Tryout {
	tr := fullTryout(tx.TxID, int(tx.Version))
	tr.Outcome = outcome
	return &tr
}

// checkHistory checks tx's saga row and its tryouts.
func checkHistory(t *testing.T, e *env, what string, txID string, want eventstore.Transaction, tries ...*eventstore.Tryout) {
	t.Helper()
	got, err := e.store.LoadTransaction(t.Context(), e.scope, txID)
	must(t, err, "LoadTransaction "+what)
	checkTx(t, "transaction "+what, got, want)
	h, err := e.store.Tryouts(t.Context(), e.scope, txID)
	must(t, err, "Tryouts "+what)
	wantH := make([]eventstore.Tryout, len(tries))
	for i, tr := range tries {
		wantH[i] = *tr
	}
	checkTryouts(t, "tryouts "+what, h, wantH)
}

// testTransitionFenced: a write of an older version, arriving after newer
// ones (a zombie writer), is discarded with its tryout (at the Index of its
// version, which a newer write wrote without a tryout); the newer state
// survives, with its tryouts.
func testTransitionFenced(t *testing.T, e *env) {
	ctx := t.Context()
	tx := fullTx(e.scope, "tx-fenced")
	must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction")
	live := tx
	live.Version++
	tr8 := tryoutAt(live, "ok")
	must(t, e.store.Transition(ctx, live, tr8), "Transition to version 8")
	failed := live
	failed.State, failed.Version = eventstore.StateCompensating, live.Version+1
	must(t, e.store.Transition(ctx, failed, nil), "Transition to version 9 without a tryout")
	newer := failed
	newer.State, newer.Version, newer.Payload = eventstore.StateCompensated, failed.Version+1, []byte("newer")
	tr10 := tryoutAt(newer, "ok")
	must(t, e.store.Transition(ctx, newer, tr10), "Transition to version 10")
	zombie := live
	zombie.State, zombie.Version, zombie.Payload = eventstore.StateInProgress, live.Version+1, []byte("zombie")
	zombie.Error = "written by a zombie"
	must(t, e.store.Transition(ctx, zombie, tryoutAt(zombie, "ok")), "Transition of the older version 9 with a tryout")
	checkHistory(t, e, "after a stale write", tx.TxID, newer, tr8, tr10)
}

// testTransitionFenceRaised: a write that raises Fence (a disable, away
// from the reply path) wins over a write of the same version with the
// lower Fence (a late reply), in either order, and over every later
// version of that Fence (the late reply's writer going on); the tryouts
// of the writes it fenced are discarded, whichever lands first. Writes of
// the raised Fence go on as usual.
func testTransitionFenceRaised(t *testing.T, e *env) {
	ctx := t.Context()
	for _, replyFirst := range []bool{false, true} {
		tx := fullTx(e.scope, fmt.Sprintf("tx-fence-raised-%v", replyFirst))
		must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction")
		live := tx
		live.Version++
		tr8 := tryoutAt(live, "ok")
		must(t, e.store.Transition(ctx, live, tr8), "Transition to version 8")

		disable := live
		disable.State, disable.Error = eventstore.StateDisabled, "transaction lifetime exceeded"
		disable.Version++
		disable.Fence++
		reply := live
		reply.State, reply.Span, reply.Endpoint, reply.Attempt = eventstore.StateInProgress, live.Span+1, "shipping/ship", 1
		reply.Version++
		if replyFirst {
			must(t, e.store.Transition(ctx, reply, tryoutAt(reply, "ok")), "late reply's Transition to version 9")
			must(t, e.store.Transition(ctx, disable, nil), "disable at version 9")
		} else {
			must(t, e.store.Transition(ctx, disable, nil), "disable at version 9")
			must(t, e.store.Transition(ctx, reply, tryoutAt(reply, "ok")), "late reply's Transition to version 9")
		}
		on := reply
		on.State, on.Version, on.Payload = eventstore.StateCompleted, reply.Version+1, []byte("completed by a stale writer")
		must(t, e.store.Transition(ctx, on, tryoutAt(on, "ok")), "the stale writer's Transition to version 10")
		checkHistory(t, e, fmt.Sprintf("after a disable and a late reply of its version (reply first: %v)", replyFirst), tx.TxID, disable, tr8)

		restore := disable
		restore.State, restore.Version, restore.Fence = eventstore.StateRetryPending, disable.Version+1, disable.Fence+1
		must(t, e.store.Transition(ctx, restore, nil), "restore at version 10")
		next := restore
		next.State, next.Version = eventstore.StateInProgress, restore.Version+1
		tr11 := tryoutAt(next, "ok")
		must(t, e.store.Transition(ctx, next, tr11), "Transition to version 11 after the restore")
		checkHistory(t, e, fmt.Sprintf("after the restore (reply first: %v)", replyFirst), tx.TxID, next, tr8, tr11)
	}
}

// testTransitionSameVersionMerges: two writes of the same Fence and
// Version merge field by field, as Cassandra merges cells of one write
// timestamp (the greater stored bytes win), the row and the tryout of that
// version alike, in either order.
func testTransitionSameVersionMerges(t *testing.T, e *env) {
	ctx := t.Context()
	for _, aFirst := range []bool{true, false} {
		id := fmt.Sprintf("tx-same-version-%v", aFirst)
		tx := fullTx(e.scope, id)
		must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction")
		a := tx
		a.Version++
		b := a
		b.State, b.Span, b.Kind, b.Endpoint, b.Attempt = eventstore.StateCompensating, 1, "revert", "inventory-service/release", 1
		b.Payload = []byte(`{"zorder":1}`)
		b.Completed = b.Completed[:1]
		b.Hints = map[string]string{"only": "one"}
		b.Error, b.RestorePath, b.PausedUntil, b.PauseEvent = "", nil, time.Time{}, ""
		b.LifetimeStart = a.LifetimeStart.Add(time.Hour)
		b.Definition = 2 // a's 3 compares greater
		b.TraceID = "ffffffffffffffffffffffffffffffff"
		b.UpdatedAt = a.UpdatedAt.Add(time.Minute)
		ta := tryoutAt(a, "ok")
		tb := tryoutAt(b, "retryable")
		tb.Endpoint, tb.Attempt, tb.Before, tb.After, tb.ResumeContext = "svc/zzz", 1, []byte("z"), nil, nil
		tb.FinishedAt = ta.FinishedAt.Add(time.Second)
		if aFirst {
			must(t, e.store.Transition(ctx, a, ta), "Transition a")
			must(t, e.store.Transition(ctx, b, tb), "Transition b of the same version")
		} else {
			must(t, e.store.Transition(ctx, b, tb), "Transition b")
			must(t, e.store.Transition(ctx, a, ta), "Transition a of the same version")
		}
		want := a // a's State, Span, Endpoint, Attempt, Completed, Hints, Error, RestorePath, PausedUntil, PauseEvent, Definition
		want.Kind, want.Payload, want.LifetimeStart, want.TraceID, want.UpdatedAt = b.Kind, b.Payload, b.LifetimeStart, b.TraceID, b.UpdatedAt
		wantTr := *ta // a's Attempt, Error, After, ResumeContext
		wantTr.Endpoint, wantTr.Outcome, wantTr.Before, wantTr.FinishedAt = tb.Endpoint, tb.Outcome, tb.Before, tb.FinishedAt
		checkHistory(t, e, fmt.Sprintf("after two writes of one version (a first: %v)", aFirst), id, want, &wantTr)
	}
}

// testFreezeFenced: Freeze and Unfreeze are ordered by the (Fence, Version)
// of their rows, whatever order they arrive in: a late freeze of a disable
// does not quarantine the saga its restore released, a later disable's
// freeze does, and a late release does not undo it.
func testFreezeFenced(t *testing.T, e *env) {
	ctx := t.Context()
	tx := fullTx(e.scope, "tx-freeze-fenced")
	must(t, e.store.CreateTransaction(ctx, tx, nil), "CreateTransaction")
	disable := tx
	disable.State, disable.Version, disable.Fence = eventstore.StateDisabled, tx.Version+1, tx.Fence+1
	restore := disable
	restore.State, restore.Version, restore.Fence = eventstore.StateRetryPending, disable.Version+1, disable.Fence+1
	frozen := func(what string, want bool) {
		t.Helper()
		_, err := e.store.GetFrozen(ctx, e.scope, tx.TxID)
		if want {
			must(t, err, "GetFrozen "+what)
		} else {
			mustIs(t, err, eventstore.ErrNotFound, "GetFrozen "+what)
		}
		list, err := e.store.ListFrozen(ctx, e.scope, 0)
		must(t, err, "ListFrozen "+what)
		if (len(list) == 1) != want {
			t.Fatalf("ListFrozen %s: %v, want the saga listed: %v", what, frozenIDs(list), want)
		}
	}
	must(t, e.store.Freeze(ctx, disable, "lifetime exceeded"), "Freeze at the disable's version")
	frozen("after the disable", true)
	must(t, e.store.Unfreeze(ctx, restore), "Unfreeze at the restore's version")
	frozen("after the restore", false)
	must(t, e.store.Freeze(ctx, disable, "lifetime exceeded"), "a late Freeze at the disable's version")
	frozen("after a late freeze of the disable", false)

	again := restore
	again.State, again.Version, again.Fence = eventstore.StateDisabled, restore.Version+1, restore.Fence+1
	must(t, e.store.Freeze(ctx, again, "lifetime exceeded again"), "Freeze at a second disable's version")
	frozen("after a second disable", true)
	must(t, e.store.Unfreeze(ctx, restore), "a late Unfreeze at the first restore's version")
	frozen("after a late release by the first restore", true)
	f, err := e.store.GetFrozen(ctx, e.scope, tx.TxID)
	must(t, err, "GetFrozen")
	if f.Reason != "lifetime exceeded again" || f.Version != again.Version {
		t.Fatalf("frozen copy %q version %d, want the second disable's", f.Reason, f.Version)
	}
}
