package yamlconfig

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCheckKnown(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		says      []string // all in the error; none: no error
	}{
		{"known keys, maps of any name, other roots", `
app: {anything: 1}
stacksaga:
  instance: {region: r, service: s}
  cassandra:
    tls: {enabled: true, ca-file: /ca.pem}
    replication: {class: NetworkTopologyStrategy, datacenters: {dc1: 3, dc2: 3}}
    write-protection:
      domains: {place-order: {mode: STRICT}}
    recovery:
      retry:
        domains:
          d: {delay-windows: 1, endpoints: {"payment-service/charge": {jitter: 0.1}}}
  kafka:
    worker: {services: {payment-service: {group-type: share}}}
`, nil},
		{"misspelt TLS key", "stacksaga:\n  cassandra:\n    tls: {ca_file: /ca.pem}\n",
			[]string{"stacksaga.cassandra.tls.ca_file (line 3)", `did you mean "ca-file"?`}},
		{"enable for enabled", "stacksaga:\n  cassandra:\n    tls:\n      enable: true\n",
			[]string{"stacksaga.cassandra.tls.enable (line 4)", `did you mean "enabled"?`}},
		{"misspelt section", "stacksaga:\n  cassandar: {keyspace: k}\n",
			[]string{"stacksaga.cassandar (line 2)", `did you mean "cassandra"?`}},
		{"unknown key under a map entry", "stacksaga:\n  cassandra:\n    write-protection:\n      domains:\n        d: {mode: STRICT, leese: 1s}\n",
			[]string{"stacksaga.cassandra.write-protection.domains.d.leese (line 5)"}},
		{"far from anything: the level's keys", "stacksaga:\n  instance: {zzzzzzzz: 1}\n",
			[]string{"stacksaga.instance.zzzzzzzz", "known here: cluster, region, region-code, service"}},
		{"two problems at once", "stacksaga:\n  instance: {regoin: r}\n  kafak: {}\n",
			[]string{"stacksaga.instance.regoin", "stacksaga.kafak"}},
		{"merge keys are checked", "base: &b {cafile: x}\nstacksaga:\n  cassandra:\n    tls: {<<: *b}\n",
			[]string{"stacksaga.cassandra.tls.cafile"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckKnown([]byte(tc.doc))
			if len(tc.says) == 0 {
				if err != nil {
					t.Fatalf("CheckKnown: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("CheckKnown: %v, want ErrUnknownKey", err)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("CheckKnown: %v\nwant it to say %q", err, s)
				}
			}
			// Decode, which every loader calls, refuses the document the same way.
			var d doc
			if err := Decode([]byte(tc.doc), &d); !errors.Is(err, ErrUnknownKey) {
				t.Errorf("Decode: %v, want ErrUnknownKey", err)
			}
		})
	}
}

func TestKeysOfAndUnlisted(t *testing.T) {
	type leaf struct {
		A string `yaml:"a"`
	}
	type rec struct {
		X    *string        `yaml:"x"`
		Down map[string]rec `yaml:"down"`
	}
	var d struct {
		Stacksaga struct {
			Instance leaf            `yaml:"instance"`
			Kafka    map[string]leaf `yaml:"kafka"`
			List     []string        `yaml:"list"`
			Rec      rec             `yaml:"rec"`
			Skipped  string          `yaml:"-"`
		} `yaml:"stacksaga"`
	}
	got := KeysOf(reflect.TypeOf(d))
	// A recursive type is followed two levels deep (retry endpoints under
	// retry domains), then no further.
	want := []string{"stacksaga.instance.a", "stacksaga.kafka.*.a", "stacksaga.list",
		"stacksaga.rec.down.*.x", "stacksaga.rec.x"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("KeysOf = %q\nwant   %q", got, want)
	}
	if u := Unlisted([]string{"stacksaga.instance.region", "stacksaga.cassandra.replication.datacenters",
		"stacksaga.cassandra.tls.ca-file"}); len(u) != 0 {
		t.Fatalf("Unlisted of listed keys = %q", u)
	}
	if u := Unlisted(got); !reflect.DeepEqual(u, want) {
		t.Fatalf("Unlisted = %q", u)
	}
}
