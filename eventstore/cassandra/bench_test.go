package cassandra_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// BenchmarkSagaLifecycle is memory's benchmark of the same name on
// Cassandra, reporting round trips and LWTs per saga from Stats.
func BenchmarkSagaLifecycle(b *testing.B) {
	hosts, keyspace := testenv.CassandraKeyspace(b)
	cfg := cassandra.Config{ContactPoints: hosts, Keyspace: keyspace, Replication: cassandra.SimpleReplication(1), CreateSchema: true, RequestTimeout: 30 * time.Second}
	ctx := context.Background()
	s, err := cassandra.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	scope := storetest.UniqueScope(b)
	payload := make([]byte, 256)
	var seq atomic.Int64
	s.ResetStats()
	b.ResetTimer()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := "tx-" + strconv.FormatInt(seq.Add(1), 10)
			path := eventstore.RecoveryPath{Day: time.Now(), MinuteOfDay: 600, InstanceID: "pod-1", Bucket: 1}
			tx := eventstore.Transaction{Scope: scope, TxID: id, Domain: "order-saga", State: eventstore.StateStarted, Version: 1, Payload: payload, RestorePath: &path}
			if err := s.CreateTransaction(ctx, tx, nil); err != nil {
				b.Error(err)
				return
			}
			if err := s.RegisterRecovery(ctx, scope, eventstore.RecoveryEntry{RecoveryPath: path, TxID: id, InstanceToken: 42}); err != nil {
				b.Error(err)
				return
			}
			for step := range 3 {
				k := eventstore.MarkerKey{Scope: scope, TxID: id, Span: step, Kind: "process", Site: "worker:payment"}
				if _, err := s.GetMarker(ctx, k); err == nil {
					b.Error("marker exists")
					return
				}
				if err := s.PutMarker(ctx, eventstore.Marker{MarkerKey: k, State: eventstore.MarkerCommitted, Owner: "w", Reply: payload}); err != nil {
					b.Error(err)
					return
				}
				tx.Version++
				tx.State = eventstore.StateInProgress
				if err := s.Transition(ctx, tx, &eventstore.Tryout{Index: step, Span: step, Outcome: "ok", Before: payload, After: payload}); err != nil {
					b.Error(err)
					return
				}
			}
			if err := s.DeleteRecoveryEntry(ctx, scope, path, id); err != nil {
				b.Error(err)
				return
			}
			if err := s.DeleteMarkers(ctx, scope, id); err != nil {
				b.Error(err)
				return
			}
		}
	})
	st := s.Stats()
	b.ReportMetric(float64(st.RoundTrips())/float64(b.N), "roundtrips/saga")
	b.ReportMetric(float64(st.LWTs)/float64(b.N), "lwts/saga")
}
