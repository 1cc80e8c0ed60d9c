package main

import (
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// TestSampleConfigOnOneNode follows the README with examples/stacksaga.yaml,
// the development profile, against the one-node Cassandra the README starts:
// `sagactl schema apply --config` creates the keyspace, and `sagactl list` and
// `sagactl show` then read it with the sample's consistency levels and its
// service, with no other flag than where the node and keyspace are (a
// keyspace of its own, so the test leaves the default one alone). Before the
// sample had a service and a one-node replication, show exited with "no
// service" and the first read failed with "Cannot achieve consistency level".
func TestSampleConfigOnOneNode(t *testing.T) {
	clearAdminEnv(t)
	hosts := strings.Join(testenv.CassandraHosts(t), ",")
	ks := testenv.UniqueName(t, "sample")
	t.Cleanup(func() { dropKeyspace(t, testenv.CassandraHosts(t), ks) })
	const sample = "../../examples/stacksaga.yaml"
	common := []string{"--config", sample, "--hosts", hosts, "--keyspace", ks}
	if code, out, errOut := sagactl(t, append([]string{"schema", "apply"}, common...)...); code != 0 {
		t.Fatalf("schema apply --config %s: exit %d: %s%s", sample, code, out, errOut)
	}
	if code, out, errOut := sagactl(t, append([]string{"list", "frozen"}, common...)...); code != 0 {
		t.Fatalf("list frozen --config %s: exit %d: %s%s", sample, code, out, errOut)
	}
	code, out, errOut := sagactl(t, append([]string{"show", "01a22bf0-8258-8001-b874-19ca7520035d"}, common...)...)
	if strings.Contains(errOut, "no service") || strings.Contains(errOut, "consistency") {
		t.Fatalf("show --config %s: exit %d: %s%s", sample, code, out, errOut)
	}
	if code == 0 || !strings.Contains(errOut, "no such saga in default/default/order-service") {
		t.Fatalf("show of an unknown saga: exit %d, stderr %q; want no such saga in the sample's scope", code, errOut)
	}
}
