package worker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	sagaconfig "github.com/stacksaga-go/stacksaga/config"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// loadDoc loads a stacksaga document with the instance and brokers'
// variables unset.
func loadDoc(t *testing.T, doc string) sagaconfig.Config {
	t.Helper()
	for _, v := range []string{kafkaflags.EnvBrokers, kafkaflags.DeprecatedEnvBrokers, sagaconfig.EnvRegion, sagaconfig.EnvCluster, sagaconfig.EnvService, sagaconfig.EnvRegionCode, sagaconfig.EnvStrictNames} {
		t.Setenv(v, "")
	}
	c, err := sagaconfig.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type nopGuard struct{}

func (nopGuard) Execute(ctx context.Context, _ *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	return run(ctx), nil
}

// TestWorkerWithConfigAppliesEverySection: the file's region, cluster,
// brokers and the service's group entry reach the worker; the
// orchestrator's sections (recovery, instance.service) are not its to
// refuse.
func TestWorkerWithConfigAppliesEverySection(t *testing.T) {
	cfg := loadDoc(t, `stacksaga:
  instance: { region: eu, cluster: shop, service: order-service }
  kafka:
    brokers: ["127.0.0.1:19092"]
    worker: { services: { payment-service: { session-timeout: 25s }, stock-service: { group-type: SHARE } } }
  cassandra:
    recovery: { window-interval: 10s }
`)
	w, err := worker.New("payment-service", worker.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	brokers, session := worker.FileApplied(w)
	if w.Region() != "eu" || w.Cluster() != "shop" || !slices.Equal(brokers, []string{"127.0.0.1:19092"}) || session != 25*time.Second || w.GroupType() != topics.GroupConsumer {
		t.Errorf("applied region %q cluster %q brokers %v session %v group %s", w.Region(), w.Cluster(), brokers, session, w.GroupType())
	}
	s, err := worker.New("stock-service", worker.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.GroupType() != topics.GroupShare {
		t.Errorf("stock-service group %s, want SHARE (its entry)", s.GroupType())
	}
}

// TestWorkerWithConfigRefusesUnappliedSections: write protection or a
// store configured but no guard is refused, naming WithGuard.
func TestWorkerWithConfigRefusesUnappliedSections(t *testing.T) {
	for _, doc := range []string{
		"stacksaga:\n  cassandra: { write-protection: { default-mode: STRICT } }\n",
		"stacksaga:\n  cassandra: { keyspace: shop }\n",
	} {
		cfg := loadDoc(t, doc)
		_, err := worker.New("payment-service", worker.WithConfig(cfg))
		if !errors.Is(err, worker.ErrConfigNotApplied) || !strings.Contains(err.Error(), "WithGuard") {
			t.Errorf("%q: err = %v, want ErrConfigNotApplied naming WithGuard", doc, err)
		}
		w, err := worker.New("payment-service", worker.WithConfig(cfg), worker.WithGuard(nopGuard{}))
		if err != nil {
			t.Errorf("%q with a guard: %v", doc, err)
			continue
		}
		w.Close()
	}
}

// Under stacksaga.instance.strict-names, a configured name the worker does
// not register refuses New: a worker group entry that matches no service, a
// write-protection domain that matches none of WithDomains, and a
// write-protection domains section without WithDomains (the worker could
// not judge it); matching names start (issue 48 item 2; config.CheckNames
// holds the rule and its table).
func TestWorkerWithConfigRefusesUnmatchedNameUnderStrictNames(t *testing.T) {
	wp := "  cassandra:\n    write-protection:\n      domains: { shop-order: { mode: STRICT } }\n"
	for _, tc := range []struct {
		name, doc string
		domains   []string
		want      string // "": New succeeds
	}{
		{"worker group entry", "  kafka:\n    worker:\n      services: { payment-servce: { group-type: share } }\n", nil, "payment-servce"},
		{"write-protection domain", wp, []string{"shop-ordr"}, "write-protection.domains.shop-order"},
		{"write-protection without WithDomains", wp, nil, "worker.WithDomains"},
		{"matching names", wp + "  kafka:\n    worker:\n      services: { payment-service: { group-type: share } }\n", []string{"shop-order"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := loadDoc(t, "stacksaga:\n  instance: { strict-names: true }\n"+tc.doc)
			opts := []worker.Option{worker.WithConfig(cfg), worker.WithGuard(nopGuard{})}
			if tc.domains != nil {
				opts = append(opts, worker.WithDomains(tc.domains...))
			}
			w, err := worker.New("payment-service", opts...)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				w.Close()
				return
			}
			if !errors.Is(err, sagaconfig.ErrUnmatchedName) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrUnmatchedName naming %s", err, tc.want)
			}
		})
	}
}
