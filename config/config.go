// Package config reads the whole stacksaga YAML document of a service in
// one call: the instance, the Cassandra store, write protection, recovery,
// the Kafka brokers (with TLS and SASL) and the Kafka group types, each
// section loaded, checked and given its environment overrides by the
// package that owns it (cassandra.LoadConfig, writeprotect.LoadConfig,
// recovery.LoadConfig, topics.LoadGroupConfig), so the file is read once
// and every problem of every section is reported together. The ring
// coordinator's service reads its own keys (ringcoordinator.LoadConfigFile).
//
// orchestrator.WithConfig and worker.WithConfig apply the whole Config: the
// instance's region and cluster, the brokers and their TLS and SASL, the
// group type and session timeout of the domain or service, the recovery
// configuration; the store (cassandra.New(ctx, cfg.Cassandra)) and the
// guard (writeprotect.New(store, cfg.WriteProtection)) are made by the
// service and passed beside it. A file holding a section the orchestrator
// or worker would leave unapplied (a store section without WithStore, a
// write-protection section without a guard) is refused. Every key is
// listed, with its type, default and environment variable, in the
// repository's docs/configuration.md.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Instance is the stacksaga.instance section: where the service runs and
// which service it is.
type Instance struct {
	// Region and Cluster default to "default".
	Region, Cluster string
	// Service is the service's name ("" if the file names none).
	Service string
	// RegionCode is the region's 12-bit code in transaction ids
	// (region-code, 1-4095; 0: none given, which only the default region,
	// code 1, may omit).
	RegionCode uint16
	// StrictNames (strict-names) makes a configured name that matches
	// nothing registered refuse the start instead of a warning (see
	// CheckNames).
	StrictNames bool
}

// Config is the whole stacksaga document of a service. Pass it whole to
// orchestrator.WithConfig and worker.WithConfig, which apply every section
// and refuse a file holding a section they would leave unapplied.
type Config struct {
	Instance        Instance
	Cassandra       cassandra.Config
	WriteProtection writeprotect.Config
	Recovery        recovery.Config
	Groups          topics.GroupConfig
	// Kafka is the brokers and the clients' TLS and SASL
	// (stacksaga.kafka.brokers, .tls, .sasl).
	Kafka kafkaflags.Config

	present map[Section]bool
}

// Section is a part of the document that one component applies.
type Section string

// The sections Has reports.
const (
	SectionInstance           Section = "stacksaga.instance"
	SectionCassandra          Section = "stacksaga.cassandra"
	SectionWriteProtection    Section = "stacksaga.cassandra.write-protection"
	SectionRecovery           Section = "stacksaga.cassandra.recovery"
	SectionKafka              Section = "stacksaga.kafka"
	SectionOrchestratorGroups Section = "stacksaga.kafka.orchestrator"
	SectionWorkerGroups       Section = "stacksaga.kafka.worker"
)

// Has reports whether the file held the section (a Config not made by Load
// holds none).
func (c Config) Has(s Section) bool { return c.present[s] }

// presentSections names the sections the document data holds. The
// cassandra section is present when it holds a key of the store's own
// (write-protection and recovery are sections of their own; a
// transaction lifetime belongs to recovery).
func presentSections(data []byte) map[Section]bool {
	var doc struct {
		Stacksaga struct {
			Instance  map[string]any `yaml:"instance"`
			Cassandra map[string]any `yaml:"cassandra"`
			Kafka     map[string]any `yaml:"kafka"`
		} `yaml:"stacksaga"`
	}
	out := map[Section]bool{}
	if yamlconfig.Decode(data, &doc) != nil {
		return out
	}
	d := doc.Stacksaga
	out[SectionInstance] = len(d.Instance) > 0
	for k := range d.Cassandra {
		switch k {
		case "write-protection":
			out[SectionWriteProtection] = true
		case "recovery", "transaction-lifetime", "transaction":
			out[SectionRecovery] = true
		default:
			out[SectionCassandra] = true
		}
	}
	for k := range d.Kafka {
		switch k {
		case "orchestrator":
			out[SectionOrchestratorGroups] = true
		case "worker":
			out[SectionWorkerGroups] = true
		default:
			out[SectionKafka] = true
		}
	}
	return out
}

// Environment variables that override the instance keys.
const (
	EnvRegion  = "STACKSAGA_INSTANCE_REGION"
	EnvCluster = "STACKSAGA_INSTANCE_CLUSTER"
	EnvService = "STACKSAGA_INSTANCE_SERVICE"
	// EnvRegionCode overrides stacksaga.instance.region-code.
	EnvRegionCode = "STACKSAGA_INSTANCE_REGION_CODE"
	// EnvStrictNames overrides stacksaga.instance.strict-names.
	EnvStrictNames = "STACKSAGA_INSTANCE_STRICT_NAMES"
)

// ErrInvalidInstance is wrapped by the errors of the stacksaga.instance
// section.
var ErrInvalidInstance = errors.New("config: invalid instance")

// Load reads every section of the YAML document data, with the process
// environment's overrides. A key under stacksaga: that no section reads
// fails first, alone (yamlconfig.ErrUnknownKey, naming the key, its line
// and the nearest known key); otherwise the error joins the problems of
// every section, each naming its key.
func Load(data []byte) (Config, error) {
	if err := yamlconfig.CheckKnown(data); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	var c Config
	var errs []error
	var err error
	if c.Instance, err = loadInstance(data, os.LookupEnv); err != nil {
		errs = append(errs, err)
	}
	if c.Cassandra, err = cassandra.LoadConfig(data); err != nil {
		errs = append(errs, err)
	}
	if c.WriteProtection, err = writeprotect.LoadConfig(data); err != nil {
		errs = append(errs, err)
	}
	if c.Recovery, err = recovery.LoadConfig(data); err != nil {
		errs = append(errs, err)
	}
	if c.Groups, err = topics.LoadGroupConfig(data); err != nil {
		errs = append(errs, err)
	}
	if c.Kafka, err = kafkaflags.LoadConfigWithEnv(data, os.LookupEnv); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	if c.Kafka.DeprecatedEnv {
		slog.Warn("config: " + kafkaflags.DeprecationNote)
	}
	c.present = presentSections(data)
	return c, nil
}

// LoadFile is Load on the contents of the file at path.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := Load(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func loadInstance(data []byte, lookup func(string) (string, bool)) (Instance, error) {
	var doc struct {
		Stacksaga struct {
			Instance struct {
				Region     string `yaml:"region"`
				Cluster    string `yaml:"cluster"`
				Service    string `yaml:"service"`
				RegionCode string `yaml:"region-code"`
				Strict     string `yaml:"strict-names"`
			} `yaml:"instance"`
		} `yaml:"stacksaga"`
	}
	if err := yamlconfig.Decode(data, &doc); err != nil {
		return Instance{}, err
	}
	in := doc.Stacksaga.Instance
	env := yamlconfig.Env(lookup)
	pick := func(name, v, def string) string {
		if e, ok := env(name); ok {
			return e
		}
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
		return def
	}
	out := Instance{Region: pick(EnvRegion, in.Region, "default"), Cluster: pick(EnvCluster, in.Cluster, "default"), Service: pick(EnvService, in.Service, "")}
	if code := pick(EnvRegionCode, in.RegionCode, ""); code != "" {
		n, err := strconv.ParseUint(code, 10, 16)
		if err != nil || n < 1 || n > 4095 {
			return Instance{}, fmt.Errorf("%w: stacksaga.instance.region-code: %q: want an integer 1-4095", ErrInvalidInstance, code)
		}
		out.RegionCode = uint16(n)
	}
	if s := pick(EnvStrictNames, in.Strict, "false"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return Instance{}, fmt.Errorf("%w: stacksaga.instance.strict-names: %q: want true or false", ErrInvalidInstance, s)
		}
		out.StrictNames = b
	}
	return out, nil
}
