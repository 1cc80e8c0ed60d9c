package worker

import (
	"errors"
	"fmt"
	"os"

	sagaconfig "github.com/stacksaga-go/stacksaga/config"
	"github.com/stacksaga-go/stacksaga/topics"
)

// ErrConfigNotApplied means the configuration given to WithConfig holds a
// section the worker would leave unapplied (the error names it and the
// option that applies it).
var ErrConfigNotApplied = errors.New("worker: configuration section applied nowhere")

// WithConfig applies the whole stacksaga document cfg (config.LoadFile):
// the instance's region and cluster; the brokers and their TLS and SASL
// (stacksaga.kafka.*); and the service's group type, share settings and
// session timeout (stacksaga.kafka.worker.services). Options given after
// it override what it set. New fails, wrapping ErrConfigNotApplied, when
// the file holds a write-protection or store section
// (stacksaga.cassandra.write-protection, stacksaga.cassandra) but no
// WithGuard is given: the worker would otherwise run its steps
// unprotected. The recovery section, stacksaga.instance.service (the
// orchestrating service) and the orchestrators' group entries are the
// orchestrator's (orchestrator.WithConfig).
func WithConfig(cfg sagaconfig.Config) Option {
	return option(func(c *config) {
		c.file = &cfg
		c.region, c.cluster = cfg.Instance.Region, cfg.Instance.Cluster
		c.brokers = append(c.brokers, cfg.Kafka.Brokers...)
		opts, err := cfg.Kafka.Client.Opts(os.LookupEnv)
		if err != nil {
			c.fileErr = fmt.Errorf("worker: WithConfig: stacksaga.kafka: %w", err)
		}
		c.kopts = append(c.kopts, opts...)
	})
}

// applyFile applies the file's entry of the service to what no option
// set, and reports the file's sections the worker leaves unapplied.
func (c *config) applyFile(service string) []error {
	f := c.file
	if f == nil {
		return nil
	}
	var errs []error
	if c.fileErr != nil {
		errs = append(errs, c.fileErr)
	}
	e := f.Groups.Service(service)
	if c.groupType == "" {
		c.groupType = e.Type
	}
	if c.share == (topics.ShareSettings{}) {
		c.share = e.Share
	}
	if c.membership.SessionTimeout == 0 && e.Type != topics.GroupShare {
		c.membership.SessionTimeout = e.SessionTimeout
	}
	names := sagaconfig.Names{Services: []string{service}, Domains: c.domains}
	if err := f.CheckNames(c.logger, names); err != nil {
		errs = append(errs, err)
	}
	if f.Instance.StrictNames && c.domains == nil && len(f.WriteProtection.Domains) > 0 {
		errs = append(errs, fmt.Errorf("%w: stacksaga.cassandra.write-protection.domains: a worker judges these names only against the domains it serves: name them with worker.WithDomains (stacksaga.instance.strict-names)", sagaconfig.ErrUnmatchedName))
	}
	for _, s := range []sagaconfig.Section{sagaconfig.SectionWriteProtection, sagaconfig.SectionCassandra} {
		if f.Has(s) && !c.guardSet {
			errs = append(errs, fmt.Errorf("%w: %s: the file configures write protection but no WithGuard is given (pass worker.WithGuard(guard) with guard from writeprotect.New(store, cfg.WriteProtection))", ErrConfigNotApplied, s))
			break
		}
	}
	return errs
}
