package orchestrator_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	sagaconfig "github.com/stacksaga-go/stacksaga/config"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// loadDoc loads a stacksaga document with the brokers' variables unset.
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

// TestWithConfigAppliesEverySection: one WithConfig gives the orchestrator
// the file's region (with its code), cluster, brokers, recovery window and
// the domain's group entry; an option after it overrides the file.
func TestWithConfigAppliesEverySection(t *testing.T) {
	cfg := loadDoc(t, `stacksaga:
  instance: { region: eu, region-code: 7, cluster: shop, service: order-service }
  kafka:
    brokers: ["127.0.0.1:19092", "127.0.0.1:19093"]
    orchestrator:
      domains: { test-order: { group-type: CONSUMER, session-timeout: 20s } }
  cassandra:
    recovery: { window-interval: 10s }
`)
	o, err := orchestrator.New("order-service", testDomain(), orchestrator.WithConfig(cfg), orchestrator.WithStore(memory.New()))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if s := o.Scope(); s.Region != "eu" || s.Cluster != "shop" || s.Service != "order-service" {
		t.Errorf("scope %+v, want eu/shop/order-service", s)
	}
	brokers, session, code, window := orchestrator.FileApplied(o)
	if !slices.Equal(brokers, []string{"127.0.0.1:19092", "127.0.0.1:19093"}) || session != 20*time.Second || code != 7 || window != 10*time.Second {
		t.Errorf("applied brokers %v, session %v, region code %d, window %v", brokers, session, code, window)
	}
	o2, err := orchestrator.New("order-service", testDomain(), orchestrator.WithConfig(cfg), orchestrator.WithStore(memory.New()),
		orchestrator.WithCluster("blue"), orchestrator.WithSessionTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer o2.Close()
	if _, session, _, _ := orchestrator.FileApplied(o2); o2.Scope().Cluster != "blue" || session != 30*time.Second || o2.GroupType() != topics.GroupConsumer {
		t.Errorf("options after WithConfig do not override it: %+v %v %s", o2.Scope(), session, o2.GroupType())
	}
}

// TestWithConfigRefusesUnappliedSections: a store section without
// WithStore, or another orchestrating service, is refused, naming what to
// pass.
func TestWithConfigRefusesUnappliedSections(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		opts      []orchestrator.Option
		want      string
	}{
		{"store section without WithStore", "stacksaga:\n  cassandra: { keyspace: shop }\n", nil, "WithStore"},
		{"another service", "stacksaga:\n  instance: { service: billing-service }\n", []orchestrator.Option{orchestrator.WithStore(memory.New())}, `"billing-service"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := loadDoc(t, tc.doc)
			_, err := orchestrator.New("order-service", testDomain(), append([]orchestrator.Option{orchestrator.WithConfig(cfg)}, tc.opts...)...)
			if !errors.Is(err, orchestrator.ErrConfigNotApplied) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrConfigNotApplied naming %s", err, tc.want)
			}
		})
	}
	cfg := loadDoc(t, "stacksaga:\n  cassandra: { keyspace: shop, write-protection: { default-mode: STRICT } }\n")
	o, err := orchestrator.New("order-service", testDomain(), orchestrator.WithConfig(cfg), orchestrator.WithStore(memory.New()))
	if err != nil {
		t.Fatalf("a file with a store and the workers' write protection: %v", err)
	}
	o.Close()
}

// A write-protection domain name that matches no domain of the
// orchestrator refuses New under stacksaga.instance.strict-names (issue 48
// item 2; config.CheckNames holds the rule and its table).
func TestWithConfigRefusesUnmatchedNameUnderStrictNames(t *testing.T) {
	cfg := loadDoc(t, "stacksaga:\n  instance: { strict-names: true }\n  cassandra:\n    write-protection:\n      domains: { "+domainName+"-typo: { mode: STRICT } }\n")
	_, err := orchestrator.New("order-service", testDomain(), orchestrator.WithConfig(cfg), orchestrator.WithStore(memory.New()))
	if !errors.Is(err, sagaconfig.ErrUnmatchedName) || !strings.Contains(err.Error(), domainName+"-typo") {
		t.Fatalf("err = %v, want ErrUnmatchedName naming the typo", err)
	}
}
