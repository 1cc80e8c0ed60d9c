package config

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
)

// ErrUnmatchedName is wrapped by CheckNames' error: under
// stacksaga.instance.strict-names, a configured name matches nothing the
// component registers.
var ErrUnmatchedName = errors.New("config: a configured name matches nothing registered")

// Names are the names a component registers at start: an orchestrator its
// domain, a worker its service. A nil list is not judged: a worker, which
// registers no domain, does not judge the file's domain names.
type Names struct {
	Domains  []string
	Services []string
}

// CheckNames compares the names the file configures with reg: the
// write-protection domains (stacksaga.cassandra.write-protection.domains)
// and the orchestrators' group entries (stacksaga.kafka.orchestrator.domains)
// with reg.Domains, the workers' group entries
// (stacksaga.kafka.worker.services) with reg.Services; a group entry named
// default matches every name. A configured name that matches nothing is a
// typo that would leave the real name on the defaults (STRICT silently
// RELAXED_WITH_DEDUP): it is logged as a warning naming its key and the
// registered names, or, when Instance.StrictNames is set, returned as an
// error wrapping ErrUnmatchedName. The mode and lease each registered
// domain runs at are logged at info level. log nil means slog.Default().
func (c Config) CheckNames(log *slog.Logger, reg Names) error {
	if log == nil {
		log = slog.Default()
	}
	var errs []error
	check := func(prefix string, configured []string, registered []string) {
		if registered == nil {
			return
		}
		for _, name := range configured {
			if name == "default" && prefix != "stacksaga.cassandra.write-protection.domains" || slices.Contains(registered, name) {
				continue
			}
			key := prefix + "." + name
			if c.Instance.StrictNames {
				errs = append(errs, fmt.Errorf("%w: %s: registered: %s (stacksaga.instance.strict-names)", ErrUnmatchedName, key, strings.Join(registered, ",")))
				continue
			}
			log.Warn("config: a configured name matches nothing registered: a typo leaves the real name on the defaults",
				"key", key, "registered", strings.Join(registered, ","))
		}
	}
	check("stacksaga.cassandra.write-protection.domains", slices.Sorted(maps.Keys(c.WriteProtection.Domains)), reg.Domains)
	check("stacksaga.kafka.orchestrator.domains", slices.Sorted(maps.Keys(c.Groups.Domains)), reg.Domains)
	check("stacksaga.kafka.worker.services", slices.Sorted(maps.Keys(c.Groups.Services)), reg.Services)
	for _, d := range reg.Domains {
		r := c.WriteProtection.Resolve(d)
		_, own := c.WriteProtection.Domains[d]
		log.Info("config: write protection", "domain", d, "mode", string(r.Mode), "lease", r.Lease, "own-entry", own)
	}
	return errors.Join(errs...)
}
