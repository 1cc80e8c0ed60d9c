package yamlconfig

import (
	"fmt"
	"testing"
)

// FuzzDecode feeds the strict decoder arbitrary documents: it must not
// panic, and a document it accepts must have, once yaml.v3 has resolved its
// merge keys and aliases, only keys of Keys under stacksaga: (what a loader
// will see is what was checked).
func FuzzDecode(f *testing.F) {
	for _, doc := range []string{
		"stacksaga:\n  cassandra: {keyspace: k, tls: {enabled: true}}\n",
		"x: &a {tls: {enabeld: true}}\nstacksaga:\n  cassandra: {<<: [*a]}\n",
		"x: &b {stacksaga: {instance: {regoin: r}}}\n<<: *b\n",
		"x: &a {region: r}\ny: &b {<<: *a}\nstacksaga: {instance: {<<: [*b, *a]}}\n",
		"stacksaga: {<<: 5}\n",
		"a: &a [*a]\n",
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var doc map[string]any
		if Decode(data, &doc) != nil {
			return
		}
		if err := knownResolved(doc["stacksaga"], schema.children["stacksaga"], "stacksaga"); err != nil {
			t.Fatalf("Decode accepted %q: %v", data, err)
		}
	})
}

// knownResolved checks the resolved value v against the schema node s.
func knownResolved(v any, s *keyNode, path string) error {
	m, ok := v.(map[string]any)
	if !ok || len(s.children) == 0 {
		return nil
	}
	for k, sub := range m {
		c, ok := s.children[k]
		if !ok {
			c, ok = s.children["*"]
		}
		if !ok {
			return fmt.Errorf("%s.%s: %w", path, k, ErrUnknownKey)
		}
		if err := knownResolved(sub, c, path+"."+k); err != nil {
			return err
		}
	}
	return nil
}
