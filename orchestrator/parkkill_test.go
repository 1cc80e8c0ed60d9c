package orchestrator_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

// parkKillEnv selects TestParkKillChild, the child process of
// TestCassandraKilledWhileParkingIsRetried, and carries its settings.
const parkKillEnv = "STACKSAGA_PARK_KILL_CHILD"

// TestParkKillChild is the child process: an orchestrator on the parent's
// Kafka and Cassandra that starts one saga and kills itself (SIGKILL)
// between the two writes that park it in RETRY_PENDING.
func TestParkKillChild(t *testing.T) {
	if os.Getenv(parkKillEnv) == "" {
		return // run only as the child of TestCassandraKilledWhileParkingIsRetried
	}
	a := strings.Split(os.Getenv(parkKillEnv), "|") // brokers|hosts|keyspace|domain|stock|pay
	ctx := context.Background()
	store := cassandraStoreIn(t, strings.Split(a[1], ","), a[2], false)
	r := &rig{domain: a[3], svcStock: a[4], svcPay: a[5]}
	o, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(strings.Split(a[0], ",")...),
		orchestrator.WithStore(store), orchestrator.WithRecovery(recovery.DefaultConfig()),
		orchestrator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		// A dead member leaves the group quickly.
		orchestrator.WithKafkaOpts(kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(500*time.Millisecond)),
		orchestrator.WithFaultInjection(func(p orchestrator.FaultPoint, txID string) bool {
			if p == orchestrator.FaultParkRetry {
				fmt.Println("KILLED " + txID)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			return false
		}))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = o.Run(ctx) }()
	<-o.Running()
	txID, err := o.Start(ctx, order{ID: "parked"})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("STARTED " + txID)
	select {} // killed by the fault above
}

// An orchestrator process is killed (SIGKILL) while it parks a saga whose
// step failed retryably, between the saga's RETRY_PENDING state and its
// retry registration. The reply was not committed, so a restarted
// orchestrator gets it again; the saga must then be retried by its retry
// policy (a few windows), not only by its restore watchdog (600 windows
// by default).
func TestCassandraKilledWhileParkingIsRetried(t *testing.T) {
	r := newRig(t, "memory")
	hosts, keyspace := testenv.CassandraKeyspace(t)
	r.store = cassandraStoreIn(t, hosts, keyspace, true)
	r.retryChargeOnce.Store(true)
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)

	child := exec.Command(os.Args[0], "-test.run=^TestParkKillChild$", "-test.v")
	child.Env = append(os.Environ(), parkKillEnv+"="+strings.Join([]string{
		strings.Join(r.brokers, ","), strings.Join(hosts, ","), keyspace, r.domain, r.svcStock, r.svcPay}, "|"))
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
	}()
	var started, killed string
	timeout := time.After(2 * time.Minute)
	for killed == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child ended (started %q) without reaching the park", started)
			}
			if s, ok := strings.CutPrefix(l, "STARTED "); ok {
				started = s
			}
			if s, ok := strings.CutPrefix(l, "KILLED "); ok {
				killed = s
			}
		case <-timeout:
			_ = child.Process.Kill()
			t.Fatal("the child never reached the park")
		}
	}
	err = child.Wait()
	if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", err)
	}
	txID := killed
	row, err := r.store.LoadTransaction(context.Background(), eventstore.Scope{Region: "default", Cluster: "default", Service: "orders"}, txID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed while parking %s, left %s attempt %d", txID, row.State, row.Attempt)

	// The restarted orchestrator, a retry node on a clock the test moves.
	clock := newFakeClock()
	cfg := recovery.DefaultConfig()
	restore := cfg.RestoreDelay(r.domain)
	o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(cfg), orchestrator.WithRetryNode())
	// It gets the reply the child died applying, once the child's session
	// has expired.
	waitStats(t, o, "the redelivered reply", func(st orchestrator.Stats) bool { return st.Replies+st.StaleReplies >= 1 })
	const windows = 20 // well under the restore delay
	if restore <= 2*windows {
		t.Fatalf("restore delay %d windows: the test needs it far beyond %d", restore, windows)
	}
	var state eventstore.State
	for i := 0; i < windows; i++ {
		clock.advance(time.Minute)
		if _, err := o.RecoveryEngine().Scan(context.Background()); err != nil {
			t.Logf("scan: %v", err)
		}
		// Replies to a re-sent step arrive asynchronously.
		for wait := time.Now().Add(2 * time.Second); time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
			s, err := o.Get(context.Background(), txID)
			if err != nil {
				t.Fatal(err)
			}
			if state = s.State; state.Terminal() {
				break
			}
		}
		if state.Terminal() {
			break
		}
	}
	if state != eventstore.StateCompleted {
		t.Fatalf("saga %s is %s after %d windows (stats %+v): its retry was lost, only the restore watchdog (%d windows) would re-drive it",
			txID, state, windows, o.Stats(), restore)
	}
	if st := o.Stats(); st.Retried != 1 || st.Restored != 0 {
		t.Errorf("stats %+v: want one retry and no restore", st)
	}
	if n := r.runsOf(txID, 1, topics.KindProcess); n != 2 {
		t.Errorf("charge ran %d times, want 2 (the failed attempt and the retry)", n)
	}
}

// cassandraStoreIn opens a Cassandra store on keyspace at hosts, creating
// its schema if create, closed when the test ends.
func cassandraStoreIn(t *testing.T, hosts []string, keyspace string, create bool) *cassandra.Store {
	t.Helper()
	cfg := cassandra.DefaultConfig()
	cfg.ContactPoints, cfg.Keyspace = hosts, keyspace
	cfg.Replication = cassandra.SimpleReplication(1)
	cfg.CreateSchema = create
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := cassandra.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
