package sqlbarrier_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/sqlbarrier"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// killChildEnv selects TestKillChild, the worker process of the kill tests
// (TestKillWorkerAtInjectedPoints, TestKillWorkersUnderOrchestrator), and
// carries its killChild configuration as JSON.
const killChildEnv = "STACKSAGA_SQLBARRIER_KILL_CHILD"

// The points at which a child kills itself (SIGKILL): after the handler's
// write ("in-handler"), after the handler returned, before the commit
// ("handled"), after the commit, before the reply ("committed"), and once
// the reply is acknowledged by Kafka, before the command's offset is
// committed ("replied").
var killPoints = []string{"committed", "replied", "handled", "in-handler"}

// killChild configures a TestKillChild process: a worker of Service over
// the barrier in DSN's database, serving the ledgerEndpoint of each of
// Endpoints.
type killChild struct {
	Brokers   []string `json:"brokers"`
	DSN       string   `json:"dsn"`
	Service   string   `json:"service"`
	Endpoints []string `json:"endpoints"`
	// Callback is the reply topic: a record acknowledged on it is the
	// "replied" point.
	Callback string `json:"callback"`
	// Seed seeds the random kills.
	Seed uint64 `json:"seed"`
	// Forced is a point at which the child dies at the ForcedAt-th call
	// (none if empty).
	Forced   string `json:"forced"`
	ForcedAt int    `json:"forced_at"`
	// Prob is the probability of a kill at each call of every point.
	Prob float64 `json:"prob"`
}

// replyHook calls f when a reply record is acknowledged.
type replyHook struct {
	topic string
	f     func()
}

func (h replyHook) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err == nil && r.Topic == h.topic {
		h.f()
	}
}

// TestKillChild is the child process: a worker that kills itself at
// injected points.
func TestKillChild(t *testing.T) {
	if os.Getenv(killChildEnv) == "" {
		return // run only as the child of a kill test (superviseKillChild)
	}
	var a killChild
	if err := json.Unmarshal([]byte(os.Getenv(killChildEnv)), &a); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(a.Seed, a.Seed^0x9e3779b97f4a7c15))
	var mu sync.Mutex
	calls := map[string]int{}
	maybeKill := func(point string) {
		mu.Lock()
		calls[point]++
		kill := (point == a.Forced && calls[point] == a.ForcedAt) || rng.Float64() < a.Prob
		mu.Unlock()
		if kill {
			fmt.Printf("KILL %s\n", point)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	db, err := sql.Open("pgx", a.DSN)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqlbarrier.New(db, sqlbarrier.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	sqlbarrier.SetCrash(b, maybeKill)
	w, err := worker.New(a.Service, worker.WithBrokers(a.Brokers...), worker.WithGuard(b), worker.WithLogger(quietLogger()),
		worker.WithoutProvision(), worker.WithInstanceID("child"),
		worker.WithKafkaOpts(kgo.WithHooks(replyHook{topic: a.Callback, f: func() { maybeKill("replied") }})))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range a.Endpoints {
		if err := sqlbarrier.Register(w, b, ledgerEndpoint(name, func() { maybeKill("in-handler") })); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("STARTED")
	_ = w.Run(context.Background())
}

// killedWorker runs TestKillChild processes of one service one after the
// other: each time one dies, it starts the next, until stop. Every process
// dies at random at any injected point with the configured probability;
// the first len(killPoints) processes die at the ForcedAt-th call of one
// point each (in killPoints' order), if nothing kills them before; the
// next External ones are SIGKILLed by the test (not at an injected point:
// wherever they are) at a random moment 1 to 6 s after they start, if
// nothing kills them before (a kill "at random").
type killedWorker struct {
	t    testing.TB
	cfg  killChild
	plan killPlan
	rng  *rand.Rand

	mu           sync.Mutex
	kills        map[string]int // point → processes that died there
	incarnations int
	live         *exec.Cmd
	stopped      bool
	done         chan struct{}
}

// killPlan says which processes of a killedWorker die when, besides at
// random at the injected points (see killedWorker).
type killPlan struct {
	ForcedAt int
	External int
}

// superviseKillChild starts the worker processes of cfg (cfg.Forced and
// cfg.Seed are set per process) and stops them when the test ends.
func superviseKillChild(t testing.TB, cfg killChild, plan killPlan) *killedWorker {
	t.Helper()
	k := &killedWorker{t: t, cfg: cfg, plan: plan, kills: map[string]int{}, done: make(chan struct{}),
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed))}
	began := time.Now()
	go func() {
		defer close(k.done)
		unexplained := 0
		for n := 0; ; n++ {
			c, lines, err := k.start(n)
			if errors.Is(err, errKillStopped) {
				return
			}
			if err != nil {
				t.Errorf("%s: worker process %d: %v", cfg.Service, n+1, err)
				return
			}
			var killedAt string
			var external atomic.Bool
			var timer *time.Timer
			sc := bufio.NewScanner(lines)
			for sc.Scan() {
				if p, ok := strings.CutPrefix(sc.Text(), "KILL "); ok {
					killedAt = p
				}
				if sc.Text() == "STARTED" && n >= len(killPoints) && n < len(killPoints)+plan.External {
					delay := time.Second + time.Duration(k.rng.Int64N(int64(5*time.Second)))
					timer = time.AfterFunc(delay, func() {
						if c.Process.Signal(syscall.SIGKILL) == nil {
							external.Store(true)
						}
					})
				}
			}
			err = c.Wait()
			if timer != nil {
				timer.Stop()
			}
			k.mu.Lock()
			stopped := k.stopped
			if killedAt == "" && external.Load() {
				killedAt = "random"
			}
			if killedAt != "" {
				k.kills[killedAt]++
			}
			k.mu.Unlock()
			if stopped {
				return
			}
			if killedAt == "" {
				// Only its own SIGKILL ends a worker process.
				t.Errorf("%s: worker process %d ended without a kill: %v", cfg.Service, n+1, err)
				if unexplained++; unexplained == 3 {
					return
				}
			}
			t.Logf("%v: %s: worker process %d killed at %q; starting another", time.Since(began).Round(time.Millisecond), cfg.Service, n+1, killedAt)
		}
	}()
	t.Cleanup(k.stop)
	return k
}

// errKillStopped: the killedWorker was stopped.
var errKillStopped = errors.New("stopped")

// start starts the n-th process (from 0), unless stopped.
func (k *killedWorker) start(n int) (*exec.Cmd, io.Reader, error) {
	cfg := k.cfg
	cfg.Seed += uint64(n)
	cfg.Forced, cfg.ForcedAt = "", 0
	if n < len(killPoints) {
		cfg.Forced, cfg.ForcedAt = killPoints[n], k.plan.ForcedAt
	}
	env, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, err
	}
	c := exec.Command(os.Args[0], "-test.run=^TestKillChild$")
	c.Env = append(os.Environ(), killChildEnv+"="+string(env))
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	c.Stderr = os.Stderr
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return nil, nil, errKillStopped
	}
	if err := c.Start(); err != nil {
		return nil, nil, err
	}
	k.live = c
	k.incarnations = n + 1
	return c, out, nil
}

// stop kills the live process and starts no other.
func (k *killedWorker) stop() {
	k.mu.Lock()
	already := k.stopped
	k.stopped = true
	if c := k.live; c != nil && !already {
		_ = c.Process.Kill()
	}
	k.mu.Unlock()
	<-k.done
}

// report returns the processes started and the kills by point.
func (k *killedWorker) report() (incarnations int, kills map[string]int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.incarnations, maps.Clone(k.kills)
}

// A worker process is SIGKILLed again and again at injected points, the
// window between the commit and the reply included, over a run of more
// than 1,000 commands (sagas that run, that compensate, whose revert
// overtakes the process, duplicates): every command is answered, and the
// ledger holds exactly one debit per step that ran and one refund per
// compensated one: no double effect.
func TestKillWorkerAtInjectedPoints(t *testing.T) {
	testenv.Long(t, "kills a worker process at injected points over 1,000 commands")
	db, dsn := openDB(t)
	r := newKafkaRig(t, 4)
	const sagas = 800
	var cmds []*topics.Envelope
	want := map[string][2]int{} // tx -> debits, refunds
	for i := range sagas {
		tx := fmt.Sprintf("tx-%d", i)
		switch {
		case i%4 == 1: // compensates
			cmds = append(cmds, r.command(tx, 0, topics.KindProcess, 10), r.command(tx, 0, topics.KindRevert, 10))
			want[tx] = [2]int{1, 1}
		case i%20 == 3: // the revert overtakes the process
			cmds = append(cmds, r.command(tx, 0, topics.KindRevert, 10), r.command(tx, 0, topics.KindProcess, 10))
			want[tx] = [2]int{0, 0}
		default:
			cmds = append(cmds, r.command(tx, 0, topics.KindProcess, 10))
			want[tx] = [2]int{1, 0}
		}
		if i%10 == 0 { // a duplicate delivery
			cmds = append(cmds, cmds[len(cmds)-1])
		}
	}
	if len(cmds) < 1000 {
		t.Fatalf("only %d commands", len(cmds))
	}
	r.produce(t, cmds...)
	pending := map[stepKey]bool{}
	for _, c := range cmds {
		pending[stepKey{c.TxID, c.Span, c.Kind}] = true
	}

	kw := superviseKillChild(t, killChild{Brokers: r.brokers, DSN: dsn, Service: r.service, Endpoints: []string{"charge"},
		Callback: r.callback, Seed: 1, Prob: 0.0005}, killPlan{ForcedAt: 25})
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	for len(pending) > 0 {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			n, _ := kw.report()
			t.Fatalf("%d of %d commands never answered after %d worker processes", len(pending), len(cmds), n)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if e, err := topics.Decode(rec.Value); err == nil {
				delete(pending, stepKey{e.TxID, e.Span, e.Kind})
			}
		})
	}
	kw.stop()

	got := map[string][2]int{}
	rows, err := db.Query(`SELECT tx_id, kind, count(*) FROM ledger GROUP BY tx_id, kind`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tx, kind string
		var n int
		if err := rows.Scan(&tx, &kind, &n); err != nil {
			t.Fatal(err)
		}
		g := got[tx]
		if kind == string(topics.KindProcess) {
			g[0] = n
		} else {
			g[1] = n
		}
		got[tx] = g
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	doubles, missing := 0, 0
	for tx, w := range want {
		g := got[tx]
		for i := range 2 {
			if g[i] > w[i] {
				doubles += g[i] - w[i]
			} else if g[i] < w[i] {
				missing += w[i] - g[i]
			}
		}
		if g != w {
			t.Errorf("%s: %d debits, %d refunds; want %d, %d", tx, g[0], g[1], w[0], w[1])
		}
	}
	incarnations, kills := kw.report()
	t.Logf("%d commands, %d worker processes, kills by point %v: %d double effects, %d missing", len(cmds), incarnations, kills, doubles, missing)
	for _, p := range killPoints {
		if kills[p] == 0 {
			t.Errorf("no worker was killed at %q", p)
		}
	}
}
