// Package config reads the whole stacksaga YAML document of a service in
// one call: the instance, the Cassandra store, write protection, recovery
// and the Kafka group types, each section loaded, checked and given its
// environment overrides by the package that owns it (cassandra.LoadConfig,
// writeprotect.LoadConfig, recovery.LoadConfig, topics.LoadGroupConfig), so
// the file is read once and every problem of every section is reported
// together. The ring coordinator's service reads its own keys
// (ringcoordinator.LoadConfigFile).
//
//	cfg, err := config.LoadFile("stacksaga.yaml")
//	store, err := cassandra.New(ctx, cfg.Cassandra)
//	guard, err := writeprotect.New(store, cfg.WriteProtection)
//	o, err := orchestrator.New("order-service", domain, orchestrator.WithStore(store), orchestrator.WithRecovery(cfg.Recovery))
//
// Every key is listed, with its type, default and environment variable, in
// the repository's docs/configuration.md.
package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
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
}

// Config is the whole stacksaga document of a service.
type Config struct {
	Instance        Instance
	Cassandra       cassandra.Config
	WriteProtection writeprotect.Config
	Recovery        recovery.Config
	Groups          topics.GroupConfig
}

// Environment variables that override the instance keys.
const (
	EnvRegion  = "STACKSAGA_INSTANCE_REGION"
	EnvCluster = "STACKSAGA_INSTANCE_CLUSTER"
	EnvService = "STACKSAGA_INSTANCE_SERVICE"
)

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
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
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
				Region  string `yaml:"region"`
				Cluster string `yaml:"cluster"`
				Service string `yaml:"service"`
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
	return Instance{Region: pick(EnvRegion, in.Region, "default"), Cluster: pick(EnvCluster, in.Cluster, "default"), Service: pick(EnvService, in.Service, "")}, nil
}
