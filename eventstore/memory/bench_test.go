package memory_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
)

// BenchmarkSagaLifecycle runs what one 3-step saga costs the store on the
// demo's hot path: create with a restore watchdog, three transitions with
// tryouts, a lease and a commit per step, and the end (watchdog and
// markers deleted).
func BenchmarkSagaLifecycle(b *testing.B) {
	s := memory.New()
	scope := eventstore.Scope{Region: "r", Cluster: "c", Service: "order-service"}
	payload := make([]byte, 256)
	var seq atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := "tx-" + strconv.FormatInt(seq.Add(1), 10)
			path := eventstore.RecoveryPath{Day: time.Now(), MinuteOfDay: 600, InstanceID: "pod-1", Bucket: 1}
			tx := eventstore.Transaction{Scope: scope, TxID: id, Domain: "order-saga", State: eventstore.StateStarted, Version: 1, Payload: payload, RestorePath: &path}
			if err := s.CreateTransaction(ctx, tx, nil); err != nil {
				b.Fatal(err)
			}
			if err := s.RegisterRecovery(ctx, scope, eventstore.RecoveryEntry{RecoveryPath: path, TxID: id, InstanceToken: 42}); err != nil {
				b.Fatal(err)
			}
			for step := range 3 {
				k := eventstore.MarkerKey{Scope: scope, TxID: id, Span: step, Kind: "process", Site: "worker:payment"}
				if ok, _, err := s.InsertMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerLeased, Owner: "w"}, 5*time.Second); err != nil || !ok {
					b.Fatal(ok, err)
				}
				if err := s.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "w", Reply: payload}); err != nil {
					b.Fatal(err)
				}
				tx.Version++
				tx.State = eventstore.StateInProgress
				tx.Completed = append(tx.Completed, eventstore.CompletedSpan{Span: step, Endpoint: "e", Compensable: true})
				if err := s.Transition(ctx, tx, &eventstore.Tryout{Index: step, Span: step, Outcome: "ok", Before: payload, After: payload}); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.DeleteRecoveryEntry(ctx, scope, path, id); err != nil {
				b.Fatal(err)
			}
			if err := s.DeleteMarkers(ctx, scope, id); err != nil {
				b.Fatal(err)
			}
		}
	})
}
