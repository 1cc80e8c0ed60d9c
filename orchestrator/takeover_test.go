package orchestrator_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// A bad instance id or session timeout, or either with a share group,
// fails New naming the option.
func TestMembershipOptionsValidated(t *testing.T) {
	for name, c := range map[string]struct {
		opts []orchestrator.Option
		want []string
	}{
		"bad id":        {[]orchestrator.Option{orchestrator.WithInstanceID("pod/1")}, []string{"WithInstanceID", `"pod/1"`}},
		"empty id":      {[]orchestrator.Option{orchestrator.WithInstanceID("")}, []string{`WithInstanceID("")`}},
		"short session": {[]orchestrator.Option{orchestrator.WithSessionTimeout(10 * time.Millisecond)}, []string{"WithSessionTimeout", "10ms"}},
		"both bad":      {[]orchestrator.Option{orchestrator.WithInstanceID("."), orchestrator.WithSessionTimeout(2 * time.Hour)}, []string{"WithInstanceID", "WithSessionTimeout", "2h0m0s"}},
		"share+id":      {[]orchestrator.Option{orchestrator.WithGroupType(topics.GroupShare), orchestrator.WithInstanceID("pod-1")}, []string{"share group"}},
		"share+session": {[]orchestrator.Option{orchestrator.WithGroupType(topics.GroupShare), orchestrator.WithSessionTimeout(10 * time.Second)}, []string{"share group"}},
	} {
		o, err := orchestrator.New(svcA, testDomain(), append([]orchestrator.Option{orchestrator.WithBrokers("127.0.0.1:1")}, c.opts...)...)
		if err == nil {
			o.Close()
			t.Errorf("%s: New accepted it", name)
			continue
		}
		for _, want := range c.want {
			if !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "orchestrator: ") {
				t.Errorf("%s: error %q does not say %q", name, err, want)
			}
		}
	}
	o, err := orchestrator.New(svcA, testDomain(), orchestrator.WithBrokers("127.0.0.1:1"),
		orchestrator.WithInstanceID("order-service-0"), orchestrator.WithSessionTimeout(6*time.Second))
	if err != nil {
		t.Fatalf("valid options: %v", err)
	}
	o.Close()
}

// Two live orchestrators with one instance id: the older is fenced and its
// Run returns ErrInstanceFenced, instead of rejoining (and fencing the
// newer) in a loop; the newer applies the replies.
func TestKafkaDuplicateInstanceIDFencesTheOlder(t *testing.T) {
	r := newRig(t, "memory")
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	older, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...), orchestrator.WithStore(r.store),
		orchestrator.WithInstanceID("dup"), orchestrator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	olderDone := make(chan error, 1)
	go func() { olderDone <- older.Run(ctx) }()
	<-older.Running()
	waitTerminal(t, older, startN(t, older, 1), time.Minute)

	newer, _ := r.startOrchestrator(orchestrator.WithInstanceID("dup"))
	select {
	case err := <-olderDone:
		if !errors.Is(err, topics.ErrInstanceFenced) || !strings.HasPrefix(err.Error(), "orchestrator: ") {
			t.Fatalf("the fenced orchestrator's Run: %v, want ErrInstanceFenced", err)
		}
		t.Logf("fenced: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the older orchestrator was not stopped by the newer one with its instance id")
	}
	for id, s := range waitTerminal(t, newer, startN(t, newer, 4), time.Minute) {
		if s != eventstore.StateCompleted {
			t.Errorf("%s: %s", id, s)
		}
	}
}

// staticOrchEnv selects TestStaticOrchestratorChild and carries its
// settings.
const staticOrchEnv = "STACKSAGA_STATIC_ORCH_CHILD"

// TestStaticOrchestratorChild is the child process of
// TestCassandraKilledStaticOrchestratorResumesAtRestart: an orchestrator on
// the parent's Kafka and Cassandra with an instance id, that starts the
// sagas it is told to and prints every reply it applies. It does nothing
// in a normal run.
func TestStaticOrchestratorChild(t *testing.T) {
	spec := os.Getenv(staticOrchEnv)
	if spec == "" {
		return
	}
	a := strings.Split(spec, "|") // brokers|hosts|keyspace|domain|stock|pay|instance|session|sagas
	session, err := time.ParseDuration(a[7])
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(a[8])
	if err != nil {
		t.Fatal(err)
	}
	store := cassandraStoreIn(t, strings.Split(a[1], ","), a[2], false)
	r := &rig{domain: a[3], svcStock: a[4], svcPay: a[5]}
	o, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(strings.Split(a[0], ",")...),
		orchestrator.WithStore(store), orchestrator.WithInstanceID(a[6]), orchestrator.WithSessionTimeout(session),
		orchestrator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		orchestrator.WithListener(func(e orchestrator.Event) {
			if e.Outcome != "" {
				fmt.Printf("APPLIED %s %s %s\n", e.TxID, e.Endpoint, e.Outcome)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-o.Running()
		fmt.Println("RUNNING")
		for range n {
			id, err := o.Start(context.Background(), order{ID: "static"})
			if err != nil {
				fmt.Println("FAILED " + err.Error())
				return
			}
			fmt.Println("STARTED " + id)
		}
	}()
	if err := o.Run(context.Background()); err != nil {
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
	c := &childProc{cmd: cmd, lines: make(chan string, 1024)}
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

// waitLine waits for a line starting with prefix and returns it.
func (c *childProc) waitLine(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child exited before printing %q", prefix)
			}
			if strings.HasPrefix(l, "FAILED ") {
				t.Fatalf("child: %s", l)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("the child did not print %q in %v", prefix, within)
		}
	}
}

// staticRestartBound is how long an orchestrator restarted under its
// instance id may take, from its process start (connecting to Cassandra
// included), to apply a reply that arrived while it was dead
// (docs/operations.md): generous for a loaded CI box, and far under the
// session timeout the test gives it, so that only the static membership
// can meet it.
const staticRestartBound = 20 * time.Second

// An orchestrator on Cassandra is SIGKILLed with sagas in flight (their
// charge steps running) and restarted with the same instance id: it
// applies the replies that arrived meanwhile as soon as it is back,
// without waiting out the session of its previous life (a minute here),
// and every saga completes with no step run twice.
func TestCassandraKilledStaticOrchestratorResumesAtRestart(t *testing.T) {
	r := newRig(t, "memory")
	hosts, keyspace := testenv.CassandraKeyspace(t)
	r.store = cassandraStoreIn(t, hosts, keyspace, true)
	r.holdChargesAfter(0) // every charge waits until the orchestrator is dead
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	const sagas, session = 8, time.Minute
	spec := func(n int) string {
		return staticOrchEnv + "=" + strings.Join([]string{strings.Join(r.brokers, ","), strings.Join(hosts, ","), keyspace,
			r.domain, r.svcStock, r.svcPay, "orders-0", session.String(), strconv.Itoa(n)}, "|")
	}
	child := startChild(t, "TestStaticOrchestratorChild", spec(sagas))
	var ids []string
	for range sagas {
		ids = append(ids, strings.TrimPrefix(child.waitLine(t, "STARTED ", 2*time.Minute), "STARTED "))
	}
	waitFor(t, time.Minute, "every saga's charge running", func() bool { return r.chargesBegun.Load() >= sagas })
	// ... and persisted as waiting for it: the orchestrator publishes a
	// command before it persists the transition, so a saga killed in
	// between would send its charge again at the restart (by design: the
	// workers' guards drop such duplicates; these workers have none).
	scope := eventstore.Scope{Region: "default", Cluster: "default", Service: "orders"}
	inState := func(span int, want eventstore.State) func() bool {
		return func() bool {
			for _, id := range ids {
				tx, err := r.store.LoadTransaction(context.Background(), scope, id)
				if err != nil || tx.State != want || tx.Span < span {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, time.Minute, "every saga persisted at its charge", inState(1, eventstore.StateInProgress))

	if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.cmd.Wait()
	killed := time.Now()
	r.releaseCharges() // their replies reach the callback topic while no orchestrator runs

	restarted := time.Now()
	again := startChild(t, "TestStaticOrchestratorChild", spec(0))
	first := again.waitLine(t, "APPLIED ", staticRestartBound+10*time.Second)
	resumed := time.Since(restarted)
	t.Logf("restarted under its instance id: first reply applied %v after the restart (%v after the kill): %s",
		resumed.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), first)
	if resumed > staticRestartBound {
		t.Errorf("the restarted orchestrator applied its first reply %v after its start, over the bound of %v (session %v)", resumed, staticRestartBound, session)
	}

	waitFor(t, 2*time.Minute, "every saga completed", inState(0, eventstore.StateCompleted))
	for _, id := range ids {
		for span, kind := range map[int]topics.Kind{0: topics.KindProcess, 1: topics.KindProcess, 2: topics.KindProcess} {
			if n := r.runsOf(id, span, kind); n != 1 {
				t.Errorf("%s span %d ran %d times, want 1", id, span, n)
			}
		}
	}
}
