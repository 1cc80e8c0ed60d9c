package ringcoordinator

import (
	"errors"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// Every key the ring coordinator's loader reads is in the document's schema.
func TestConfigKeysAreListed(t *testing.T) {
	var all []string
	for _, k := range keys {
		all = append(all, "stacksaga."+k.path)
	}
	if u := yamlconfig.Unlisted(all); len(u) > 0 {
		t.Fatalf("keys read but not in yamlconfig.Keys: %q", u)
	}
}

// A misspelt key of the block fails at start naming it.
func TestConfigMisspeltKeysFail(t *testing.T) {
	for _, tc := range []struct{ doc, key string }{
		{"stacksaga:\n  coordinator: {cylce: 1m}\n", "stacksaga.coordinator.cylce"},
		{"stacksaga:\n  agent: {master: {prot: 7100}}\n", "stacksaga.agent.master.prot"},
		{"stacksaga:\n  agent: {slave: {target_master: {host: h}}}\n", "stacksaga.agent.slave.target_master"},
	} {
		_, err := LoadConfigWithEnv([]byte(tc.doc), nil)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("LoadConfigWithEnv(%q) = %v, want ErrInvalidConfig naming %s", tc.doc, err, tc.key)
		}
	}
}
