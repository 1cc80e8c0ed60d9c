package recovery

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// Every key the recovery loader reads is in the document's schema.
func TestConfigKeysAreListed(t *testing.T) {
	if u := yamlconfig.Unlisted(yamlconfig.KeysOf(reflect.TypeOf(file{}))); len(u) > 0 {
		t.Fatalf("keys read but not in yamlconfig.Keys: %q", u)
	}
}

// A misspelt key of the block fails at start naming it.
func TestConfigMisspeltKeysFail(t *testing.T) {
	for _, tc := range []struct{ doc, key string }{
		{"stacksaga:\n  cassandra:\n    recovery: {lookback_days: 3}\n", "stacksaga.cassandra.recovery.lookback_days"},
		{"stacksaga:\n  cassandra:\n    recovery: {retry: {domains: {d: {delay-window: 2}}}}\n", "stacksaga.cassandra.recovery.retry.domains.d.delay-window"},
		{"stacksaga:\n  cassandra:\n    recovery: {retry: {domains: {d: {endpoints: {e: {jiter: 0.1}}}}}}\n", "stacksaga.cassandra.recovery.retry.domains.d.endpoints.e.jiter"},
		{"stacksaga:\n  cassandra:\n    recovery: {restore: {default: {delay-windows: 6}}}\n", "stacksaga.cassandra.recovery.restore.default"},
		{"stacksaga:\n  cassandra:\n    transaction: {life-time: 1h}\n", "stacksaga.cassandra.transaction.life-time"},
	} {
		_, err := LoadConfigWithEnv([]byte(tc.doc), nil)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("LoadConfigWithEnv(%q) = %v, want ErrInvalidConfig naming %s", tc.doc, err, tc.key)
		}
	}
}
