package writeprotect

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// Mode is a write-protection mode (the seed's ConsistencyMode).
type Mode string

// Modes.
const (
	// Strict takes an exclusive lease with a conditional insert (a Cassandra
	// LWT) before running a step, so a step runs once even when the same
	// command reaches two worker instances at the same time. The LWT's
	// serial consistency bounds that: with LOCAL_SERIAL (the store's
	// default) it holds among the workers of one data centre; workers of a
	// STRICT domain active in several data centres need SERIAL (see the
	// package documentation).
	Strict Mode = "STRICT"
	// RelaxedWithDedup reads the step's marker and skips the step if it was
	// committed; otherwise it runs the step and writes the marker with one
	// plain write. It costs no LWT and stops sequential duplicates, not
	// concurrent ones.
	RelaxedWithDedup Mode = "RELAXED_WITH_DEDUP"
)

// Defaults (seed 000's property table).
const (
	// DefaultMode applies to domains without a mode of their own.
	DefaultMode = RelaxedWithDedup
	// DefaultLease is the STRICT lease of domains without one of their own.
	DefaultLease = 5 * time.Second
)

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("writeprotect: invalid configuration")

// ParseMode parses a mode name: STRICT or RELAXED_WITH_DEDUP, in any case,
// with '-' accepted for '_'.
func ParseMode(s string) (Mode, error) {
	m := Mode(strings.ReplaceAll(strings.ToUpper(strings.TrimSpace(s)), "-", "_"))
	if !m.valid() {
		return "", fmt.Errorf("writeprotect: unknown mode %q (want %s or %s)", s, Strict, RelaxedWithDedup)
	}
	return m, nil
}

func (m Mode) valid() bool { return m == Strict || m == RelaxedWithDedup }

// String returns the mode's configuration name.
func (m Mode) String() string { return string(m) }

// DomainConfig overrides the defaults for one saga domain. Zero fields
// take Config's defaults.
type DomainConfig struct {
	// Mode of the domain; "" means Config.DefaultMode.
	Mode Mode
	// Lease is the STRICT lease of the domain (lease-duration); 0 means
	// Config.DefaultLease. Bounds as for Config.DefaultLease.
	Lease time.Duration
}

// Config is the write-protection configuration: the YAML keys under
// stacksaga.cassandra.write-protection. Zero fields take the defaults
// named in their comments.
type Config struct {
	// DefaultMode applies to domains not in Domains (default-mode).
	// "" means RelaxedWithDedup.
	DefaultMode Mode
	// DefaultLease is the STRICT lease (default-lease-duration): how long an
	// execution holds its step before another instance may take it over.
	// Leases are whole seconds (Cassandra TTLs); a fraction is rounded up.
	// 0 means 5s. It must lie between MinLease (2s) and MaxLease (5m); the
	// handler gets less than the lease (see the package documentation).
	DefaultLease time.Duration
	// Domains overrides the defaults per saga domain (the command's
	// topics.Envelope.Domain), keyed by domain name (domains.<name>).
	Domains map[string]DomainConfig
	// MarkerRetention (marker-retention) is how long a committed marker
	// outlives its step: long enough that a late duplicate, or a step
	// re-sent by recovery, still finds it after the saga ended. It must be
	// at least TransactionLifetime, and end (from the clock at start) by
	// eventstore.MaxMarkerExpiry (2038-01-19T03:14:06Z), the latest expiry
	// Cassandra stores. 0 means DefaultMarkerRetention (48h); a negative
	// value keeps markers until the orchestrator deletes them
	// (orchestrator.WithMarkerCleanup, which then needs the guard's
	// WithTerminalFence).
	MarkerRetention time.Duration
	// TransactionLifetime is the transaction lifetime of the sagas whose
	// steps the guard protects (stacksaga.cassandra.transaction-lifetime,
	// the key the orchestrator's recovery.Config.TransactionLifetime is
	// read from): recovery re-sends a step within it, so a marker must not
	// expire sooner. 0 means DefaultTransactionLifetime (24h).
	TransactionLifetime time.Duration
}

// Marker retention (Config.MarkerRetention).
const (
	// DefaultMarkerRetention is the default Config.MarkerRetention: twice
	// the default transaction lifetime.
	DefaultMarkerRetention = 48 * time.Hour
	// MinMarkerRetention is the shortest retention accepted: a marker must
	// outlive the saga it protects.
	MinMarkerRetention = time.Hour
	// MaxMarkerRetention is the longest retention accepted: Cassandra's
	// longest TTL (20 years).
	MaxMarkerRetention = 630720000 * time.Second
	// DefaultTransactionLifetime is the default Config.TransactionLifetime,
	// recovery.DefaultTransactionLifetime.
	DefaultTransactionLifetime = 24 * time.Hour
)

// lifetimeKey is the full key of Config.TransactionLifetime, outside the
// write-protection section (package recovery reads it too).
const lifetimeKey = "stacksaga.cassandra.transaction-lifetime"

// keyPrefix is the prefix of every configuration key.
const keyPrefix = "stacksaga.cassandra.write-protection."

// DefaultConfig returns the defaults: RELAXED_WITH_DEDUP with a 5s lease,
// no domain overrides.
func DefaultConfig() Config {
	return Config{DefaultMode: DefaultMode, DefaultLease: DefaultLease, MarkerRetention: DefaultMarkerRetention, TransactionLifetime: DefaultTransactionLifetime}
}

// withDefaults fills the zero defaults.
func (c Config) withDefaults() Config {
	if c.DefaultMode == "" {
		c.DefaultMode = DefaultMode
	}
	if c.DefaultLease == 0 {
		c.DefaultLease = DefaultLease
	}
	if c.MarkerRetention == 0 {
		c.MarkerRetention = DefaultMarkerRetention
	}
	if c.TransactionLifetime == 0 {
		c.TransactionLifetime = DefaultTransactionLifetime
	}
	return c
}

// retention is the TTL of committed markers (0: permanent).
func (c Config) retention() time.Duration {
	c = c.withDefaults()
	return max(c.MarkerRetention, 0)
}

// Resolve returns the effective mode and lease of domain.
func (c Config) Resolve(domain string) DomainConfig {
	c = c.withDefaults()
	d := c.Domains[domain]
	if d.Mode == "" {
		d.Mode = c.DefaultMode
	}
	if d.Lease == 0 {
		d.Lease = c.DefaultLease
	}
	return d
}

// Validate reports every problem of c at once (errors.Join), each naming
// its full key, sorted by key; the result wraps ErrInvalidConfig. Leases
// (whatever the mode) must lie between MinLease and MaxLease once rounded
// up to whole seconds; 0 means the default. A positive MarkerRetention
// must be at least TransactionLifetime and, counted from time.Now, end by
// eventstore.MaxMarkerExpiry.
func (c Config) Validate() error { return c.validate(DefaultClockSkew, time.Now()) }

// validate is Validate for a guard whose clock-skew margin is skew and
// whose clock reads now: the shortest lease it accepts is
// minLeaseFor(skew), the longest retention ends by
// eventstore.MaxMarkerExpiry counted from now.
func (c Config) validate(skew time.Duration, now time.Time) error {
	p := yamlconfig.Problems{Prefix: keyPrefix}
	minLease := minLeaseFor(skew)
	lease := func(key string, d time.Duration) {
		switch {
		case d < 0:
			p.Add(key, "must be positive, got %v", d)
		case d == 0:
		case ceilSeconds(d) < minLease:
			p.Add(key, "must be at least %v, got %v: a lease loses up to a second to Cassandra's whole-second TTLs, "+
				"%v is kept for clock skew and some time for the commit, which leaves a shorter one no time to run the step", minLease, d, skew)
		case ceilSeconds(d) > MaxLease:
			p.Add(key, "must be at most %v, got %v: a duplicate would wait that long for it (and a crashed execution's lease hold its saga as long)", MaxLease, d)
		}
	}
	if c.DefaultMode != "" && !c.DefaultMode.valid() {
		p.Add("default-mode", "unknown mode %q (want %s or %s)", string(c.DefaultMode), Strict, RelaxedWithDedup)
	}
	lease("default-lease-duration", c.DefaultLease)
	lifetime := c.TransactionLifetime
	if lifetime == 0 {
		lifetime = DefaultTransactionLifetime
	}
	if lifetime < 0 {
		p.Append(fmt.Errorf("%s: must be positive, got %v", lifetimeKey, lifetime))
	}
	switch r := c.MarkerRetention; {
	case r > 0 && r < MinMarkerRetention:
		p.Add("marker-retention", "must be at least %v (longer than the transaction lifetime), or negative to keep markers until the orchestrator deletes them, got %v", MinMarkerRetention, r)
	case r > MaxMarkerRetention:
		p.Add("marker-retention", "must be at most %v (Cassandra's longest TTL), got %v", MaxMarkerRetention, r)
	case r > 0 && r < lifetime:
		p.Add("marker-retention", "must be at least %s (%v), got %v: recovery re-sends a step while its saga lives, "+
			"and a step re-sent after its marker expired runs again", lifetimeKey, lifetime, r)
	case r > 0 && eventstore.ValidateExpiry(now, r) != nil:
		left := eventstore.MaxMarkerExpiry.Sub(now.Truncate(time.Second))
		p.Add("marker-retention", "must end by %s, the latest expiry Cassandra stores (before 5.0, and in 5.0's default "+
			"storage compatibility mode, expiry times are 32-bit seconds and every commit would be refused): "+
			"at most %v (%d days) from now (%s), got %v (%d days)", eventstore.MaxMarkerExpiry.Format(time.RFC3339),
			left, int(left/(24*time.Hour)), now.UTC().Format(time.RFC3339), r, int(r/(24*time.Hour)))
	}
	for name, d := range c.Domains {
		if strings.TrimSpace(name) == "" {
			p.Add("domains", "empty domain name")
			continue
		}
		if d.Mode != "" && !d.Mode.valid() {
			p.Add("domains."+name+".mode", "unknown mode %q (want %s or %s)", string(d.Mode), Strict, RelaxedWithDedup)
		}
		lease("domains."+name+".lease-duration", d.Lease)
	}
	return p.Err(ErrInvalidConfig)
}

// file is the YAML document; only stacksaga.cassandra.write-protection is
// read. Scalars are taken as strings so that a bad value is reported with
// its key instead of as a YAML type error.
type file struct {
	Stacksaga struct {
		Cassandra struct {
			WriteProtection rawConfig `yaml:"write-protection"`
			rawLifetime     `yaml:",inline"`
		} `yaml:"cassandra"`
	} `yaml:"stacksaga"`
}

type rawConfig struct {
	DefaultMode  *string              `yaml:"default-mode"`
	DefaultLease *string              `yaml:"default-lease-duration"`
	Retention    *string              `yaml:"marker-retention"`
	Domains      map[string]rawDomain `yaml:"domains"`
}

// rawLifetime holds the transaction lifetime keys (recovery's):
// stacksaga.cassandra.transaction-lifetime, also accepted as
// stacksaga.cassandra.transaction.lifetime.
type rawLifetime struct {
	Lifetime    *string `yaml:"transaction-lifetime"`
	Transaction struct {
		Lifetime *string `yaml:"lifetime"`
	} `yaml:"transaction"`
}

type rawDomain struct {
	Mode  *string `yaml:"mode"`
	Lease *string `yaml:"lease-duration"`
}

// LoadConfig reads the stacksaga.cassandra.write-protection section of a
// YAML document and the transaction lifetime
// (stacksaga.cassandra.transaction-lifetime, or transaction.lifetime),
// applies the environment overrides (see ApplyEnv) from the process
// environment, fills defaults and validates. Other keys are ignored. A key set to null takes its default. Durations are Go durations
// ("5s", "1m30s") or ISO-8601 ("PT5S"); a bare number is refused (its unit
// would be ambiguous). A lease outside [MinLease, MaxLease] is refused,
// naming its key and the bound.
func LoadConfig(data []byte) (Config, error) {
	return LoadConfigWithEnv(data, os.LookupEnv)
}

// LoadConfigFile is LoadConfig on the contents of the file at path.
func LoadConfigFile(path string) (Config, error) {
	return yamlconfig.LoadFile("writeprotect", path, LoadConfig)
}

// LoadConfigWithEnv is LoadConfig with the environment read through lookup
// (nil: no environment overrides).
func LoadConfigWithEnv(data []byte, lookup func(string) (string, bool)) (Config, error) {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	var f file
	if err := yamlconfig.Decode(data, &f); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	raw := f.Stacksaga.Cassandra.WriteProtection
	c := DefaultConfig()
	p := yamlconfig.Problems{Prefix: keyPrefix}
	mode := func(key string, s *string, dst *Mode) {
		if s == nil || strings.TrimSpace(*s) == "" {
			return
		}
		m, err := ParseMode(*s)
		if err != nil {
			p.Add(key, "unknown mode %q (want %s or %s)", *s, Strict, RelaxedWithDedup)
			return
		}
		*dst = m
	}
	dur := func(key string, s *string, dst *time.Duration) {
		if s == nil || strings.TrimSpace(*s) == "" {
			return
		}
		d, err := ParseDuration(*s)
		if err != nil {
			p.Add(key, "%w", err)
			return
		}
		*dst = d
	}
	mode("default-mode", raw.DefaultMode, &c.DefaultMode)
	dur("default-lease-duration", raw.DefaultLease, &c.DefaultLease)
	dur("marker-retention", raw.Retention, &c.MarkerRetention)
	var lifetime, alias time.Duration
	lt := f.Stacksaga.Cassandra.rawLifetime
	// The lifetime's keys lie outside the write-protection section.
	fullDur := func(key string, s *string, dst *time.Duration) bool {
		if s == nil || strings.TrimSpace(*s) == "" {
			return false
		}
		d, err := ParseDuration(*s)
		if err != nil {
			p.Append(fmt.Errorf("%s: %w", key, err))
			return false
		}
		*dst = d
		return true
	}
	const aliasKey = "stacksaga.cassandra.transaction.lifetime"
	okA := fullDur(lifetimeKey, lt.Lifetime, &lifetime)
	okB := fullDur(aliasKey, lt.Transaction.Lifetime, &alias)
	switch {
	case okA && okB && lifetime != alias:
		p.Append(fmt.Errorf("%s: disagrees with %s (%v vs %v): set one of them", lifetimeKey, aliasKey, lifetime, alias))
	case okA:
		c.TransactionLifetime = lifetime
	case okB:
		c.TransactionLifetime = alias
	}
	if len(raw.Domains) > 0 {
		c.Domains = make(map[string]DomainConfig, len(raw.Domains))
		for name, rd := range raw.Domains {
			var d DomainConfig
			mode("domains."+name+".mode", rd.Mode, &d.Mode)
			dur("domains."+name+".lease-duration", rd.Lease, &d.Lease)
			c.Domains[name] = d
		}
	}
	p.Append(c.ApplyEnv(lookup))
	if err := p.Err(ErrInvalidConfig); err != nil {
		return Config{}, err
	}
	// A zero duration written explicitly means the default, as null does.
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Environment variables that override configuration keys: the key's path
// upper-cased with '.' and '-' turned into '_'. Domain keys have none
// (domain names may contain characters that variables cannot).
const (
	EnvDefaultMode     = "STACKSAGA_CASSANDRA_WRITE_PROTECTION_DEFAULT_MODE"
	EnvDefaultLease    = "STACKSAGA_CASSANDRA_WRITE_PROTECTION_DEFAULT_LEASE_DURATION"
	EnvMarkerRetention = "STACKSAGA_CASSANDRA_WRITE_PROTECTION_MARKER_RETENTION"
	// EnvTransactionLifetime overrides stacksaga.cassandra.transaction-lifetime
	// (package recovery reads the same variable).
	EnvTransactionLifetime = "STACKSAGA_CASSANDRA_TRANSACTION_LIFETIME"
)

// ApplyEnv overrides DefaultMode, DefaultLease, MarkerRetention and
// TransactionLifetime from EnvDefaultMode, EnvDefaultLease,
// EnvMarkerRetention and EnvTransactionLifetime (set and non-empty ones
// only), looked up with lookup (os.LookupEnv in LoadConfig). An
// unparsable value is reported naming the variable and the key.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	get := yamlconfig.Env(lookup)
	var p yamlconfig.Problems
	if v, ok := get(EnvDefaultMode); ok {
		m, err := ParseMode(v)
		if err != nil {
			p.Append(yamlconfig.EnvError(EnvDefaultMode, keyPrefix+"default-mode", err))
		} else {
			c.DefaultMode = m
		}
	}
	if v, ok := get(EnvDefaultLease); ok {
		d, err := ParseDuration(v)
		if err != nil {
			p.Append(yamlconfig.EnvError(EnvDefaultLease, keyPrefix+"default-lease-duration", err))
		} else {
			c.DefaultLease = d
		}
	}
	if v, ok := get(EnvMarkerRetention); ok {
		d, err := ParseDuration(v)
		if err != nil {
			p.Append(yamlconfig.EnvError(EnvMarkerRetention, keyPrefix+"marker-retention", err))
		} else {
			c.MarkerRetention = d
		}
	}
	if v, ok := get(EnvTransactionLifetime); ok {
		d, err := ParseDuration(v)
		if err != nil {
			p.Append(yamlconfig.EnvError(EnvTransactionLifetime, lifetimeKey, err))
		} else {
			c.TransactionLifetime = d
		}
	}
	return p.Err(ErrInvalidConfig)
}

// ParseDuration parses a Go duration ("5s", "1m30s", "500ms") or an
// ISO-8601 duration of days, hours, minutes and seconds ("PT5S", "P1DT2H").
// A bare number is refused: its unit would be ambiguous.
func ParseDuration(s string) (time.Duration, error) {
	d, err := yamlconfig.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("writeprotect: %w", err)
	}
	return d, nil
}
