package worker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/metrictest"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Share-group workers on real Kafka: transient failures are released and
// redelivered to another instance, poison is dead-lettered and rejected,
// a record failing on its last delivery is dead-lettered, and a killed
// instance's commands come back after the acquisition lock.

// failingGuard fails every command with a transient error (its store is
// down) and records the transactions it failed.
type failingGuard struct {
	mu     sync.Mutex
	failed map[string]int
	only   string // "" fails every command, else only this transaction's
}

func (g *failingGuard) Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	if g.only != "" && cmd.TxID != g.only {
		return run(ctx), nil
	}
	g.mu.Lock()
	g.failed[cmd.TxID]++
	g.mu.Unlock()
	return nil, errors.New("store unavailable")
}

func shareWorker(e *env, opts ...worker.Option) *worker.Worker {
	w := e.newWorker(append([]worker.Option{worker.WithGroupType(topics.GroupShare)}, opts...)...)
	registerPayment(e.t, w)
	return w
}

// A command that fails transiently on one instance is released and
// another instance of the share group runs it. The topic has one
// partition, which both instances share (with more partitions than
// members the broker spreads the partitions over the members instead, and
// a release comes back to the member that owns the partition).
func TestShareTransientReleasedToAnotherInstance(t *testing.T) {
	e := newRealKafkaPartitions(t, 1)
	broken := &failingGuard{failed: map[string]int{}}
	a := shareWorker(e, worker.WithGuard(broken), worker.WithShareSettings(topics.ShareSettings{DeliveryLimit: 10}))
	b := shareWorker(e, worker.WithShareSettings(topics.ShareSettings{DeliveryLimit: 10}))
	e.start(a)
	e.start(b)
	const n = 20
	for i := range n {
		e.send(e.cmd(fmt.Sprintf("t%d", i), "charge", 0, topics.KindProcess, Order{ID: fmt.Sprint(i), Amount: 1}))
	}
	e.waitFor("every command replied", func(rs []*topics.Envelope, _ []*kgo.Record) bool { return len(rs) >= n })
	broken.mu.Lock()
	defer broken.mu.Unlock()
	if len(broken.failed) == 0 {
		t.Fatal("the broken instance got no command: nothing was released")
	}
	for tx := range broken.failed {
		if r := e.reply(tx, 0, topics.KindProcess); r.Outcome != topics.OutcomeOK {
			t.Errorf("%s released by the broken instance replied %s", tx, r.Outcome)
		}
	}
	// A reply is read before its command is counted: wait for the count.
	waitStats(t, b, worker.Stats{Processed: n})
	t.Logf("released by the broken instance and run by the other: %v", broken.failed)
}

// A poison record (not an envelope) is dead-lettered with its reason and
// rejected: it is never delivered again; the commands around it run.
func TestSharePoisonRejected(t *testing.T) {
	e := newRealKafka(t)
	w := shareWorker(e)
	e.start(w)
	e.sendRaw(&kgo.Record{Key: []byte("poison"), Value: []byte("\xc1 not msgpack")})
	e.send(e.cmd("t-ok", "charge", 0, topics.KindProcess, Order{ID: "ok", Amount: 1}))
	e.reply("t-ok", 0, topics.KindProcess)
	e.waitFor("the dead letter", func(_ []*topics.Envelope, ds []*kgo.Record) bool { return len(ds) == 1 })
	e.mu.Lock()
	reason := topics.DeadLetterReason(e.dlts[0])
	e.mu.Unlock()
	if !strings.HasPrefix(reason, worker.ReasonUndecodable) {
		t.Errorf("reason %q", reason)
	}
	// Rejected, not released: no redelivery (a release would come back
	// within the release backoff).
	time.Sleep(2 * time.Second)
	if st := w.Stats(); st.DeadLettered != 1 {
		t.Errorf("stats %+v: the poison was delivered again", st)
	}
}

// A command that fails on every delivery is dead-lettered on its last one
// (the group's delivery limit) with the reason, instead of being archived
// by the broker without a trace; its saga stays in flight for its restore
// watchdog. The other commands are not held up.
func TestShareDeliveryLimitDeadLetters(t *testing.T) {
	e := newRealKafka(t)
	g := &failingGuard{failed: map[string]int{}, only: "t-bad"}
	w := shareWorker(e, worker.WithGuard(g), worker.WithShareSettings(topics.ShareSettings{DeliveryLimit: 3}))
	e.start(w)
	e.send(e.cmd("t-bad", "charge", 0, topics.KindProcess, Order{ID: "bad", Amount: 1}),
		e.cmd("t-good", "charge", 0, topics.KindProcess, Order{ID: "good", Amount: 1}))
	e.reply("t-good", 0, topics.KindProcess)
	e.waitFor("the dead letter", func(_ []*topics.Envelope, ds []*kgo.Record) bool { return len(ds) == 1 })
	e.mu.Lock()
	reason := topics.DeadLetterReason(e.dlts[0])
	key := string(e.dlts[0].Key)
	e.mu.Unlock()
	if want := worker.ReasonGivenUp + ": delivery count limit of 3 reached: "; !strings.HasPrefix(reason, want) || key != "t-bad" {
		t.Errorf("dead letter of %s with reason %q, want %q…", key, reason, want)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed["t-bad"] != 3 {
		t.Errorf("t-bad tried %d times, want 3", g.failed["t-bad"])
	}
}

// killChildEnv carries the share-group worker's settings to the child
// process of TestShareKill9Redelivered.
const killChildEnv = "STACKSAGA_SHARE_KILL_CHILD"

// TestShareKillChild is the child process of TestShareKill9Redelivered: a
// share-group worker whose charge handler never returns. It does nothing in
// a normal run.
func TestShareKillChild(t *testing.T) {
	spec := os.Getenv(killChildEnv)
	if spec == "" {
		return // only as the child of TestShareKill9Redelivered
	}
	parts := strings.Split(spec, "|") // brokers|service|group
	w, err := worker.New(parts[1], worker.WithBrokers(strings.Split(parts[0], ",")...), worker.WithGroup(parts[2]),
		worker.WithGroupType(topics.GroupShare), worker.WithLogger(quietLogger()),
		worker.WithShareSettings(topics.ShareSettings{RecordLock: 3 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Register(w, worker.Endpoint[Order]{Name: "charge", Process: func(_ context.Context, s *worker.Step, o Order) (Order, error) {
		fmt.Printf("HOLDING %s\n", s.TxID)
		select {} // mid-step until killed
	}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		<-w.Running()
		fmt.Println("RUNNING")
	}()
	_ = w.Run(context.Background())
}

// A share-group worker killed with SIGKILL mid-step: the commands it held
// are redelivered once their acquisition lock (3s here) times out, and a
// healthy instance runs every one of them.
func TestShareKill9Redelivered(t *testing.T) {
	e := newRealKafkaPartitions(t, 1) // both members share the partition
	child := exec.Command(os.Args[0], "-test.run=^TestShareKillChild$", "-test.count=1")
	child.Env = append(os.Environ(), killChildEnv+"="+strings.Join(e.brokers, ",")+"|"+e.service+"|"+e.group)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	wait := func(prefix string) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("child exited before %q", prefix)
				}
				if strings.HasPrefix(l, prefix) {
					return
				}
			case <-timeout:
				t.Fatalf("child never printed %q", prefix)
			}
		}
	}
	wait("RUNNING")
	const n = 5
	for i := range n {
		e.send(e.cmd(fmt.Sprintf("k%d", i), "charge", 0, topics.KindProcess, Order{ID: fmt.Sprint(i), Amount: 1}))
	}
	wait("HOLDING")                              // a step is running in the child
	if err := child.Process.Kill(); err != nil { // SIGKILL: no release, no leave
		t.Fatal(err)
	}
	killed := time.Now()
	_ = child.Wait()
	healthy := shareWorker(e, worker.WithShareSettings(topics.ShareSettings{RecordLock: 3 * time.Second}))
	e.start(healthy)
	for i := range n {
		if r := e.reply(fmt.Sprintf("k%d", i), 0, topics.KindProcess); r.Outcome != topics.OutcomeOK {
			t.Errorf("k%d: %s", i, r.Outcome)
		}
	}
	t.Logf("all %d commands of the killed instance ran %v after the kill", n, time.Since(killed).Round(time.Millisecond))
}

// A share-group worker on brokers without share groups fails at start,
// saying so, instead of consuming nothing.
func TestShareUnsupportedBrokerFailsAtStart(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.MaxVersions(kversion.V3_9_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := worker.New(service, worker.WithBrokers(c.ListenAddrs()...), worker.WithGroupType(topics.GroupShare))
	if err != nil {
		t.Fatal(err)
	}
	registerPayment(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Run(ctx); !errors.Is(err, topics.ErrShareGroupsUnsupported) {
		t.Fatalf("Run: %v, want ErrShareGroupsUnsupported", err)
	}
}

// A share-group worker whose Kafka options cap ShareAcknowledge below v2
// (kgo.MaxVersions) is told that it cannot renew record locks (which its
// client could not send): its start-up warning names the client's cap, and
// it still replies.
func TestShareClientCapDisablesRenewal(t *testing.T) {
	e := newKfake(t)
	capped := kversion.Stable()
	capped.SetMaxKeyVersion(int16(kmsg.ShareAcknowledge), 1)
	var logs testenv.LockedBuffer
	w := shareWorker(e, worker.WithKafkaOpts(kgo.MaxVersions(capped)),
		worker.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	e.start(w) // the warning precedes Running
	got := logs.String()
	if !strings.Contains(got, "share-group record locks cannot be renewed") ||
		!strings.Contains(got, "the client's kgo.MaxVersions caps ShareAcknowledge at v1") {
		t.Errorf("logged %q, want the no-renewal warning naming the client's cap", got)
	}
	e.send(e.cmd("t-capped", "charge", 0, topics.KindProcess, Order{ID: "c", Amount: 1}))
	if r := e.reply("t-capped", 0, topics.KindProcess); r.Outcome != topics.OutcomeOK {
		t.Fatalf("reply %+v", r)
	}
}

// A share group hands out records in no order, so its worker records a
// step's outcome before it replies: it calls the guard's Execute, never
// ExecuteOverlapped.
func TestShareDoesNotOverlapRecordWithReply(t *testing.T) {
	e := newRealKafka(t)
	g := &overlapGuard{open: make(chan struct{})}
	t.Cleanup(g.release)
	w := shareWorker(e, worker.WithGuard(g))
	e.start(w)
	e.send(e.cmd("t-share-ov", "charge", 0, topics.KindProcess, Order{ID: "s", Amount: 1}))
	if r := e.reply("t-share-ov", 0, topics.KindProcess); r.Outcome != topics.OutcomeOK {
		t.Fatalf("reply %+v", r)
	}
	if o, x := g.overlapped.Load(), g.executes.Load(); o != 0 || x != 1 {
		t.Fatalf("ExecuteOverlapped called %d times and Execute %d, want 0 and 1", o, x)
	}
}

// A share-group worker with a MeterProvider reports its Kafka client's
// messages, connections and produce latency, as a consumer-group worker
// does: its one client (the share consumer, which also produces the
// replies) carries the telemetry hooks.
func TestShareWorkerKafkaMetrics(t *testing.T) {
	e := newRealKafkaPartitions(t, 1)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	w := shareWorker(e, worker.WithMeterProvider(mp))
	e.start(w)
	const n = 5
	for i := range n {
		e.send(e.cmd(fmt.Sprintf("m%d", i), "charge", 0, topics.KindProcess, Order{ID: fmt.Sprint(i), Amount: 1}))
	}
	e.waitFor("every command replied", func(rs []*topics.Envelope, _ []*kgo.Record) bool { return len(rs) >= n })
	// kgo calls its produce hook after the produce's promise, so a reply
	// may be read (and its command counted) before its batch is: wait for
	// the counts themselves.
	client := attribute.String("messaging.client.id", "stacksaga-worker-"+e.service)
	var consumed, sent, connects float64
	counts := func() bool {
		ms := metrictest.Collect(t, reader)
		consumed = metrictest.Total(ms[telemetry.MetricKafkaConsumed], client, attribute.String("messaging.destination.name", e.command))
		sent = metrictest.Total(ms[telemetry.MetricKafkaSent], client)
		connects = metrictest.Total(ms[telemetry.MetricKafkaConnects], client)
		return consumed >= n && sent >= n && connects > 0
	}
	for deadline := time.Now().Add(30 * time.Second); !counts(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Kafka client counts: %s %v, %s %v, %s %v; want the %d commands, at least the %d replies, a connection",
				telemetry.MetricKafkaConsumed, consumed, telemetry.MetricKafkaSent, sent, telemetry.MetricKafkaConnects, connects, n, n)
		}
	}
	if consumed != n {
		t.Errorf("%s of the command topic = %v, want the %d commands", telemetry.MetricKafkaConsumed, consumed, n)
	}
}

// A step that runs longer than the share group's acquisition lock keeps
// its record: the instance running it renews the lock, so the other
// instance sharing the partition is not handed the command meanwhile, and
// the step runs once and replies once.
func TestShareLongStepKeepsItsLock(t *testing.T) {
	const lock = 4 * time.Second // scripts/services lets a group go down to 1s
	e := newRealKafkaPartitions(t, 1)
	var mu sync.Mutex
	runs := map[string]int{} // instance → runs of the slow step
	slowWorker := func(name string) *worker.Worker {
		w := shareWorker(e, worker.WithShareSettings(topics.ShareSettings{RecordLock: lock}))
		if err := worker.Register(w, worker.Endpoint[Order]{
			Name: "slow",
			Process: func(_ context.Context, _ *worker.Step, o Order) (Order, error) {
				mu.Lock()
				runs[name]++
				mu.Unlock()
				time.Sleep(5 * lock / 2) // the lock ends twice meanwhile unless renewed
				return o, nil
			},
		}); err != nil {
			t.Fatal(err)
		}
		return w
	}
	a, b := slowWorker("a"), slowWorker("b")
	e.start(a)
	e.start(b)
	e.send(e.cmd("t-slow", "slow", 0, topics.KindProcess, Order{ID: "slow"}))
	if r := e.reply("t-slow", 0, topics.KindProcess); r.Outcome != topics.OutcomeOK {
		t.Fatalf("reply %+v", r)
	}
	// The reply is produced before its command is counted and accepted.
	// Had the lock ended, the other instance would have started the step
	// again a lock in, long before this first run replied; and had the
	// accept come too late, the command would come back within a lock of
	// it, which the check waits out.
	waitForCond(t, "the slow command counted", func() bool { return a.Stats().Processed+b.Stats().Processed >= 1 })
	time.Sleep(lock + time.Second)
	mu.Lock()
	defer mu.Unlock()
	if runs["a"]+runs["b"] != 1 {
		t.Errorf("the slow step ran %v times by instance, want once in all", runs)
	}
	if sa, sb := a.Stats(), b.Stats(); sa.Processed+sb.Processed != 1 {
		t.Errorf("stats %+v and %+v: want one command processed", sa, sb)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.replies) != 1 {
		t.Errorf("%d replies, want 1", len(e.replies))
	}
}

// An accept that comes after its record's acquisition lock ended is
// refused by a real broker: the worker logs it at Warn and counts it
// (telemetry.MetricKafkaShareAckFailures), the broker delivers the command
// again, and a STRICT guard answers the redelivery with the recorded reply
// instead of running the step a second time. The worker cannot renew the
// lock here (its client caps ShareAcknowledge at v1), and it does not poll
// while the slow step runs, so the record sits available, acquired by
// nobody, when the accept reaches the broker.
func TestShareLateAcceptFailsAndIsCounted(t *testing.T) {
	const lock = time.Second // scripts/services lets a group go down to 1s
	e := newRealKafkaPartitions(t, 1)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg := writeprotect.DefaultConfig()
	cfg.DefaultMode = writeprotect.Strict
	g, err := writeprotect.New(memory.New(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	capped := kversion.Stable()
	capped.SetMaxKeyVersion(int16(kmsg.ShareAcknowledge), 1)
	var logs testenv.LockedBuffer
	w := e.newWorker(worker.WithGroupType(topics.GroupShare), worker.WithGuard(g), worker.WithMeterProvider(mp),
		worker.WithShareSettings(topics.ShareSettings{RecordLock: lock}), worker.WithKafkaOpts(kgo.MaxVersions(capped)),
		worker.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	var runs atomic.Int32
	if err := worker.Register(w, worker.Endpoint[Order]{
		Name: "slow",
		Process: func(_ context.Context, _ *worker.Step, o Order) (Order, error) {
			runs.Add(1)
			time.Sleep(3 * lock) // the lock ends meanwhile: nothing renews it
			o.Charged = true
			return o, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	e.start(w)
	e.send(e.cmd("t-late", "slow", 0, topics.KindProcess, Order{ID: "late", Amount: 1}))
	// The first reply comes from the run; the second, after the refused
	// accept and the redelivery, from the guard's record of that run.
	e.waitFor("the run's reply and the recorded one", func(rs []*topics.Envelope, _ []*kgo.Record) bool { return len(rs) >= 2 })
	e.mu.Lock()
	for i, r := range e.replies {
		var o Order
		if err := msgpack.Unmarshal(r.Payload, &o); err != nil || r.TxID != "t-late" || r.Outcome != topics.OutcomeOK || !o.Charged {
			t.Errorf("reply %d: %s %s %+v (%v), want t-late ok with the run's payload (charged)", i, r.TxID, r.Outcome, o, err)
		}
	}
	e.mu.Unlock()
	if n := runs.Load(); n != 1 {
		t.Errorf("the slow step ran %d times, want once: the redelivery gets the recorded reply", n)
	}
	client := attribute.String("messaging.client.id", "stacksaga-worker-"+e.service)
	refused := attribute.String("error.type", "INVALID_RECORD_STATE")
	waitForCond(t, "the refused accept counted", func() bool {
		return metrictest.Total(metrictest.Collect(t, reader)[telemetry.MetricKafkaShareAckFailures], client,
			attribute.String("messaging.destination.name", e.command), refused) >= 1
	})
	got := logs.String()
	if !strings.Contains(got, "kafkaloop: share acknowledgements failed") || !strings.Contains(got, "topic="+e.command) ||
		!strings.Contains(got, "INVALID_RECORD_STATE") || !strings.Contains(got, "is delivered again") {
		t.Errorf("logged %q, want the refused accept at Warn with its topic, error and effect", got)
	}
}

// A share-group worker that cannot configure its group (WithoutProvision,
// and here a client that cannot send IncrementalAlterConfigs) works with
// the group's real delivery limit, not the one it was given: an operator
// set 2, the worker was told 5, and a command failing on every delivery is
// dead-lettered on its second, before the broker would archive it.
func TestShareWorkerUsesTheGroupsDeliveryLimit(t *testing.T) {
	e := newRealKafkaPartitions(t, 1)
	admin, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := topics.ConfigureShareGroup(t.Context(), admin, e.group, topics.ShareSettings{DeliveryLimit: 2}); err != nil {
		t.Fatal(err)
	}
	// The broker answers from its metadata, which takes the change a
	// moment after the controller.
	waitForCond(t, "the broker serving the group's limit of 2", func() bool {
		n, err := topics.ShareDeliveryLimit(t.Context(), admin, e.group)
		return err == nil && n == 2
	})
	noAlter := kversion.Stable()
	noAlter.SetMaxKeyVersion(int16(kmsg.IncrementalAlterConfigs), -1)
	g := &failingGuard{failed: map[string]int{}, only: "t-bad"}
	w := shareWorker(e, worker.WithGuard(g), worker.WithoutProvision(), worker.WithKafkaOpts(kgo.MaxVersions(noAlter)),
		worker.WithShareSettings(topics.ShareSettings{DeliveryLimit: 5}))
	e.start(w)
	e.send(e.cmd("t-bad", "charge", 0, topics.KindProcess, Order{ID: "bad", Amount: 1}))
	e.waitFor("the dead letter", func(_ []*topics.Envelope, ds []*kgo.Record) bool { return len(ds) == 1 })
	e.mu.Lock()
	reason := topics.DeadLetterReason(e.dlts[0])
	e.mu.Unlock()
	if want := worker.ReasonGivenUp + ": delivery count limit of 2 reached: "; !strings.HasPrefix(reason, want) {
		t.Errorf("reason %q, want %q…", reason, want)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed["t-bad"] != 2 {
		t.Errorf("t-bad tried %d times, want 2", g.failed["t-bad"])
	}
}

// A share-group worker that can neither configure its group nor read the
// group's delivery limit fails at start, naming the config, instead of
// assuming a limit the broker may not have.
func TestShareUnknownDeliveryLimitFailsAtStart(t *testing.T) {
	e := newKfake(t)
	blind := kversion.Stable()
	blind.SetMaxKeyVersion(int16(kmsg.IncrementalAlterConfigs), -1)
	blind.SetMaxKeyVersion(int16(kmsg.DescribeConfigs), -1)
	w := shareWorker(e, worker.WithoutProvision(), worker.WithKafkaOpts(kgo.MaxVersions(blind)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := w.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "share.delivery.count.limit") {
		t.Fatalf("Run: %v, want a start failure naming share.delivery.count.limit", err)
	}
}
