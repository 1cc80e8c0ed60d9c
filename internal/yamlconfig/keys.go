package yamlconfig

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrUnknownKey is wrapped by the error of a document that has a key under
// stacksaga: that no package of StackSaga reads (a misspelt key, or a key of
// another version). A misspelt key would otherwise be ignored silently: a
// `tls: {ca_file: ...}` would leave TLS off and send the password in plain
// text.
var ErrUnknownKey = errors.New("unknown configuration key")

// Keys are the full keys of the stacksaga YAML document that some package
// reads: the whole document's schema, in one place, so that every loader (each
// reads only its section) refuses a key no loader reads, whichever packages a
// binary links. A "*" segment stands for any name (a domain, a service, an
// endpoint, a data center). A key with no longer key below it is a leaf: what
// is under it (a list, a scalar) is its loader's to check.
//
// Each loader's test checks that every key its document type reads is here
// (KeysOf and CheckKnown), so a new key cannot be forgotten.
var Keys = []string{
	"stacksaga.instance.region",
	"stacksaga.instance.cluster",
	"stacksaga.instance.service",
	"stacksaga.instance.region-code",
	"stacksaga.instance.strict-names",

	// eventstore/cassandra
	"stacksaga.cassandra.contact-points",
	"stacksaga.cassandra.keyspace",
	"stacksaga.cassandra.local-datacenter",
	"stacksaga.cassandra.username",
	"stacksaga.cassandra.password",
	"stacksaga.cassandra.tls.enabled",
	"stacksaga.cassandra.tls.ca-file",
	"stacksaga.cassandra.tls.cert-file",
	"stacksaga.cassandra.tls.key-file",
	"stacksaga.cassandra.tls.server-name",
	"stacksaga.cassandra.tls.insecure-skip-verify",
	"stacksaga.cassandra.read-consistency-level",
	"stacksaga.cassandra.write-consistency-level",
	"stacksaga.cassandra.serial-consistency-level",
	"stacksaga.cassandra.request-timeout",
	"stacksaga.cassandra.connect-timeout",
	"stacksaga.cassandra.connections-per-host",
	"stacksaga.cassandra.timestamp-generator",
	"stacksaga.cassandra.reconnection-policy.base-delay",
	"stacksaga.cassandra.reconnection-policy.max-delay",
	"stacksaga.cassandra.reconnection-policy.max-retries",
	"stacksaga.cassandra.replication.class",
	"stacksaga.cassandra.replication.replication-factor",
	"stacksaga.cassandra.replication.datacenters.*",
	"stacksaga.cassandra.create-schema",

	// writeprotect
	"stacksaga.cassandra.write-protection.default-mode",
	"stacksaga.cassandra.write-protection.default-lease-duration",
	"stacksaga.cassandra.write-protection.marker-retention",
	"stacksaga.cassandra.write-protection.domains.*.mode",
	"stacksaga.cassandra.write-protection.domains.*.lease-duration",

	// recovery
	"stacksaga.cassandra.transaction-lifetime",
	"stacksaga.cassandra.transaction.lifetime",
	"stacksaga.cassandra.recovery.window-interval-minutes",
	"stacksaga.cassandra.recovery.window-interval",
	"stacksaga.cassandra.recovery.bucket-size",
	"stacksaga.cassandra.recovery.concurrency",
	"stacksaga.cassandra.recovery.lookback-days",
	"stacksaga.cassandra.recovery.page-size",
	"stacksaga.cassandra.recovery.retry.domains.*.delay-windows",
	"stacksaga.cassandra.recovery.retry.domains.*.max-attempts",
	"stacksaga.cassandra.recovery.retry.domains.*.backoff-multiplier",
	"stacksaga.cassandra.recovery.retry.domains.*.max-delay-windows",
	"stacksaga.cassandra.recovery.retry.domains.*.jitter",
	"stacksaga.cassandra.recovery.retry.domains.*.initial-interval",
	"stacksaga.cassandra.recovery.retry.domains.*.max-interval",
	"stacksaga.cassandra.recovery.retry.domains.*.step-timeout",
	"stacksaga.cassandra.recovery.retry.domains.*.endpoints.*.delay-windows",
	"stacksaga.cassandra.recovery.retry.domains.*.endpoints.*.max-attempts",
	"stacksaga.cassandra.recovery.retry.domains.*.endpoints.*.backoff-multiplier",
	"stacksaga.cassandra.recovery.retry.domains.*.endpoints.*.max-delay-windows",
	"stacksaga.cassandra.recovery.retry.domains.*.endpoints.*.jitter",
	"stacksaga.cassandra.recovery.retry.domains.*.endpoints.*.initial-interval",
	"stacksaga.cassandra.recovery.retry.domains.*.endpoints.*.max-interval",
	"stacksaga.cassandra.recovery.retry.domains.*.endpoints.*.step-timeout",
	"stacksaga.cassandra.recovery.restore.domains.*.delay-windows",
	"stacksaga.cassandra.recovery.deadline.domains.*.saga-timeout",

	// internal/kafkaflags (the Kafka clients' connection)
	"stacksaga.kafka.brokers",
	"stacksaga.kafka.tls.enabled",
	"stacksaga.kafka.tls.ca-file",
	"stacksaga.kafka.tls.cert-file",
	"stacksaga.kafka.tls.key-file",
	"stacksaga.kafka.sasl.mechanism",
	"stacksaga.kafka.sasl.user",
	"stacksaga.kafka.sasl.password-env",

	// topics (group types of the consume loops)
	"stacksaga.kafka.orchestrator.domains.*.group-type",
	"stacksaga.kafka.orchestrator.domains.*.delivery-count-limit",
	"stacksaga.kafka.orchestrator.domains.*.record-lock-duration",
	"stacksaga.kafka.orchestrator.domains.*.session-timeout",
	"stacksaga.kafka.worker.services.*.group-type",
	"stacksaga.kafka.worker.services.*.delivery-count-limit",
	"stacksaga.kafka.worker.services.*.record-lock-duration",
	"stacksaga.kafka.worker.services.*.session-timeout",

	// ringcoordinator
	"stacksaga.coordinator.deploy.index-based",
	"stacksaga.coordinator.deploy.role",
	"stacksaga.coordinator.deploy.ordinal",
	"stacksaga.coordinator.cycle",
	"stacksaga.coordinator.publish-offset",
	"stacksaga.coordinator.http.address",
	"stacksaga.coordinator.token-file",
	"stacksaga.coordinator.insecure",
	"stacksaga.agent.master.host",
	"stacksaga.agent.master.port",
	"stacksaga.agent.master.lazy-rebalance-cycles",
	"stacksaga.agent.master.max-slaves",
	"stacksaga.agent.slave.host",
	"stacksaga.agent.slave.port",
	"stacksaga.agent.slave.advertised-host",
	"stacksaga.agent.slave.advertised-port",
	"stacksaga.agent.slave.target-master.host",
	"stacksaga.agent.slave.target-master.port",
	"stacksaga.agent.connector.target-master.host",
	"stacksaga.agent.connector.target-master.port",
	"stacksaga.agent.connector.guard",
	"stacksaga.agent.reconnect.min-backoff",
	"stacksaga.agent.reconnect.max-backoff",
}

// keyNode is one level of the schema tree built from Keys.
type keyNode struct {
	children map[string]*keyNode // by segment; "*" matches any name
}

var schema = buildSchema(Keys)

func buildSchema(keys []string) *keyNode {
	root := &keyNode{children: map[string]*keyNode{}}
	for _, k := range keys {
		n := root
		for _, seg := range strings.Split(k, ".") {
			c, ok := n.children[seg]
			if !ok {
				c = &keyNode{children: map[string]*keyNode{}}
				n.children[seg] = c
			}
			n = c
		}
	}
	return root
}

// CheckKnown parses the YAML document data and returns an error wrapping
// ErrUnknownKey that names every key under stacksaga: that is not in Keys,
// with its line and the nearest known key of that level. Merge keys (`<<:
// *a`, `<<: [*a, *b]`, at any level, the document's too) are resolved first:
// a key that reaches the document through a merge is checked as if written
// in place. Keys outside
// stacksaga: (the application's own configuration) are not looked at. A
// document that is not YAML returns the parse error.
func CheckKnown(data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	var resolved any // yaml.v3's own limits on aliases bound the walk below
	if err := yaml.Unmarshal(data, &resolved); err != nil {
		return err
	}
	if len(doc.Content) == 0 {
		return nil
	}
	var errs []error
	for _, kv := range mergedPairs(doc.Content[0]) {
		if kv[0].Value == "stacksaga" {
			walkKnown(kv[1], schema.children["stacksaga"], "stacksaga", &errs)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.Join(errs...)
}

// walkKnown checks the mapping n (at key path) against the schema node s.
func walkKnown(n *yaml.Node, s *keyNode, path string, errs *[]error) {
	if len(s.children) == 0 {
		return // a leaf: its loader checks the value
	}
	for _, kv := range mergedPairs(n) {
		k, v := kv[0], kv[1]
		c, ok := s.children[k.Value]
		if !ok {
			c, ok = s.children["*"]
		}
		if !ok {
			*errs = append(*errs, fmt.Errorf("%s.%s (line %d): %w%s", path, k.Value, k.Line, ErrUnknownKey, suggest(k.Value, s)))
			continue
		}
		walkKnown(v, c, path+"."+k.Value, errs)
	}
}

// mergedPairs returns the key and value nodes of the mapping n (an alias
// resolved) with its YAML merge keys (`<<: *a`, `<<: [*a, *b]`, nested in
// the merged mappings too) replaced by the pairs they merge: every key the
// decoder will see, so none escapes the check. A key overridden by another
// is kept (a typo is a typo wherever it is). A node that is not a mapping
// has none. depth bounds the aliases followed (yaml.v3 refuses an alias to
// itself, and limits the aliases of a document).
func mergedPairs(n *yaml.Node) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	appendPairs(n, &out, 0)
	return out
}

func appendPairs(n *yaml.Node, out *[][2]*yaml.Node, depth int) {
	for n != nil && n.Kind == yaml.AliasNode && depth < maxMergeDepth {
		n, depth = n.Alias, depth+1
	}
	if n == nil || n.Kind != yaml.MappingNode || depth >= maxMergeDepth {
		return // null, or a value of the wrong type: its loader reports it
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!merge" {
			*out = append(*out, [2]*yaml.Node{k, v})
			continue
		}
		if v.Kind == yaml.SequenceNode {
			for _, m := range v.Content {
				appendPairs(m, out, depth+1)
			}
			continue
		}
		appendPairs(v, out, depth+1)
	}
}

// maxMergeDepth bounds the merges and aliases followed from one mapping.
const maxMergeDepth = 64

// suggest names the known keys of level s nearest to key, for the message.
func suggest(key string, s *keyNode) string {
	var names []string
	for name := range s.children {
		if name != "*" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	best, bestD := "", 1<<30
	for _, name := range names {
		if d := distance(normalize(key), normalize(name)); d < bestD {
			best, bestD = name, d
		}
	}
	if best != "" && bestD <= max(2, len(best)/3) {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	if len(names) == 0 {
		return ""
	}
	return "; known here: " + strings.Join(names, ", ")
}

func normalize(s string) string {
	return strings.ToLower(strings.NewReplacer("_", "-", " ", "-").Replace(s))
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// KeysOf returns the full keys that the YAML document type t (a struct
// decoded by yaml.v3) reads, with "*" for the keys of a map: the keys whose
// value is not itself a struct or a map of structs. A loader's test checks
// them with Unlisted.
func KeysOf(t reflect.Type) []string {
	var out []string
	keysOf(t, "", &out, map[reflect.Type]int{})
	sort.Strings(out)
	return out
}

func keysOf(t reflect.Type, prefix string, out *[]string, seen map[reflect.Type]int) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && isDoc(t.Elem()):
		keysOf(t.Elem(), prefix+".*", out, seen)
		return
	case t.Kind() != reflect.Struct || !isDoc(t):
		*out = append(*out, strings.TrimPrefix(prefix, "."))
		return
	}
	if seen[t] >= 2 { // a recursive type (retry endpoints): two levels are enough
		return
	}
	seen[t]++
	defer func() { seen[t]-- }()
	for f := range t.Fields() {
		tag := f.Tag.Get("yaml")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keysOf(f.Type, prefix+"."+name, out, seen)
	}
}

// isDoc reports whether t (a struct, or a map of them) is a level of the
// document rather than a leaf value (a duration, a consistency, a list).
func isDoc(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Map {
		return t.Key().Kind() == reflect.String && isDoc(t.Elem())
	}
	if t.Kind() != reflect.Struct || t.PkgPath() == "time" {
		return false
	}
	for f := range t.Fields() {
		if _, ok := f.Tag.Lookup("yaml"); ok {
			return true
		}
	}
	return false
}

// Unlisted returns the keys of keys (full keys, "*" for any name) that Keys
// does not have (as a key or as a level above keys): a loader's test fails on
// any, so that what it reads and the schema cannot drift apart.
func Unlisted(keys []string) []string {
	var out []string
	for _, k := range keys {
		n := schema
		for _, seg := range strings.Split(k, ".") {
			if n = n.children[seg]; n == nil {
				out = append(out, k)
				break
			}
		}
	}
	return out
}
