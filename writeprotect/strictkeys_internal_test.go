package writeprotect

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig/keytest"
)

// Every key the write-protection loader reads is in the document's schema.
func TestConfigKeysAreListed(t *testing.T) { keytest.ListedType(t, file{}) }

// A misspelt key of the block fails at start naming it.
func TestConfigMisspeltKeysFail(t *testing.T) {
	keytest.Refused(t, func(doc []byte) error { _, err := LoadConfigWithEnv(doc, nil); return err }, ErrInvalidConfig, map[string]string{
		"stacksaga:\n  cassandra:\n    write-protection: {default_mode: STRICT}\n":                    "stacksaga.cassandra.write-protection.default_mode",
		"stacksaga:\n  cassandra:\n    write-protection: {domains: {d: {mode: STRICT, lease: 1s}}}\n": "stacksaga.cassandra.write-protection.domains.d.lease",
		"stacksaga:\n  cassandra:\n    writeprotection: {default-mode: STRICT}\n":                     "stacksaga.cassandra.writeprotection",
	})
}
