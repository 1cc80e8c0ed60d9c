package writeprotect

import (
	"maps"
	"slices"
	"strings"
	"sync"
)

// maxDomainNotes bounds the domains a Guard remembers having noted: a
// command's domain comes off the wire, so the set must not grow without
// end. Past it, a new domain is resolved without a note.
const maxDomainNotes = 1024

// domainNotes remembers which domains a Guard has seen a command of.
type domainNotes struct {
	mu   sync.Mutex
	seen map[string]bool
}

// first reports whether domain is seen for the first time, and which of
// configured were not seen yet (sorted).
func (n *domainNotes) first(domain string, configured map[string]DomainConfig) (bool, []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen[domain] || len(n.seen) >= maxDomainNotes {
		return false, nil
	}
	if n.seen == nil {
		n.seen = make(map[string]bool)
	}
	n.seen[domain] = true
	var unseen []string
	for _, d := range slices.Sorted(maps.Keys(configured)) {
		if !n.seen[d] {
			unseen = append(unseen, d)
		}
	}
	return true, unseen
}

// policy resolves the mode and lease of domain; every command goes
// through it. The first command of each domain logs the mode it runs at
// and, when the domain has no entry of its own while configured entries
// have matched no command yet, warns naming them: a misspelt domain name
// (shop-ordr for shop-order) would otherwise leave the real domain on the
// default mode without a word (STRICT silently RELAXED_WITH_DEDUP). The
// start-up check of the same rule is config.CheckNames (worker.WithDomains).
func (g *Guard) policy(domain string) DomainConfig {
	d := g.cfg.Resolve(domain)
	first, unseen := g.domains.first(domain, g.cfg.Domains)
	if !first {
		return d
	}
	_, own := g.cfg.Domains[domain]
	g.log.Info("writeprotect: first command of a domain", "domain", domain, "mode", string(d.Mode), "lease", d.Lease, "own-entry", own)
	if !own && len(unseen) > 0 {
		g.log.Warn("writeprotect: a domain without an entry of its own runs at the default mode while configured domains have matched no command: a misspelt name?",
			"domain", domain, "mode", string(d.Mode), "key", "stacksaga.cassandra.write-protection.domains", "unmatched", strings.Join(unseen, ","))
	}
	return d
}
