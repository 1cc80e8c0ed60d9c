package sagatest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/wait"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Service is a worker service running in an env: one instance, or two
// with TwinWorkers. Make one with Worker.
type Service struct {
	env      *Env
	name     string
	topic    string
	register func(*worker.Worker) error
	opts     []worker.Option
	insts    []*instance
}

// Worker starts the worker service named service in e: it makes each
// instance with worker.New(service, opts...), calls register to add its
// endpoints, and runs it until the test ends. register is called again for
// every instance and every restart. The harness sets the brokers, the
// consumer group, the topic partitions and the guard (see WithGuard); the
// logger unless opts set one. Worker returns once every instance has
// joined its group, and fails the test if one cannot start.
func Worker(e *Env, service string, register func(w *worker.Worker) error, opts ...worker.Option) *Service {
	e.t.Helper()
	s := &Service{env: e, name: service, topic: topics.CommandTopic(service), register: register, opts: opts}
	e.mu.Lock()
	_, dup := e.services[service]
	e.mu.Unlock()
	if dup {
		e.t.Fatalf("sagatest: worker service %q started twice", service)
		return nil
	}
	if err := topics.ValidName(service); err != nil {
		e.t.Fatalf("sagatest: %v", err)
		return nil
	}
	if err := e.ensureTopics(topics.WorkerTopics(service)...); err != nil {
		e.t.Fatalf("sagatest: worker %s: %v", service, err)
		return nil
	}
	if e.cfg.cmdCopies > 0 {
		if err := e.startRelay(s.topic, s.topic, e.cfg.cmdCopies, false, &e.stats.commandCopies); err != nil {
			e.t.Fatalf("sagatest: worker %s: %v", service, err)
			return nil
		}
	}
	n := 1
	if e.cfg.twins {
		n = 2
	}
	share := e.workerGroupType(service) == topics.GroupShare
	if share && (e.cfg.restartEvery > 0 || e.cfg.crashEvery > 0) {
		e.t.Fatalf("sagatest: worker %s: RestartWorkersEvery and CrashWorkersEvery rewind consumer-group offsets: not with share groups", service)
		return nil
	}
	if e.cfg.instances > 1 {
		if e.cfg.twins {
			e.t.Fatalf("sagatest: WorkerInstances and TwinWorkers do not combine")
			return nil
		}
		n = e.cfg.instances
	}
	group := topics.Prefix + "." + service + ".worker"
	for i := range n {
		g := group
		if i == 1 && e.cfg.twins {
			g += ".twin"
		}
		in := &instance{svc: s, idx: i, group: g, share: share}
		if e.cfg.crashEvery > 0 {
			in.crashes = newCrashSchedule(e.seed, service, i, e.cfg.crashEvery)
		}
		s.insts = append(s.insts, in)
	}
	e.mu.Lock()
	e.services[service] = s
	e.mu.Unlock()
	e.onStop(s.stop)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, in := range s.insts {
		wg.Go(func() {
			in.mu.Lock()
			defer in.mu.Unlock()
			errs[i] = in.start()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatalf("%v", err)
	}
	return s
}

// Name returns the service name.
func (s *Service) Name() string { return s.name }

// Instances returns the number of instances (2 with TwinWorkers).
func (s *Service) Instances() int { return len(s.insts) }

// InstanceExecutions returns how many handler executions each instance of
// the service ran (across its restarts), in instance order: with
// WorkerInstances and a share group, whether every instance took part.
func (s *Service) InstanceExecutions() []int64 {
	out := make([]int64, len(s.insts))
	for i, in := range s.insts {
		out[i] = in.execs.Load()
	}
	return out
}

// Stats returns the sum of the worker.Stats of every instance, over every
// restart.
func (s *Service) Stats() worker.Stats {
	var sum worker.Stats
	for _, in := range s.insts {
		st := in.stats()
		sum.Processed += st.Processed
		sum.DeadLettered += st.DeadLettered
		sum.Panics += st.Panics
	}
	return sum
}

// Restart restarts every instance of the service with redelivery: each
// instance is stopped gracefully (the handlers in flight finish, reply and
// commit), its group's committed offsets are set back to where they stood
// when it started (or at its previous restart), and a new instance is
// started in its place, to which the commands the stopped one handled
// since then are delivered again. It is the redelivery that follows a
// crash which lost the offset commits, without interrupting a handler
// (see CrashWorkersEvery for that). Restart returns once the new instances
// have joined their groups; it fails the test if one cannot start.
func (s *Service) Restart() {
	s.env.t.Helper()
	errs := make([]error, len(s.insts))
	var wg sync.WaitGroup
	for i, in := range s.insts {
		wg.Go(func() { errs[i] = in.restart() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.env.t.Fatalf("%v", err)
	}
}

// RestartWorker restarts the worker service named service (see
// Service.Restart).
func (e *Env) RestartWorker(service string) {
	e.t.Helper()
	e.mu.Lock()
	s := e.services[service]
	e.mu.Unlock()
	if s == nil {
		e.t.Fatalf("sagatest: no worker service %q", service)
		return
	}
	s.Restart()
}

func (s *Service) stop() {
	var wg sync.WaitGroup
	for _, in := range s.insts {
		wg.Go(func() {
			in.mu.Lock()
			defer in.mu.Unlock()
			in.stop()
			in.stopped = true
		})
	}
	wg.Wait()
}

// instance is one worker instance of a service, across its restarts.
type instance struct {
	svc     *Service
	idx     int
	group   string
	share   bool           // a share-group member (no committed offsets)
	execs   atomic.Int64   // handler executions, across incarnations
	crashes *crashSchedule // of CrashWorkersEvery (nil: none)

	mu      sync.Mutex // held while starting, stopping and restarting
	w       *worker.Worker
	guard   *instanceGuard // of the current incarnation
	cancel  context.CancelFunc
	done    chan error
	prior   worker.Stats // of the stopped incarnations
	stopped bool

	// startedAt holds, per partition of the command topic, the offset
	// committed when the current incarnation started, before any rewind
	// (-1: none).
	startedAt map[int32]int64
}

// start makes and runs a new incarnation; in.mu is held.
func (in *instance) start() error {
	e := in.svc.env
	if in.startedAt == nil && !in.share {
		ctx, cancel := context.WithTimeout(e.ctx, e.cfg.timeout)
		at, _, err := in.committed(ctx)
		cancel()
		if err != nil {
			return err
		}
		in.startedAt = at
	}
	var guard worker.Guard
	switch {
	case e.cfg.protect != nil:
		g, err := e.newProtection()
		if err != nil {
			return err
		}
		guard = g
	case e.cfg.guard != nil:
		guard = e.cfg.guard(in.svc.name)
	}
	if guard == nil {
		guard = passThrough{}
	}
	ig := &instanceGuard{in: in, inner: guard}
	opts := []worker.Option{worker.WithLogger(e.log)}
	if e.kfake {
		opts = append(opts, worker.WithKafkaOpts(kgo.FetchMaxWait(kfakeFetchMaxWait)))
	}
	if in.share {
		opts = append(opts, worker.WithGroupType(topics.GroupShare), worker.WithShareSettings(e.cfg.share))
	}
	opts = append(opts, in.svc.opts...)
	opts = append(opts,
		worker.WithBrokers(e.brokers...),
		worker.WithGroup(in.group),
		worker.WithProvision(e.provision()),
		worker.WithGuard(ig),
	)
	w, err := worker.New(in.svc.name, opts...)
	if err != nil {
		return fmt.Errorf("sagatest: worker %s: %w", in.svc.name, err)
	}
	if err := in.svc.register(w); err != nil {
		w.Close()
		return fmt.Errorf("sagatest: worker %s: register: %w", in.svc.name, err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	timer := time.NewTimer(e.cfg.timeout)
	defer timer.Stop()
	select {
	case <-w.Running():
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("returned before joining its group")
		}
		return fmt.Errorf("sagatest: worker %s: Run: %w", in.svc.name, err)
	case <-timer.C:
		cancel()
		<-done
		return fmt.Errorf("sagatest: worker %s did not join group %s within %v", in.svc.name, in.group, e.cfg.timeout)
	}
	in.w, in.cancel, in.done, in.guard = w, cancel, done, ig
	return nil
}

// stop stops the current incarnation, if any; in.mu is held.
func (in *instance) stop() {
	if in.w == nil {
		return
	}
	in.cancel()
	if err := <-in.done; err != nil {
		in.svc.env.t.Errorf("sagatest: worker %s (group %s): %v", in.svc.name, in.group, err)
	}
	st := in.w.Stats()
	in.prior.Processed += st.Processed
	in.prior.DeadLettered += st.DeadLettered
	in.prior.Panics += st.Panics
	in.w, in.guard = nil, nil
}

// restart stops the current incarnation and starts one that is handed
// again what the stopped one handled.
func (in *instance) restart() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.replaceLocked(true)
}

// replace does what restart does (rewind) or restarts after a crash (no
// rewind), if g's incarnation still runs.
func (in *instance) replace(g *instanceGuard, rewind bool) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.guard != g {
		return nil // replaced already
	}
	return in.replaceLocked(rewind)
}

// replaceLocked stops the current incarnation and starts a new one, with
// the offsets rewound or as they are; in.mu is held.
func (in *instance) replaceLocked(rewind bool) error {
	if in.stopped || in.svc.env.ctx.Err() != nil {
		return nil
	}
	if rewind && in.share {
		return fmt.Errorf("sagatest: worker %s: a restart with redelivery rewinds consumer-group offsets: not with a share group", in.svc.name)
	}
	in.stop()
	if rewind {
		if err := in.rewind(); err != nil {
			return err
		}
		in.svc.env.stats.restarts.Add(1)
	} else {
		in.startedAt = nil // a restart rewinds to where the replacement starts
	}
	return in.start()
}

func (in *instance) stats() worker.Stats {
	in.mu.Lock()
	defer in.mu.Unlock()
	st := in.prior
	if in.w != nil {
		cur := in.w.Stats()
		st.Processed += cur.Processed
		st.DeadLettered += cur.DeadLettered
		st.Panics += cur.Panics
	}
	return st
}

// committed returns the offsets the instance's group has committed on the
// command topic (-1: none), and the partitions' log start offsets.
func (in *instance) committed(ctx context.Context) (at, logStart map[int32]int64, err error) {
	adm := in.svc.env.adm
	starts, err := adm.ListStartOffsets(ctx, in.svc.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sagatest: worker %s: start offsets: %w", in.svc.name, err)
	}
	commits, err := fetchOffsets(ctx, adm, in.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		commits, err = nil, nil // a group that never committed
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sagatest: worker %s: offsets of %s: %w", in.svc.name, in.group, err)
	}
	at, logStart = make(map[int32]int64), make(map[int32]int64)
	starts.Each(func(o kadm.ListedOffset) {
		logStart[o.Partition] = o.Offset
		at[o.Partition] = -1
		if c, ok := commits.Lookup(in.svc.topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
			at[o.Partition] = c.At
		}
	})
	return at, logStart, nil
}

// rewind sets the stopped group's committed offsets back to where they
// were when the stopped incarnation started (never forward), as if its
// commits had been lost in a crash; in.mu is held and no incarnation runs.
func (in *instance) rewind() error {
	e := in.svc.env
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.timeout)
	defer cancel()
	now, logStart, err := in.committed(ctx)
	if err != nil {
		return err
	}
	var back kadm.Offsets
	for p, h := range now {
		prev, ok := in.startedAt[p]
		if !ok || h < 0 {
			continue
		}
		if prev < 0 {
			prev = logStart[p]
		}
		if prev < h {
			back.AddOffset(in.svc.topic, p, prev, -1)
		}
	}
	in.startedAt = now
	if len(back) == 0 {
		return nil
	}
	resp, err := e.adm.CommitOffsets(ctx, in.group, back)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("sagatest: worker %s: rewind %s: %w", in.svc.name, in.group, err)
	}
	return nil
}

// restartRequest asks the restarter to replace the incarnation of guard.
type restartRequest struct {
	guard  *instanceGuard
	rewind bool // a restart with redelivery; else after a crash
}

// requestRestart queues r for the restarter; it never blocks.
func (e *Env) requestRestart(r restartRequest) {
	e.restartMu.Lock()
	e.restarts = append(e.restarts, r)
	e.restartMu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default: // the restarter is woken already
	}
}

// restarter replaces the incarnations that asked for it, each in its own
// goroutine (a crashed incarnation does nothing until it is replaced),
// until the env ends.
func (e *Env) restarter() {
	defer e.wg.Done()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-e.wake:
		}
		e.restartMu.Lock()
		reqs := e.restarts
		e.restarts = nil
		e.restartMu.Unlock()
		for _, r := range reqs {
			wg.Go(func() {
				if err := r.guard.in.replace(r.guard, r.rewind); err != nil && e.ctx.Err() == nil {
					e.t.Errorf("%v", err)
				}
			})
		}
	}
}

// errCrashed is what a crashed incarnation's guard returns: the worker
// sends nothing and does not commit the command.
var errCrashed = errors.New("sagatest: worker instance crashed")

// crashSignal is the panic that unwinds a crash out of the inner guard,
// which must neither record a reply nor release a lease.
type crashSignal struct{}

// instanceGuard wraps the guard of one incarnation of an instance: it
// counts deliveries and executions, meets the twin instance, restarts or
// crashes the incarnation when due, and sends replies through the reply
// relay when one runs.
type instanceGuard struct {
	in    *instance
	inner worker.Guard
	execs atomic.Int64 // executions of the incarnation
	dead  atomic.Bool  // crashed
}

func (g *instanceGuard) Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	reply, wait, err := g.execute(ctx, cmd, run, false)
	wait()
	return reply, err
}

// ExecuteOverlapped forwards to the inner guard's ExecuteOverlapped when
// it has one (writeprotect.Guard), so that the harness runs the workers'
// real path: the reply sent while the outcome's write is in flight.
func (g *instanceGuard) ExecuteOverlapped(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, func(), error) {
	return g.execute(ctx, cmd, run, true)
}

// overlapper is the inner guard's optional ExecuteOverlapped.
type overlapper interface {
	ExecuteOverlapped(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, func(), error)
}

func noWait() {}

// execute runs cmd through the inner guard with the instance's faults;
// wait is the inner guard's (a no-op unless overlapped), returned on every
// path, the crashed ones included: the write it waits for is in flight.
func (g *instanceGuard) execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope, overlapped bool) (reply *topics.Envelope, wait func(), err error) {
	e := g.in.svc.env
	wait = noWait
	if g.dead.Load() {
		return nil, wait, errCrashed
	}
	e.delivered(cmd)
	if e.cfg.twins && e.twins.meet(ctx, g.in.svc.name+"\x00"+cmd.IdempotencyKey+"\x00"+strconv.Itoa(cmd.Attempt), g.in.idx) {
		e.stats.twinMeetings.Add(1)
	}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(crashSignal); !ok {
				panic(v)
			}
			reply, err = nil, errCrashed
		}
	}()
	var crashAfter int64 // the execution that crashes after the reply
	ran := false         // the handler ran in this call
	guarded := func(run func(context.Context) *topics.Envelope) (*topics.Envelope, func(), error) {
		if o, ok := g.inner.(overlapper); ok && overlapped {
			return o.ExecuteOverlapped(ctx, cmd, run)
		}
		r, err := g.inner.Execute(ctx, cmd, run)
		return r, noWait, err
	}
	reply, wait, err = guarded(func(ctx context.Context) *topics.Envelope {
		if g.dead.Load() {
			panic(crashSignal{}) // crashed meanwhile: the handler never starts
		}
		n := g.execs.Add(1)
		total := g.in.execs.Add(1)
		if s := g.in.crashes; s != nil {
			if crash, after := s.due(); crash && !after {
				if g.crash(&e.stats.crashesInRun) {
					e.fault(FaultCrashBeforeHandler, g.in, total, cmd)
				}
				panic(crashSignal{})
			} else if crash {
				crashAfter = total
			}
		}
		e.count(commandKey(cmd))
		if r := int64(e.cfg.restartEvery); r > 0 && n == r {
			e.fault(FaultRestart, g.in, total, cmd)
			e.requestRestart(restartRequest{guard: g, rewind: true})
		}
		ran = true
		return run(ctx)
	})
	if ran && err == nil && reply != nil {
		// What the guard answered for a run of the handler: it may answer
		// a later attempt so too, from what it recorded.
		e.ranWith(commandKey(cmd), reply)
	}
	if crashAfter > 0 && g.crash(&e.stats.crashesBeforeReply) {
		e.fault(FaultCrashBeforeReply, g.in, crashAfter, cmd)
	}
	if g.dead.Load() {
		return nil, wait, errCrashed // the reply dies with the instance
	}
	if err == nil && reply != nil {
		// The worker sends the reply to cmd.ReplyTo after Execute returns.
		if staging := e.stagingFor(cmd.ReplyTo); staging != "" {
			cmd.ReplyTo = staging
		}
	}
	return reply, wait, err
}

// crash marks the incarnation crashed, counts it in n and asks for its
// replacement; it reports false if the incarnation had crashed already.
func (g *instanceGuard) crash(n *atomic.Int64) bool {
	if !g.dead.CompareAndSwap(false, true) {
		return false
	}
	n.Add(1)
	g.in.svc.env.requestRestart(restartRequest{guard: g})
	return true
}

// passThrough runs every command.
type passThrough struct{}

func (passThrough) Execute(ctx context.Context, _ *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	return run(ctx), nil
}

// rendezvous makes the two twin instances hand a command to their guards
// together: the first to arrive waits for the other, up to TwinWindow.
// Only the first arrival of a command at each instance waits; redeliveries
// and retries go straight through.
type rendezvous struct {
	mu    sync.Mutex
	slots map[string]*meeting
}

type meeting struct {
	arrived [2]bool
	both    chan struct{}
}

// meet reports whether the other twin arrived within the window; only the
// second to arrive reports true, so a meeting counts once.
func (r *rendezvous) meet(ctx context.Context, key string, idx int) bool {
	r.mu.Lock()
	m := r.slots[key]
	if m == nil {
		m = &meeting{both: make(chan struct{})}
		r.slots[key] = m
	}
	if m.arrived[idx] {
		r.mu.Unlock()
		return false
	}
	m.arrived[idx] = true
	if m.arrived[1-idx] {
		close(m.both)
		r.mu.Unlock()
		return true
	}
	r.mu.Unlock()
	t := time.NewTimer(TwinWindow)
	defer t.Stop()
	select {
	case <-m.both:
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// kfakeFetchMaxWait bounds the fetch long-poll of workers on kfake: a
// worker started in place of a crashed one sometimes waited the whole
// default (5s) for records produced meanwhile.
const kfakeFetchMaxWait = 200 * time.Millisecond

// fetchOffsets is kadm's FetchOffsets, retried while Kafka answers with a
// retriable error (a coordinator still loading or moving, as on a broker
// that just started) until ctx ends.
func fetchOffsets(ctx context.Context, adm *kadm.Client, group string) (kadm.OffsetResponses, error) {
	delay := 50 * time.Millisecond
	for {
		commits, err := adm.FetchOffsets(ctx, group)
		if err == nil || !kerr.IsRetriable(err) {
			return commits, err
		}
		if !wait.Sleep(ctx, delay) {
			return commits, err
		}
		delay = min(2*delay, time.Second)
	}
}

// workerGroupType is the group type of the workers of service.
func (e *Env) workerGroupType(service string) topics.GroupType {
	if g, ok := e.cfg.workerGroups[service]; ok {
		return g
	}
	if e.cfg.groupType != "" {
		return e.cfg.groupType
	}
	return topics.GroupConsumer
}

// Service returns the worker service started with that name, or nil.
func (e *Env) Service(name string) *Service {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.services[name]
}
