package ringcoordinator

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig/keytest"
)

// Every key the ring coordinator's loader reads is in the document's schema.
func TestConfigKeysAreListed(t *testing.T) {
	var all []string
	for _, k := range keys {
		all = append(all, "stacksaga."+k.path)
	}
	keytest.Listed(t, all)
}

// A misspelt key of the block fails at start naming it.
func TestConfigMisspeltKeysFail(t *testing.T) {
	keytest.Refused(t, func(doc []byte) error { _, err := LoadConfigWithEnv(doc, nil); return err }, ErrInvalidConfig, map[string]string{
		"stacksaga:\n  coordinator: {cylce: 1m}\n":                   "stacksaga.coordinator.cylce",
		"stacksaga:\n  agent: {master: {prot: 7100}}\n":              "stacksaga.agent.master.prot",
		"stacksaga:\n  agent: {slave: {target_master: {host: h}}}\n": "stacksaga.agent.slave.target_master",
	})
}
