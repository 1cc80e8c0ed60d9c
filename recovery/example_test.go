package recovery_test

import (
	"context"
	"fmt"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/recovery"
)

// How an orchestrator uses the package: a watchdog at saga start, a retry
// after a retryable failure, the watchdog's removal at the end, and a
// retry node's engine re-driving what is due.
func Example() {
	ctx := context.Background()
	store := memory.New()
	scope := eventstore.Scope{Region: "eu", Cluster: "default", Service: "order-service"}
	now := time.Date(2026, 3, 10, 10, 30, 15, 0, time.UTC)
	clock := func() time.Time { return now }

	cfg := recovery.DefaultConfig() // or recovery.LoadConfigFile("stacksaga.yaml")
	w, err := recovery.NewWriter(store, cfg, recovery.WithClock(clock))
	if err != nil {
		panic(err)
	}

	// Saga start: register the watchdog, store its path on the saga row.
	watchdog, _ := w.RegisterRestore(ctx, scope, "tx-1", "place-order")
	fmt.Println("watchdog window:", watchdog.MinuteOfDay, "bucket:", watchdog.Bucket)

	// A retryable failure of attempt 1: persist RETRY_PENDING, then
	// register the retry with the policy's backoff.
	policy := cfg.RetryPolicy("place-order", "payment-service.charge")
	if !policy.Exhausted(1) {
		retry, _ := w.RegisterRetry(ctx, scope, "tx-1", "place-order", 1) // policy.Delay(1) with jitter
		fmt.Println("retry window:", retry.MinuteOfDay, "bucket:", retry.Bucket)
	}

	// A retry node re-drives it once its window is sealed.
	redrive := recovery.RedriverFunc(func(ctx context.Context, e eventstore.RecoveryEntry) error {
		fmt.Println("re-drive", e.TxID, "restore:", e.Restore())
		return nil // the orchestrator would load the saga and send its step again
	})
	engine, err := recovery.NewEngine(store, scope, redrive, cfg, recovery.WithClock(clock), recovery.WithWriter(w))
	if err != nil {
		panic(err)
	}
	now = now.Add(2 * time.Minute)
	res, _ := engine.Scan(ctx)
	fmt.Println("retried:", res.Retried, "windows compacted:", res.WindowsDeleted)

	// The saga completes: remove its watchdog by the stored path.
	_ = w.Unregister(ctx, scope, watchdog, "tx-1")
	// Output:
	// watchdog window: 1230 bucket: 1
	// retry window: 631 bucket: 0
	// re-drive tx-1 restore: false
	// retried: 1 windows compacted: 1
}
