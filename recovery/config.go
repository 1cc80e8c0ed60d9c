package recovery

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("recovery: invalid configuration")

// DefaultDomain is the domain name whose settings apply to domains without
// their own (retry.domains.default, restore.domains.default).
const DefaultDomain = "default"

// Defaults (seed 000's property table; the retry policy keys beyond
// delay-windows are this project's).
const (
	DefaultInterval            = time.Minute
	DefaultBucketSize          = 50000
	DefaultConcurrency         = 100
	DefaultLookbackDays        = 2
	DefaultPageSize            = 1000
	DefaultTransactionLifetime = 24 * time.Hour
	DefaultRetryDelayWindows   = 1
	DefaultRestoreDelayWindows = 600
	DefaultBackoffMultiplier   = 2.0
	DefaultMaxDelayWindows     = 60
	DefaultJitter              = 0.2
	// DefaultInitialInterval is the delay of a step's first in-process
	// retry (initial-interval), as Temporal's activity retry default.
	DefaultInitialInterval = time.Second
	// DefaultMaxInterval caps the in-process retry delay (max-interval),
	// 100 × DefaultInitialInterval as Temporal's default.
	DefaultMaxInterval = 100 * time.Second
	// DefaultStepTimeout is how long a step may run before its saga's
	// orchestrator treats it as failed retryably (step-timeout): a web
	// request's order of magnitude.
	DefaultStepTimeout = 30 * time.Second
	// RestoreMargin is added to a step's timeout to make its saga's
	// restore watchdog due: a saga whose step has had no reply for its
	// step timeout plus this margin is restored by a retry node (its
	// orchestrator, if alive, failed the attempt at the timeout and moved
	// the saga on, which a pickup sees and rolls the watchdog forward).
	RestoreMargin = 10 * time.Second
)

// Bounds of the settings.
const (
	// MaxDelayWindows bounds every delay, so window arithmetic never
	// overflows (a million windows is about 2 years of 1-minute windows).
	MaxDelayWindows = 1_000_000
	// MaxLookbackDays keeps one ListDays call within the store's span
	// limit (eventstore.MaxListDaysYears).
	MaxLookbackDays = 1000
	// MaxRetryInterval bounds initial-interval and max-interval: an
	// in-process timer is for short delays; longer ones are what the
	// windows are for.
	MaxRetryInterval = time.Hour
	// MaxStepTimeout bounds step-timeout.
	MaxStepTimeout = 24 * time.Hour
	// MaxSagaTimeout bounds saga-timeout (a saga is disabled once its
	// transaction lifetime is over anyway).
	MaxSagaTimeout = 366 * 24 * time.Hour
	// MaxBucketSize bounds bucket-size by Cassandra's default
	// tombstone_failure_threshold (100000): restore watchdogs are deleted
	// one by one as their sagas end, so a restore scan of a bucket whose
	// sagas all ended reads up to bucket-size row tombstones in one query,
	// and Cassandra fails a read that scans more than the threshold.
	MaxBucketSize = 100_000
	// MaxDelay bounds every delay as a duration (delay × interval).
	MaxDelay = 366 * 24 * time.Hour
)

// RetryPolicy is the effective retry policy of a step: how far forward a
// retry is registered after each failed attempt, and when to give up.
type RetryPolicy struct {
	// DelayWindows is the delay of the first retry in windows (W+delay).
	DelayWindows int
	// MaxAttempts is the number of attempts of a step, the first included,
	// after which a retryable failure is final (0: unlimited; the
	// transaction lifetime then bounds the retries).
	MaxAttempts int
	// BackoffMultiplier multiplies the delay after each failed attempt
	// (1: a constant delay).
	BackoffMultiplier float64
	// MaxDelayWindows caps the delay before jitter.
	MaxDelayWindows int
	// Jitter adds up to this fraction of the delay at random (0: none).
	Jitter float64
	// InitialInterval is the delay of the first in-process retry
	// (initial-interval): the orchestrator that parked the saga re-drives
	// it from a timer after InitialInterval × BackoffMultiplier^(attempt−1),
	// capped at MaxInterval, plus jitter, while the window registration
	// (DelayWindows…) stays as the durable fallback should that process
	// die first. 0 turns the in-process retries off: windows only.
	InitialInterval time.Duration
	// MaxInterval caps the in-process retry delay (max-interval; below
	// InitialInterval it is InitialInterval).
	MaxInterval time.Duration
	// StepTimeout is a start-to-close timeout (step-timeout): an attempt
	// whose reply has not been applied this long after its command was
	// sent fails retryably ("step timed out"), is retried as such (or
	// exhausts the policy), and its late reply is ignored as stale. It is
	// kept by the orchestrator that sent the command, in process; 0: none.
	StepTimeout time.Duration
}

// RetryOverride overrides some fields of a RetryPolicy; nil fields
// inherit.
type RetryOverride struct {
	DelayWindows      *int
	MaxAttempts       *int
	BackoffMultiplier *float64
	MaxDelayWindows   *int
	Jitter            *float64
	InitialInterval   *time.Duration
	MaxInterval       *time.Duration
	StepTimeout       *time.Duration
	// Endpoints overrides per step endpoint (endpoints.<endpoint>); their
	// own Endpoints are ignored.
	Endpoints map[string]RetryOverride
}

// RetryConfig is the stacksaga.cassandra.recovery.retry section.
type RetryConfig struct {
	// Default is domains.default: the policy of domains without one.
	Default RetryPolicy
	// DefaultEndpoints is domains.default.endpoints.
	DefaultEndpoints map[string]RetryOverride
	// Domains is domains.<name> for names other than default.
	Domains map[string]RetryOverride
}

// RestoreConfig is the stacksaga.cassandra.recovery.restore section.
type RestoreConfig struct {
	// DefaultDelayWindows is domains.default.delay-windows: K of the
	// watchdog window W+K.
	DefaultDelayWindows int
	// Domains is domains.<name>.delay-windows for other names.
	Domains map[string]int
}

// DeadlineConfig is the stacksaga.cassandra.recovery.deadline section:
// the saga-level deadline (Temporal's workflow execution timeout) per
// domain, domains.<name>.saga-timeout. A saga that has not completed its
// forward steps saga-timeout after its creation fails non-retryably
// ("saga timed out") and compensates. 0 (the default): no deadline.
type DeadlineConfig struct {
	// Default is domains.default.saga-timeout.
	Default time.Duration
	// Domains is domains.<name>.saga-timeout for other names.
	Domains map[string]time.Duration
}

// Config is the recovery configuration: the keys under
// stacksaga.cassandra.recovery plus stacksaga.cassandra.transaction-lifetime.
// Build one with DefaultConfig or LoadConfig; Validate checks it.
type Config struct {
	// Interval is the window length: window-interval-minutes (whole
	// minutes dividing 1440), or window-interval (a duration; under a
	// minute for tests and demos, whole seconds dividing 60s). Default 1m.
	Interval time.Duration
	// BucketSize is the number of rows after which an instance moves to
	// its next bucket of a window (bucket-size). Default 50000, at most
	// MaxBucketSize.
	BucketSize int
	// Concurrency bounds the re-drives a retry node runs at once
	// (concurrency). Default 100.
	Concurrency int
	// LookbackDays is how many days before today a retry node scans
	// (lookback-days), at least 1: the last window of a day is sealed at
	// midnight, so a scan that read today only would never read it.
	// Default 2.
	LookbackDays int
	// PageSize is the number of tier-5 rows read per request (page-size).
	// Default 1000.
	PageSize int
	// TransactionLifetime is how long a saga may be re-driven
	// (stacksaga.cassandra.transaction-lifetime, also accepted as
	// stacksaga.cassandra.transaction.lifetime). Default 24h.
	TransactionLifetime time.Duration
	// Retry and Restore are the per-domain delays and the retry policy.
	Retry   RetryConfig
	Restore RestoreConfig
	// Deadline is the saga-level deadline per domain (none by default).
	Deadline DeadlineConfig
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Interval:            DefaultInterval,
		BucketSize:          DefaultBucketSize,
		Concurrency:         DefaultConcurrency,
		LookbackDays:        DefaultLookbackDays,
		PageSize:            DefaultPageSize,
		TransactionLifetime: DefaultTransactionLifetime,
		Retry: RetryConfig{Default: RetryPolicy{
			DelayWindows:      DefaultRetryDelayWindows,
			BackoffMultiplier: DefaultBackoffMultiplier,
			MaxDelayWindows:   DefaultMaxDelayWindows,
			Jitter:            DefaultJitter,
			InitialInterval:   DefaultInitialInterval,
			MaxInterval:       DefaultMaxInterval,
			StepTimeout:       DefaultStepTimeout,
		}},
		Restore: RestoreConfig{DefaultDelayWindows: DefaultRestoreDelayWindows},
	}
}

// Windows returns the window arithmetic of c.Interval.
func (c Config) Windows() (Windows, error) { return NewWindows(c.Interval) }

// RetryPolicy returns the effective policy of a step: each field is taken
// from the first of retry.domains.<domain>.endpoints.<endpoint>,
// retry.domains.<domain>, retry.domains.default.endpoints.<endpoint> and
// retry.domains.default that sets it.
func (c Config) RetryPolicy(domain, endpoint string) RetryPolicy {
	p := c.Retry.Default
	layers := []RetryOverride{c.Retry.DefaultEndpoints[endpoint]}
	if d, ok := c.Retry.Domains[domain]; ok {
		layers = append(layers, d, d.Endpoints[endpoint])
	}
	for _, o := range layers { // least specific first
		p = applyOverride(p, o)
	}
	return p
}

// applyOverride returns p with the fields o sets replaced.
func applyOverride(p RetryPolicy, o RetryOverride) RetryPolicy {
	if o.DelayWindows != nil {
		p.DelayWindows = *o.DelayWindows
	}
	if o.MaxAttempts != nil {
		p.MaxAttempts = *o.MaxAttempts
	}
	if o.BackoffMultiplier != nil {
		p.BackoffMultiplier = *o.BackoffMultiplier
	}
	if o.MaxDelayWindows != nil {
		p.MaxDelayWindows = *o.MaxDelayWindows
	}
	if o.Jitter != nil {
		p.Jitter = *o.Jitter
	}
	if o.InitialInterval != nil {
		p.InitialInterval = *o.InitialInterval
	}
	if o.MaxInterval != nil {
		p.MaxInterval = *o.MaxInterval
	}
	if o.StepTimeout != nil {
		p.StepTimeout = *o.StepTimeout
	}
	return p
}

// RestoreDelay returns K, the watchdog delay in windows of domain.
func (c Config) RestoreDelay(domain string) int {
	if k, ok := c.Restore.Domains[domain]; ok && k > 0 {
		return k
	}
	return c.Restore.DefaultDelayWindows
}

// SagaTimeout returns the saga-level deadline of domain, counted from the
// saga's creation (0: none).
func (c Config) SagaTimeout(domain string) time.Duration {
	if d, ok := c.Deadline.Domains[domain]; ok {
		return d
	}
	return c.Deadline.Default
}

// Expired reports whether a saga created (or last restored by an admin) at
// createdAt has outlived the transaction lifetime at now. The recovery
// engine's Redriver freezes such a saga as DISABLED instead of re-driving
// it (seed 001, "disabled transactions").
func (c Config) Expired(createdAt, now time.Time) bool {
	lifetime := c.TransactionLifetime
	if lifetime <= 0 {
		lifetime = DefaultTransactionLifetime
	}
	return !createdAt.IsZero() && now.Sub(createdAt) >= lifetime
}

// Keys of the section, relative to keyPrefix.
const (
	keyPrefix        = "stacksaga.cassandra."
	keyInterval      = "recovery.window-interval-minutes"
	keyIntervalDur   = "recovery.window-interval"
	keyBucketSize    = "recovery.bucket-size"
	keyConcurrency   = "recovery.concurrency"
	keyLookback      = "recovery.lookback-days"
	keyPageSize      = "recovery.page-size"
	keyLifetime      = "transaction-lifetime"
	keyLifetimeAlias = "transaction.lifetime"
	keyRetry         = "recovery.retry.domains."
	keyRestore       = "recovery.restore.domains."
	keyDeadline      = "recovery.deadline.domains."
)

// Validate reports every problem of c at once (errors.Join), each naming
// its full key, sorted by key; the result wraps ErrInvalidConfig.
func (c Config) Validate() error {
	p := yamlconfig.Problems{Prefix: keyPrefix}
	c.check(&p, keyInterval)
	return p.Err(ErrInvalidConfig)
}

// check records the problems of c in p; an invalid Interval is reported
// under intervalKey (the key it was read from).
func (c Config) check(p *yamlconfig.Problems, intervalKey string) {
	if err := ValidInterval(c.Interval); err != nil {
		p.Add(intervalKey, "%v", err)
	}
	atLeast := func(key string, v, lo int) {
		if v < lo {
			p.Add(key, "must be at least %d, got %d", lo, v)
		}
	}
	if c.BucketSize < 1 || c.BucketSize > MaxBucketSize {
		p.Add(keyBucketSize, "must be 1..%d (a restore scan of a bucket reads up to bucket-size tombstones; Cassandra fails a read past tombstone_failure_threshold, 100000 by default), got %d", MaxBucketSize, c.BucketSize)
	}
	atLeast(keyConcurrency, c.Concurrency, 1)
	atLeast(keyPageSize, c.PageSize, 1)
	if c.LookbackDays < 1 || c.LookbackDays > MaxLookbackDays {
		p.Add(keyLookback, "must be 1..%d (the last window of a day is sealed at midnight: with 0 it would never be scanned), got %d", MaxLookbackDays, c.LookbackDays)
	}
	if ValidInterval(c.Interval) == nil {
		long := func(key string, windows int) {
			if windows > 0 && time.Duration(windows) > MaxDelay/c.Interval {
				p.Add(key, "%d windows of %v reach beyond %v", windows, c.Interval, MaxDelay)
			}
		}
		long(keyRetry+DefaultDomain+".delay-windows", c.Retry.Default.DelayWindows)
		long(keyRetry+DefaultDomain+".max-delay-windows", c.Retry.Default.MaxDelayWindows)
		long(keyRestore+DefaultDomain+".delay-windows", c.Restore.DefaultDelayWindows)
		for name, k := range c.Restore.Domains {
			long(keyRestore+name+".delay-windows", k)
		}
		over := func(prefix string, o RetryOverride) {
			if o.DelayWindows != nil {
				long(prefix+"delay-windows", *o.DelayWindows)
			}
			if o.MaxDelayWindows != nil {
				long(prefix+"max-delay-windows", *o.MaxDelayWindows)
			}
		}
		for name, o := range c.Retry.DefaultEndpoints {
			over(keyRetry+DefaultDomain+".endpoints."+name+".", o)
		}
		for name, o := range c.Retry.Domains {
			over(keyRetry+name+".", o)
			for ep, eo := range o.Endpoints {
				over(keyRetry+name+".endpoints."+ep+".", eo)
			}
		}
	}
	if c.TransactionLifetime <= 0 {
		p.Add(keyLifetime, "must be positive, got %v", c.TransactionLifetime)
	}
	validatePolicy(p, keyRetry+DefaultDomain+".", c.Retry.Default)
	validateOverrides(p, keyRetry+DefaultDomain+".endpoints.", c.Retry.DefaultEndpoints)
	for name, o := range c.Retry.Domains {
		switch {
		case strings.TrimSpace(name) == "":
			p.Add(keyRetry[:len(keyRetry)-1], "empty domain name")
		case name == DefaultDomain:
			p.Add(keyRetry+name, "the default domain belongs in Retry.Default")
		default:
			validateOverride(p, keyRetry+name+".", o)
			validateOverrides(p, keyRetry+name+".endpoints.", o.Endpoints)
		}
	}
	delay := func(key string, v int) {
		if v < 1 || v > MaxDelayWindows {
			p.Add(key, "must be 1..%d windows, got %d", MaxDelayWindows, v)
		}
	}
	delay(keyRestore+DefaultDomain+".delay-windows", c.Restore.DefaultDelayWindows)
	for name, k := range c.Restore.Domains {
		if strings.TrimSpace(name) == "" {
			p.Add(keyRestore[:len(keyRestore)-1], "empty domain name")
			continue
		}
		delay(keyRestore+name+".delay-windows", k)
	}
	sagaTimeout := func(key string, d time.Duration) {
		if d < 0 || d > MaxSagaTimeout || (d > 0 && d < 10*time.Millisecond) {
			p.Add(key, "must be 0 (none) or 10ms..%v, got %v", MaxSagaTimeout, d)
		}
	}
	sagaTimeout(keyDeadline+DefaultDomain+".saga-timeout", c.Deadline.Default)
	for name, d := range c.Deadline.Domains {
		if strings.TrimSpace(name) == "" {
			p.Add(keyDeadline[:len(keyDeadline)-1], "empty domain name")
			continue
		}
		sagaTimeout(keyDeadline+name+".saga-timeout", d)
	}
}

func validatePolicy(p *yamlconfig.Problems, prefix string, r RetryPolicy) {
	validateOverride(p, prefix, RetryOverride{
		DelayWindows: &r.DelayWindows, MaxAttempts: &r.MaxAttempts, BackoffMultiplier: &r.BackoffMultiplier,
		MaxDelayWindows: &r.MaxDelayWindows, Jitter: &r.Jitter,
		InitialInterval: &r.InitialInterval, MaxInterval: &r.MaxInterval, StepTimeout: &r.StepTimeout,
	})
}

func validateOverrides(p *yamlconfig.Problems, prefix string, m map[string]RetryOverride) {
	for name, o := range m {
		if strings.TrimSpace(name) == "" {
			p.Add(strings.TrimSuffix(prefix, "."), "empty endpoint name")
			continue
		}
		validateOverride(p, prefix+name+".", o)
	}
}

func validateOverride(p *yamlconfig.Problems, prefix string, o RetryOverride) {
	if v := o.DelayWindows; v != nil && (*v < 1 || *v > MaxDelayWindows) {
		p.Add(prefix+"delay-windows", "must be 1..%d windows, got %d", MaxDelayWindows, *v)
	}
	if v := o.MaxAttempts; v != nil && *v < 0 {
		p.Add(prefix+"max-attempts", "must be 0 (unlimited) or more, got %d", *v)
	}
	if v := o.BackoffMultiplier; v != nil && (math.IsNaN(*v) || *v < 1 || *v > 100) {
		p.Add(prefix+"backoff-multiplier", "must be 1..100, got %v", *v)
	}
	if v := o.MaxDelayWindows; v != nil && (*v < 1 || *v > MaxDelayWindows) {
		p.Add(prefix+"max-delay-windows", "must be 1..%d windows, got %d", MaxDelayWindows, *v)
	}
	if v := o.Jitter; v != nil && (math.IsNaN(*v) || *v < 0 || *v > 1) {
		p.Add(prefix+"jitter", "must be 0..1, got %v", *v)
	}
	if v := o.InitialInterval; v != nil && (*v < 0 || *v > MaxRetryInterval || (*v > 0 && *v < time.Millisecond)) {
		p.Add(prefix+"initial-interval", "must be 0 (no in-process retries) or 1ms..%v, got %v", MaxRetryInterval, *v)
	}
	if v := o.MaxInterval; v != nil && (*v < 0 || *v > MaxRetryInterval) {
		p.Add(prefix+"max-interval", "must be 0..%v, got %v", MaxRetryInterval, *v)
	}
	if v := o.StepTimeout; v != nil && (*v < 0 || *v > MaxStepTimeout || (*v > 0 && *v < 10*time.Millisecond)) {
		p.Add(prefix+"step-timeout", "must be 0 (none) or 10ms..%v, got %v", MaxStepTimeout, *v)
	}
}

// file is the YAML document; only the keys of Config are read. Scalars are
// taken as strings so that a bad value is reported with its key instead of
// as a YAML type error.
type file struct {
	Stacksaga struct {
		Cassandra struct {
			Lifetime    *string `yaml:"transaction-lifetime"`
			Transaction struct {
				Lifetime *string `yaml:"lifetime"`
			} `yaml:"transaction"`
			Recovery rawRecovery `yaml:"recovery"`
		} `yaml:"cassandra"`
	} `yaml:"stacksaga"`
}

type rawRecovery struct {
	IntervalMinutes *string `yaml:"window-interval-minutes"`
	Interval        *string `yaml:"window-interval"`
	BucketSize      *string `yaml:"bucket-size"`
	Concurrency     *string `yaml:"concurrency"`
	LookbackDays    *string `yaml:"lookback-days"`
	PageSize        *string `yaml:"page-size"`
	Retry           struct {
		Domains map[string]rawRetry `yaml:"domains"`
	} `yaml:"retry"`
	Restore struct {
		Domains map[string]struct {
			DelayWindows *string `yaml:"delay-windows"`
		} `yaml:"domains"`
	} `yaml:"restore"`
	Deadline struct {
		Domains map[string]struct {
			SagaTimeout *string `yaml:"saga-timeout"`
		} `yaml:"domains"`
	} `yaml:"deadline"`
}

type rawRetry struct {
	DelayWindows      *string             `yaml:"delay-windows"`
	MaxAttempts       *string             `yaml:"max-attempts"`
	BackoffMultiplier *string             `yaml:"backoff-multiplier"`
	MaxDelayWindows   *string             `yaml:"max-delay-windows"`
	Jitter            *string             `yaml:"jitter"`
	InitialInterval   *string             `yaml:"initial-interval"`
	MaxInterval       *string             `yaml:"max-interval"`
	StepTimeout       *string             `yaml:"step-timeout"`
	Endpoints         map[string]rawRetry `yaml:"endpoints"`
}

// LoadConfig reads the recovery keys of a YAML document (see Config),
// applies the environment overrides (see ApplyEnv) from the process
// environment, fills defaults and validates. Other keys are ignored; a key
// set to null takes its default. Durations are Go durations ("24h",
// "1m30s") or ISO-8601 ("PT24H", "P1D").
func LoadConfig(data []byte) (Config, error) { return LoadConfigWithEnv(data, os.LookupEnv) }

// LoadConfigFile is LoadConfig on the contents of the file at path.
func LoadConfigFile(path string) (Config, error) {
	return yamlconfig.LoadFile("recovery", path, LoadConfig)
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
	cs := f.Stacksaga.Cassandra
	raw := cs.Recovery
	c := DefaultConfig()
	p := yamlconfig.Problems{Prefix: keyPrefix}
	r := reader{p: &p}

	var minutes *int
	var interval *time.Duration
	if v, ok := r.int(keyInterval, raw.IntervalMinutes); ok {
		minutes = &v
	}
	if v, ok := r.duration(keyIntervalDur, raw.Interval); ok {
		interval = &v
	}
	r.intTo(keyBucketSize, raw.BucketSize, &c.BucketSize)
	r.intTo(keyConcurrency, raw.Concurrency, &c.Concurrency)
	r.intTo(keyLookback, raw.LookbackDays, &c.LookbackDays)
	r.intTo(keyPageSize, raw.PageSize, &c.PageSize)
	lifetime, okA := r.duration(keyLifetime, cs.Lifetime)
	alias, okB := r.duration(keyLifetimeAlias, cs.Transaction.Lifetime)
	switch {
	case okA && okB && lifetime != alias:
		p.Add(keyLifetime, "disagrees with %s%s (%v vs %v): set one of them", keyPrefix, keyLifetimeAlias, lifetime, alias)
	case okA:
		c.TransactionLifetime = lifetime
	case okB:
		c.TransactionLifetime = alias
	}

	for name, rd := range raw.Retry.Domains {
		prefix := keyRetry + name + "."
		o := r.override(prefix, rd)
		eps := make(map[string]RetryOverride, len(rd.Endpoints))
		for ep, re := range rd.Endpoints {
			eps[ep] = r.override(prefix+"endpoints."+ep+".", re)
		}
		if len(eps) == 0 {
			eps = nil
		}
		if name == DefaultDomain {
			c.Retry.Default = applyOverride(c.Retry.Default, o)
			c.Retry.DefaultEndpoints = eps
			continue
		}
		o.Endpoints = eps
		if c.Retry.Domains == nil {
			c.Retry.Domains = make(map[string]RetryOverride)
		}
		c.Retry.Domains[name] = o
	}
	for name, rd := range raw.Restore.Domains {
		v, ok := r.int(keyRestore+name+".delay-windows", rd.DelayWindows)
		if !ok {
			continue
		}
		if name == DefaultDomain {
			c.Restore.DefaultDelayWindows = v
			continue
		}
		if c.Restore.Domains == nil {
			c.Restore.Domains = make(map[string]int)
		}
		c.Restore.Domains[name] = v
	}

	for name, rd := range raw.Deadline.Domains {
		d, ok := r.duration(keyDeadline+name+".saga-timeout", rd.SagaTimeout)
		if !ok {
			continue
		}
		if name == DefaultDomain {
			c.Deadline.Default = d
			continue
		}
		if c.Deadline.Domains == nil {
			c.Deadline.Domains = make(map[string]time.Duration)
		}
		c.Deadline.Domains[name] = d
	}

	intervalKey := keyInterval
	switch {
	case minutes != nil && interval != nil && time.Duration(*minutes)*time.Minute != *interval:
		p.Add(keyIntervalDur, "disagrees with %s%s (%v vs %d minutes): set one of them", keyPrefix, keyInterval, *interval, *minutes)
	case interval != nil:
		c.Interval, intervalKey = *interval, keyIntervalDur
	case minutes != nil:
		if *minutes < 1 || 1440%*minutes != 0 {
			p.Add(keyInterval, "must divide 1440 (e.g. 1, 5, 15, 60), got %d", *minutes)
		} else {
			c.Interval, intervalKey = time.Duration(*minutes)*time.Minute, keyInterval
		}
	}
	if envKey := c.applyEnv(lookup, &p); envKey != "" {
		intervalKey = envKey
	}
	// Values that did not parse kept their defaults: check the rest, so
	// that every problem is reported at once.
	c.check(&p, intervalKey)
	if err := p.Err(ErrInvalidConfig); err != nil {
		return Config{}, err
	}
	return c, nil
}

// reader parses raw scalars, recording problems under their keys.
type reader struct{ p *yamlconfig.Problems }

func present(s *string) bool { return s != nil && strings.TrimSpace(*s) != "" }

func (r reader) int(key string, s *string) (int, bool) {
	if !present(s) {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(*s))
	if err != nil {
		r.p.Add(key, "not an integer: %q", *s)
		return 0, false
	}
	return v, true
}

func (r reader) intTo(key string, s *string, dst *int) {
	if v, ok := r.int(key, s); ok {
		*dst = v
	}
}

func (r reader) float(key string, s *string) (float64, bool) {
	if !present(s) {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(*s), 64)
	if err != nil {
		r.p.Add(key, "not a number: %q", *s)
		return 0, false
	}
	return v, true
}

func (r reader) duration(key string, s *string) (time.Duration, bool) {
	if !present(s) {
		return 0, false
	}
	d, err := ParseDuration(*s)
	if err != nil {
		r.p.Add(key, "%w", err)
		return 0, false
	}
	return d, true
}

func (r reader) override(prefix string, rr rawRetry) RetryOverride {
	var o RetryOverride
	ip := func(key string, s *string) *int {
		if v, ok := r.int(prefix+key, s); ok {
			return &v
		}
		return nil
	}
	fp := func(key string, s *string) *float64 {
		if v, ok := r.float(prefix+key, s); ok {
			return &v
		}
		return nil
	}
	o.DelayWindows = ip("delay-windows", rr.DelayWindows)
	o.MaxAttempts = ip("max-attempts", rr.MaxAttempts)
	o.BackoffMultiplier = fp("backoff-multiplier", rr.BackoffMultiplier)
	o.MaxDelayWindows = ip("max-delay-windows", rr.MaxDelayWindows)
	o.Jitter = fp("jitter", rr.Jitter)
	dp := func(key string, s *string) *time.Duration {
		if v, ok := r.duration(prefix+key, s); ok {
			return &v
		}
		return nil
	}
	o.InitialInterval = dp("initial-interval", rr.InitialInterval)
	o.MaxInterval = dp("max-interval", rr.MaxInterval)
	o.StepTimeout = dp("step-timeout", rr.StepTimeout)
	return o
}
