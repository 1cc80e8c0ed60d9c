package placeorder

import (
	"context"
	"fmt"

	"github.com/stacksaga-go/stacksaga/config"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// WorkerConfig returns the worker options of the StackSaga YAML file at
// path (--config): worker.WithConfig with the whole file, its brokers
// replaced by kafkaFlag when that is set, and, when the file configures
// write protection or the store and the service brings no guard of its own
// (hasGuard), the writeprotect guard on the file's Cassandra store. closeFn
// closes that store.
func WorkerConfig(ctx context.Context, path, kafkaFlag string, hasGuard bool) (opts []worker.Option, closeFn func(), err error) {
	cfg, err := config.LoadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if b := kafkaflags.SplitBrokers(kafkaFlag); len(b) > 0 {
		cfg.Kafka.Brokers = b
	}
	opts = []worker.Option{worker.WithConfig(cfg)}
	closeFn = func() {}
	if hasGuard || !(cfg.Has(config.SectionWriteProtection) || cfg.Has(config.SectionCassandra)) {
		return opts, closeFn, nil
	}
	store, err := cassandra.New(ctx, cfg.Cassandra)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the store of the write-protection guard: %w", path, err)
	}
	guard, err := writeprotect.New(store, cfg.WriteProtection)
	if err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	return append(opts, worker.WithGuard(guard)), func() { _ = store.Close() }, nil
}
