package recovery

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig/keytest"
)

// Every key the recovery loader reads is in the document's schema.
func TestConfigKeysAreListed(t *testing.T) { keytest.ListedType(t, file{}) }

// A misspelt key of the block fails at start naming it.
func TestConfigMisspeltKeysFail(t *testing.T) {
	keytest.Refused(t, func(doc []byte) error { _, err := LoadConfigWithEnv(doc, nil); return err }, ErrInvalidConfig, map[string]string{
		"stacksaga:\n  cassandra:\n    recovery: {lookback_days: 3}\n":                                      "stacksaga.cassandra.recovery.lookback_days",
		"stacksaga:\n  cassandra:\n    recovery: {retry: {domains: {d: {delay-window: 2}}}}\n":              "stacksaga.cassandra.recovery.retry.domains.d.delay-window",
		"stacksaga:\n  cassandra:\n    recovery: {retry: {domains: {d: {endpoints: {e: {jiter: 0.1}}}}}}\n": "stacksaga.cassandra.recovery.retry.domains.d.endpoints.e.jiter",
		"stacksaga:\n  cassandra:\n    recovery: {restore: {default: {delay-windows: 6}}}\n":                "stacksaga.cassandra.recovery.restore.default",
		"stacksaga:\n  cassandra:\n    transaction: {life-time: 1h}\n":                                      "stacksaga.cassandra.transaction.life-time",
	})
}
