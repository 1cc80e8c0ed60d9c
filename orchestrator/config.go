package orchestrator

import (
	"errors"
	"fmt"
	"os"

	sagaconfig "github.com/stacksaga-go/stacksaga/config"
	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
)

// ErrConfigNotApplied means the configuration given to WithConfig holds a
// section the orchestrator would leave unapplied (the error names it and
// the option that applies it).
var ErrConfigNotApplied = errors.New("orchestrator: configuration section applied nowhere")

// WithConfig applies the whole stacksaga document cfg (config.LoadFile):
// the instance's region, region code and cluster; the brokers and their
// TLS and SASL (stacksaga.kafka.*); the recovery configuration; and the
// domain's group type, share settings and session timeout
// (stacksaga.kafka.orchestrator.domains). Options given after it override
// what it set. New fails, wrapping ErrConfigNotApplied, when the file
// names another orchestrating service (stacksaga.instance.service) or
// holds a store section (stacksaga.cassandra) but no WithStore is given:
// the orchestrator would otherwise keep its sagas in memory. The
// write-protection section and the workers' group entries are the
// workers' (worker.WithConfig).
func WithConfig(cfg sagaconfig.Config) Option {
	return optFunc(func(c *config) {
		c.file = &cfg
		c.region, c.cluster = cfg.Instance.Region, cfg.Instance.Cluster
		if cfg.Instance.RegionCode != 0 {
			c.regions = RegionMap{cfg.Instance.Region: cfg.Instance.RegionCode}
		}
		c.brokers = append(c.brokers, cfg.Kafka.Brokers...)
		opts, err := cfg.Kafka.Client.Opts(os.LookupEnv)
		if err != nil {
			c.fileErr = fmt.Errorf("orchestrator: WithConfig: stacksaga.kafka: %w", err)
		}
		c.kafkaOpts = append(c.kafkaOpts, opts...)
		c.recovery = cfg.Recovery
	})
}

// applyFile applies the file's entry of the domain to what no option set,
// and reports the file's sections the orchestrator leaves unapplied.
func (c *config) applyFile(service, domain string) []error {
	f := c.file
	if f == nil {
		return nil
	}
	var errs []error
	if c.fileErr != nil {
		errs = append(errs, c.fileErr)
	}
	e := f.Groups.Domain(domain)
	if c.groupType == "" {
		c.groupType = e.Type
	}
	if c.share == (topics.ShareSettings{}) {
		c.share = e.Share
	}
	if c.membership.SessionTimeout == 0 && e.Type != topics.GroupShare {
		c.membership.SessionTimeout = e.SessionTimeout
	}
	if s := f.Instance.Service; s != "" && s != service {
		errs = append(errs, fmt.Errorf("%w: stacksaga.instance.service is %q but this orchestrator is %q (sagactl would look for its sagas under %q)", ErrConfigNotApplied, s, service, s))
	}
	if err := f.CheckNames(c.logger, sagaconfig.Names{Domains: []string{domain}}); err != nil {
		errs = append(errs, err)
	}
	if f.Has(sagaconfig.SectionCassandra) && !c.storeSet {
		errs = append(errs, fmt.Errorf("%w: %s: the file configures a store but no WithStore is given (pass orchestrator.WithStore(store) with store from cassandra.New(ctx, cfg.Cassandra))", ErrConfigNotApplied, sagaconfig.SectionCassandra))
	}
	return errs
}

// setStore sets the store given by an option.
func (c *config) setStore(s eventstore.Store) { c.store, c.storeSet = s, true }
