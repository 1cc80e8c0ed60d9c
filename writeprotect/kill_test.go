package writeprotect_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// The child process of TestKillWorkerInHandler, selected by this variable.
const killChildEnv = "STACKSAGA_KILL_CHILD"

// killLease is longer than the group's session timeout, so the survivor
// gets the command while the dead instance's lease is still live.
const killLease = 8 * time.Second

// killWorker builds the worker both processes run: STRICT on the Cassandra
// store, one endpoint "charge" whose handler is handle.
func killWorker(t testing.TB, brokers, hosts []string, keyspace, service, owner string, handle func()) (*worker.Worker, *writeprotect.Guard, *cassandra.Store) {
	t.Helper()
	cfg := cassandra.Config{ContactPoints: hosts, Keyspace: keyspace, Replication: cassandra.SimpleReplication(1), RequestTimeout: 20 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := cassandra.New(ctx, cfg, cassandra.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	wp := writeprotect.DefaultConfig()
	wp.DefaultMode, wp.DefaultLease = writeprotect.Strict, killLease
	g, err := writeprotect.New(store, wp, writeprotect.WithOwner(owner), writeprotect.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(service, worker.WithBrokers(brokers...), worker.WithGuard(g), worker.WithLogger(quietLogger()),
		worker.WithoutProvision(), worker.WithKafkaOpts(kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(500*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	err = worker.Register(w, worker.Endpoint[map[string]string]{
		Name: "charge",
		Process: func(_ context.Context, _ *worker.Step, in map[string]string) (map[string]string, error) {
			handle()
			in["charged"] = "yes"
			return in, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return w, g, store
}

// TestKillChild is the child process: it runs the worker, says RUNNING from
// inside the handler, and blocks there until the parent kills it.
func TestKillChild(t *testing.T) {
	if os.Getenv(killChildEnv) == "" {
		return // run only as the child of TestKillWorkerInHandler
	}
	a := strings.Split(os.Getenv(killChildEnv), "|") // brokers|hosts|keyspace|service
	w, _, _ := killWorker(t, strings.Split(a[0], ","), strings.Split(a[1], ","), a[2], a[3], "child", func() {
		fmt.Println("RUNNING")
		select {} // killed here, between lease and commit
	})
	_ = w.Run(context.Background())
}

// A worker process is killed (SIGKILL) inside the handler of a STRICT step,
// between taking the lease and committing. The command is redelivered to
// another instance, which waits for the dead lease to expire and then runs
// the step once: never while the lease is live, never twice.
func TestKillWorkerInHandler(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	hosts, keyspace := testenv.CassandraKeyspace(t)
	service := testenv.UniqueName(t, "pay")
	callback := topics.CallbackTopic(testenv.UniqueName(t, "dom"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(callback))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := topics.Ensure(ctx, kadm.NewClient(cl), append(topics.WorkerTopics(service), callback), topics.Provision{Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	if err := cassandra.ApplySchemaWithConfig(sctx, cassandra.Config{ContactPoints: hosts, Keyspace: keyspace, Replication: cassandra.SimpleReplication(1)}); err != nil {
		t.Fatal(err)
	}
	scancel()

	// The child takes the command and dies in its handler.
	child := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.v")
	child.Env = append(os.Environ(), killChildEnv+"="+strings.Join([]string{strings.Join(brokers, ","), strings.Join(hosts, ","), keyspace, service}, "|"))
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	cmd := &topics.Envelope{
		Type: topics.TypeCommand, Region: "default", Cluster: "default", Service: "orders",
		Domain: "dom", TxID: "tx-kill-1", Span: 0, Kind: topics.KindProcess, Endpoint: "charge",
		IdempotencyKey: topics.IdempotencyKey("tx-kill-1", 0, topics.KindProcess), Attempt: 1,
		ReplyTo: callback, Payload: []byte{0x80}, // msgpack {}
	}
	b, _ := topics.Encode(cmd)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.CommandTopic(service), Key: []byte(cmd.TxID), Value: b}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "RUNNING" {
				close(running)
				return
			}
		}
	}()
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatal("the child never ran the handler")
	}
	leasedBy := time.Now() // the lease was taken before the handler ran
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	// A second instance in the same group gets the uncommitted command.
	var runs, concurrent atomic.Int32
	var mu sync.Mutex
	var startedAt time.Time
	w, guard, store := killWorker(t, brokers, hosts, keyspace, service, "survivor", func() {
		if concurrent.Add(1) > 1 {
			t.Error("two runs at once")
		}
		defer concurrent.Add(-1)
		runs.Add(1)
		mu.Lock()
		startedAt = time.Now()
		mu.Unlock()
	})
	defer store.Close()
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { wcancel(); <-done }()

	var reply *topics.Envelope
	for reply == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("no reply from the surviving instance")
		}
		fs.EachRecord(func(r *kgo.Record) {
			if e, err := topics.Decode(r.Value); err == nil {
				reply = e
			}
		})
	}
	if reply.Outcome != topics.OutcomeOK || reply.TxID != cmd.TxID {
		t.Fatalf("reply %+v", reply)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the surviving instance ran the step %d times, want 1", n)
	}
	mu.Lock()
	waited := startedAt.Sub(leasedBy)
	mu.Unlock()
	if waited < killLease-time.Second { // leases are whole seconds
		t.Fatalf("the step ran again %v after the dead instance's lease was taken; the lease is %v", waited, killLease)
	}
	// The worker sends the reply while the guard commits the lease
	// (ExecuteOverlapped): the commit lands soon after the reply.
	var m eventstore.Marker
	waitUntil(t, 30*time.Second, "the surviving run's commit", func() bool {
		m, err = store.GetMarker(ctx, writeprotect.MarkerKeyFor(cmd))
		return err != nil || m.State != eventstore.MarkerLeased
	})
	if err != nil || m.State != eventstore.MarkerCommitted || !retained(m) {
		t.Fatalf("marker after the run: %+v, %v; want a COMMITTED marker expiring after the retention", m, err)
	}
	if st := guard.Stats(); st.LeaseWaits == 0 || st.Executions != 1 {
		t.Errorf("survivor's guard %+v: want it to have waited on the dead lease, then run once", st)
	}
	t.Logf("the survivor ran the step %v after the killed instance took its lease", waited.Round(time.Millisecond))
}
