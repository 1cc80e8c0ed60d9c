package cassandra

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig/keytest"
)

// Every key the stacksaga.cassandra loader reads is in the document's schema,
// so the strict decoding never refuses one of them.
func TestConfigKeysAreListed(t *testing.T) { keytest.ListedType(t, file{}) }

// A misspelt key of the block fails at start naming it; in particular the TLS
// block never falls back to plain text because a key was misspelt.
func TestConfigMisspeltKeysFail(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	keytest.Refused(t, func(doc []byte) error { _, err := loadConfig(doc, noEnv); return err }, ErrInvalidConfig, map[string]string{
		"stacksaga:\n  cassandra:\n    tls: {ca_file: /etc/ca.pem}\n":                     "stacksaga.cassandra.tls.ca_file",
		"stacksaga:\n  cassandra:\n    tls: {enable: true}\n":                             "stacksaga.cassandra.tls.enable",
		"stacksaga:\n  cassandra:\n    tls: {cafile: /etc/ca.pem, enabled: true}\n":       "stacksaga.cassandra.tls.cafile",
		"stacksaga:\n  cassandra:\n    contact-point: [127.0.0.1]\n":                      "stacksaga.cassandra.contact-point",
		"stacksaga:\n  cassandra:\n    reconnection-policy: {max-retry: 3}\n":             "stacksaga.cassandra.reconnection-policy.max-retry",
		"stacksaga:\n  cassandra:\n    replication: {class: SimpleStrategy, factor: 1}\n": "stacksaga.cassandra.replication.factor",
	})
}
