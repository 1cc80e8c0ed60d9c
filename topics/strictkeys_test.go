package topics

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig/keytest"
)

// Every key the group-type loader reads is in the document's schema.
func TestGroupConfigKeysAreListed(t *testing.T) { keytest.ListedType(t, groupDoc{}) }

// A misspelt key of the block fails at start naming it.
func TestGroupConfigMisspeltKeysFail(t *testing.T) {
	keytest.Refused(t, func(doc []byte) error { _, err := LoadGroupConfig(doc); return err }, ErrInvalidGroupConfig, map[string]string{
		"stacksaga:\n  kafka: {worker: {services: {s: {group_type: share}}}}\n":     "stacksaga.kafka.worker.services.s.group_type",
		"stacksaga:\n  kafka: {orchestrator: {domain: {d: {group-type: share}}}}\n": "stacksaga.kafka.orchestrator.domain",
	})
}
