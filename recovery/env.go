package recovery

import (
	"fmt"
	"strconv"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// Environment variables that override configuration keys: the key's path
// upper-cased with '.' and '-' turned into '_'. Only the default domain's
// retry and restore settings have one (domain names may contain characters
// that variables cannot).
const (
	EnvIntervalMinutes     = "STACKSAGA_CASSANDRA_RECOVERY_WINDOW_INTERVAL_MINUTES"
	EnvInterval            = "STACKSAGA_CASSANDRA_RECOVERY_WINDOW_INTERVAL" // a duration, "2s"
	EnvBucketSize          = "STACKSAGA_CASSANDRA_RECOVERY_BUCKET_SIZE"
	EnvConcurrency         = "STACKSAGA_CASSANDRA_RECOVERY_CONCURRENCY"
	EnvLookbackDays        = "STACKSAGA_CASSANDRA_RECOVERY_LOOKBACK_DAYS"
	EnvPageSize            = "STACKSAGA_CASSANDRA_RECOVERY_PAGE_SIZE"
	EnvTransactionLifetime = "STACKSAGA_CASSANDRA_TRANSACTION_LIFETIME"
	EnvRetryDelayWindows   = "STACKSAGA_CASSANDRA_RECOVERY_RETRY_DOMAINS_DEFAULT_DELAY_WINDOWS"
	EnvRetryMaxAttempts    = "STACKSAGA_CASSANDRA_RECOVERY_RETRY_DOMAINS_DEFAULT_MAX_ATTEMPTS"
	EnvRetryMultiplier     = "STACKSAGA_CASSANDRA_RECOVERY_RETRY_DOMAINS_DEFAULT_BACKOFF_MULTIPLIER"
	EnvRetryMaxDelay       = "STACKSAGA_CASSANDRA_RECOVERY_RETRY_DOMAINS_DEFAULT_MAX_DELAY_WINDOWS"
	EnvRetryJitter         = "STACKSAGA_CASSANDRA_RECOVERY_RETRY_DOMAINS_DEFAULT_JITTER"
	EnvRetryInitial        = "STACKSAGA_CASSANDRA_RECOVERY_RETRY_DOMAINS_DEFAULT_INITIAL_INTERVAL"
	EnvRetryMaxInterval    = "STACKSAGA_CASSANDRA_RECOVERY_RETRY_DOMAINS_DEFAULT_MAX_INTERVAL"
	EnvStepTimeout         = "STACKSAGA_CASSANDRA_RECOVERY_RETRY_DOMAINS_DEFAULT_STEP_TIMEOUT"
	EnvRestoreDelayWindows = "STACKSAGA_CASSANDRA_RECOVERY_RESTORE_DOMAINS_DEFAULT_DELAY_WINDOWS"
	EnvSagaTimeout         = "STACKSAGA_CASSANDRA_RECOVERY_DEADLINE_DOMAINS_DEFAULT_SAGA_TIMEOUT"
)

// ApplyEnv overrides fields from the variables Env* (set and non-empty
// ones only), looked up with lookup (os.LookupEnv in LoadConfig). Every
// unparsable value is reported, naming the variable and the key. When both
// interval variables are set they must agree.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	var p yamlconfig.Problems
	c.applyEnv(lookup, &p)
	return p.Err(ErrInvalidConfig)
}

// applyEnv is ApplyEnv recording its problems in p; it returns the key of
// the interval variable that set Interval ("" if none did).
func (c *Config) applyEnv(lookup func(string) (string, bool), p *yamlconfig.Problems) string {
	get := yamlconfig.Env(lookup)
	num := func(name, key string, dst *int) bool {
		v, ok := get(name)
		if !ok {
			return false
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			p.Append(yamlconfig.EnvError(name, keyPrefix+key, fmt.Errorf("not an integer: %q", v)))
			return false
		}
		*dst = n
		return true
	}
	float := func(name, key string, dst *float64) {
		if v, ok := get(name); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				p.Append(yamlconfig.EnvError(name, keyPrefix+key, fmt.Errorf("not a number: %q", v)))
				return
			}
			*dst = f
		}
	}
	dur := func(name, key string, dst *time.Duration) bool {
		v, ok := get(name)
		if !ok {
			return false
		}
		d, err := ParseDuration(v)
		if err != nil {
			p.Append(yamlconfig.EnvError(name, keyPrefix+key, err))
			return false
		}
		*dst = d
		return true
	}

	intervalKey := ""
	var minutes int
	var interval time.Duration
	hasMinutes := num(EnvIntervalMinutes, keyInterval, &minutes)
	hasInterval := dur(EnvInterval, keyIntervalDur, &interval)
	switch {
	case hasMinutes && hasInterval && time.Duration(minutes)*time.Minute != interval:
		p.Append(yamlconfig.EnvError(EnvInterval, keyPrefix+keyIntervalDur,
			fmt.Errorf("disagrees with %s (%v vs %d minutes): set one of them", EnvIntervalMinutes, interval, minutes)))
	case hasInterval:
		c.Interval, intervalKey = interval, keyIntervalDur
	case hasMinutes:
		if minutes < 1 || 1440%minutes != 0 {
			p.Append(yamlconfig.EnvError(EnvIntervalMinutes, keyPrefix+keyInterval,
				fmt.Errorf("must divide 1440 (e.g. 1, 5, 15, 60), got %d", minutes)))
		} else {
			c.Interval, intervalKey = time.Duration(minutes)*time.Minute, keyInterval
		}
	}
	num(EnvBucketSize, keyBucketSize, &c.BucketSize)
	num(EnvConcurrency, keyConcurrency, &c.Concurrency)
	num(EnvLookbackDays, keyLookback, &c.LookbackDays)
	num(EnvPageSize, keyPageSize, &c.PageSize)
	dur(EnvTransactionLifetime, keyLifetime, &c.TransactionLifetime)
	def := keyRetry + DefaultDomain + "."
	num(EnvRetryDelayWindows, def+"delay-windows", &c.Retry.Default.DelayWindows)
	num(EnvRetryMaxAttempts, def+"max-attempts", &c.Retry.Default.MaxAttempts)
	float(EnvRetryMultiplier, def+"backoff-multiplier", &c.Retry.Default.BackoffMultiplier)
	num(EnvRetryMaxDelay, def+"max-delay-windows", &c.Retry.Default.MaxDelayWindows)
	float(EnvRetryJitter, def+"jitter", &c.Retry.Default.Jitter)
	dur(EnvRetryInitial, def+"initial-interval", &c.Retry.Default.InitialInterval)
	dur(EnvRetryMaxInterval, def+"max-interval", &c.Retry.Default.MaxInterval)
	dur(EnvStepTimeout, def+"step-timeout", &c.Retry.Default.StepTimeout)
	num(EnvRestoreDelayWindows, keyRestore+DefaultDomain+".delay-windows", &c.Restore.DefaultDelayWindows)
	dur(EnvSagaTimeout, keyDeadline+DefaultDomain+".saga-timeout", &c.Deadline.Default)
	return intervalKey
}
