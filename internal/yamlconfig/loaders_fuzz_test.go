package yamlconfig_test

import (
	"errors"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// FuzzLoaders feeds every YAML loader the same arbitrary document: none may
// panic, and each either loads it or refuses it with its package's
// invalid-configuration error (so a caller can tell a bad file from a bug).
func FuzzLoaders(f *testing.F) {
	for _, doc := range []string{
		"stacksaga:\n  cassandra:\n    contact-points: [127.0.0.1:9042]\n    tls: {enabled: true, ca-file: /nonexistent.pem}\n",
		"stacksaga:\n  cassandra:\n    write-protection: {default-mode: STRICT, domains: {d: {lease-duration: PT5S}}}\n",
		"stacksaga:\n  cassandra:\n    recovery: {window-interval-minutes: 1, lookback-days: 2, retry: {domains: {d: {endpoints: {e: {jitter: 0.5}}}}}}\n",
		"stacksaga:\n  kafka: {worker: {services: {s: {group-type: share, delivery-count-limit: 5}}}}\n",
		"stacksaga:\n  coordinator: {cycle: 1m, publish-offset: 30s}\n  agent: {master: {port: 7100}}\n",
		"stacksaga:\n  instance: {region: r}\n  cassandra: &a {keyspace: k}\n  other: *a\n",
		"stacksaga: [1, 2]\n",
		"stacksaga:\n  cassandra:\n    tls: {ca_file: x}\n",
		"a: &a [*a]\n",
	} {
		f.Add([]byte(doc))
	}
	noEnv := func(string) (string, bool) { return "", false }
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = yamlconfig.CheckKnown(data) // must not panic; a parse error or ErrUnknownKey are both fine
		if _, err := cassandra.LoadConfig(data); err != nil && !errors.Is(err, cassandra.ErrInvalidConfig) {
			t.Fatalf("cassandra: %v does not wrap ErrInvalidConfig", err)
		}
		if _, err := writeprotect.LoadConfigWithEnv(data, noEnv); err != nil && !errors.Is(err, writeprotect.ErrInvalidConfig) {
			t.Fatalf("writeprotect: %v does not wrap ErrInvalidConfig", err)
		}
		if _, err := recovery.LoadConfigWithEnv(data, noEnv); err != nil && !errors.Is(err, recovery.ErrInvalidConfig) {
			t.Fatalf("recovery: %v does not wrap ErrInvalidConfig", err)
		}
		if _, err := ringcoordinator.LoadConfigWithEnv(data, noEnv); err != nil && !errors.Is(err, ringcoordinator.ErrInvalidConfig) {
			t.Fatalf("ringcoordinator: %v does not wrap ErrInvalidConfig", err)
		}
		if _, err := topics.LoadGroupConfig(data); err != nil && !errors.Is(err, topics.ErrInvalidGroupConfig) {
			t.Fatalf("topics: %v does not wrap ErrInvalidGroupConfig", err)
		}
	})
}
