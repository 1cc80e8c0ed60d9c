package tracewindow_test

import (
	"context"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/tracewindow/indextest"
)

func TestMemoryIndexConformance(t *testing.T) {
	indextest.Run(t, func(t *testing.T) indextest.Subject {
		return indextest.Subject{Index: tracewindow.NewMemoryIndex(0)}
	})
}

func TestMemoryIndexForgetsTheOldest(t *testing.T) {
	idx := tracewindow.NewMemoryIndex(5)
	var ids []string
	for i := range 8 {
		at := indextest.Base.Add(time.Duration(i) * time.Minute)
		id := indextest.ID(t, at)
		ids = append(ids, id)
		idx.Observe(indextest.Scope, tracewindow.Entry{TxID: id, Domain: []string{"a", "b"}[i%2], State: eventstore.StateCompleted, UpdatedAt: at})
	}
	// 5/64 rounds to 0: the index forgets just what exceeds its capacity.
	if idx.Len() != 5 {
		t.Fatalf("len %d, want 5", idx.Len())
	}
	q := tracewindow.Query{Scope: indextest.Scope, Domain: "a", From: indextest.Base, To: indextest.Base.Add(time.Hour), Limit: 10}
	p, err := idx.Recent(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	// a holds ids 0, 2, 4, 6; 0 and 2 were forgotten (with 1).
	if len(p.Entries) != 2 || p.Entries[0].TxID != ids[6] || p.Entries[1].TxID != ids[4] {
		t.Fatalf("domain a after eviction: %+v", p.Entries)
	}
}

func TestListenerRecordsEvents(t *testing.T) {
	idx := tracewindow.NewMemoryIndex(0)
	scope := indextest.Scope
	l := tracewindow.Listener(idx, scope)
	at := indextest.Base
	id := indextest.ID(t, at)
	l(orchestrator.Event{TxID: id, Domain: "order", To: eventstore.StateStarted, At: at})
	l(orchestrator.Event{TxID: id, Domain: "order", From: eventstore.StateStarted, To: eventstore.StateCompensated,
		Span: 0, Kind: "revert", Endpoint: "stock/reserve", Outcome: "ok", Error: "boom", At: at.Add(time.Second)})
	p, err := idx.Recent(context.Background(), tracewindow.Query{Scope: scope, Domain: "order", From: at, To: at.Add(time.Minute), Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 1 {
		t.Fatalf("entries %+v", p.Entries)
	}
	e := p.Entries[0]
	if e.State != eventstore.StateCompensated || e.Kind != "revert" || e.Endpoint != "stock/reserve" || e.Error != "boom" || !e.UpdatedAt.Equal(at.Add(time.Second)) || !e.CreatedAt.Equal(at) {
		t.Fatalf("entry %+v", e)
	}
}

func TestIDPrefixAndTime(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 678e6, time.UTC)
	id := indextest.ID(t, at)
	if p := tracewindow.IDPrefix(at); id[:13] != p {
		t.Fatalf("prefix %s of id %s", p, id)
	}
	if got, ok := tracewindow.IDTime(id); !ok || !got.Equal(at) {
		t.Fatalf("IDTime %v %v", got, ok)
	}
	if tracewindow.IDPrefix(at.Add(time.Millisecond)) <= id || tracewindow.IDPrefix(at) > id {
		t.Fatal("ids do not sort between the prefixes of their millisecond")
	}
	for _, bad := range []string{"", "xyz", "0123456-0123", "01234567_0123", "01234567-0123-zz"} {
		if _, ok := tracewindow.IDTime(bad); ok {
			t.Errorf("IDTime(%q) ok", bad)
		}
	}
}

func TestMemoryIndexForgetsInChunks(t *testing.T) {
	idx := tracewindow.NewMemoryIndex(128)
	for i := range 129 {
		at := indextest.Base.Add(time.Duration(i) * time.Second)
		idx.Observe(indextest.Scope, tracewindow.Entry{TxID: indextest.ID(t, at), Domain: []string{"a", "b", "c"}[i%3], State: eventstore.StateCompleted, UpdatedAt: at})
	}
	if idx.Len() != 126 { // 129 - (1 + 128/64)
		t.Fatalf("len %d, want 126", idx.Len())
	}
	c, err := idx.Census(context.Background(), indextest.Scope, indextest.Base, indextest.Base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if c.Scanned != 126 {
		t.Fatalf("census scanned %d", c.Scanned)
	}
	// The three oldest went: the first saga left is the fourth.
	p, _ := idx.Recent(context.Background(), tracewindow.Query{Scope: indextest.Scope, Domain: "a", From: indextest.Base, To: indextest.Base.Add(time.Hour), Limit: 500})
	if last := p.Entries[len(p.Entries)-1]; !last.CreatedAt.Equal(indextest.Base.Add(3 * time.Second)) {
		t.Fatalf("oldest of a: %v", last.CreatedAt)
	}
}
