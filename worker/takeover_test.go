package worker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// TestMembershipOptionsValidated: a bad instance id or session timeout,
// or either with a share group, fails New naming the option.
func TestMembershipOptionsValidated(t *testing.T) {
	for name, c := range map[string]struct {
		opts []worker.Option
		want []string
	}{
		"bad id":        {[]worker.Option{worker.WithInstanceID("pod 1")}, []string{"WithInstanceID", `"pod 1"`}},
		"empty id":      {[]worker.Option{worker.WithInstanceID("")}, []string{`WithInstanceID("")`}},
		"short session": {[]worker.Option{worker.WithSessionTimeout(100 * time.Millisecond)}, []string{"WithSessionTimeout", "100ms"}},
		"both bad":      {[]worker.Option{worker.WithInstanceID(".."), worker.WithSessionTimeout(time.Hour)}, []string{"WithInstanceID", "WithSessionTimeout", "1h0m0s"}},
		"share+id":      {[]worker.Option{worker.WithGroupType(topics.GroupShare), worker.WithInstanceID("pod-1")}, []string{"share group"}},
		"share+session": {[]worker.Option{worker.WithGroupType(topics.GroupShare), worker.WithSessionTimeout(10 * time.Second)}, []string{"share group"}},
	} {
		w, err := worker.New(service, append([]worker.Option{worker.WithBrokers("127.0.0.1:1")}, c.opts...)...)
		if err == nil {
			w.Close()
			t.Errorf("%s: New accepted it", name)
			continue
		}
		for _, want := range c.want {
			if !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "worker: ") {
				t.Errorf("%s: error %q does not say %q", name, err, want)
			}
		}
	}
	w, err := worker.New(service, worker.WithBrokers("127.0.0.1:1"), worker.WithInstanceID("payment-service-0"), worker.WithSessionTimeout(6*time.Second))
	if err != nil {
		t.Fatalf("valid options: %v", err)
	}
	w.Close()
}

// Two live workers with one instance id: the one that joined first is
// fenced (FENCED_INSTANCE_ID) and its Run returns ErrInstanceFenced at
// once, instead of rejoining (and fencing the other) in a loop; the other
// goes on working.
func TestKafkaDuplicateInstanceIDFencesTheOlder(t *testing.T) {
	e := newRealKafka(t)
	first := e.newWorker(worker.WithInstanceID("dup"))
	registerPayment(t, first)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Run(ctx) }()
	<-first.Running()
	e.send(e.cmd("before", "charge", 0, topics.KindProcess, Order{ID: "before", Amount: 1}))
	e.reply("before", 0, topics.KindProcess)

	second := e.newWorker(worker.WithInstanceID("dup"))
	registerPayment(t, second)
	e.start(second)
	select {
	case err := <-firstDone:
		if !errors.Is(err, topics.ErrInstanceFenced) {
			t.Fatalf("the fenced worker's Run: %v, want ErrInstanceFenced", err)
		}
		if !strings.Contains(err.Error(), `"dup"`) || !strings.Contains(err.Error(), e.group) {
			t.Errorf("the error does not name the instance id and the group: %v", err)
		}
		t.Logf("fenced: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the older worker was not stopped by the newer one with its instance id")
	}
	e.send(e.cmd("after", "charge", 0, topics.KindProcess, Order{ID: "after", Amount: 1}))
	if r := e.reply("after", 0, topics.KindProcess); r.Outcome != topics.OutcomeOK {
		t.Errorf("after the fence: %s", r.Outcome)
	}
}

// A static worker that stops gracefully leaves its group: a dynamic
// member gets its partitions at once, not after its session timeout (a
// minute here, beyond the wait of e.reply).
func TestKafkaStaticWorkerLeavesOnStop(t *testing.T) {
	e := newRealKafka(t)
	static := e.newWorker(worker.WithInstanceID("leaver"), worker.WithSessionTimeout(time.Minute))
	registerPayment(t, static)
	stopStatic := e.start(static)
	other := e.newWorker(worker.WithSessionTimeout(time.Minute))
	registerPayment(t, other)
	e.start(other)
	// Both members own partitions (4 of them): replies to commands on
	// every partition come from both.
	e.send(e.cmd("warm", "charge", 0, topics.KindProcess, Order{ID: "warm", Amount: 1}))
	e.reply("warm", 0, topics.KindProcess)
	stopStatic()
	stopped := time.Now()
	const n = 16 // keys over all four partitions
	for i := range n {
		e.send(e.cmd(fmt.Sprintf("k%d", i), "charge", 0, topics.KindProcess, Order{ID: fmt.Sprint(i), Amount: 1}))
	}
	for i := range n {
		e.reply(fmt.Sprintf("k%d", i), 0, topics.KindProcess)
	}
	t.Logf("the remaining member answered on every partition %v after the static member stopped", time.Since(stopped).Round(time.Millisecond))
}

// staticKillEnv carries the settings of TestStaticKillChild.
const staticKillEnv = "STACKSAGA_STATIC_KILL_CHILD"

// TestStaticKillChild is the child process of TestKafkaKilledStaticWorker
// ResumesAtRestart: a static worker (instance id and session timeout from
// the parent) that prints RUNNING once it has its partitions. It does
// nothing in a normal run.
func TestStaticKillChild(t *testing.T) {
	spec := os.Getenv(staticKillEnv)
	if spec == "" {
		return
	}
	a := strings.Split(spec, "|") // brokers|service|group|instance|session
	session, err := time.ParseDuration(a[4])
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(a[1], worker.WithBrokers(strings.Split(a[0], ",")...), worker.WithGroup(a[2]),
		worker.WithInstanceID(a[3]), worker.WithSessionTimeout(session), worker.WithLogger(quietLogger()),
		worker.WithKafkaOpts(kgo.MetadataMinAge(50*time.Millisecond), kgo.FetchMaxWait(300*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	registerPayment(t, w)
	go func() {
		<-w.Running()
		fmt.Println("RUNNING")
	}()
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// childProc is a child test process whose stdout lines are read.
type childProc struct {
	cmd   *exec.Cmd
	lines chan string
}

// startChild runs the test named run of this binary with env added.
func startChild(t *testing.T, run string, env ...string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &childProc{cmd: cmd, lines: make(chan string, 256)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- strings.TrimSpace(sc.Text())
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return c
}

// waitLine waits for a line starting with prefix.
func (c *childProc) waitLine(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child exited before printing %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("the child did not print %q in %v", prefix, within)
		}
	}
}

// kill SIGKILLs the child and reaps it.
func (c *childProc) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
}

// staticRestartBound is how long a static member restarted under its
// instance id may take, from its process start, to handle the records of
// its partitions (docs/operations.md): generous for a loaded CI box, and
// far under the session timeout the test gives it, so that only the
// static membership can meet it.
const staticRestartBound = 20 * time.Second

// A static worker killed with SIGKILL and restarted with the same instance
// id handles the commands sent to its partitions meanwhile as soon as it
// is back, without waiting out the session of its previous life (a
// minute here).
func TestKafkaKilledStaticWorkerResumesAtRestart(t *testing.T) {
	e := newRealKafka(t)
	const session = time.Minute
	env := staticKillEnv + "=" + strings.Join([]string{strings.Join(e.brokers, ","), e.service, e.group, "payment-0", session.String()}, "|")
	child := startChild(t, "TestStaticKillChild", env)
	child.waitLine(t, "RUNNING", time.Minute)
	e.send(e.cmd("before", "charge", 0, topics.KindProcess, Order{ID: "before", Amount: 1}))
	e.reply("before", 0, topics.KindProcess)

	child.kill(t)
	killed := time.Now()
	const n = 16 // keys over all four partitions
	for i := range n {
		e.send(e.cmd(fmt.Sprintf("k%d", i), "charge", 0, topics.KindProcess, Order{ID: fmt.Sprint(i), Amount: 1}))
	}
	restarted := time.Now()
	startChild(t, "TestStaticKillChild", env)
	deadline := restarted.Add(staticRestartBound)
	var first time.Duration
	for got := 0; got < n; {
		got = 0
		e.mu.Lock()
		for _, r := range e.replies {
			if strings.HasPrefix(r.TxID, "k") {
				got++
			}
		}
		e.mu.Unlock()
		if got > 0 && first == 0 {
			first = time.Since(restarted)
		}
		if got < n && time.Now().After(deadline) {
			t.Fatalf("%d of %d commands answered %v after the restart (bound %v; session %v)", got, n, time.Since(restarted).Round(time.Millisecond), staticRestartBound, session)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("restarted under its instance id: first reply %v after the restart, all %d %v after it (%v after the kill)",
		first.Round(time.Millisecond), n, time.Since(restarted).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
}

// A session timeout the brokers refuse (under group.min.session.timeout.ms,
// 6s on the in-process broker) stops Run with ErrSessionTimeoutRefused
// instead of failing every join for ever.
func TestSessionTimeoutRefusedStopsRun(t *testing.T) {
	e := newKfake(t)
	w := e.newWorker(worker.WithSessionTimeout(2 * time.Second))
	registerPayment(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := w.Run(ctx)
	if !errors.Is(err, topics.ErrSessionTimeoutRefused) || !strings.Contains(err.Error(), "2s") {
		t.Fatalf("Run: %v, want ErrSessionTimeoutRefused naming the timeout", err)
	}
	t.Logf("Run: %v", err)
}
