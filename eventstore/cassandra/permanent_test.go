package cassandra_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
)

// What Cassandra refuses on every try (a key that is not valid UTF-8 or
// over 64 KiB, text that is not valid UTF-8) fails with an error matching
// eventstore.ErrPermanent, so that a consumer can dead-letter the record
// instead of retrying it for ever. Transient conditions (an ended context)
// and a closed store do not match it.
func TestRefusedRequestsArePermanent(t *testing.T) {
	cfg := testConfig(t)
	s := newStore(t, cfg)
	scope := storetest.UniqueScope(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const badUTF8 = "tx-\xff\xfe"
	huge := strings.Repeat("k", 70_000) // the partition key limit is 64 KiB
	tx := func(id string) eventstore.Transaction {
		return eventstore.Transaction{Scope: scope, TxID: id, Domain: "d", State: eventstore.StateStarted, Version: 1}
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"LoadTransaction, tx id not UTF-8", func() error { _, err := s.LoadTransaction(ctx, scope, badUTF8); return err }},
		{"TransactionState, tx id not UTF-8", func() error { _, err := s.TransactionState(ctx, scope, badUTF8); return err }},
		{"Transition, tx id not UTF-8", func() error { return s.Transition(ctx, tx(badUTF8), nil) }},
		{"Transition with tryout, tx id not UTF-8", func() error {
			return s.Transition(ctx, tx(badUTF8), &eventstore.Tryout{Index: 1, Outcome: "ok"})
		}},
		{"CreateTransaction, tx id not UTF-8", func() error { return s.CreateTransaction(ctx, tx(badUTF8), nil) }},
		{"LoadTransaction, tx id over 64 KiB", func() error { _, err := s.LoadTransaction(ctx, scope, huge); return err }},
		{"Transition, tx id over 64 KiB", func() error { return s.Transition(ctx, tx(huge), nil) }},
		{"Transition, hint not UTF-8", func() error {
			x := tx("tx-hint")
			x.Hints = map[string]string{"refund": "r-\xff"}
			return s.Transition(ctx, x, nil)
		}},
		{"InsertMarker, tx id not UTF-8", func() error {
			_, _, err := s.InsertMarker(ctx, eventstore.Marker{
				MarkerKey: eventstore.MarkerKey{Scope: scope, TxID: badUTF8, Kind: "process", Site: "w"},
				State:     eventstore.MarkerLeased, Owner: "o",
			}, 5*time.Second)
			return err
		}},
		{"LoadTransaction, empty id (checked before sending)", func() error { _, err := s.LoadTransaction(ctx, scope, ""); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			t.Logf("%.300v", err)
			if !errors.Is(err, eventstore.ErrPermanent) {
				t.Fatalf("error %v does not match ErrPermanent", err)
			}
			if errors.Is(err, eventstore.ErrClosed) || errors.Is(err, eventstore.ErrNotFound) {
				t.Errorf("error %v also matches ErrClosed or ErrNotFound", err)
			}
			if !strings.HasPrefix(err.Error(), "cassandra: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}

	// The store still works, and what is not permanent is not reported so.
	if err := s.CreateTransaction(ctx, tx("tx-ok"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadTransaction(ctx, scope, "tx-missing"); !errors.Is(err, eventstore.ErrNotFound) || errors.Is(err, eventstore.ErrPermanent) {
		t.Errorf("missing row: %v", err)
	}
	ended, stop := context.WithCancel(ctx)
	stop()
	if _, err := s.LoadTransaction(ended, scope, "tx-ok"); err == nil || errors.Is(err, eventstore.ErrPermanent) {
		t.Errorf("ended context: %v", err)
	}
	_ = s.Close()
	if _, err := s.LoadTransaction(ctx, scope, "tx-ok"); !errors.Is(err, eventstore.ErrClosed) || errors.Is(err, eventstore.ErrPermanent) {
		t.Errorf("closed store: %v", err)
	}
}
