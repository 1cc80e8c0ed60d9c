package testenv

import (
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var validName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

func TestUniqueNameIsValidAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		n := UniqueName(t, "Orders-Topic")
		if !validName.MatchString(n) {
			t.Fatalf("UniqueName = %q, not [a-z][a-z0-9_]{0,47}", n)
		}
		if !strings.HasPrefix(n, "orders_topic_") {
			t.Fatalf("UniqueName = %q, want prefix orders_topic_", n)
		}
		if seen[n] {
			t.Fatalf("UniqueName returned %q twice", n)
		}
		seen[n] = true
	}
}

func TestUniqueNameShapes(t *testing.T) {
	long := strings.Repeat("VeryLongSubtestName/", 10) + "Final_Case"
	cases := []struct {
		prefix, test, want string
	}{
		{"ks", "TestFoo", "ks_testfoo_0123456789"},
		{"", "TestFoo", "t_testfoo_0123456789"},
		{"9lives", "TestFoo/sub test#01", "t9lives_testfoo_sub_test_01_0123456789"},
		{"ÜBER topic", "Test", "ber_topic_test_0123456789"},
		{"ks", "", "ks_0123456789"},
		{"ks", long, "ks_verylongsubtestname_final_case_0123456789"},
		{"abcdefghijklmnopqrstuvwxyz", "TestX", "abcdefghijklmnop_testx_0123456789"},
	}
	for _, c := range cases {
		got := uniqueName(c.prefix, c.test, "0123456789")
		if got != c.want {
			t.Errorf("uniqueName(%q, %q) = %q, want %q", c.prefix, c.test, got, c.want)
		}
		if !validName.MatchString(got) {
			t.Errorf("uniqueName(%q, %q) = %q is not a valid name", c.prefix, c.test, got)
		}
	}
}

func TestParseAddrs(t *testing.T) {
	got, err := parseAddrs(" 127.0.0.1:9092, ,[::1]:9093 ")
	if err != nil || len(got) != 2 || got[0] != "127.0.0.1:9092" || got[1] != "[::1]:9093" {
		t.Fatalf("parseAddrs = %q, %v", got, err)
	}
	for _, bad := range []string{"", " , ", "localhost", "127.0.0.1:9092,nohost"} {
		if _, err := parseAddrs(bad); err == nil {
			t.Errorf("parseAddrs(%q) succeeded, want an error", bad)
		}
	}
}

// recordingTB captures Skipf/Fatalf instead of stopping the goroutine.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper()                           {}
func (r *recordingTB) Skipf(format string, args ...any)  { r.skipped = format }
func (r *recordingTB) Fatalf(format string, args ...any) { r.fatal = format }

func TestMissingSkipsOrFails(t *testing.T) {
	t.Setenv(EnvRequireServices, "")
	r := &recordingTB{TB: t}
	missing(r, "Kafka", EnvKafkaBrokers)
	if r.skipped == "" || r.fatal != "" {
		t.Fatalf("without %s: skipped=%q fatal=%q, want a skip", EnvRequireServices, r.skipped, r.fatal)
	}

	t.Setenv(EnvRequireServices, "1")
	r = &recordingTB{TB: t}
	missing(r, "Kafka", EnvKafkaBrokers)
	if r.fatal == "" || r.skipped != "" {
		t.Fatalf("with %s=1: skipped=%q fatal=%q, want a failure", EnvRequireServices, r.skipped, r.fatal)
	}
	if !strings.Contains(r.fatal, "%s") || !strings.Contains(howToStart, "make services-up") {
		t.Fatalf("failure message %q / hint %q does not say how to start the services", r.fatal, howToStart)
	}
}

func TestCheckReachable(t *testing.T) {
	if err := checkReachable([]string{"127.0.0.1:1"}, 0); err == nil {
		t.Fatal("checkReachable of a closed port succeeded")
	}
}

// ClosedAddr is on loopback and refuses connections.
func TestClosedAddr(t *testing.T) {
	addr := ClosedAddr(t)
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("ClosedAddr = %q, want a 127.0.0.1 address", addr)
	}
	if err := checkReachable([]string{addr}, time.Second); err == nil {
		t.Fatalf("ClosedAddr %s accepts connections", addr)
	}
}

// Without POSTGRES_DSN the PostgreSQL tests skip, and fail with
// STACKSAGA_REQUIRE_SERVICES=1; an unreachable one fails them.
func TestPostgresMissingSkipsOrFails(t *testing.T) {
	reset := func() { pgOnce, pgDSN, pgErr = sync.Once{}, "", nil }
	t.Cleanup(reset)
	t.Setenv(EnvPostgresDSN, "")
	t.Setenv(EnvRequireServices, "")
	reset()
	r := &recordingTB{TB: t}
	if PostgresDSN(r) != "" || r.skipped == "" || r.fatal != "" {
		t.Fatalf("without %s: skipped=%q fatal=%q, want a skip", EnvPostgresDSN, r.skipped, r.fatal)
	}
	t.Setenv(EnvRequireServices, "1")
	reset()
	r = &recordingTB{TB: t}
	if PostgresDSN(r) != "" || r.fatal == "" || r.skipped != "" {
		t.Fatalf("with %s=1: skipped=%q fatal=%q, want a failure", EnvRequireServices, r.skipped, r.fatal)
	}
	t.Setenv(EnvPostgresDSN, "postgres://u:p@"+ClosedAddr(t)+"/x")
	reset()
	resolvePostgres()
	if pgErr == nil || !strings.Contains(pgErr.Error(), "scripts/services up postgres") {
		t.Fatalf("unreachable: %v, want an error saying how to start it", pgErr)
	}
}

// The cluster's helpers skip when its variables are unset (fail with
// STACKSAGA_REQUIRE_CLUSTER=1), and fail when they are set but a node does
// not answer and STACKSAGA_REQUIRE_SERVICES=1 (skip without it).
func TestClusterEndpointsSkipOrFail(t *testing.T) {
	closed := ClosedAddr(t)
	for _, c := range []struct {
		name                  string
		hosts, require, reqCl string
		wantFatal             bool
	}{
		{"unset", "", "", "", false},
		{"unset, services required", "", "1", "", false},
		{"unset, cluster required", "", "", "1", true},
		{"unreachable", closed, "", "", false},
		{"unreachable, services required", closed, "1", "", true},
		{"one node of two unreachable, services required", ClosedAddr(t) + "," + closed, "1", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvCassandraClusterHosts, c.hosts)
			t.Setenv(EnvKafkaClusterBrokers, c.hosts)
			t.Setenv(EnvRequireServices, c.require)
			t.Setenv(EnvRequireCluster, c.reqCl)
			for name, get := range map[string]func(testing.TB){
				"cassandra": func(tb testing.TB) { CassandraClusterNodes(tb) },
				"kafka":     func(tb testing.TB) { KafkaClusterBrokers(tb) },
			} {
				r := &recordingTB{TB: t}
				get(r)
				if got := r.fatal != ""; got != c.wantFatal || (r.fatal == "") == (r.skipped == "") {
					t.Errorf("%s: fatal %q, skipped %q; want fatal: %v", name, r.fatal, r.skipped, c.wantFatal)
				}
			}
		})
	}
}
