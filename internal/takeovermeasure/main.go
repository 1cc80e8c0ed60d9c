// Command takeovermeasure measures how long the partitions of a consumer
// that is killed (SIGKILL) stay unconsumed on a real Kafka, for the
// figures of docs/operations.md. It creates a topic of 8 partitions,
// produces a numbered record every 20ms, runs a consumer in a child
// process (kgo, with the consume loop's rebalance options), kills it and
// reports when a record produced after the kill is consumed:
//
//	go run ./internal/takeovermeasure                      # kill, restart: Kafka's default session (45s)
//	go run ./internal/takeovermeasure -session 10s         # the framework's default
//	go run ./internal/takeovermeasure -instance pod-0      # static member restarted under its id
//	go run ./internal/takeovermeasure -session 10s -survivor  # a second member takes over (no restart)
//	go run ./internal/takeovermeasure -share -lock 5s      # a share group member restarted
//	go run ./internal/takeovermeasure -mode soak -members 4 -session 10s -for 15m
//
// The soak mode runs members that only heartbeat and reports, per member,
// the longest gap between two successful heartbeats and the partitions it
// lost: run it on a loaded machine to see how close a session timeout
// comes to expiring by itself. The brokers are $KAFKA_BROKERS (or -brokers).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/kafkaloop"
	"github.com/stacksaga-go/stacksaga/topics"
)

var (
	brokers  = flag.String("brokers", os.Getenv("KAFKA_BROKERS"), "Kafka brokers, comma-separated (default $KAFKA_BROKERS)")
	mode     = flag.String("mode", "kill", "kill (measure takeovers), soak (measure heartbeat gaps), or child (internal)")
	topic    = flag.String("topic", "", "internal: the child's topic")
	group    = flag.String("group", "", "internal: the child's group")
	session  = flag.Duration("session", 0, "session timeout (0: kgo's default, 45s)")
	instance = flag.String("instance", "", "instance id of the killed member (static membership)")
	share    = flag.Bool("share", false, "a share group instead of a consumer group")
	lock     = flag.Duration("lock", 0, "the share group's record lock duration (0: the broker's)")
	runs     = flag.Int("runs", 3, "kills to measure")
	survivor = flag.Bool("survivor", false, "a second member stays up and takes over; the killed one is restarted only after")
	members  = flag.Int("members", 3, "soak: members of the group")
	soakFor  = flag.Duration("for", time.Minute, "soak: how long")
)

func main() {
	flag.Parse()
	if *brokers == "" {
		fmt.Fprintln(os.Stderr, "takeovermeasure: no brokers (-brokers or $KAFKA_BROKERS)")
		os.Exit(2)
	}
	var err error
	switch *mode {
	case "child":
		err = child()
	case "soak":
		err = soak()
	case "kill":
		err = measure()
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "takeovermeasure:", err)
		os.Exit(1)
	}
}

// memberOpts are the group options of a member with the flags' settings.
func memberOpts(id string) []kgo.Opt {
	var opts []kgo.Opt
	if *session > 0 {
		opts = append(opts, kafkaloop.MembershipOpts(topics.Membership{SessionTimeout: *session, InstanceID: id})...)
	} else if id != "" {
		opts = append(opts, kgo.InstanceID(id))
	}
	return opts
}

// child consumes and prints "REC <unix ns> <value>" per record.
func child() error {
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.ConsumeTopics(*topic)}
	if *share {
		opts = append(opts, kgo.ShareGroup(*group))
	} else {
		opts = append(opts, kgo.ConsumerGroup(*group), kgo.BlockRebalanceOnPoll(),
			kgo.AutoCommitMarks(), kgo.AutoCommitInterval(500*time.Millisecond))
		opts = append(opts, memberOpts(*instance)...)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	for {
		fs := cl.PollRecords(context.Background(), 100)
		fs.EachError(func(t string, p int32, err error) { fmt.Fprintln(os.Stderr, "fetch error:", t, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			fmt.Println("REC", time.Now().UnixNano(), string(r.Value))
			if *share {
				r.Ack(kgo.AckAccept)
			} else {
				cl.MarkCommitRecords(r)
			}
		})
		cl.AllowRebalance()
	}
}

// proc is a running child and its records.
type proc struct {
	cmd  *exec.Cmd
	recs chan [2]int64 // consumed at (unix ns), sequence number
}

func startChild(id string) (*proc, error) {
	args := []string{"-mode=child", "-brokers=" + *brokers, "-topic=" + *topic, "-group=" + *group,
		"-session=" + session.String(), "-share=" + strconv.FormatBool(*share), "-instance=" + id}
	cmd := exec.Command(os.Args[0], args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, recs: make(chan [2]int64, 1<<16)}
	go func() {
		defer close(p.recs)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 || f[0] != "REC" {
				continue
			}
			at, _ := strconv.ParseInt(f[1], 10, 64)
			seq, _ := strconv.ParseInt(f[2], 10, 64)
			p.recs <- [2]int64{at, seq}
		}
	}()
	return p, nil
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// firstAfter waits for a record numbered above after and returns when it
// was consumed.
func (p *proc) firstAfter(after int64, within time.Duration) (time.Time, bool) {
	timeout := time.After(within)
	for {
		select {
		case r, ok := <-p.recs:
			if !ok {
				return time.Time{}, false
			}
			if r[1] > after {
				return time.Unix(0, r[0]), true
			}
		case <-timeout:
			return time.Time{}, false
		}
	}
}

// allPartitionsAfter waits until p consumed 8 consecutive records (one per
// partition, produced round robin) numbered above after.
func (p *proc) allPartitionsAfter(after int64, within time.Duration) (time.Time, bool) {
	timeout := time.After(within)
	got := map[int64]bool{}
	for {
		select {
		case r, ok := <-p.recs:
			if !ok {
				return time.Time{}, false
			}
			if r[1] <= after {
				continue
			}
			got[r[1]] = true
			for first := range got {
				all := true
				for k := int64(0); k < 8 && all; k++ {
					all = got[first+k]
				}
				if all {
					return time.Unix(0, r[0]), true
				}
			}
		case <-timeout:
			return time.Time{}, false
		}
	}
}

func measure() error {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	*topic = fmt.Sprintf("takeovermeasure-%d", time.Now().UnixNano())
	*group = *topic
	if _, err := adm.CreateTopic(ctx, 8, 1, nil, *topic); err != nil {
		return err
	}
	defer func() { _, _ = adm.DeleteTopics(ctx, *topic) }()
	if *share && *lock > 0 {
		if err := topics.ConfigureShareGroup(ctx, cl, *group, topics.ShareSettings{RecordLock: *lock}); err != nil {
			return err
		}
	}
	var seq atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				cl.ProduceSync(ctx, &kgo.Record{Topic: *topic, Value: []byte(strconv.FormatInt(seq.Add(1), 10))})
			}
		}
	}()
	var surv *proc
	if *survivor {
		id := ""
		if *instance != "" {
			id = "survivor"
		}
		if surv, err = startChild(id); err != nil {
			return err
		}
		defer surv.kill()
	}
	p, err := startChild(*instance)
	if err != nil {
		return err
	}
	if _, ok := p.firstAfter(seq.Load(), time.Minute); !ok {
		p.kill()
		return fmt.Errorf("the first consumer never consumed")
	}
	fmt.Printf("session %v, instance id %q, share %v, survivor %v\n", *session, *instance, *share, *survivor)
	for i := range *runs {
		time.Sleep(3 * time.Second) // consume and commit a while
		if _, ok := p.firstAfter(seq.Load(), 30*time.Second); !ok {
			p.kill()
			return fmt.Errorf("the consumer stalled before the kill")
		}
		p.kill()
		killed, after := time.Now(), seq.Load()
		if surv != nil {
			at, ok := surv.allPartitionsAfter(after, 2*time.Minute)
			report(i, "the surviving member consumed every partition", killed, at, ok)
		}
		if p, err = startChild(*instance); err != nil {
			return err
		}
		if surv == nil {
			at, ok := p.firstAfter(after, 2*time.Minute)
			report(i, "the restarted member consumed", killed, at, ok)
		} else if _, ok := p.firstAfter(seq.Load(), 2*time.Minute); !ok {
			fmt.Println("the restarted member did not rejoin")
		}
	}
	p.kill()
	return nil
}

func report(run int, what string, killed, at time.Time, ok bool) {
	if !ok {
		fmt.Printf("run %d: %s nothing within 2m\n", run, what)
		return
	}
	fmt.Printf("run %d: %s %v after the kill\n", run, what, at.Sub(killed).Round(10*time.Millisecond))
}

// gaps records a member's heartbeats (request key 12).
type gaps struct {
	mu     sync.Mutex
	last   time.Time
	max    time.Duration
	errs   atomic.Int64
	lost   atomic.Int64
	revoke atomic.Int64
}

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (g *gaps) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if key != 12 {
		return
	}
	if e.Err() != nil {
		g.errs.Add(1)
		return
	}
	now := time.Now()
	g.mu.Lock()
	if !g.last.IsZero() {
		g.max = max(g.max, now.Sub(g.last))
	}
	g.last = now
	g.mu.Unlock()
}

func soak() error {
	ctx := context.Background()
	bs := strings.Split(*brokers, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(bs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tp := fmt.Sprintf("takeovermeasure-soak-%d", time.Now().UnixNano())
	if _, err := adm.CreateTopic(ctx, 8, 1, nil, tp); err != nil {
		return err
	}
	defer func() { _, _ = adm.DeleteTopics(ctx, tp) }()
	sctx, cancel := context.WithTimeout(ctx, *soakFor)
	defer cancel()
	var wg sync.WaitGroup
	var all []*gaps
	for range *members {
		g := &gaps{}
		all = append(all, g)
		opts := append([]kgo.Opt{kgo.SeedBrokers(bs...), kgo.ConsumeTopics(tp), kgo.ConsumerGroup(tp), kgo.WithHooks(g),
			kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) { g.lost.Add(1) }),
			kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) { g.revoke.Add(1) }),
		}, memberOpts("")...)
		c, err := kgo.NewClient(opts...)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for sctx.Err() == nil {
				c.PollFetches(sctx)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("session %v, %d members, %v\n", *session, *members, *soakFor)
	for i, g := range all {
		fmt.Printf("member %d: longest heartbeat gap %v, heartbeat errors %d, partitions lost %d, revokes %d (joins and the final leave revoke too)\n",
			i, g.max.Round(time.Millisecond), g.errs.Load(), g.lost.Load(), g.revoke.Load())
	}
	return nil
}
