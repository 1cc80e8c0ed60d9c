package yamlconfig_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/config"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// strictCaller is one loader that reads the stacksaga document strictly: good
// is a flow mapping of stacksaga: it loads, with get returning want; typo is
// one with the misspelt key key.
type strictCaller struct {
	name       string
	load       func([]byte) (string, error)
	good, want string
	typo, key  string
}

func strictCallers() []strictCaller {
	noEnv := func(string) (string, bool) { return "", false }
	return []strictCaller{
		{"cassandra", func(d []byte) (string, error) { c, err := cassandra.LoadConfig(d); return c.Keyspace, err },
			"{cassandra: {keyspace: merged_ks}}", "merged_ks",
			"{cassandra: {tls: {enabeld: true}}}", "stacksaga.cassandra.tls.enabeld"},
		{"writeprotect", func(d []byte) (string, error) {
			c, err := writeprotect.LoadConfigWithEnv(d, noEnv)
			return string(c.DefaultMode), err
		}, "{cassandra: {write-protection: {default-mode: STRICT}}}", "STRICT",
			"{cassandra: {write-protection: {default-mod: STRICT}}}", "stacksaga.cassandra.write-protection.default-mod"},
		{"recovery", func(d []byte) (string, error) {
			c, err := recovery.LoadConfigWithEnv(d, noEnv)
			return fmt.Sprint(c.BucketSize), err
		}, "{cassandra: {recovery: {bucket-size: 777}}}", "777",
			"{cassandra: {recovery: {bucket-sise: 777}}}", "stacksaga.cassandra.recovery.bucket-sise"},
		{"ringcoordinator", func(d []byte) (string, error) {
			c, err := ringcoordinator.LoadConfigWithEnv(d, noEnv)
			return c.Cycle.String(), err
		}, "{coordinator: {cycle: 7m}}", "7m0s",
			"{coordinator: {cylce: 7m}}", "stacksaga.coordinator.cylce"},
		{"topics", func(d []byte) (string, error) {
			c, err := topics.LoadGroupConfig(d)
			return fmt.Sprint(c.Service("s").Type), err
		}, "{kafka: {worker: {services: {s: {group-type: share}}}}}", fmt.Sprint(topics.GroupShare),
			"{kafka: {worker: {services: {s: {group-typ: share}}}}}", "stacksaga.kafka.worker.services.s.group-typ"},
		{"kafkaflags", func(d []byte) (string, error) {
			c, err := kafkaflags.LoadConfigWithEnv(d, noEnv)
			return strings.Join(c.Brokers, ","), err
		}, "{kafka: {brokers: [127.0.0.1:9]}}", "127.0.0.1:9",
			"{kafka: {tls: {enabled: true, ca_file: /ca.pem}}}", "stacksaga.kafka.tls.ca_file"},
		{"config", func(d []byte) (string, error) { c, err := config.Load(d); return c.Instance.Region, err },
			"{instance: {region: merged-region}}", "merged-region",
			"{instance: {regoin: r}}", "stacksaga.instance.regoin"},
	}
}

// mergeForms spell a stacksaga: body through YAML merge keys, each way a
// loader must see through.
var mergeForms = map[string]string{
	"inline":             "stacksaga: %s\n",
	"alias merge":        "x-base: &base %s\nstacksaga:\n  <<: *base\n",
	"sequence merge":     "x-a: &a {}\nx-base: &base %s\nstacksaga:\n  <<: [*a, *base]\n",
	"document merge":     "x-base: &base {stacksaga: %s}\n<<: *base\n",
	"document seq merge": "x-base: &base {stacksaga: %s}\n<<: [*base]\n",
	"nested merge":       "x-inner: &inner %s\nx-base: &base {<<: [*inner]}\nstacksaga: {<<: *base}\n",
}

// TestMergeKeysChecked: through every merge-key form, every strict loader
// refuses a misspelt key naming it, and loads a correct merge with the merged
// values.
func TestMergeKeysChecked(t *testing.T) {
	for _, c := range strictCallers() {
		for form, tmpl := range mergeForms {
			t.Run(c.name+"/"+form, func(t *testing.T) {
				got, err := c.load(fmt.Appendf(nil, tmpl, c.good))
				if err != nil || got != c.want {
					t.Errorf("correct merge: got %q, %v; want %q", got, err, c.want)
				}
				_, err = c.load(fmt.Appendf(nil, tmpl, c.typo))
				if !errors.Is(err, yamlconfig.ErrUnknownKey) || !strings.Contains(err.Error(), c.key) {
					t.Errorf("misspelt key through merge: %v; want ErrUnknownKey naming %s", err, c.key)
				}
			})
		}
	}
}
