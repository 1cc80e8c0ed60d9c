package writeprotect

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// Every key the write-protection loader reads is in the document's schema.
func TestConfigKeysAreListed(t *testing.T) {
	if u := yamlconfig.Unlisted(yamlconfig.KeysOf(reflect.TypeOf(file{}))); len(u) > 0 {
		t.Fatalf("keys read but not in yamlconfig.Keys: %q", u)
	}
}

// A misspelt key of the block fails at start naming it.
func TestConfigMisspeltKeysFail(t *testing.T) {
	for _, tc := range []struct{ doc, key string }{
		{"stacksaga:\n  cassandra:\n    write-protection: {default_mode: STRICT}\n", "stacksaga.cassandra.write-protection.default_mode"},
		{"stacksaga:\n  cassandra:\n    write-protection: {domains: {d: {mode: STRICT, lease: 1s}}}\n", "stacksaga.cassandra.write-protection.domains.d.lease"},
		{"stacksaga:\n  cassandra:\n    writeprotection: {default-mode: STRICT}\n", "stacksaga.cassandra.writeprotection"},
	} {
		_, err := LoadConfigWithEnv([]byte(tc.doc), nil)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("LoadConfigWithEnv(%q) = %v, want ErrInvalidConfig naming %s", tc.doc, err, tc.key)
		}
	}
}
