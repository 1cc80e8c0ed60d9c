package sqlbarrier_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
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

// The child process of TestKillWorkerAtInjectedPoints, selected by this
// variable: brokers|dsn|service|callback|seed|forced point|forced count|per-point probability.
const killChildEnv = "STACKSAGA_SQLBARRIER_KILL_CHILD"

// The points at which a child kills itself (SIGKILL): after the handler's
// write ("in-handler"), after the handler returned, before the commit
// ("handled"), after the commit, before the reply ("committed"), and once
// the reply is acknowledged by Kafka, before the command's offset is
// committed ("replied").
var killPoints = []string{"committed", "replied", "handled", "in-handler"}

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
		return // run only as the child of TestKillWorkerAtInjectedPoints
	}
	a := strings.Split(os.Getenv(killChildEnv), "|")
	seed, _ := strconv.ParseUint(a[4], 10, 64)
	forced := a[5]
	forcedAt, _ := strconv.Atoi(a[6])
	prob, _ := strconv.ParseFloat(a[7], 64)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var mu sync.Mutex
	calls := map[string]int{}
	maybeKill := func(point string) {
		mu.Lock()
		calls[point]++
		kill := (point == forced && calls[point] == forcedAt) || rng.Float64() < prob
		mu.Unlock()
		if kill {
			fmt.Printf("KILL %s\n", point)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	db, err := sql.Open("pgx", a[1])
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqlbarrier.New(db, sqlbarrier.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	sqlbarrier.SetCrash(b, maybeKill)
	w, err := worker.New(a[2], worker.WithBrokers(strings.Split(a[0], ",")...), worker.WithGuard(b), worker.WithLogger(quietLogger()),
		worker.WithoutProvision(), worker.WithInstanceID("child"),
		worker.WithKafkaOpts(kgo.WithHooks(replyHook{topic: a[3], f: func() { maybeKill("replied") }})))
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlbarrier.Register(w, b, chargeEndpoint(func() { maybeKill("in-handler") })); err != nil {
		t.Fatal(err)
	}
	fmt.Println("STARTED")
	_ = w.Run(context.Background())
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

	var mu sync.Mutex
	kills := map[string]int{}
	var live atomic.Pointer[exec.Cmd]
	defer func() {
		if c := live.Load(); c != nil {
			_ = c.Process.Kill()
		}
	}()
	start := func(n int) (*exec.Cmd, chan struct{}) {
		forced, at := "", 0
		if n < len(killPoints) {
			forced, at = killPoints[n], 25
		}
		c := exec.Command(os.Args[0], "-test.run=^TestKillChild$")
		c.Env = append(os.Environ(), killChildEnv+"="+strings.Join([]string{strings.Join(r.brokers, ","), dsn, r.service, r.callback,
			strconv.Itoa(n + 1), forced, strconv.Itoa(at), "0.0005"}, "|"))
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		live.Store(c)
		exited := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if p, ok := strings.CutPrefix(sc.Text(), "KILL "); ok {
					mu.Lock()
					kills[p]++
					mu.Unlock()
				}
			}
			_ = c.Wait()
			close(exited)
		}()
		return c, exited
	}
	incarnations := 1
	began := time.Now()
	_, exited := start(0)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	for len(pending) > 0 {
		select {
		case <-exited:
			t.Logf("%v: worker process %d died with %d commands unanswered; starting another", time.Since(began).Round(time.Millisecond), incarnations, len(pending))
			_, exited = start(incarnations)
			incarnations++
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := r.cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("%d of %d commands never answered after %d worker processes", len(pending), len(cmds), incarnations)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if e, err := topics.Decode(rec.Value); err == nil {
				delete(pending, stepKey{e.TxID, e.Span, e.Kind})
			}
		})
	}
	if c := live.Load(); c != nil {
		_ = c.Process.Kill()
		<-exited
	}

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
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d commands, %d worker processes, kills by point %v: %d double effects, %d missing", len(cmds), incarnations, kills, doubles, missing)
	for _, p := range killPoints {
		if kills[p] == 0 {
			t.Errorf("no worker was killed at %q", p)
		}
	}
}
