package kafkaflags

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestLoadConfigWithEnv: the file's brokers, the one variable over them,
// the deprecated one when that is unset (marked), the default broker, and
// every bad TLS/SASL setting named by its key.
func TestLoadConfigWithEnv(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	doc := []byte("stacksaga:\n  kafka:\n    brokers: [\"127.0.0.1:19092\", \" 127.0.0.1:19093 \"]\n")
	for _, tc := range []struct {
		name       string
		doc        []byte
		lookup     func(string) (string, bool)
		want       []string
		deprecated bool
	}{
		{"file", doc, env(), []string{"127.0.0.1:19092", "127.0.0.1:19093"}, false},
		{"default", nil, env(), []string{DefaultBroker}, false},
		{"variable", doc, env(EnvBrokers, "127.0.0.1:1,127.0.0.1:2", DeprecatedEnvBrokers, "127.0.0.1:3"), []string{"127.0.0.1:1", "127.0.0.1:2"}, false},
		{"deprecated variable", doc, env(DeprecatedEnvBrokers, "127.0.0.1:3"), []string{"127.0.0.1:3"}, true},
	} {
		c, err := LoadConfigWithEnv(tc.doc, tc.lookup)
		if err != nil || !slices.Equal(c.Brokers, tc.want) || c.DeprecatedEnv != tc.deprecated {
			t.Errorf("%s: %v %v deprecated=%v", tc.name, err, c.Brokers, c.DeprecatedEnv)
		}
	}
	bad := []byte("stacksaga:\n  kafka:\n    brokers: [\"\"]\n    tls: { ca-file: /nonexistent/ca.pem, cert-file: /nonexistent/c.pem }\n    sasl: { mechanism: md5 }\n")
	_, err := LoadConfigWithEnv(bad, env())
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, key := range []string{"stacksaga.kafka.brokers:", "stacksaga.kafka.tls.ca-file:", "stacksaga.kafka.tls.cert-file:", "stacksaga.kafka.sasl.mechanism:"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("the error does not name %s:\n%v", key, err)
		}
	}
}
