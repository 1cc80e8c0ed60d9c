package writeprotect_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/writeprotect"
)

func TestDefaultConfig(t *testing.T) {
	c := writeprotect.DefaultConfig()
	if c.DefaultMode != writeprotect.RelaxedWithDedup || c.DefaultLease != 5*time.Second || len(c.Domains) != 0 ||
		c.MarkerRetention != writeprotect.DefaultMarkerRetention || writeprotect.DefaultMarkerRetention != 48*time.Hour {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// The zero Config is valid and means the defaults.
	if err := (writeprotect.Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if got := (writeprotect.Config{}).Resolve("any"); got != (writeprotect.DomainConfig{Mode: writeprotect.RelaxedWithDedup, Lease: 5 * time.Second}) {
		t.Fatalf("zero Config resolves to %+v", got)
	}
}

// The seed's complete application.yml (less its Java driver's
// `config: classpath:...` key, which the Go driver has no use for and the
// strict decoding refuses): other sections are ignored.
const seedYAML = `
stacksaga:
  instance:
    region: us-central
    cluster: us-central-cluster-1

  cassandra:
    read-consistency-level: LOCAL_QUORUM
    write-consistency-level: LOCAL_QUORUM

    transaction:
      lifetime: 24h

    write-protection:
      default-mode: RELAXED_WITH_DEDUP      # default
      default-lease-duration: 5s
      domains:
        payment-saga:
          mode: STRICT
          lease-duration: 10s
        order-saga:
          mode: STRICT
        notification-saga:
          mode: RELAXED_WITH_DEDUP

    recovery:
      concurrency: 100
      window-interval-minutes: 1
other:
  key: 1
`

func noEnv(string) (string, bool) { return "", false }

func TestLoadConfigSeedExample(t *testing.T) {
	c, err := writeprotect.LoadConfigWithEnv([]byte(seedYAML), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := writeprotect.Config{
		DefaultMode:         writeprotect.RelaxedWithDedup,
		DefaultLease:        5 * time.Second,
		MarkerRetention:     writeprotect.DefaultMarkerRetention,
		TransactionLifetime: writeprotect.DefaultTransactionLifetime,
		Domains: map[string]writeprotect.DomainConfig{
			"payment-saga":      {Mode: writeprotect.Strict, Lease: 10 * time.Second},
			"order-saga":        {Mode: writeprotect.Strict},
			"notification-saga": {Mode: writeprotect.RelaxedWithDedup},
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("LoadConfig:\n got %+v\nwant %+v", c, want)
	}
	for domain, wantRes := range map[string]writeprotect.DomainConfig{
		"payment-saga":      {Mode: writeprotect.Strict, Lease: 10 * time.Second},
		"order-saga":        {Mode: writeprotect.Strict, Lease: 5 * time.Second},
		"notification-saga": {Mode: writeprotect.RelaxedWithDedup, Lease: 5 * time.Second},
		"unknown-saga":      {Mode: writeprotect.RelaxedWithDedup, Lease: 5 * time.Second},
	} {
		if got := c.Resolve(domain); got != wantRes {
			t.Errorf("Resolve(%q) = %+v, want %+v", domain, got, wantRes)
		}
	}
}

func TestLoadConfigDefaultsAndForms(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       writeprotect.Config
	}{
		{"empty document", "", writeprotect.DefaultConfig()},
		{"no section", "stacksaga:\n  cassandra:\n    keyspace: x\n", writeprotect.DefaultConfig()},
		{"nulls take defaults", "stacksaga:\n  cassandra:\n    write-protection:\n      default-mode: null\n      default-lease-duration: ~\n",
			writeprotect.DefaultConfig()},
		{"strict with ISO lease", "stacksaga:\n  cassandra:\n    write-protection:\n      default-mode: strict\n      default-lease-duration: PT7S\n",
			writeprotect.Config{DefaultMode: writeprotect.Strict, DefaultLease: 7 * time.Second, MarkerRetention: 48 * time.Hour, TransactionLifetime: 24 * time.Hour}},
		{"dashes and case", "stacksaga:\n  cassandra:\n    write-protection:\n      default-mode: relaxed-with-dedup\n      default-lease-duration: 1m30s\n",
			writeprotect.Config{DefaultMode: writeprotect.RelaxedWithDedup, DefaultLease: 90 * time.Second, MarkerRetention: 48 * time.Hour, TransactionLifetime: 24 * time.Hour}},
		{"domain with lease only", "stacksaga:\n  cassandra:\n    write-protection:\n      domains:\n        d:\n          lease-duration: 2s\n",
			writeprotect.Config{DefaultMode: writeprotect.RelaxedWithDedup, DefaultLease: 5 * time.Second, MarkerRetention: 48 * time.Hour, TransactionLifetime: 24 * time.Hour,
				Domains: map[string]writeprotect.DomainConfig{"d": {Lease: 2 * time.Second}}}},
		{"marker retention", "stacksaga:\n  cassandra:\n    write-protection:\n      marker-retention: 72h\n",
			writeprotect.Config{DefaultMode: writeprotect.RelaxedWithDedup, DefaultLease: 5 * time.Second, MarkerRetention: 72 * time.Hour, TransactionLifetime: 24 * time.Hour}},
		{"ISO marker retention", "stacksaga:\n  cassandra:\n    write-protection:\n      marker-retention: P7D\n",
			writeprotect.Config{DefaultMode: writeprotect.RelaxedWithDedup, DefaultLease: 5 * time.Second, MarkerRetention: 7 * 24 * time.Hour, TransactionLifetime: 24 * time.Hour}},
		{"permanent markers", "stacksaga:\n  cassandra:\n    write-protection:\n      marker-retention: -1s\n",
			writeprotect.Config{DefaultMode: writeprotect.RelaxedWithDedup, DefaultLease: 5 * time.Second, MarkerRetention: -time.Second, TransactionLifetime: 24 * time.Hour}},
		{"zero retention takes the default", "stacksaga:\n  cassandra:\n    write-protection:\n      marker-retention: 0s\n",
			writeprotect.DefaultConfig()},
		{"null retention takes the default", "stacksaga:\n  cassandra:\n    write-protection:\n      marker-retention: ~\n",
			writeprotect.DefaultConfig()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := writeprotect.LoadConfigWithEnv([]byte(tc.yaml), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c, tc.want) {
				t.Fatalf("got %+v, want %+v", c, tc.want)
			}
		})
	}
}

// Every problem is reported at once, each naming its full key.
func TestLoadConfigErrorsNameKeys(t *testing.T) {
	const doc = `
stacksaga:
  cassandra:
    write-protection:
      default-mode: EVENTUAL
      default-lease-duration: 5
      domains:
        payment-saga:
          mode: STRICTER
          lease-duration: -3s
        order-saga:
          lease-duration: soon
`
	_, err := writeprotect.LoadConfigWithEnv([]byte(doc), noEnv)
	if !errors.Is(err, writeprotect.ErrInvalidConfig) {
		t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`stacksaga.cassandra.write-protection.default-mode: unknown mode "EVENTUAL"`,
		`stacksaga.cassandra.write-protection.default-lease-duration: writeprotect: duration "5" needs a unit`,
		`stacksaga.cassandra.write-protection.domains.payment-saga.mode: unknown mode "STRICTER"`,
		`stacksaga.cassandra.write-protection.domains.order-saga.lease-duration: writeprotect: invalid duration "soon"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	// The negative lease parses; Validate reports it once the parse errors
	// are fixed.
	fixed := strings.NewReplacer("EVENTUAL", "STRICT", "default-lease-duration: 5", "default-lease-duration: 5s",
		"STRICTER", "STRICT", "soon", "1s").Replace(doc)
	_, err = writeprotect.LoadConfigWithEnv([]byte(fixed), noEnv)
	if err == nil || !strings.Contains(err.Error(), "stacksaga.cassandra.write-protection.domains.payment-saga.lease-duration: must be positive, got -3s") {
		t.Fatalf("negative lease: %v", err)
	}

	if _, err := writeprotect.LoadConfigWithEnv([]byte("stacksaga: [1, 2"), noEnv); !errors.Is(err, writeprotect.ErrInvalidConfig) {
		t.Fatalf("malformed YAML: %v", err)
	}
}

func TestValidate(t *testing.T) {
	c := writeprotect.Config{
		DefaultMode:  "FAST",
		DefaultLease: -time.Second,
		Domains: map[string]writeprotect.DomainConfig{
			"":  {},
			"b": {Mode: "X", Lease: -1},
			"a": {Mode: writeprotect.Strict, Lease: 2 * time.Second},
		},
	}
	err := c.Validate()
	if !errors.Is(err, writeprotect.ErrInvalidConfig) {
		t.Fatalf("Validate() = %v", err)
	}
	want := []string{
		writeprotect.ErrInvalidConfig.Error(),
		`stacksaga.cassandra.write-protection.default-lease-duration: must be positive, got -1s`,
		`stacksaga.cassandra.write-protection.default-mode: unknown mode "FAST" (want STRICT or RELAXED_WITH_DEDUP)`,
		`stacksaga.cassandra.write-protection.domains.b.lease-duration: must be positive, got -1ns`,
		`stacksaga.cassandra.write-protection.domains.b.mode: unknown mode "X" (want STRICT or RELAXED_WITH_DEDUP)`,
		`stacksaga.cassandra.write-protection.domains: empty domain name`,
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Fatalf("Validate():\n got %q\nwant %q", got, want)
	}
}

func TestApplyEnv(t *testing.T) {
	env := map[string]string{
		writeprotect.EnvDefaultMode:     "STRICT",
		writeprotect.EnvDefaultLease:    "3s",
		writeprotect.EnvMarkerRetention: "PT96H",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := writeprotect.LoadConfigWithEnv([]byte(seedYAML), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if c.DefaultMode != writeprotect.Strict || c.DefaultLease != 3*time.Second || c.MarkerRetention != 96*time.Hour {
		t.Fatalf("env overrides not applied: %+v", c)
	}
	if c.Domains["payment-saga"].Lease != 10*time.Second {
		t.Fatalf("domain override lost: %+v", c.Domains)
	}
	env[writeprotect.EnvDefaultMode] = "sometimes"
	env[writeprotect.EnvDefaultLease] = "3"
	env[writeprotect.EnvMarkerRetention] = "48"
	_, err = writeprotect.LoadConfigWithEnv(nil, lookup)
	if err == nil || !strings.Contains(err.Error(), writeprotect.EnvDefaultMode+" (stacksaga.cassandra.write-protection.default-mode)") ||
		!strings.Contains(err.Error(), writeprotect.EnvDefaultLease+" (stacksaga.cassandra.write-protection.default-lease-duration)") ||
		!strings.Contains(err.Error(), writeprotect.EnvMarkerRetention+" (stacksaga.cassandra.write-protection.marker-retention)") {
		t.Fatalf("bad env values: %v", err)
	}
	// The variable overrides the YAML key, and its value is validated.
	env = map[string]string{writeprotect.EnvMarkerRetention: "10m"}
	_, err = writeprotect.LoadConfigWithEnv([]byte("stacksaga:\n  cassandra:\n    write-protection:\n      marker-retention: 72h\n"), lookup)
	if err == nil || !strings.Contains(err.Error(), "stacksaga.cassandra.write-protection.marker-retention: must be at least 1h0m0s") {
		t.Fatalf("short retention from the environment: %v", err)
	}
}

// marker-retention: at least MinMarkerRetention, at most Cassandra's
// longest TTL, negative for none; every refusal names the key.
func TestMarkerRetentionBounds(t *testing.T) {
	const key = "stacksaga.cassandra.write-protection.marker-retention: "
	doc := func(v string) []byte {
		return []byte("stacksaga:\n  cassandra:\n    write-protection:\n      marker-retention: " + v + "\n")
	}
	for v, want := range map[string]string{
		"30m":     key + "must be at least 1h0m0s (longer than the transaction lifetime)",
		"59m59s":  key + "must be at least 1h0m0s",
		"P7400D":  key + "must be at most 175200h0m0s (Cassandra's longest TTL), got 177600h0m0s",
		"forever": key + `writeprotect: invalid duration "forever"`,
		"172800":  key + `writeprotect: duration "172800" needs a unit`,
		"1ns":     key + "must be at least 1h0m0s",
		"1h":      key + "must be at least stacksaga.cassandra.transaction-lifetime (24h0m0s), got 1h0m0s",
		"P7300D":  key + "must end by 2038-01-19T03:14:06Z",
	} {
		_, err := writeprotect.LoadConfigWithEnv(doc(v), noEnv)
		if !errors.Is(err, writeprotect.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("marker-retention %s: %v, want %q", v, err, want)
		}
	}
	for _, v := range []string{"24h", "-1ns", "-48h", "P3650D"} {
		c, err := writeprotect.LoadConfigWithEnv(doc(v), noEnv)
		if err != nil {
			t.Errorf("marker-retention %s: %v", v, err)
			continue
		}
		if d, _ := writeprotect.ParseDuration(v); c.MarkerRetention != d {
			t.Errorf("marker-retention %s loaded as %v", v, c.MarkerRetention)
		}
	}
	c := writeprotect.Config{MarkerRetention: time.Minute}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key+"must be at least 1h0m0s") {
		t.Errorf("Validate: %v", err)
	}
	if _, err := writeprotect.New(memoryBackend(t).store, c); err == nil || !strings.Contains(err.Error(), key) {
		t.Errorf("New with a one-minute retention: %v", err)
	}
}

func TestLoadConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "application.yml")
	if err := os.WriteFile(path, []byte(seedYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(writeprotect.EnvDefaultMode, "")
	t.Setenv(writeprotect.EnvDefaultLease, "")
	c, err := writeprotect.LoadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Resolve("payment-saga").Mode != writeprotect.Strict {
		t.Fatalf("LoadConfigFile: %+v", c)
	}
	if _, err := writeprotect.LoadConfigFile(filepath.Join(t.TempDir(), "missing.yml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte("stacksaga:\n  cassandra:\n    write-protection:\n      default-mode: NOPE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := writeprotect.LoadConfigFile(bad); err == nil || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Fatalf("bad file error does not name the file: %v", err)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"5s": 5 * time.Second, "500ms": 500 * time.Millisecond, "1m30s": 90 * time.Second,
		"PT5S": 5 * time.Second, "pt1.5s": 1500 * time.Millisecond, "PT2M": 2 * time.Minute, "P1DT1H": 25 * time.Hour, "P1D": 24 * time.Hour,
	} {
		got, err := writeprotect.ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "5", "1.5", "P", "PT", "P1DT", "five seconds", "PT5X"} {
		if _, err := writeprotect.ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) succeeded", in)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]writeprotect.Mode{
		"STRICT": writeprotect.Strict, " strict ": writeprotect.Strict,
		"RELAXED_WITH_DEDUP": writeprotect.RelaxedWithDedup, "relaxed-with-dedup": writeprotect.RelaxedWithDedup,
	} {
		if got, err := writeprotect.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := writeprotect.ParseMode("RELAXED"); err == nil {
		t.Error("ParseMode(RELAXED) succeeded")
	}
}
