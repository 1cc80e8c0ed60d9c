package ringcoordinator

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Helpers of the flow and integration tests: a master, slaves (in this
// process or as child processes that can be SIGKILLed) and connectors,
// and the checks made from the connectors' own records.

const (
	envHelper       = "RINGCOORDINATOR_TEST_HELPER"
	envHelperMaster = "RINGCOORDINATOR_TEST_MASTER"
	envHelperScope  = "RINGCOORDINATOR_TEST_SCOPE"
	envHelperCycle  = "RINGCOORDINATOR_TEST_CYCLE"
)

// TestMain doubles as a slave process for the integration tests: run with
// RINGCOORDINATOR_TEST_HELPER=slave, it serves a slave on 127.0.0.1:0,
// prints "ADDR <addr> ID <id>" and runs until killed or its stdin closes.
// testToken is the shared token of the tests' nodes.
const testToken = "ringcoordinator-test-token"

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) == "slave" {
		os.Exit(helperSlave())
	}
	os.Exit(m.Run())
}

func helperSlave() int {
	region, cluster, _ := strings.Cut(os.Getenv(envHelperScope), "/")
	if region == "" {
		region, cluster = DefaultRegion, DefaultCluster
	}
	cycle, err := time.ParseDuration(os.Getenv(envHelperCycle))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := NewSlave(WithMaster(os.Getenv(envHelperMaster)), WithToken(testToken), WithScope(region, cluster), WithCycle(cycle),
		WithBackoff(50*time.Millisecond, 300*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ADDR %s ID %s\n", s.Addr(), s.ID())
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }() // the test is gone
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// slaveProc is a slave in a child process.
type slaveProc struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	addr, id  string
	waited    chan struct{}
	killedErr error
}

func startSlaveProc(t *testing.T, master, scope string, cycle time.Duration) *slaveProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"=slave", envHelperMaster+"="+master, envHelperScope+"="+scope, envHelperCycle+"="+cycle.String())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var logMu sync.Mutex
	cmd.Stderr = writerFunc(func(b []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return logs.Write(b) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &slaveProc{cmd: cmd, stdin: stdin, waited: make(chan struct{})}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("slave process: %v", err)
	}
	if _, err := fmt.Sscanf(line, "ADDR %s ID %s", &p.addr, &p.id); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("slave process said %q: %v", line, err)
	}
	go func() { p.killedErr = cmd.Wait(); close(p.waited) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			logMu.Lock()
			t.Logf("slave %s log:\n%s", p.id, logs.String())
			logMu.Unlock()
		}
	})
	return p
}

// kill SIGKILLs the process and waits for it.
func (p *slaveProc) kill() {
	select {
	case <-p.waited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.waited
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// runner runs a role until stopped.
type runner struct {
	cancel context.CancelFunc
	done   chan error
}

func run(f func(context.Context) error) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- f(ctx) }()
	return r
}

func (r *runner) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
		r.done <- nil // stop is idempotent
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// node is a connector under test and its clock offset.
type node struct {
	c      *Connector
	offset time.Duration // its clock = true time + offset
	r      *runner
}

// startConnector starts a connector to master.
func startConnector(t *testing.T, tp Transport, master string, cycle, offset time.Duration, opts ...Option) *node {
	t.Helper()
	clock := func() time.Time { return time.Now().Add(offset) }
	c, err := NewConnector(append([]Option{WithTransport(tp), WithMaster(master), WithCycle(cycle), WithClock(clock),
		WithBackoff(20*time.Millisecond, 300*time.Millisecond), WithLogger(testLogger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{c: c, offset: offset}
	n.r = run(c.Run)
	t.Cleanup(func() { n.r.stop(t) })
	return n
}

// testLogger logs to the test's output only when it fails (kept short).
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return quiet
}

// record is a holding in true time.
type record struct {
	node     int
	h        Holding
	from, to time.Time // active interval, true time
}

func records(nodes []*node) []record {
	var out []record
	for i, n := range nodes {
		for _, h := range n.c.History() {
			if h.Dropped {
				continue // dropped before its minute: never handed out
			}
			out = append(out, record{node: i, h: h, from: h.ActiveFrom().Add(-n.offset), to: h.ActiveUntil.Add(-n.offset)})
		}
	}
	return out
}

// checkNoOverlap fails if two nodes' records show overlapping ranges held
// at the same instant (true time).
func checkNoOverlap(t *testing.T, nodes []*node) {
	t.Helper()
	rs := records(nodes)
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			a, b := rs[i], rs[j]
			if a.node == b.node {
				continue
			}
			if a.from.Before(b.to) && b.from.Before(a.to) && Overlaps(a.h.Range.TokenRange(), b.h.Range.TokenRange()) {
				t.Fatalf("nodes %d and %d held overlapping ranges at once:\n  %d: %v minute %v active %v..%v from %s\n  %d: %v minute %v active %v..%v from %s",
					a.node, b.node, a.node, a.h.Range, a.h.ValidForMinute, a.from, a.to, a.h.SlaveID,
					b.node, b.h.Range, b.h.ValidForMinute, b.from, b.to, b.h.SlaveID)
			}
		}
	}
}

// minuteRanges returns the non-dropped ranges the nodes hold for minute.
func minuteRanges(nodes []*node, minute time.Time) []Holding {
	var out []Holding
	for _, n := range nodes {
		for _, h := range n.c.History() {
			if !h.Dropped && h.ValidForMinute.Equal(minute) {
				out = append(out, h)
			}
		}
	}
	return out
}

// covers reports whether hs tile the whole ring.
func covers(hs []Holding) bool {
	if len(hs) == 0 {
		return false
	}
	rs := make([]eventstore.TokenRange, len(hs))
	for i, h := range hs {
		rs[i] = h.Range.TokenRange()
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Min < rs[j].Min })
	if rs[0].Min != MinToken || rs[len(rs)-1].Max != MaxToken {
		return false
	}
	for i := 1; i < len(rs); i++ {
		if rs[i-1].Max == MaxToken || rs[i].Min != rs[i-1].Max+1 {
			return false
		}
	}
	return true
}

// waitCovered waits for a minute (after since) whose ranges, all from the
// nodes in want (nil: any) and satisfying ok, cover the ring; it returns
// that minute.
func waitCovered(t *testing.T, nodes []*node, since time.Time, d time.Duration, what string, ok func([]Holding) bool) time.Time {
	t.Helper()
	var found time.Time
	waitFor(t, d, what, func() bool {
		seen := map[time.Time]bool{}
		for _, n := range nodes {
			for _, h := range n.c.History() {
				m := h.ValidForMinute
				if seen[m] || !m.After(since) {
					continue
				}
				seen[m] = true
				hs := minuteRanges(nodes, m)
				if covers(hs) && (ok == nil || ok(hs)) {
					found = m
					return true
				}
			}
		}
		return false
	})
	return found
}

// waitPhase sleeps until frac of the current cycle (or of the next one
// if that point is past).
func waitPhase(cycle time.Duration, frac float64) {
	now := time.Now()
	at := cycleStart(now, cycle).Add(time.Duration(float64(cycle) * frac))
	if !at.After(now) {
		at = at.Add(cycle)
	}
	time.Sleep(time.Until(at))
}

func holdingsFrom(hs []Holding, slave string) bool {
	for _, h := range hs {
		if h.SlaveID != slave {
			return false
		}
	}
	return true
}
