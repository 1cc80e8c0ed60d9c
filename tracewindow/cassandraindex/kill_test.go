package cassandraindex_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/tracewindow/cassandraindex"
)

// The kill test's child process: env killMode selects what it does.
const (
	killMode     = "STACKSAGA_KILL_TEST_MODE" // "orchestrate" or "restart"
	killHosts    = "STACKSAGA_KILL_TEST_HOSTS"
	killKeyspace = "STACKSAGA_KILL_TEST_KEYSPACE"
	killService  = "STACKSAGA_KILL_TEST_SERVICE"
	killRepair   = "STACKSAGA_KILL_TEST_REPAIR" // "1": write ends through, repair at restart
	killWritten  = "WRITTEN"
)

// killPlan is what the child does to each group of sagas, in the order
// the orchestrator writes: the watchdog and the row, the listener, then at
// an end the listener before the watchdog's deletion. The process is
// killed right after the last write, with the index's queue unwritten (a
// flush interval of an hour; the first group's flush writes only what
// came before it).
var killPlan = []struct {
	name  string
	want  eventstore.State
	steps []eventstore.State
	// flushAt flushes the index after that many steps (0: never);
	// unheard: the last step is written to the store, and the process dies
	// before the listener hears it.
	flushAt int
	unheard bool
}{
	{"indexed in flight, ended, not heard", eventstore.StateCompleted, []eventstore.State{eventstore.StateInProgress, eventstore.StateCompleted}, 1, true},
	{"created", eventstore.StateStarted, nil, 0, false},
	{"in progress", eventstore.StateInProgress, []eventstore.State{eventstore.StateInProgress}, 0, false},
	{"completed", eventstore.StateCompleted, []eventstore.State{eventstore.StateInProgress, eventstore.StateCompleted}, 0, false},
	{"compensated", eventstore.StateCompensated, []eventstore.State{eventstore.StateInProgress, eventstore.StateCompensating, eventstore.StateCompensated}, 0, false},
	{"ended, not heard", eventstore.StateCompleted, []eventstore.State{eventstore.StateInProgress, eventstore.StateCompleted}, 0, true},
}

const killPerGroup = 4

// TestMain runs the test binary as the child process of
// TestKillRestartListsEverySaga when killMode says so, else the tests.
func TestMain(m *testing.M) {
	switch os.Getenv(killMode) {
	case "orchestrate":
		killOrchestrate(childFatal{}) // until SIGKILL
	case "restart":
		killRestart(childFatal{})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fataler is what the child's steps need of a *testing.T.
type fataler interface{ Fatal(args ...any) }

// childFatal ends the child process on an error.
type childFatal struct{}

func (childFatal) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"kill test child:"}, args...)...)
	os.Exit(1)
}

func killEnv() (cassandra.Config, eventstore.Scope, bool) {
	return cassandra.Config{ContactPoints: strings.Split(os.Getenv(killHosts), ","), Keyspace: os.Getenv(killKeyspace)},
		eventstore.Scope{Region: "eu", Cluster: "c1", Service: os.Getenv(killService)}, os.Getenv(killRepair) == "1"
}

// killOrchestrate writes the sagas of killPlan as the orchestrator does,
// prints killWritten and waits to be killed.
func killOrchestrate(t fataler) {
	cfg, scope, repair := killEnv()
	ctx := context.Background()
	store, err := cassandra.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts := []cassandraindex.Option{cassandraindex.WithFlushInterval(time.Hour)}
	if !repair {
		opts = append(opts, cassandraindex.WithWriteThroughTimeout(0))
	}
	idx, err := cassandraindex.New(ctx, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	w, err := recovery.NewWriter(store, recovery.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	listen := tracewindow.Listener(idx, scope)
	at := time.Now().UTC().Add(-time.Minute)
	for g, p := range killPlan {
		for i := range killPerGroup {
			at = at.Add(time.Millisecond)
			id, err := orchestrator.NewTxID(at, 1)
			if err != nil {
				t.Fatal(err)
			}
			domain := fmt.Sprintf("dom-%d", (g+i)%2)
			path, err := w.RegisterRestore(ctx, scope, id, domain)
			if err != nil {
				t.Fatal(err)
			}
			tx := eventstore.Transaction{Scope: scope, TxID: id, Domain: domain, State: eventstore.StateStarted, Version: 1,
				Span: 0, Kind: "process", Endpoint: "stock/reserve", Attempt: 1, RestorePath: &path, CreatedAt: at, UpdatedAt: at}
			if err := store.CreateTransaction(ctx, tx, nil); err != nil {
				t.Fatal(err)
			}
			listen(orchestrator.Event{TxID: id, Domain: domain, To: tx.State, Kind: tx.Kind, Endpoint: tx.Endpoint, At: tx.UpdatedAt})
			for n, st := range p.steps {
				tx.State, tx.Version, tx.UpdatedAt = st, tx.Version+1, tx.UpdatedAt.Add(time.Millisecond)
				if err := store.Transition(ctx, tx, nil); err != nil {
					t.Fatal(err)
				}
				last := n == len(p.steps)-1
				if last && p.unheard {
					break // killed between the store's write and the listener
				}
				listen(orchestrator.Event{TxID: id, Domain: domain, From: eventstore.StateStarted, To: st, Kind: tx.Kind, Endpoint: tx.Endpoint, At: tx.UpdatedAt})
				if n+1 == p.flushAt {
					if err := idx.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if last && st.Terminal() {
					if err := store.DeleteRecoveryEntry(ctx, scope, path, id); err != nil {
						t.Fatal(err)
					}
				}
			}
			fmt.Printf("SAGA %s %s\n", id, p.want)
		}
	}
	fmt.Println(killWritten)
	select {} // until SIGKILL
}

// killRestart is the restarted process: a new index, Repair (when the
// fix is on), then Close (which writes its queue).
func killRestart(t fataler) {
	cfg, scope, repair := killEnv()
	ctx := context.Background()
	store, err := cassandra.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	idx, err := cassandraindex.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if repair {
		res, err := tracewindow.Repair(ctx, store, idx, scope, recovery.DefaultConfig(), time.Now().UTC())
		if err != nil {
			t.Fatal(err)
		}
		out, _ := json.Marshal(res)
		fmt.Printf("repair %s\n", out)
	}
	if err := idx.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestKillRestartListsEverySaga: a process feeding the index on real
// Cassandra is SIGKILLed right after writing its sagas, with its index
// queue unwritten; after a restart every saga is in the Trace Window's
// list with its state, and the health counts agree. The same run without
// the write-through of ends and without Repair shows the loss the fix
// closes (sagas missing, an ended saga counted in flight).
func TestKillRestartListsEverySaga(t *testing.T) {
	for _, fixed := range []bool{true, false} {
		t.Run(map[bool]string{true: "repaired", false: "without the fix"}[fixed], func(t *testing.T) {
			hosts, ks := testenv.CassandraKeyspace(t)
			cfg := cassandra.Config{ContactPoints: hosts, Keyspace: ks}
			scope := eventstore.Scope{Region: "eu", Cluster: "c1", Service: testenv.UniqueName(t, "svc")}
			store, err := cassandra.New(t.Context(), cassandra.Config{ContactPoints: hosts, Keyspace: ks, CreateSchema: true})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			env := append(os.Environ(), killHosts+"="+strings.Join(hosts, ","), killKeyspace+"="+ks, killService+"="+scope.Service,
				killRepair+"="+map[bool]string{true: "1", false: "0"}[fixed])
			planned := killChild(t, append(env, killMode+"=orchestrate"))
			if len(planned) != len(killPlan)*killPerGroup {
				t.Fatalf("the child reported %d sagas, want %d", len(planned), len(killPlan)*killPerGroup)
			}
			runChild(t, append(env, killMode+"=restart"))
			missing, wrong, inFlight := killCheck(t, store, cfg, scope, planned)
			want := 2 * killPerGroup // created, in progress
			if fixed {
				if len(missing) > 0 || len(wrong) > 0 || inFlight != want {
					t.Fatalf("after the restart: missing %v, wrong state %v, in flight %d (want %d)", missing, wrong, inFlight, want)
				}
				return
			}
			if len(missing) == 0 || inFlight == want {
				t.Fatalf("without the fix nothing was lost (missing %v, wrong %v, in flight %d): the kill did not cut a batch", missing, wrong, inFlight)
			}
			t.Logf("without the fix: %d sagas missing, %d in a wrong state, %d counted in flight (want %d)", len(missing), len(wrong), inFlight, want)
		})
	}
}

// killChild starts the child, waits for killWritten and SIGKILLs it; it
// returns the sagas the child wrote, with their planned state.
func killChild(t *testing.T, env []string) map[string]eventstore.State {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = env
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	written := make(chan bool, 1)
	planned := map[string]eventstore.State{}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == killWritten {
				written <- true
				return
			}
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "SAGA" {
				planned[f[1]] = eventstore.State(f[2])
			} else {
				t.Logf("child: %s", sc.Text())
			}
		}
		written <- false
	}()
	select {
	case ok := <-written:
		if !ok {
			_ = cmd.Wait()
			t.Fatal("the child ended before writing its sagas")
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("the child did not write its sagas in 3 minutes")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	return planned
}

// runChild runs the child to its end.
func runChild(t *testing.T, env []string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("restart: %v\n%s", err, out)
	}
	t.Logf("restart:\n%s", out)
}

// killCheck lists every saga of scope through the index (each state read
// from the store, as the Trace Window lists) and counts the sagas in
// flight by the index's census (the health's source); it returns the
// planned sagas missing from the list, those listed in another state, and
// the in-flight count.
func killCheck(t *testing.T, store *cassandra.Store, cfg cassandra.Config, scope eventstore.Scope, planned map[string]eventstore.State) (missing, wrong []string, inFlight int) {
	t.Helper()
	ctx := t.Context()
	idx, err := cassandraindex.New(ctx, cfg, cassandraindex.WithoutSchema())
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	now := time.Now().UTC()
	q := tracewindow.Query{Scope: scope, From: now.Add(-time.Hour), To: now, Limit: tracewindow.MaxLimit}
	page, _, err := tracewindow.List(ctx, store, idx, q)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]eventstore.State{}
	for _, e := range page.Entries {
		listed[e.TxID] = e.State
	}
	c, err := idx.Census(ctx, scope, now.Add(-time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, counts := range c.ByDomain {
		for st, n := range counts {
			if tracewindow.InFlight(st) {
				inFlight += n
			}
		}
	}
	for id, want := range planned {
		got, ok := listed[id]
		switch {
		case !ok:
			missing = append(missing, id+" ("+string(want)+")")
		case got != want:
			wrong = append(wrong, id+": "+string(got)+", want "+string(want))
		}
	}
	return missing, wrong, inFlight
}
