package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Environment variables of the three-node cluster that `scripts/services up
// --cluster` starts and `scripts/services env --cluster` prints.
const (
	// EnvCassandraClusterHosts lists every node's CQL endpoint, e.g.
	// "127.0.0.1:9043,127.0.0.2:9043,127.0.0.3:9043".
	EnvCassandraClusterHosts = "CASSANDRA_CLUSTER_HOSTS"
	// EnvCassandraClusterDC is the nodes' data centre.
	EnvCassandraClusterDC = "CASSANDRA_CLUSTER_DC"
	// EnvKafkaClusterBrokers lists every broker of the Kafka cluster.
	EnvKafkaClusterBrokers = "KAFKA_CLUSTER_BROKERS"
	// EnvClusterDir is the script's state directory of the cluster, where
	// each node's pid file is (<dir>/cassandra-<n>/pid, <dir>/kafka-<n>/pid).
	EnvClusterDir = "STACKSAGA_CLUSTER_DIR"
	// EnvRequireCluster, when "1" (or "true"), fails the cluster tests
	// when the cluster's variables are not set (`make test` sets it when it
	// starts the cluster). Set but unreachable endpoints fail them whenever
	// STACKSAGA_REQUIRE_SERVICES is set.
	EnvRequireCluster = "STACKSAGA_REQUIRE_CLUSTER"
)

const howToStartCluster = "start the cluster with `scripts/services up --cluster` and export its endpoints with " +
	"`eval \"$(scripts/services env --cluster)\"`, or run everything with `make test`"

// ClusterNode is one server of the local cluster: its endpoint and its
// process, which a test may pause (SIGSTOP) and resume (SIGCONT).
type ClusterNode struct {
	// Addr is the node's endpoint (host:port).
	Addr string
	// Host is Addr's host: the node's loopback address.
	Host string
	// service is the script's name of the node ("cluster/cassandra-2"),
	// which its command line carries; pidFile is where the script keeps
	// its pid.
	service string
	pidFile string
}

// CassandraCluster is the three-node Cassandra cluster of `scripts/services
// up --cluster`.
type CassandraCluster struct {
	// Hosts are every node's CQL endpoint.
	Hosts []string
	// DC is the nodes' data centre.
	DC string
	// Nodes are the nodes, in the order of Hosts.
	Nodes []ClusterNode
}

// RequiredCluster reports whether the cluster tests must fail, not skip,
// when the cluster's variables are not set (STACKSAGA_REQUIRE_CLUSTER).
func RequiredCluster() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(EnvRequireCluster))) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// reachability caches checkAllReachable's answer per variable value, so
// that a test binary dials each cluster once.
var reachability struct {
	sync.Mutex
	errs map[string]error
}

func allReachable(v string, addrs []string) error {
	reachability.Lock()
	defer reachability.Unlock()
	if err, ok := reachability.errs[v]; ok {
		return err
	}
	if reachability.errs == nil {
		reachability.errs = map[string]error{}
	}
	err := checkAllReachable(addrs, 5*time.Second)
	reachability.errs[v] = err
	return err
}

// CassandraClusterNodes returns the local three-node Cassandra cluster, or
// skips t when CASSANDRA_CLUSTER_HOSTS is not set (fails it with
// STACKSAGA_REQUIRE_CLUSTER=1). With the variable set, every node must
// accept connections: a node that does not fails t when
// STACKSAGA_REQUIRE_SERVICES=1 (skips it otherwise), naming it.
func CassandraClusterNodes(t testing.TB) CassandraCluster {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(EnvCassandraClusterHosts))
	if v == "" {
		skipOrFail(t, RequiredCluster(), "testenv: the Cassandra cluster's %s is not set (required when %s=1): %s",
			EnvCassandraClusterHosts, EnvRequireCluster, howToStartCluster)
		return CassandraCluster{}
	}
	hosts, err := parseAddrs(v)
	if err == nil {
		err = allReachable(v, hosts)
	}
	if err != nil {
		err = fmt.Errorf("testenv: %s=%q: %w; %s", EnvCassandraClusterHosts, v, err, howToStartCluster)
		skipOrFail(t, Required() || RequiredCluster(), "%v", err)
		return CassandraCluster{}
	}
	c := CassandraCluster{Hosts: hosts, DC: strings.TrimSpace(os.Getenv(EnvCassandraClusterDC))}
	if c.DC == "" {
		c.DC = "datacenter1"
	}
	dir := strings.TrimSpace(os.Getenv(EnvClusterDir))
	for i, h := range hosts {
		host, _, _ := net.SplitHostPort(h)
		svc := fmt.Sprintf("cassandra-%d", i+1)
		n := ClusterNode{Addr: h, Host: host, service: "cluster/" + svc}
		if dir != "" {
			n.pidFile = filepath.Join(dir, svc, "pid")
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c
}

// KafkaClusterBrokers returns every broker of the local three-broker Kafka
// cluster (KAFKA_CLUSTER_BROKERS), with the same rules as
// CassandraClusterNodes: unset skips t (fails it with
// STACKSAGA_REQUIRE_CLUSTER=1); set, every broker must accept connections
// or t fails under STACKSAGA_REQUIRE_SERVICES=1.
func KafkaClusterBrokers(t testing.TB) []string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(EnvKafkaClusterBrokers))
	if v == "" {
		skipOrFail(t, RequiredCluster(), "testenv: the Kafka cluster's %s is not set (required when %s=1): %s",
			EnvKafkaClusterBrokers, EnvRequireCluster, howToStartCluster)
		return nil
	}
	brokers, err := parseAddrs(v)
	if err == nil {
		err = allReachable(v, brokers)
	}
	if err != nil {
		skipOrFail(t, Required() || RequiredCluster(), "testenv: %s=%q: %v; %s", EnvKafkaClusterBrokers, v, err, howToStartCluster)
		return nil
	}
	return brokers
}

// checkAllReachable makes sure every address accepts TCP connections.
func checkAllReachable(addrs []string, timeout time.Duration) error {
	var errs []error
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, timeout)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.Close()
	}
	if len(errs) > 0 {
		return fmt.Errorf("testenv: %d of %d nodes do not accept connections: %w", len(errs), len(addrs), errors.Join(errs...))
	}
	return nil
}

// pid returns the node's process id, checking that the process is the
// node the script started (its command line carries the script's marker),
// so that a reused pid is never signalled.
func (n ClusterNode) pid() (int, error) {
	if n.pidFile == "" {
		return 0, fmt.Errorf("testenv: %s is not set: the node's process is unknown", EnvClusterDir)
	}
	b, err := os.ReadFile(n.pidFile)
	if err != nil {
		return 0, fmt.Errorf("testenv: pid of %s: %w", n.service, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("testenv: pid file %s: %w", n.pidFile, err)
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, fmt.Errorf("testenv: %s (pid %d) does not run: %w", n.service, pid, err)
	}
	if !strings.Contains(string(cmd), "-Dstacksaga.service="+n.service+"\x00") {
		return 0, fmt.Errorf("testenv: pid %d is not %s", pid, n.service)
	}
	return pid, nil
}

// Pause stops the node's process (SIGSTOP): it keeps its connections open
// and answers nothing, as a node that hangs or is cut off does; its peers
// notice only when their failure detector convicts it. Resume is
// registered as t's cleanup, so that no test leaves a node stopped.
func (n ClusterNode) Pause(t testing.TB) {
	t.Helper()
	pid, err := n.pid()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Resume(t) })
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("testenv: SIGSTOP %s (pid %d): %v", n.service, pid, err)
	}
	t.Logf("testenv: paused %s (%s, pid %d)", n.service, n.Addr, pid)
}

// Resume continues a paused node (SIGCONT); resuming a running node does
// nothing.
func (n ClusterNode) Resume(t testing.TB) {
	t.Helper()
	pid, err := n.pid()
	if err != nil {
		t.Error(err)
		return
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Errorf("testenv: SIGCONT %s (pid %d): %v", n.service, pid, err)
	}
}

// KafkaClusterNodes returns the brokers of the local Kafka cluster as
// nodes (KafkaClusterBrokers' rules), in the order of
// KAFKA_CLUSTER_BROKERS: node n is broker id n.
func KafkaClusterNodes(t testing.TB) []ClusterNode {
	t.Helper()
	brokers := KafkaClusterBrokers(t)
	dir := strings.TrimSpace(os.Getenv(EnvClusterDir))
	var nodes []ClusterNode
	for i, b := range brokers {
		host, _, _ := net.SplitHostPort(b)
		svc := fmt.Sprintf("kafka-%d", i+1)
		n := ClusterNode{Addr: b, Host: host, service: "cluster/" + svc}
		if dir != "" {
			n.pidFile = filepath.Join(dir, svc, "pid")
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// Name is the script's name of the node ("cluster/cassandra-2").
func (n ClusterNode) Name() string { return n.service }

// Pid returns the node's process id, or an error when it does not run.
func (n ClusterNode) Pid() (int, error) { return n.pid() }

// Kill ends the node's process with SIGKILL, as a crash does, and waits
// (up to a minute) until it is gone; it returns the pid killed.
// RestartCluster starts it again.
func (n ClusterNode) Kill(t testing.TB) int {
	t.Helper()
	pid, err := n.pid()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("testenv: SIGKILL %s (pid %d): %v", n.service, pid, err)
	}
	deadline := time.Now().Add(time.Minute)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %s (pid %d) still alive a minute after SIGKILL", n.service, pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("testenv: killed %s (%s, pid %d)", n.service, n.Addr, pid)
	return pid
}

// RestartCluster runs `scripts/services up --cluster` (of this module, on
// the state directory STACKSAGA_CLUSTER_DIR is in), which starts the
// cluster's nodes that do not run and waits until every one is ready
// (the nodes that run are kept), bounded by timeout; it returns how long
// it took.
func RestartCluster(t testing.TB, timeout time.Duration) time.Duration {
	t.Helper()
	dir := strings.TrimSpace(os.Getenv(EnvClusterDir))
	if dir == "" {
		t.Fatalf("testenv: %s is not set: the cluster cannot be restarted", EnvClusterDir)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "services"), "up", "--cluster")
	// A node killed on a loaded machine replays its commit log before it
	// serves: the script waits as long as timeout allows.
	wait := strconv.Itoa(int(timeout / time.Second))
	cmd.Env = append(os.Environ(), "STACKSAGA_SERVICES_DIR="+filepath.Dir(dir), "CLUSTER_READY_TIMEOUT="+wait)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: scripts/services up --cluster: %v\n%s", err, out)
	}
	took := time.Since(start)
	t.Logf("testenv: cluster restarted in %v", took.Round(time.Second))
	return took
}

// moduleRoot finds the directory of go.mod from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
}
