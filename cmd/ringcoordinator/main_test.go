package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/ringcoordinator"
)

// TestMain doubles as the command: RINGCOORDINATOR_MAIN=1 runs main.
func TestMain(m *testing.M) {
	if os.Getenv("RINGCOORDINATOR_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func noEnv(string) (string, bool) { return "", false }

// testToken is the coordinator token of the tests.
const testToken = "ringcoordinator-cmd-test-token"

// tokenOnly is an environment holding only the token.
func tokenOnly(k string) (string, bool) {
	if k == ringcoordinator.EnvToken {
		return testToken, true
	}
	return "", false
}

func TestResolveFlagsOverEnvOverFile(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/stacksaga.yaml"
	if err := os.WriteFile(path, []byte(`
stacksaga:
  instance: {region: eu, cluster: c1}
  coordinator: {deploy: {role: slave}, cycle: 30s}
  agent: {slave: {target-master: {host: m.example, port: 7100}}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	lookup := func(k string) (string, bool) {
		v, ok := map[string]string{"STACKSAGA_INSTANCE_CLUSTER": "c2", "STACKSAGA_AGENT_MASTER_PORT": "7200", ringcoordinator.EnvToken: testToken}[k]
		return v, ok
	}
	s, err := resolve([]string{"--config", path, "--cycle", "10s", "--region", "us", "--advertise", "slave-1:7300"}, lookup, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if c.Region != "us" || c.Cluster != "c2" || c.Cycle != 10*time.Second || c.EffectivePublishOffset() != 5*time.Second ||
		c.MasterPort != 7200 || c.TargetMasterAddr() != "m.example:7100" || advertised(c, "h") != "slave-1:7300" || s.master || !s.slave {
		t.Fatalf("resolved %+v (master %v slave %v)", c, s.master, s.slave)
	}

	// index-based from the host name
	s, err = resolve([]string{"--index-based", "--hostname", "coordinator-0"}, tokenOnly, io.Discard)
	if err != nil || !s.master || s.slave {
		t.Fatalf("coordinator-0: master %v slave %v err %v", s.master, s.slave, err)
	}
	s, err = resolve([]string{"--index-based", "--hostname", "coordinator-2"}, tokenOnly, io.Discard)
	if err != nil || s.master || !s.slave {
		t.Fatalf("coordinator-2: master %v slave %v err %v", s.master, s.slave, err)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
		env  func(string) (string, bool)
	}{
		{[]string{"--nope"}, "flag provided but not defined", nil},
		{[]string{"--role", "boss"}, "stacksaga.coordinator.deploy.role", nil},
		{[]string{"--cycle", "100ms"}, "stacksaga.coordinator.cycle", nil},
		{[]string{"--index-based", "--hostname", "laptop"}, "stacksaga.coordinator.deploy.ordinal", nil},
		{[]string{"--master-listen", "nope"}, "--master-listen", nil},
		{[]string{"extra"}, "unexpected arguments", nil},
		{[]string{"--role", "master"}, "stacksaga.coordinator.token-file: no token: set STACKSAGA_COORDINATOR_TOKEN", noEnv},
	} {
		var stderr bytes.Buffer
		lookup := tokenOnly
		if c.env != nil {
			lookup = c.env
		}
		code := run(context.Background(), c.args, lookup, io.Discard, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d mentioning %q", c.args, code, stderr.String(), exitUsage, c.want)
		}
	}
}

// proc is the command run as a child process.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs []map[string]any
	raw  strings.Builder
	done chan error
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "RINGCOORDINATOR_MAIN=1", ringcoordinator.EnvToken+"="+testToken)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			_ = json.Unmarshal(sc.Bytes(), &m)
			p.mu.Lock()
			p.logs = append(p.logs, m)
			p.raw.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%v log:\n%s", args, p.raw.String())
			p.mu.Unlock()
		}
	})
	return p
}

// logged waits for a log line with msg and returns its attr.
func (p *proc) logged(t *testing.T, msg, attr string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		for _, m := range p.logs {
			if m["msg"] == msg {
				v, _ := m[attr].(string)
				p.mu.Unlock()
				return v
			}
		}
		p.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no log line %q", msg)
	return ""
}

func getJSON(url string, v any) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(v)
}

// TestMasterSlaveProcess runs master and slave in one process with a 1s
// cycle: /healthz answers, /readyz turns 200 with the assignment once the
// slave is registered, a retry node gets the whole ring, FetchAssignment
// names it, and SIGTERM shuts the process down with exit code 0.
func TestMasterSlaveProcess(t *testing.T) {
	p := start(t, "--role", "master-slave", "--cycle", "1s", "--master-listen", "127.0.0.1:0",
		"--slave-listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	httpAddr := p.logged(t, "ringcoordinator: http listening", "addr")
	masterAddr := p.logged(t, "ringcoordinator: master listening", "addr")

	var health map[string]any
	if code, err := getJSON("http://"+httpAddr+"/healthz", &health); err != nil || code != 200 || health["status"] != "ok" {
		t.Fatalf("/healthz: %d %v %v", code, health, err)
	}
	var ready readiness
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, err := getJSON("http://"+httpAddr+"/readyz", &ready)
		if err == nil && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready: %d %+v %v", code, ready, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !ready.Ready || ready.Master == nil || ready.Slave == nil || len(ready.Master.Slaves) != 1 || !ready.Slave.Connected {
		t.Fatalf("/readyz: %+v", ready)
	}

	var probeOut bytes.Buffer
	if code := run(context.Background(), []string{"probe", "http://" + httpAddr + "/readyz"}, tokenOnly, &probeOut, io.Discard); code != exitOK ||
		!strings.Contains(probeOut.String(), `"ready": true`) {
		t.Fatalf("probe: exit %d, %s", code, probeOut.String())
	}
	if code := run(context.Background(), []string{"probe", "http://" + httpAddr + "/nope"}, tokenOnly, io.Discard, io.Discard); code != exitFailure {
		t.Fatalf("probe of a 404: exit %d", code)
	}

	ctx, cancel := context.WithCancel(context.Background())
	conn, err := ringcoordinator.NewConnector(ringcoordinator.WithMaster(masterAddr), ringcoordinator.WithCycle(time.Second), ringcoordinator.WithToken(testToken),
		ringcoordinator.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- conn.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline = time.Now().Add(20 * time.Second)
	for {
		if r, _, ok := conn.Range(time.Now()); ok {
			if r != ringcoordinator.FullRing {
				t.Fatalf("the only retry node holds %v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the retry node got no range")
		}
		time.Sleep(20 * time.Millisecond)
	}
	a, err := ringcoordinator.FetchAssignment(context.Background(), masterAddr, ringcoordinator.WithToken(testToken))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := ringcoordinator.FormatAssignment(&out, a, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), conn.ID()) || !strings.Contains(out.String(), "-9223372036854775808") {
		t.Fatalf("sagactl ring output does not name the node and its range:\n%s", out.String())
	}
	t.Logf("ring:\n%s", out.String())

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit within 15s of SIGTERM")
	}
	p.logged(t, "ringcoordinator: stopped", "msg")
	p.mu.Lock()
	defer p.mu.Unlock()
	if strings.Contains(p.raw.String(), testToken) {
		t.Fatal("the log shows the token")
	}
}

// TestStatefulSetOrdinals runs a StatefulSet's coordinator-0 (master) and
// coordinator-1 (slave) from the same flags but their host names: a retry
// node is served by coordinator-1.
func TestStatefulSetOrdinals(t *testing.T) {
	p0 := start(t, "--index-based", "--hostname", "coordinator-0", "--cycle", "1s", "--master-listen", "127.0.0.1:0", "--http", "off")
	masterAddr := p0.logged(t, "ringcoordinator: master listening", "addr")
	p1 := start(t, "--index-based", "--hostname", "coordinator-1", "--cycle", "1s", "--slave-listen", "127.0.0.1:0",
		"--advertise", "127.0.0.1:0", "--target-master", masterAddr, "--http", "off")
	slaveAddr := p1.logged(t, "ringcoordinator: slave listening", "advertised")
	p0.mu.Lock()
	for _, m := range p0.logs {
		if m["msg"] == "ringcoordinator: slave listening" {
			t.Fatal("coordinator-0 runs a slave")
		}
	}
	p0.mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	conn, err := ringcoordinator.NewConnector(ringcoordinator.WithMaster(masterAddr), ringcoordinator.WithCycle(time.Second), ringcoordinator.WithToken(testToken),
		ringcoordinator.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- conn.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _, ok := conn.Range(time.Now())
		_, _, addr := conn.Connected()
		if ok && addr == slaveAddr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no range from coordinator-1 (%s)", slaveAddr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
