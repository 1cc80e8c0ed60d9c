package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// businessKey is a claim of key in scope by owner.
func businessKey(scope eventstore.Scope, key, owner string) eventstore.BusinessKey {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891_000_000, time.UTC)
	return eventstore.BusinessKey{
		BusinessKeyID: eventstore.BusinessKeyID{Scope: scope, Domain: "place-order", Key: key},
		TxID:          "tx-of-" + key, Payload: []byte{0x81, 0xa2, 'i', 'd', 0x01}, CreatedAt: at,
		Owner: owner, ClaimedAt: at.Add(time.Second),
	}
}

// testBusinessKeyClaim: the first insert of a key claims it; the next one
// is refused with the row, every field as written; another domain, key or
// scope is another row.
func testBusinessKeyClaim(t *testing.T, e *env) {
	keys, ok := optional[eventstore.BusinessKeys](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	first := businessKey(e.scope, "order-42", "start-1")
	applied, _, err := keys.InsertBusinessKey(ctx, first, time.Hour)
	must(t, err, "InsertBusinessKey")
	if !applied {
		t.Fatal("the first claim of a key was not applied")
	}
	second := businessKey(e.scope, "order-42", "start-2")
	second.TxID, second.Payload = "tx-other", []byte{0x01}
	applied, got, err := keys.InsertBusinessKey(ctx, second, time.Hour)
	must(t, err, "InsertBusinessKey again")
	if applied {
		t.Fatal("a second claim of the key was applied")
	}
	if !reflect.DeepEqual(got, first) {
		t.Fatalf("refused claim found\n%+v\nwant the first claim\n%+v", got, first)
	}
	others := []eventstore.BusinessKey{businessKey(e.scope, "order-43", "start-3"), businessKey(e.scope, "order-42", "start-4"), businessKey(UniqueScope(t), "order-42", "start-5")}
	others[1].Domain = "refund"
	for _, k := range others {
		applied, _, err := keys.InsertBusinessKey(ctx, k, time.Hour)
		must(t, err, "InsertBusinessKey of another row")
		if !applied {
			t.Fatalf("claim of %+v refused: another domain, key or scope is another row", k.BusinessKeyID)
		}
	}
}

// testBusinessKeyReplace: a replace lands only while its owner holds the
// claim unsettled; a takeover changes the owner, a settle freezes the row
// (no takeover, no delete).
func testBusinessKeyReplace(t *testing.T, e *env) {
	keys, ok := optional[eventstore.BusinessKeys](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	k := businessKey(e.scope, "order-7", "start-1")
	_, _, err := keys.InsertBusinessKey(ctx, k, time.Hour)
	must(t, err, "InsertBusinessKey")

	taken := k
	taken.Owner, taken.Generation, taken.ClaimedAt = "taker-1", 1, k.ClaimedAt.Add(time.Minute)
	applied, got, err := keys.ReplaceBusinessKey(ctx, taken, "someone-else", time.Hour)
	must(t, err, "ReplaceBusinessKey with the wrong owner")
	if applied || got.Owner != "start-1" || got.Settled {
		t.Fatalf("replace with the wrong owner: applied %v, found %+v; want refused, owner start-1", applied, got)
	}
	applied, _, err = keys.ReplaceBusinessKey(ctx, taken, "start-1", time.Hour)
	must(t, err, "ReplaceBusinessKey (takeover)")
	if !applied {
		t.Fatal("takeover by the holder's owner refused")
	}
	_, got, err = keys.InsertBusinessKey(ctx, businessKey(e.scope, "order-7", "late"), time.Hour)
	must(t, err, "InsertBusinessKey after the takeover")
	if !reflect.DeepEqual(got, taken) {
		t.Fatalf("row after the takeover\n%+v\nwant\n%+v", got, taken)
	}
	// The first owner lost the claim: it can neither settle nor release it.
	settled := k
	settled.Settled = true
	if applied, got, err := keys.ReplaceBusinessKey(ctx, settled, "start-1", time.Hour); err != nil || applied || got.Owner != "taker-1" {
		t.Fatalf("settle by the former owner: %v, %+v, %v; want refused, owner taker-1", applied, got, err)
	}
	if applied, got, err := keys.DeleteBusinessKey(ctx, k.BusinessKeyID, "start-1"); err != nil || applied || got.Owner != "taker-1" {
		t.Fatalf("release by the former owner: %v, %+v, %v; want refused, owner taker-1", applied, got, err)
	}
	// The new owner settles it: no takeover or release after that.
	settled = taken
	settled.Settled = true
	applied, _, err = keys.ReplaceBusinessKey(ctx, settled, "taker-1", time.Hour)
	must(t, err, "ReplaceBusinessKey (settle)")
	if !applied {
		t.Fatal("settle by the owner refused")
	}
	again := taken
	again.Owner, again.Generation = "taker-2", 2
	if applied, got, err := keys.ReplaceBusinessKey(ctx, again, "taker-1", time.Hour); err != nil || applied || got.Owner != "taker-1" || !got.Settled {
		t.Fatalf("takeover of a settled claim: %v, %+v, %v; want refused, owner taker-1 settled", applied, got, err)
	}
	if applied, got, err := keys.DeleteBusinessKey(ctx, k.BusinessKeyID, "taker-1"); err != nil || applied || !got.Settled {
		t.Fatalf("release of a settled claim: %v, %+v, %v; want refused, settled", applied, got, err)
	}
	_, got, err = keys.InsertBusinessKey(ctx, businessKey(e.scope, "order-7", "late"), time.Hour)
	must(t, err, "InsertBusinessKey after the settle")
	if !reflect.DeepEqual(got, settled) {
		t.Fatalf("row after the settle\n%+v\nwant\n%+v", got, settled)
	}
	// A replace of a row that does not exist writes nothing.
	missing := businessKey(e.scope, "order-missing", "start-1")
	if applied, got, err := keys.ReplaceBusinessKey(ctx, missing, "start-1", time.Hour); err != nil || applied || got.Owner != "" {
		t.Fatalf("replace of a missing row: %v, %+v, %v; want refused, nothing found", applied, got, err)
	}
	if applied, _, err := keys.InsertBusinessKey(ctx, missing, time.Hour); err != nil || !applied {
		t.Fatalf("the refused replace left a row: insert %v, %v", applied, err)
	}
}

// testBusinessKeyDelete: the owner of an unsettled claim releases it, and
// the key can be claimed again.
func testBusinessKeyDelete(t *testing.T, e *env) {
	keys, ok := optional[eventstore.BusinessKeys](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	k := businessKey(e.scope, "order-9", "start-1")
	if applied, got, err := keys.DeleteBusinessKey(ctx, k.BusinessKeyID, "start-1"); err != nil || applied || got.Owner != "" {
		t.Fatalf("delete of a missing row: %v, %+v, %v; want refused, nothing found", applied, got, err)
	}
	_, _, err := keys.InsertBusinessKey(ctx, k, time.Hour)
	must(t, err, "InsertBusinessKey")
	if applied, got, err := keys.DeleteBusinessKey(ctx, k.BusinessKeyID, "start-2"); err != nil || applied || got.Owner != "start-1" {
		t.Fatalf("delete by another owner: %v, %+v, %v; want refused, owner start-1", applied, got, err)
	}
	applied, _, err := keys.DeleteBusinessKey(ctx, k.BusinessKeyID, "start-1")
	must(t, err, "DeleteBusinessKey")
	if !applied {
		t.Fatal("release by the owner refused")
	}
	again := businessKey(e.scope, "order-9", "start-2")
	if applied, _, err := keys.InsertBusinessKey(ctx, again, time.Hour); err != nil || !applied {
		t.Fatalf("claim after the release: %v, %v; want applied", applied, err)
	}
}

// testBusinessKeyTTL: a claim expires after its TTL (whole seconds) and the
// key can then be claimed again; a replace sets a new TTL.
func testBusinessKeyTTL(t *testing.T, e *env) {
	keys, ok := optional[eventstore.BusinessKeys](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	e.advanceToFraction(0)
	short := businessKey(e.scope, "order-short", "start-1")
	long := businessKey(e.scope, "order-long", "start-1")
	for _, k := range []eventstore.BusinessKey{short, long} {
		if applied, _, err := keys.InsertBusinessKey(ctx, k, time.Second); err != nil || !applied {
			t.Fatalf("InsertBusinessKey: %v, %v", applied, err)
		}
	}
	// The long one's TTL is renewed by its settle.
	settled := long
	settled.Settled = true
	if applied, _, err := keys.ReplaceBusinessKey(ctx, settled, "start-1", time.Hour); err != nil || !applied {
		t.Fatalf("settle: %v, %v", applied, err)
	}
	e.eventually(t, "the short claim expired", 500*time.Millisecond, func() bool {
		applied, _, err := keys.InsertBusinessKey(ctx, businessKey(e.scope, "order-short", "start-2"), time.Hour)
		must(t, err, "InsertBusinessKey after the TTL")
		return applied
	})
	applied, got, err := keys.InsertBusinessKey(ctx, businessKey(e.scope, "order-long", "start-2"), time.Hour)
	must(t, err, "InsertBusinessKey of the renewed claim")
	if applied || !reflect.DeepEqual(got, settled) {
		t.Fatalf("the claim whose settle set a 1h TTL: applied %v, found %+v; want the settled row", applied, got)
	}
	// A permanent claim (TTL 0) and the TTL limit.
	if applied, _, err := keys.InsertBusinessKey(ctx, businessKey(e.scope, "order-forever", "start-1"), 0); err != nil || !applied {
		t.Fatalf("InsertBusinessKey without a TTL: %v, %v", applied, err)
	}
	tooLong := time.Until(eventstore.MaxMarkerExpiry) + 48*time.Hour
	if e.f.Advance != nil {
		tooLong = eventstore.MaxMarkerExpiry.Sub(e.f.Now()) + 48*time.Hour
	}
	_, _, err = keys.InsertBusinessKey(ctx, businessKey(e.scope, "order-2038", "start-1"), tooLong)
	mustIs(t, err, eventstore.ErrInvalid, "a TTL ending after 2038-01-19")
}

// testBusinessKeyRace: of concurrent claims of one key exactly one lands,
// and every other one finds it.
func testBusinessKeyRace(t *testing.T, e *env) {
	keys, ok := optional[eventstore.BusinessKeys](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	n := e.f.Concurrency
	applied := make([]bool, n)
	found := make([]eventstore.BusinessKey, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			k := businessKey(e.scope, "order-race", fmt.Sprintf("start-%d", i))
			k.TxID = fmt.Sprintf("tx-%d", i)
			applied[i], found[i], errs[i] = keys.InsertBusinessKey(ctx, k, time.Hour)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i := range n {
		must(t, errs[i], fmt.Sprintf("claim %d", i))
		if applied[i] {
			if winner >= 0 {
				t.Fatalf("claims %d and %d both landed", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("none of %d claims landed", n)
	}
	for i := range n {
		if i != winner && (found[i].TxID != fmt.Sprintf("tx-%d", winner) || found[i].Owner != fmt.Sprintf("start-%d", winner)) {
			t.Fatalf("claim %d found %+v, want the winner's (%d)", i, found[i], winner)
		}
	}
}

// testBusinessKeyValidation: empty components, a negative TTL and an empty
// owner fail with ErrInvalid; a closed store with ErrClosed.
func testBusinessKeyValidation(t *testing.T, e *env) {
	keys, ok := optional[eventstore.BusinessKeys](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	good := businessKey(e.scope, "order-v", "start-1")
	bad := map[string]eventstore.BusinessKey{}
	for name, f := range map[string]func(*eventstore.BusinessKey){
		"empty region": func(k *eventstore.BusinessKey) { k.Region = "" },
		"empty domain": func(k *eventstore.BusinessKey) { k.Domain = "" },
		"empty key":    func(k *eventstore.BusinessKey) { k.Key = "" },
		"empty tx id":  func(k *eventstore.BusinessKey) { k.TxID = "" },
		"empty owner":  func(k *eventstore.BusinessKey) { k.Owner = "" },
		"generation":   func(k *eventstore.BusinessKey) { k.Generation = -1 },
	} {
		k := good
		f(&k)
		bad[name] = k
	}
	for name, k := range bad {
		_, _, err := keys.InsertBusinessKey(ctx, k, time.Hour)
		mustIs(t, err, eventstore.ErrInvalid, "InsertBusinessKey with "+name)
		_, _, err = keys.ReplaceBusinessKey(ctx, k, "start-1", time.Hour)
		mustIs(t, err, eventstore.ErrInvalid, "ReplaceBusinessKey with "+name)
	}
	_, _, err := keys.InsertBusinessKey(ctx, good, -time.Second)
	mustIs(t, err, eventstore.ErrInvalid, "InsertBusinessKey with a negative TTL")
	_, _, err = keys.ReplaceBusinessKey(ctx, good, "", time.Hour)
	mustIs(t, err, eventstore.ErrInvalid, "ReplaceBusinessKey of an empty owner")
	_, _, err = keys.DeleteBusinessKey(ctx, good.BusinessKeyID, "")
	mustIs(t, err, eventstore.ErrInvalid, "DeleteBusinessKey of an empty owner")
	id := good.BusinessKeyID
	id.Key = ""
	_, _, err = keys.DeleteBusinessKey(ctx, id, "start-1")
	mustIs(t, err, eventstore.ErrInvalid, "DeleteBusinessKey of an empty key")
	// Nothing was written.
	if applied, _, err := keys.InsertBusinessKey(ctx, good, time.Hour); err != nil || !applied {
		t.Fatalf("InsertBusinessKey after the refused calls: %v, %v", applied, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := keys.InsertBusinessKey(cctx, businessKey(e.scope, "order-c", "s"), time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("InsertBusinessKey with a cancelled context: %v", err)
	}
	must(t, e.store.Close(), "Close")
	_, _, err = keys.InsertBusinessKey(ctx, businessKey(e.scope, "order-closed", "s"), time.Hour)
	mustIs(t, err, eventstore.ErrClosed, "InsertBusinessKey on a closed store")
	_, _, err = keys.ReplaceBusinessKey(ctx, good, "start-1", time.Hour)
	mustIs(t, err, eventstore.ErrClosed, "ReplaceBusinessKey on a closed store")
	_, _, err = keys.DeleteBusinessKey(ctx, good.BusinessKeyID, "start-1")
	mustIs(t, err, eventstore.ErrClosed, "DeleteBusinessKey on a closed store")
}

// testBusinessKeyRead: GetBusinessKey finds a claim with every field as
// written, follows a replace, answers ErrNotFound for a key never claimed,
// another domain's, and one released, and ErrInvalid for a bad id.
func testBusinessKeyRead(t *testing.T, e *env) {
	keys, ok := optional[eventstore.BusinessKeys](t, e)
	if !ok {
		return
	}
	r, ok := optional[eventstore.BusinessKeyReader](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	k := businessKey(e.scope, "order-77", "start-1")
	if _, err := r.GetBusinessKey(ctx, k.BusinessKeyID); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("GetBusinessKey of a key never claimed: %v, want ErrNotFound", err)
	}
	_, _, err := keys.InsertBusinessKey(ctx, k, time.Hour)
	must(t, err, "InsertBusinessKey")
	got, err := r.GetBusinessKey(ctx, k.BusinessKeyID)
	must(t, err, "GetBusinessKey")
	if !reflect.DeepEqual(got, k) {
		t.Fatalf("GetBusinessKey\n%+v\nwant\n%+v", got, k)
	}
	other := k.BusinessKeyID
	other.Domain = "refund"
	if _, err := r.GetBusinessKey(ctx, other); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("GetBusinessKey of another domain: %v, want ErrNotFound", err)
	}
	settled := k
	settled.Settled = true
	_, _, err = keys.ReplaceBusinessKey(ctx, settled, k.Owner, time.Hour)
	must(t, err, "ReplaceBusinessKey")
	if got, err := r.GetBusinessKey(ctx, k.BusinessKeyID); err != nil || !got.Settled {
		t.Fatalf("GetBusinessKey after a settle: %+v, %v", got, err)
	}
	released := businessKey(e.scope, "order-78", "start-2")
	_, _, err = keys.InsertBusinessKey(ctx, released, time.Hour)
	must(t, err, "InsertBusinessKey")
	_, _, err = keys.DeleteBusinessKey(ctx, released.BusinessKeyID, released.Owner)
	must(t, err, "DeleteBusinessKey")
	if _, err := r.GetBusinessKey(ctx, released.BusinessKeyID); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("GetBusinessKey of a released key: %v, want ErrNotFound", err)
	}
	bad := k.BusinessKeyID
	bad.Key = ""
	if _, err := r.GetBusinessKey(ctx, bad); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("GetBusinessKey of an empty key: %v, want ErrInvalid", err)
	}
}
