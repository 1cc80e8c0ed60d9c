package placeorder_test

import (
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// TestSampleConfigLoads keeps examples/stacksaga.yaml (shown in the README)
// valid for both loaders that read it.
func TestSampleConfigLoads(t *testing.T) {
	cc, err := cassandra.LoadConfigFile("../stacksaga.yaml")
	if err != nil {
		t.Fatalf("cassandra config: %v", err)
	}
	if len(cc.ContactPoints) != 1 || cc.Keyspace != "stacksaga_event_store" || cc.LocalDatacenter != "datacenter1" {
		t.Errorf("cassandra config: %+v", cc)
	}
	wp, err := writeprotect.LoadConfigFile("../stacksaga.yaml")
	if err != nil {
		t.Fatalf("write-protection config: %v", err)
	}
	if got := wp.Resolve("place-order"); got.Mode != writeprotect.Strict || got.Lease != 10*time.Second {
		t.Errorf("place-order resolves to %+v", got)
	}
	if got := wp.Resolve("other"); got.Mode != writeprotect.RelaxedWithDedup || got.Lease != 5*time.Second {
		t.Errorf("default resolves to %+v", got)
	}
	rc, err := recovery.LoadConfigFile("../stacksaga.yaml")
	if err != nil {
		t.Fatalf("recovery config: %v", err)
	}
	want := recovery.RetryPolicy{DelayWindows: 2, MaxAttempts: 5, BackoffMultiplier: 2, MaxDelayWindows: 60, Jitter: 0.2, InitialInterval: time.Second, MaxInterval: 100 * time.Second, StepTimeout: 30 * time.Second}
	if got := rc.RetryPolicy("place-order", "payment-service/charge-payment"); got != want {
		t.Errorf("charge-payment's retry policy %+v, want %+v", got, want)
	}
	if got := rc.RetryPolicy("other", "x/y"); got.MaxAttempts != 0 || got.DelayWindows != 1 {
		t.Errorf("default retry policy %+v", got)
	}
	if rc.RestoreDelay("place-order") != 600 || rc.TransactionLifetime != 24*time.Hour || rc.Interval != time.Minute {
		t.Errorf("recovery config %+v", rc)
	}
}
