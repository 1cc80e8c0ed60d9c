package recovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
)

func noEnv(string) (string, bool) { return "", false }

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func ptr[T any](v T) *T { return &v }

// The seed's complete application.yml example (part 4), with the retry
// policy keys this project adds.
const seedYAML = `
stacksaga:
  instance:
    region: us-central
    cluster: us-central-cluster-1
  cassandra:
    read-consistency-level: LOCAL_QUORUM
    transaction:
      lifetime: 24h
    write-protection:
      default-mode: RELAXED_WITH_DEDUP
    recovery:
      concurrency: 100
      window-interval-minutes: 1
      bucket-size: 50000
      lookback-days: 2
      retry:
        domains:
          default:
            delay-windows: 1
          order-saga:
            delay-windows: 3
            max-attempts: 5
            endpoints:
              payment-service.charge:
                max-attempts: 10
                jitter: 0
          payment-saga:
            delay-windows: 1
      restore:
        domains:
          default:
            delay-windows: 600
          order-saga:
            delay-windows: 1200
          payment-saga:
            delay-windows: 300
          notification-saga:
            delay-windows: 60
`

func TestLoadConfigSeedExample(t *testing.T) {
	c, err := LoadConfigWithEnv([]byte(seedYAML), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Retry.Domains = map[string]RetryOverride{
		"order-saga": {DelayWindows: ptr(3), MaxAttempts: ptr(5), Endpoints: map[string]RetryOverride{
			"payment-service.charge": {MaxAttempts: ptr(10), Jitter: ptr(0.0)},
		}},
		"payment-saga": {DelayWindows: ptr(1)},
	}
	want.Restore.Domains = map[string]int{"order-saga": 1200, "payment-saga": 300, "notification-saga": 60}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("LoadConfig\n got %+v\nwant %+v", c, want)
	}
	for _, tc := range []struct {
		domain, endpoint string
		want             RetryPolicy
	}{
		{"order-saga", "payment-service.charge", RetryPolicy{DelayWindows: 3, MaxAttempts: 10, BackoffMultiplier: 2, MaxDelayWindows: 60, Jitter: 0, InitialInterval: time.Second, MaxInterval: 100 * time.Second, StepTimeout: 30 * time.Second}},
		{"order-saga", "stock-service.reserve", RetryPolicy{DelayWindows: 3, MaxAttempts: 5, BackoffMultiplier: 2, MaxDelayWindows: 60, Jitter: 0.2, InitialInterval: time.Second, MaxInterval: 100 * time.Second, StepTimeout: 30 * time.Second}},
		{"payment-saga", "", RetryPolicy{DelayWindows: 1, BackoffMultiplier: 2, MaxDelayWindows: 60, Jitter: 0.2, InitialInterval: time.Second, MaxInterval: 100 * time.Second, StepTimeout: 30 * time.Second}},
		{"other-saga", "payment-service.charge", RetryPolicy{DelayWindows: 1, BackoffMultiplier: 2, MaxDelayWindows: 60, Jitter: 0.2, InitialInterval: time.Second, MaxInterval: 100 * time.Second, StepTimeout: 30 * time.Second}},
	} {
		if got := c.RetryPolicy(tc.domain, tc.endpoint); got != tc.want {
			t.Errorf("RetryPolicy(%q, %q) = %+v, want %+v", tc.domain, tc.endpoint, got, tc.want)
		}
	}
	for domain, k := range map[string]int{"order-saga": 1200, "payment-saga": 300, "notification-saga": 60, "other": 600} {
		if got := c.RestoreDelay(domain); got != k {
			t.Errorf("RestoreDelay(%q) = %d, want %d", domain, got, k)
		}
	}
}

func TestLoadConfigDefaults(t *testing.T) {
	for _, doc := range []string{"", "stacksaga:\n  cassandra:\n    keyspace: x\n", "stacksaga:\n  cassandra:\n    recovery:\n      bucket-size: ~\n      concurrency: null\n"} {
		c, err := LoadConfigWithEnv([]byte(doc), noEnv)
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if !reflect.DeepEqual(c, DefaultConfig()) {
			t.Fatalf("%q: got %+v", doc, c)
		}
	}
	c := DefaultConfig()
	if c.Interval != time.Minute || c.BucketSize != 50000 || c.Concurrency != 100 || c.LookbackDays != 2 ||
		c.TransactionLifetime != 24*time.Hour || c.Retry.Default.DelayWindows != 1 || c.Restore.DefaultDelayWindows != 600 {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLoadConfigForms(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		check      func(Config) bool
	}{
		{"5-minute windows", "stacksaga:\n  cassandra:\n    recovery:\n      window-interval-minutes: 5\n",
			func(c Config) bool { return c.Interval == 5*time.Minute }},
		{"2-second windows", "stacksaga:\n  cassandra:\n    recovery:\n      window-interval: 2s\n",
			func(c Config) bool { return c.Interval == 2*time.Second }},
		{"both interval keys agreeing", "stacksaga:\n  cassandra:\n    recovery:\n      window-interval: PT5M\n      window-interval-minutes: 5\n",
			func(c Config) bool { return c.Interval == 5*time.Minute }},
		{"lifetime (property table key)", "stacksaga:\n  cassandra:\n    transaction-lifetime: 48h\n",
			func(c Config) bool { return c.TransactionLifetime == 48*time.Hour }},
		{"lifetime (example key, ISO)", "stacksaga:\n  cassandra:\n    transaction:\n      lifetime: P2D\n",
			func(c Config) bool { return c.TransactionLifetime == 48*time.Hour }},
		{"lookback 1", "stacksaga:\n  cassandra:\n    recovery:\n      lookback-days: 1\n",
			func(c Config) bool { return c.LookbackDays == 1 }},
		{"default retry policy", "stacksaga:\n  cassandra:\n    recovery:\n      retry:\n        domains:\n          default:\n            max-attempts: 4\n            backoff-multiplier: 1.5\n            max-delay-windows: 10\n            jitter: 0.5\n            initial-interval: 250ms\n            max-interval: PT30S\n            step-timeout: 2m\n",
			func(c Config) bool {
				return c.Retry.Default == RetryPolicy{DelayWindows: 1, MaxAttempts: 4, BackoffMultiplier: 1.5, MaxDelayWindows: 10, Jitter: 0.5, InitialInterval: 250 * time.Millisecond, MaxInterval: 30 * time.Second, StepTimeout: 2 * time.Minute}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConfigWithEnv([]byte(tc.yaml), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("got %+v", c)
			}
		})
	}
}

func TestLoadConfigEnv(t *testing.T) {
	env := envMap(map[string]string{
		EnvInterval:            " 2s ",
		EnvBucketSize:          "3",
		EnvConcurrency:         "7",
		EnvLookbackDays:        "5",
		EnvPageSize:            "10",
		EnvTransactionLifetime: "1h",
		EnvRetryDelayWindows:   "2",
		EnvRetryMaxAttempts:    "3",
		EnvRetryMultiplier:     "1",
		EnvRetryMaxDelay:       "4",
		EnvRetryJitter:         "0",
		EnvRetryInitial:        "500ms",
		EnvRetryMaxInterval:    "20s",
		EnvStepTimeout:         "45s",
		EnvRestoreDelayWindows: "30",
		"UNRELATED":            "x",
	})
	c, err := LoadConfigWithEnv([]byte("stacksaga:\n  cassandra:\n    recovery:\n      window-interval-minutes: 5\n      bucket-size: 10\n"), env)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Interval: 2 * time.Second, BucketSize: 3, Concurrency: 7, LookbackDays: 5, PageSize: 10, TransactionLifetime: time.Hour,
		Retry:   RetryConfig{Default: RetryPolicy{DelayWindows: 2, MaxAttempts: 3, BackoffMultiplier: 1, MaxDelayWindows: 4, InitialInterval: 500 * time.Millisecond, MaxInterval: 20 * time.Second, StepTimeout: 45 * time.Second}},
		Restore: RestoreConfig{DefaultDelayWindows: 30},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	// Blank variables are ignored.
	c, err = LoadConfigWithEnv(nil, envMap(map[string]string{EnvBucketSize: "  "}))
	if err != nil || c.BucketSize != DefaultBucketSize {
		t.Fatalf("blank variable: %+v %v", c, err)
	}
	c, err = LoadConfigWithEnv(nil, envMap(map[string]string{EnvIntervalMinutes: "15"}))
	if err != nil || c.Interval != 15*time.Minute {
		t.Fatalf("minutes variable: %+v %v", c.Interval, err)
	}
}

// Every error names its full key (and the variable, for environment
// overrides); all problems are reported at once.
func TestLoadConfigErrorsNameKeys(t *testing.T) {
	const p = "stacksaga.cassandra."
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       []string
	}{
		{"interval not dividing 1440", "stacksaga:\n  cassandra:\n    recovery:\n      window-interval-minutes: 7\n", nil,
			[]string{p + "recovery.window-interval-minutes: must divide 1440"}},
		{"interval zero", "stacksaga:\n  cassandra:\n    recovery:\n      window-interval-minutes: 0\n", nil,
			[]string{p + "recovery.window-interval-minutes: must divide 1440"}},
		{"interval not a number", "stacksaga:\n  cassandra:\n    recovery:\n      window-interval-minutes: one\n", nil,
			[]string{p + "recovery.window-interval-minutes: not an integer"}},
		{"second interval not dividing 60", "stacksaga:\n  cassandra:\n    recovery:\n      window-interval: 7s\n", nil,
			[]string{p + "recovery.window-interval: recovery: invalid window interval: 7s"}},
		{"interval without unit", "stacksaga:\n  cassandra:\n    recovery:\n      window-interval: 2\n", nil,
			[]string{p + "recovery.window-interval: recovery: duration \"2\" needs a unit"}},
		{"interval keys disagreeing", "stacksaga:\n  cassandra:\n    recovery:\n      window-interval: 2s\n      window-interval-minutes: 1\n", nil,
			[]string{p + "recovery.window-interval: disagrees with " + p + "recovery.window-interval-minutes"}},
		{"lifetime keys disagreeing", "stacksaga:\n  cassandra:\n    transaction-lifetime: 1h\n    transaction:\n      lifetime: 2h\n", nil,
			[]string{p + "transaction-lifetime: disagrees with " + p + "transaction.lifetime"}},
		{"many at once", `
stacksaga:
  cassandra:
    transaction-lifetime: -1h
    recovery:
      bucket-size: 0
      concurrency: -3
      lookback-days: 5000
      page-size: x
      retry:
        domains:
          default:
            delay-windows: 0
            jitter: 2
            initial-interval: 2h
            max-interval: soon
            step-timeout: -1s
          order-saga:
            max-attempts: -1
            backoff-multiplier: 0.5
            endpoints:
              charge:
                max-delay-windows: 0
      restore:
        domains:
          default:
            delay-windows: 0
          order-saga:
            delay-windows: abc
`, nil, []string{
			p + "recovery.bucket-size: must be 1..100000 (a restore scan",
			p + "recovery.concurrency: must be at least 1, got -3",
			p + "recovery.lookback-days: must be 1..1000",
			p + "recovery.page-size: not an integer",
			p + "recovery.retry.domains.default.delay-windows: must be 1..",
			p + "recovery.retry.domains.default.jitter: must be 0..1, got 2",
			p + "recovery.retry.domains.default.initial-interval: must be 0 (no in-process retries) or 1ms..1h0m0s, got 2h0m0s",
			p + "recovery.retry.domains.default.max-interval: recovery: invalid duration",
			p + "recovery.retry.domains.default.step-timeout: must be 0 (none) or 10ms..24h0m0s, got -1s",
			p + "recovery.retry.domains.order-saga.max-attempts: must be 0 (unlimited) or more, got -1",
			p + "recovery.retry.domains.order-saga.backoff-multiplier: must be 1..100, got 0.5",
			p + "recovery.retry.domains.order-saga.endpoints.charge.max-delay-windows: must be 1..",
			p + "recovery.restore.domains.default.delay-windows: must be 1..",
			p + "recovery.restore.domains.order-saga.delay-windows: not an integer",
			p + "transaction-lifetime: must be positive",
		}},
		{"bucket beyond the tombstone threshold", "stacksaga:\n  cassandra:\n    recovery:\n      bucket-size: 100001\n", nil,
			[]string{p + "recovery.bucket-size: must be 1..100000 (a restore scan of a bucket reads up to bucket-size tombstones; Cassandra fails a read past tombstone_failure_threshold, 100000 by default), got 100001"}},
		{"delay too far for the interval", "stacksaga:\n  cassandra:\n    recovery:\n      window-interval-minutes: 1440\n      restore:\n        domains:\n          default:\n            delay-windows: 400\n", nil,
			[]string{p + "recovery.restore.domains.default.delay-windows: 400 windows of 24h0m0s reach beyond"}},
		{"bad environment", "", map[string]string{EnvBucketSize: "many", EnvInterval: "7s", EnvTransactionLifetime: "soon", EnvRetryJitter: "x"}, []string{
			EnvBucketSize + " (" + p + "recovery.bucket-size): not an integer",
			p + "recovery.window-interval: recovery: invalid window interval: 7s",
			EnvTransactionLifetime + " (" + p + "transaction-lifetime): recovery: invalid duration",
			EnvRetryJitter + " (" + p + "recovery.retry.domains.default.jitter): not a number",
		}},
		{"environment interval variables disagreeing", "", map[string]string{EnvInterval: "2s", EnvIntervalMinutes: "1"}, []string{
			EnvInterval + " (" + p + "recovery.window-interval): disagrees with " + EnvIntervalMinutes,
		}},
		{"environment minutes not dividing 1440", "", map[string]string{EnvIntervalMinutes: "7"}, []string{
			EnvIntervalMinutes + " (" + p + "recovery.window-interval-minutes): must divide 1440",
		}},
		{"YAML type error", "stacksaga: [1, 2]\n", nil, []string{"recovery: invalid configuration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfigWithEnv([]byte(tc.yaml), envMap(tc.env))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error does not wrap ErrInvalidConfig: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// lookback-days 0 would scan today only: the last window of each day,
// sealed at midnight, would never be scanned (issue 35.11). It is refused,
// from YAML, from the environment and in a Config, naming the key.
func TestLookbackDaysZeroIsRefused(t *testing.T) {
	const key = "stacksaga.cassandra.recovery.lookback-days: must be 1..1000"
	_, err := LoadConfigWithEnv([]byte("stacksaga:\n  cassandra:\n    recovery:\n      lookback-days: 0\n"), noEnv)
	if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), key) {
		t.Errorf("YAML lookback-days 0: %v", err)
	}
	_, err = LoadConfigWithEnv(nil, envMap(map[string]string{EnvLookbackDays: "0"}))
	if err == nil || !strings.Contains(err.Error(), key) {
		t.Errorf("%s=0: %v", EnvLookbackDays, err)
	}
	c := DefaultConfig()
	c.LookbackDays = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key) {
		t.Errorf("Validate with LookbackDays 0: %v", err)
	}
	if _, err := NewEngine(memory.New(), eventstore.Scope{Region: "r", Cluster: "c", Service: "s"}, RedriverFunc(func(context.Context, eventstore.RecoveryEntry) error { return nil }), c); err == nil || !strings.Contains(err.Error(), key) {
		t.Errorf("NewEngine with LookbackDays 0: %v", err)
	}
	c.LookbackDays = 1
	if err := c.Validate(); err != nil {
		t.Errorf("LookbackDays 1: %v", err)
	}
}

func TestValidateNamesKeys(t *testing.T) {
	c := DefaultConfig()
	c.Interval = 90 * time.Second
	c.Retry.Domains = map[string]RetryOverride{"": {}, DefaultDomain: {}}
	c.Restore.Domains = map[string]int{"x": 0}
	err := c.Validate()
	for _, w := range []string{
		"stacksaga.cassandra.recovery.window-interval-minutes: recovery: invalid window interval",
		"stacksaga.cassandra.recovery.retry.domains: empty domain name",
		"stacksaga.cassandra.recovery.retry.domains.default: the default domain belongs in Retry.Default",
		"stacksaga.cassandra.recovery.restore.domains.x.delay-windows: must be 1..",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate error lacks %q: %v", w, err)
		}
	}
	if err := (Config{}).Validate(); err == nil {
		t.Error("the zero Config is valid")
	}
}

func TestLoadConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stacksaga.yaml")
	if err := os.WriteFile(path, []byte(seedYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfigFile(path); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfigFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "recovery: read configuration") {
		t.Fatalf("missing file: %v", err)
	}
	// The project's sample configuration loads.
	if _, err := LoadConfigFile("../examples/stacksaga.yaml"); err != nil {
		t.Fatal(err)
	}
}

func TestExpired(t *testing.T) {
	c := DefaultConfig()
	created := at("2026-03-10T10:00:00Z")
	if c.Expired(created, created.Add(24*time.Hour-time.Millisecond)) {
		t.Error("expired before 24h")
	}
	if !c.Expired(created, created.Add(24*time.Hour)) {
		t.Error("not expired at 24h")
	}
	if c.Expired(time.Time{}, created) {
		t.Error("a zero creation time expires")
	}
	c.TransactionLifetime = time.Hour
	if !c.Expired(created, created.Add(time.Hour)) {
		t.Error("lifetime not honoured")
	}
}

// The saga-level deadline: none by default, per domain from
// deadline.domains.<name>.saga-timeout (the default domain's also from the
// environment), bad values refused naming their key.
func TestLoadConfigSagaTimeout(t *testing.T) {
	c, err := LoadConfigWithEnv(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.SagaTimeout("order-saga"); got != 0 {
		t.Fatalf("default saga timeout %v, want none", got)
	}
	c, err = LoadConfigWithEnv([]byte(`
stacksaga:
  cassandra:
    recovery:
      deadline:
        domains:
          default:
            saga-timeout: 10m
          order-saga:
            saga-timeout: PT30S
          audit-saga:
            saga-timeout: 0s
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for domain, want := range map[string]time.Duration{"order-saga": 30 * time.Second, "audit-saga": 0, "other": 10 * time.Minute} {
		if got := c.SagaTimeout(domain); got != want {
			t.Errorf("SagaTimeout(%q) = %v, want %v", domain, got, want)
		}
	}
	c, err = LoadConfigWithEnv(nil, func(k string) (string, bool) {
		return "2m", k == EnvSagaTimeout
	})
	if err != nil || c.SagaTimeout("x") != 2*time.Minute {
		t.Fatalf("from %s: %v, %v", EnvSagaTimeout, c.SagaTimeout("x"), err)
	}
	_, err = LoadConfigWithEnv([]byte(`
stacksaga:
  cassandra:
    recovery:
      deadline:
        domains:
          default:
            saga-timeout: -1s
          order-saga:
            saga-timeout: soon
`), nil)
	for _, want := range []string{
		"stacksaga.cassandra.recovery.deadline.domains.default.saga-timeout: must be 0 (none) or 10ms..",
		"stacksaga.cassandra.recovery.deadline.domains.order-saga.saga-timeout: ",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want it to name %q", err, want)
		}
	}
}
