package orchestrator_test

import (
	"bufio"
	"context"
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

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// Issue 37's idempotent Start on real Kafka and each store: Starts racing
// with one business key on two orchestrator instances make one saga, whose
// steps each run once; every instance's Wait returns it completed (the one
// that applies its replies woken by them, the other by its reads); a later
// Start gets its id.
func TestKafkaBusinessKeyOneSagaAcrossInstances(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		r := newRig(t, kind)
		r.startWorker(r.svcStock)
		r.startWorker(r.svcPay)
		o1, _ := r.startOrchestrator()
		o2, _ := r.startOrchestrator()
		os := []*orchestrator.Orchestrator[order]{o1, o2}
		ids, errs := raceStarts(t, os, 8, "order-race")
		id := checkOneSaga(t, ids, errs)
		for _, o := range os {
			if s := waitDone(t, o, id); s.State != eventstore.StateCompleted || !strings.HasPrefix(s.Entity.ID, "racer-") {
				t.Fatalf("saga %+v", s)
			}
		}
		r.checkRanOnce(t, id)
		again, err := o2.Start(t.Context(), order{ID: "late"}, orchestrator.WithBusinessKey("order-race"))
		if e := existsOf(t, err); again != id || e.TookOver {
			t.Fatalf("late Start: %q, %+v; want %s", again, e, id)
		}
	})
}

// checkRanOnce checks that each of the rig saga's three steps ran once for
// txID.
func (r *rig) checkRanOnce(t *testing.T, txID string) {
	t.Helper()
	for span := range 3 {
		if n := r.runsOf(txID, span, topics.KindProcess); n != 1 {
			t.Errorf("%s: span %d ran %d times, want once", txID, span, n)
		}
	}
}

// A Start abandoned after its claim, or after its create (as if its
// process died there), on real Kafka and each store: a new orchestrator
// instance's Start with the key gets the first saga's id, and the saga
// completes once with the first Start's order: created by the new Start
// after the grace period, or restored by the retry node from its watchdog.
func TestKafkaBusinessKeyAfterAbandonedStart(t *testing.T) {
	for _, point := range []orchestrator.FaultPoint{orchestrator.FaultAfterClaim, orchestrator.FaultAfterCreate} {
		t.Run(point.String(), func(t *testing.T) {
			onEachStore(t, func(t *testing.T, kind string) {
				r := newRig(t, kind)
				r.startWorker(r.svcStock)
				r.startWorker(r.svcPay)
				cfg := recoveryCfg(t)
				dead, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(r.brokers...), orchestrator.WithKafkaOpts(r.kopts...),
					orchestrator.WithStore(r.store), orchestrator.WithRecovery(cfg),
					orchestrator.WithFaultInjection(func(p orchestrator.FaultPoint, _ string) bool { return p == point }))
				if err != nil {
					t.Fatal(err)
				}
				id, err := dead.Start(t.Context(), order{ID: "first"}, orchestrator.WithBusinessKey("order-abandoned"))
				if err != nil {
					t.Fatal(err)
				}
				_ = dead.Close()
				r.checkRecovers(t, point, id, "order-abandoned")
			})
		})
	}
}

// checkRecovers starts a new orchestrator (a retry node on a test clock)
// and checks that a Start with key, after a Start abandoned at point left
// txID, gets txID and the saga completes once with the first Start's order.
func (r *rig) checkRecovers(t *testing.T, point orchestrator.FaultPoint, txID, key string) {
	t.Helper()
	clock := newFakeClock()
	o, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recoveryCfg(t)), orchestrator.WithRetryNode())
	_, err := o.Get(t.Context(), txID)
	if exists := err == nil; exists != (point == orchestrator.FaultAfterCreate) {
		t.Fatalf("the abandoned Start's saga: %v", err)
	}
	if point == orchestrator.FaultAfterClaim {
		clock.advance(orchestrator.DefaultBusinessKeyGrace)
	}
	again, err := o.Start(t.Context(), order{ID: "second"}, orchestrator.WithBusinessKey(key))
	if e := existsOf(t, err); again != txID || e.TookOver != (point == orchestrator.FaultAfterClaim) {
		t.Fatalf("Start after the abandoned one: %q, %+v; want %s", again, e, txID)
	}
	if point == orchestrator.FaultAfterCreate {
		// Its watchdog, a few windows ahead, brings it back.
		expectAll(t, scanUntil(t, o, clock, time.Minute, []string{txID}), eventstore.StateCompleted)
	}
	if s := waitDone(t, o, txID); s.State != eventstore.StateCompleted || s.Entity.ID != "first" {
		t.Fatalf("saga %+v: want the first Start's order, completed", s)
	}
	r.checkRanOnce(t, txID)
}

// keyKillEnv selects TestBusinessKeyKillChild, the child process of
// TestCassandraBusinessKeyKilledStart, and carries its settings.
const keyKillEnv = "STACKSAGA_KEY_KILL_CHILD"

// TestBusinessKeyKillChild is the child process: an orchestrator on the
// parent's Kafka and Cassandra that starts one saga with a business key and
// kills itself (SIGKILL) at a fault point.
func TestBusinessKeyKillChild(t *testing.T) {
	if os.Getenv(keyKillEnv) == "" {
		return // run only as the child of TestCassandraBusinessKeyKilledStart
	}
	a := strings.Split(os.Getenv(keyKillEnv), "|") // brokers|hosts|keyspace|domain|stock|pay|point|key
	point, err := strconv.Atoi(a[6])
	if err != nil {
		t.Fatal(err)
	}
	store := cassandraStoreIn(t, strings.Split(a[1], ","), a[2], false)
	r := &rig{domain: a[3], svcStock: a[4], svcPay: a[5]}
	o, err := orchestrator.New("orders", r.sagaDomain(), orchestrator.WithBrokers(strings.Split(a[0], ",")...),
		orchestrator.WithStore(store), orchestrator.WithRecovery(recoveryCfg(t)),
		orchestrator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		orchestrator.WithKafkaOpts(kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(500*time.Millisecond)),
		orchestrator.WithFaultInjection(func(p orchestrator.FaultPoint, txID string) bool {
			if p == orchestrator.FaultPoint(point) {
				fmt.Println("KILLED " + txID)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			return false
		}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = o.Start(context.Background(), order{ID: "first"}, orchestrator.WithBusinessKey(a[7]))
	t.Fatalf("Start returned (%v) instead of reaching the fault point", err)
}

// The acceptance of issue 37, item 4, at process level: an orchestrator
// process starting a saga with a business key is killed (SIGKILL) after
// creating the saga, or between claiming the key and creating it. On real
// Kafka and Cassandra, a new orchestrator's Start with the key returns the
// killed Start's saga id, and the saga completes once with the killed
// Start's order.
func TestCassandraBusinessKeyKilledStart(t *testing.T) {
	for _, point := range []orchestrator.FaultPoint{orchestrator.FaultAfterCreate, orchestrator.FaultAfterClaim} {
		t.Run(point.String(), func(t *testing.T) {
			r := newRig(t, "memory")
			hosts, keyspace := testenv.CassandraKeyspace(t)
			r.store = cassandraStoreIn(t, hosts, keyspace, true)
			r.startWorker(r.svcStock)
			r.startWorker(r.svcPay)
			key := "order-killed-" + strconv.Itoa(int(point))
			txID := runKillChild(t, keyKillEnv, "^TestBusinessKeyKillChild$", strings.Join([]string{
				strings.Join(r.brokers, ","), strings.Join(hosts, ","), keyspace, r.domain, r.svcStock, r.svcPay, strconv.Itoa(int(point)), key}, "|"))
			r.checkRecovers(t, point, txID, key)
		})
	}
}

// runKillChild runs this test binary's test run (a regexp) in a child
// process with env=val, which prints "KILLED <tx id>" and kills itself;
// it returns the id once the child died of SIGKILL.
func runKillChild(t *testing.T, env, run, val string) string {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run="+run, "-test.v")
	child.Env = append(os.Environ(), env+"="+val)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "KILLED "); ok {
				killed <- s
			}
		}
		close(killed)
	}()
	var txID string
	select {
	case txID = <-killed:
	case <-time.After(2 * time.Minute):
		_ = child.Process.Kill()
		t.Fatal("the child never reached its fault point")
	}
	err = child.Wait()
	if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); txID == "" || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v (tx %q), want SIGKILL at its fault point", err, txID)
	}
	return txID
}

// Slow claimers on real Kafka and each store (see TestBusinessKeySlowClaimer):
// a Start held between its claim and its create for the grace period is
// taken over; whether the taker creates the saga first or the slow one
// creates it between the taker's read and the taker's create, the slow
// one sends nothing and is told that the saga exists, each step runs once
// and the saga completes with the slow Start's order. On Cassandra the slow
// create lands (no store there detects a taken id) and is discarded by the
// taker's fence, or loses to the taker's fenced create.
func TestKafkaBusinessKeySlowClaimer(t *testing.T) {
	for _, takerFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "taker creates first", false: "slow claimer creates between the taker's read and create"}[takerFirst], func(t *testing.T) {
			onEachStore(t, func(t *testing.T, kind string) {
				r := newRig(t, kind)
				r.startWorker(r.svcStock)
				r.startWorker(r.svcPay)
				clock := newFakeClock()
				g1, g2 := newGate(), newGate()
				slow, _ := r.startOrchestrator(orchestrator.WithClock(clock.now), orchestrator.WithFaultInjection(g1.hook))
				takerOpts := []orchestrator.Option{orchestrator.WithClock(clock.now)}
				if !takerFirst {
					takerOpts = append(takerOpts, orchestrator.WithFaultInjection(g2.hook))
				}
				taker, _ := r.startOrchestrator(takerOpts...)
				first := startAsync(slow, "first", "order-slow")
				id := <-g1.reached
				clock.advance(orchestrator.DefaultBusinessKeyGrace)
				second := startAsync(taker, "second", "order-slow")
				if takerFirst {
					if r := <-second; r.id != id || !existsOf(t, r.err).TookOver {
						t.Fatalf("taker: %q, %v; want %s taken over", r.id, r.err, id)
					}
				} else if got := <-g2.reached; got != id {
					t.Fatalf("the taker creates %s, want %s", got, id)
				}
				close(g1.release)
				if r := <-first; r.id != id || existsOf(t, r.err).TookOver {
					t.Fatalf("slow claimer: %q, %v; want told that the saga exists", r.id, r.err)
				}
				if !takerFirst {
					close(g2.release)
					if r := <-second; r.id != id {
						t.Fatalf("taker: %q, %v; want %s", r.id, r.err, id)
					} else {
						existsOf(t, r.err)
					}
				}
				for _, o := range []*orchestrator.Orchestrator[order]{slow, taker} {
					if s := waitDone(t, o, id); s.State != eventstore.StateCompleted || s.Entity.ID != "first" {
						t.Fatalf("saga %+v: want the slow Start's order, completed", s)
					}
				}
				r.checkRanOnce(t, id)
				// The taker's create, fenced, won (on the memory store the
				// slow one's create, first, made the taker's fail).
				if row, err := r.store.LoadTransaction(t.Context(), taker.Scope(), id); err != nil || (takerFirst || kind == "cassandra") && row.Fence != 1 {
					t.Errorf("saga row fence %d (%v), want the taker's, 1", row.Fence, err)
				}
			})
		})
	}
}
