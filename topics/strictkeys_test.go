package topics

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// Every key the group-type loader reads is in the document's schema.
func TestGroupConfigKeysAreListed(t *testing.T) {
	if u := yamlconfig.Unlisted(yamlconfig.KeysOf(reflect.TypeOf(groupDoc{}))); len(u) > 0 {
		t.Fatalf("keys read but not in yamlconfig.Keys: %q", u)
	}
}

// A misspelt key of the block fails at start naming it.
func TestGroupConfigMisspeltKeysFail(t *testing.T) {
	for _, tc := range []struct{ doc, key string }{
		{"stacksaga:\n  kafka: {worker: {services: {s: {group_type: share}}}}\n", "stacksaga.kafka.worker.services.s.group_type"},
		{"stacksaga:\n  kafka: {orchestrator: {domain: {d: {group-type: share}}}}\n", "stacksaga.kafka.orchestrator.domain"},
	} {
		_, err := LoadGroupConfig([]byte(tc.doc))
		if !errors.Is(err, ErrInvalidGroupConfig) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("LoadGroupConfig(%q) = %v, want ErrInvalidGroupConfig naming %s", tc.doc, err, tc.key)
		}
	}
}
