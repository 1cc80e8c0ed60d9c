package placeorder_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/config"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/worker"
)

// TestWorkerConfigAppliesTheFile: an example worker's --config gives it
// the file's region, cluster and brokers (--kafka replacing them); with
// the sample file, on the real Cassandra, its write protection becomes the
// worker's guard, so that WithConfig does not refuse it.
func TestWorkerConfigAppliesTheFile(t *testing.T) {
	for _, v := range []string{config.EnvRegion, config.EnvCluster, config.EnvService, config.EnvRegionCode, kafkaflags.EnvBrokers, kafkaflags.DeprecatedEnvBrokers} {
		t.Setenv(v, "")
	}
	path := filepath.Join(t.TempDir(), "stacksaga.yaml")
	if err := os.WriteFile(path, []byte("stacksaga:\n  instance: { region: eu, cluster: shop }\n  kafka: { brokers: [\"127.0.0.1:19092\"] }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, kafka := range []string{"", "127.0.0.1:29092"} {
		opts, closeFn, err := placeorder.WorkerConfig(t.Context(), path, kafka, false)
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(placeorder.InventoryService, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if w.Region() != "eu" || w.Cluster() != "shop" || len(opts) != 1 {
			t.Errorf("--kafka %q: region %q cluster %q, %d options", kafka, w.Region(), w.Cluster(), len(opts))
		}
		w.Close()
		closeFn()
	}

	hosts, ks := testenv.CassandraKeyspace(t)
	if hosts == nil {
		return
	}
	t.Setenv(cassandra.EnvContactPoints, strings.Join(hosts, ","))
	t.Setenv(cassandra.EnvKeyspace, ks)
	t.Setenv(cassandra.EnvCreateSchema, "true")
	opts, closeFn, err := placeorder.WorkerConfig(t.Context(), "../stacksaga.yaml", "", false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if len(opts) != 2 {
		t.Fatalf("%d options, want WithConfig and the guard", len(opts))
	}
	w, err := worker.New(placeorder.PaymentService, opts...)
	if err != nil {
		t.Fatalf("the sample file with its guard: %v", err)
	}
	w.Close()
	cfg, err := config.LoadFile("../stacksaga.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.New(placeorder.PaymentService, worker.WithConfig(cfg)); err == nil {
		t.Error("the sample file without a guard is accepted")
	}
}
