package config

import (
	"errors"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

var sample = filepath.Join("..", "examples", "stacksaga.yaml")

// TestLoadFileIsEachSection: one LoadFile of the sample gives what each
// package's own loader gives for its section.
func TestLoadFileIsEachSection(t *testing.T) {
	for _, v := range []string{EnvRegion, EnvCluster, EnvService, EnvRegionCode, kafkaflags.EnvBrokers, kafkaflags.DeprecatedEnvBrokers} {
		t.Setenv(v, "")
	}
	c, err := LoadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	if c.Instance != (Instance{Region: "default", Cluster: "default", Service: "order-service"}) {
		t.Errorf("instance %+v", c.Instance)
	}
	cc, err := cassandra.LoadConfigFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	wp, err := writeprotect.LoadConfigFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := recovery.LoadConfigFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Cassandra, cc) || !reflect.DeepEqual(c.WriteProtection, wp) || !reflect.DeepEqual(c.Recovery, rc) {
		t.Errorf("sections differ from their loaders':\n%+v\n%+v\n%+v", c.Cassandra, c.WriteProtection, c.Recovery)
	}
	if m := c.WriteProtection.Resolve("checkout").Mode; m != writeprotect.Strict {
		t.Errorf("checkout mode %s, want STRICT (the quickstart's)", m)
	}
}

// TestLoadReportsEverySection: problems of several sections come
// together, each naming its key.
func TestLoadReportsEverySection(t *testing.T) {
	doc := `stacksaga:
  cassandra:
    read-consistency-level: ONE
    write-protection: { default-mode: BOGUS }
    recovery: { bucket-size: 200000 }
  kafka:
    worker:
      services: { payment-service: { group-type: QUEUE } }
`
	_, err := Load([]byte(doc))
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{"read-consistency-level", "default-mode", "bucket-size", "group-type"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not name %s:\n%s", want, msg)
		}
	}
	for _, sentinel := range []error{cassandra.ErrInvalidConfig, writeprotect.ErrInvalidConfig, recovery.ErrInvalidConfig, topics.ErrInvalidGroupConfig} {
		if !errors.Is(err, sentinel) {
			t.Errorf("error is not %v:\n%s", sentinel, msg)
		}
	}
}

// TestLoadUnknownKeyOnce: a misspelt key is refused once, naming it.
func TestLoadUnknownKeyOnce(t *testing.T) {
	_, err := Load([]byte("stacksaga:\n  instanse: { region: eu }\n"))
	if !errors.Is(err, yamlconfig.ErrUnknownKey) {
		t.Fatalf("err = %v, want ErrUnknownKey", err)
	}
	if n := strings.Count(err.Error(), "stacksaga.instanse (line 2)"); n != 1 || !strings.Contains(err.Error(), `did you mean "instance"`) {
		t.Errorf("the unknown key is reported %d times:\n%v", n, err)
	}
}

// TestInstanceEnvironment: STACKSAGA_INSTANCE_* override the file.
func TestInstanceEnvironment(t *testing.T) {
	t.Setenv(EnvService, "billing-service")
	t.Setenv(EnvRegion, "")
	t.Setenv(EnvCluster, "blue")
	c, err := LoadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	if c.Instance != (Instance{Region: "default", Cluster: "blue", Service: "billing-service"}) {
		t.Errorf("instance %+v", c.Instance)
	}
}

// TestKafkaSection: stacksaga.kafka.brokers and its TLS/SASL keys are read;
// STACKSAGA_KAFKA_BROKERS overrides them, KAFKA_BROKERS still does when it
// is unset, with a deprecation warning; a bad setting names its key.
func TestKafkaSection(t *testing.T) {
	for _, v := range []string{EnvRegion, EnvCluster, EnvService, EnvRegionCode, kafkaflags.EnvBrokers, kafkaflags.DeprecatedEnvBrokers} {
		t.Setenv(v, "")
	}
	doc := []byte("stacksaga:\n  kafka:\n    brokers: [\"127.0.0.1:19092\"]\n    tls: { enabled: true }\n")
	c, err := Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Kafka.Brokers, []string{"127.0.0.1:19092"}) || !c.Kafka.Client.TLSOn() || !c.Has(SectionKafka) || c.Has(SectionCassandra) {
		t.Errorf("kafka %+v, sections %v", c.Kafka, c.present)
	}
	var logs testenv.LockedBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	t.Setenv(kafkaflags.DeprecatedEnvBrokers, "127.0.0.1:29092")
	if c, err = Load(doc); err != nil || !slices.Equal(c.Kafka.Brokers, []string{"127.0.0.1:29092"}) || !strings.Contains(logs.String(), "KAFKA_BROKERS is deprecated") {
		t.Errorf("KAFKA_BROKERS: %v %v, log %q", err, c.Kafka.Brokers, logs.String())
	}
	t.Setenv(kafkaflags.EnvBrokers, "127.0.0.1:39092,127.0.0.1:39093")
	if c, err = Load(doc); err != nil || !slices.Equal(c.Kafka.Brokers, []string{"127.0.0.1:39092", "127.0.0.1:39093"}) {
		t.Errorf("STACKSAGA_KAFKA_BROKERS: %v %v", err, c.Kafka.Brokers)
	}
	_, err = Load([]byte("stacksaga:\n  kafka:\n    sasl: { mechanism: md5, user: shop, password-env: NO_SUCH_VARIABLE_X }\n"))
	if !errors.Is(err, kafkaflags.ErrInvalidConfig) || !strings.Contains(err.Error(), "stacksaga.kafka.sasl.mechanism") || !strings.Contains(err.Error(), "stacksaga.kafka.sasl.user") {
		t.Errorf("bad SASL: %v", err)
	}
	_, err = Load([]byte("stacksaga:\n  instance: { region: eu, region-code: 5000 }\n"))
	if !errors.Is(err, ErrInvalidInstance) {
		t.Errorf("region-code 5000: %v", err)
	}
}
