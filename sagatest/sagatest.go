package sagatest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/answer"
	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// TB is the part of testing.TB the harness uses; *testing.T and
// *testing.B satisfy it. Fatalf is only called from the goroutine that
// called the harness.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// Execution names the executions of one business handler: a span of a
// saga, forward (topics.KindProcess) or compensating (topics.KindRevert).
type Execution struct {
	TxID string
	Span int
	Kind topics.Kind
}

// String returns "txID/span/kind".
func (x Execution) String() string { return fmt.Sprintf("%s/%d/%s", x.TxID, x.Span, x.Kind) }

// attemptKey names the executions of one attempt of a step: a step
// re-driven after a retryable failure runs once per attempt.
type attemptKey struct {
	Execution
	attempt int
}

// String returns "txID/span/kind attempt n".
func (k attemptKey) String() string { return fmt.Sprintf("%s attempt %d", k.Execution, k.attempt) }

// Stats counts what the harness saw and did.
type Stats struct {
	// Deliveries counts commands handed to worker guards, retries of a
	// command the guard refused included.
	Deliveries int64
	// Executions counts business-handler executions.
	Executions int64
	// DuplicateExecutions counts executions beyond the first of their
	// (transaction, span, kind, attempt): a step re-driven after a
	// retryable failure runs once per attempt, which is no duplicate.
	DuplicateExecutions int64
	// CommandCopies and ReplyCopies count the extra records the
	// duplicating relays wrote.
	CommandCopies int64
	ReplyCopies   int64
	// ReorderedReplies counts the stale replies ReorderReplies wrote after
	// a newer reply of the same saga (one with another span, kind or
	// attempt).
	ReorderedReplies int64
	// TwinMeetings counts commands that both twin instances handed to
	// their guards together (within TwinWindow).
	TwinMeetings int64
	// Restarts counts worker instance restarts with redelivery
	// (RestartWorkersEvery, Service.Restart).
	Restarts int64
	// CrashesInRun and CrashesBeforeReply count the crashes of
	// CrashWorkersEvery: before a handler ran (its guard had called run),
	// and after the guard returned the reply, before it was sent.
	CrashesInRun       int64
	CrashesBeforeReply int64
}

// Env is one test's saga system: a broker, an event store, the
// orchestrators and workers started on it, and the fault injectors. Make
// one with New.
type Env struct {
	t       TB
	cfg     config
	log     *slog.Logger
	brokers []string
	kfake   bool // brokers is the env's own kfake cluster
	store   eventstore.Store
	adm     *kadm.Client
	admCl   *kgo.Client

	ctx    context.Context // ends when the test ends
	cancel context.CancelFunc
	wg     sync.WaitGroup // background goroutines

	mu       sync.Mutex
	stops    []func() // in start order; run in reverse at cleanup
	services map[string]*Service
	orchs    map[string]orchRef // by group
	relays   map[string]*relay  // by source topic
	staging  map[string]string  // callback topic -> staging topic
	cmdTopic map[string]bool    // command topics with a relay

	guards []*writeprotect.Guard // made by WithWriteProtection

	execMu sync.Mutex
	execs  map[attemptKey]int // handler executions
	total  map[Execution]int  // handler executions over every attempt
	delivs map[attemptKey]int // commands handed to guards
	// actionDone holds the attempts of reverts delivered with
	// topics.Envelope.ActionDone (the orchestrator holds the action's ok
	// reply).
	actionDone map[attemptKey]bool
	// results holds what the guard replied for each attempt whose handler
	// ran (its last run's): a later attempt may be answered with it,
	// recorded by the guard, without running (answer.ForAttempt).
	results map[attemptKey]answer.Recorded
	// doubles describes the runs of a later attempt after an earlier
	// attempt's run was answered with a reply that answers it too.
	doubles []string
	sagas   map[sagaRef]struct{} // sagas whose commands reached a guard

	seed     int64
	faultMu  sync.Mutex
	faults   []Fault     // injected, in order
	reported atomic.Bool // the seed was printed with a failure

	twins rendezvous

	restartMu sync.Mutex
	restarts  []restartRequest // for the restarter
	wake      chan struct{}    // cap 1: restarts has requests

	stats struct {
		deliveries, executions, duplicates, commandCopies, replyCopies      atomic.Int64
		reordered, twinMeetings, restarts, crashesInRun, crashesBeforeReply atomic.Int64
	}
}

// orchRef is what Settle and AssertExactlyOnce need of an orchestrator.
type orchRef struct {
	group, topic string
	scope        eventstore.Scope
	domain       string
	store        eventstore.Store
	share        bool // a share group (settled by its start offsets)
}

// sagaRef names a saga across orchestrators.
type sagaRef struct {
	scope  eventstore.Scope
	domain string
	txID   string
}

// New starts an env for t: an in-process kfake broker (or the brokers of
// WithKafka) and the in-memory event store (or WithCassandra's, or
// WithStore's). It fails t if an option is invalid or a service cannot be
// reached. Everything is stopped when t ends.
func New(t TB, opts ...Option) *Env {
	t.Helper()
	cfg := config{partitions: DefaultPartitions, timeout: DefaultTimeout}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if !cfg.seedSet {
		cfg.seed = rand.Int64()
	}
	var errs []error
	if cfg.partitions < 1 {
		errs = append(errs, fmt.Errorf("sagatest: partitions %d < 1", cfg.partitions))
	}
	if cfg.timeout <= 0 {
		errs = append(errs, fmt.Errorf("sagatest: timeout %v <= 0", cfg.timeout))
	}
	if cfg.cmdCopies < 0 || cfg.replyCopies < 0 {
		errs = append(errs, fmt.Errorf("sagatest: negative copies (commands %d, replies %d)", cfg.cmdCopies, cfg.replyCopies))
	}
	if cfg.restartEvery < 0 {
		errs = append(errs, fmt.Errorf("sagatest: RestartWorkersEvery(%d) < 0", cfg.restartEvery))
	}
	if cfg.crashEvery < 0 {
		errs = append(errs, fmt.Errorf("sagatest: CrashWorkersEvery(%d) < 0", cfg.crashEvery))
	}
	if cfg.crashEvery == 1 {
		errs = append(errs, errors.New("sagatest: CrashWorkersEvery(1) crashes every redelivery of a crashed command again: use 2 or more"))
	}
	if cfg.protect != nil {
		if err := cfg.protect.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("sagatest: WithWriteProtection: %w", err))
		}
		if cfg.guard != nil {
			errs = append(errs, errors.New("sagatest: both WithGuard and WithWriteProtection"))
		}
	}
	if cfg.store != nil && cfg.cass {
		errs = append(errs, errors.New("sagatest: both WithStore and WithCassandra"))
	}
	if cfg.cass && (len(cfg.cassHosts) == 0 || cfg.keyspace == "") {
		errs = append(errs, errors.New("sagatest: WithCassandra needs hosts and a keyspace"))
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	e := &Env{
		t:          t,
		cfg:        cfg,
		log:        cfg.logger,
		services:   make(map[string]*Service),
		orchs:      make(map[string]orchRef),
		relays:     make(map[string]*relay),
		staging:    make(map[string]string),
		cmdTopic:   make(map[string]bool),
		execs:      make(map[attemptKey]int),
		total:      make(map[Execution]int),
		delivs:     make(map[attemptKey]int),
		results:    make(map[attemptKey]answer.Recorded),
		actionDone: make(map[attemptKey]bool),
		seed:       cfg.seed,
		sagas:      make(map[sagaRef]struct{}),
		twins:      rendezvous{slots: make(map[string]*meeting)},
		wake:       make(chan struct{}, 1),
	}
	if e.log == nil {
		e.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if f, ok := t.(interface{ Failed() bool }); ok {
		// Registered before close, so run after it: its failures count.
		t.Cleanup(func() {
			if f.Failed() && !e.reported.Load() {
				t.Logf("%s", strings.TrimPrefix(e.replayHint(), "\n"))
			}
		})
	}
	t.Cleanup(e.close)

	e.brokers = cfg.brokers
	if len(e.brokers) == 0 {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(cfg.partitions))
		if err != nil {
			t.Fatalf("sagatest: kfake: %v", err)
			return nil
		}
		e.onStop(c.Close)
		e.brokers = c.ListenAddrs()
		e.kfake = true
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatalf("sagatest: kafka client: %v", err)
		return nil
	}
	e.admCl, e.adm = cl, kadm.NewClient(cl)
	e.onStop(cl.Close)

	switch {
	case cfg.store != nil:
		e.store = cfg.store
	case cfg.cass:
		ctx, cancel := context.WithTimeout(e.ctx, cfg.timeout+time.Minute) // schema creation is slow
		s, err := cassandra.New(ctx, cassandra.Config{
			ContactPoints: cfg.cassHosts,
			Keyspace:      cfg.keyspace,
			Replication:   cassandra.SimpleReplication(1),
			CreateSchema:  true,
		}, cassandra.WithLogger(e.log))
		cancel()
		if err != nil {
			t.Fatalf("sagatest: cassandra store: %v", err)
			return nil
		}
		e.store = s
		e.onStop(func() { _ = s.Close() })
	default:
		s := memory.New()
		e.store = s
		e.onStop(func() { _ = s.Close() })
	}
	if cfg.restartEvery > 0 || cfg.crashEvery > 0 {
		e.wg.Add(1)
		go e.restarter()
	}
	return e
}

// onStop registers f to run at cleanup (in reverse order of registration).
func (e *Env) onStop(f func()) {
	e.mu.Lock()
	e.stops = append(e.stops, f)
	e.mu.Unlock()
}

// close stops everything, newest first.
func (e *Env) close() {
	e.cancel()
	e.wg.Wait() // the restarter: no restart races the stops below
	e.mu.Lock()
	stops := e.stops
	e.stops = nil
	e.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
}

// Brokers returns the Kafka seed brokers of the env.
func (e *Env) Brokers() []string { return slices.Clone(e.brokers) }

// Store returns the env's event store.
func (e *Env) Store() eventstore.Store { return e.store }

// Stats returns a snapshot of the harness's counters.
func (e *Env) Stats() Stats {
	s := &e.stats
	return Stats{
		Deliveries: s.deliveries.Load(), Executions: s.executions.Load(),
		DuplicateExecutions: s.duplicates.Load(), CommandCopies: s.commandCopies.Load(),
		ReplyCopies: s.replyCopies.Load(), ReorderedReplies: s.reordered.Load(),
		TwinMeetings: s.twinMeetings.Load(), Restarts: s.restarts.Load(),
		CrashesInRun: s.crashesInRun.Load(), CrashesBeforeReply: s.crashesBeforeReply.Load(),
	}
}

// newProtection makes the guard of a worker instance for
// WithWriteProtection.
func (e *Env) newProtection() (*writeprotect.Guard, error) {
	opts := append([]writeprotect.Option{writeprotect.WithLogger(e.log)}, e.cfg.protectOpts...)
	g, err := writeprotect.New(e.store, *e.cfg.protect, opts...)
	if err != nil {
		return nil, fmt.Errorf("sagatest: write protection: %w", err)
	}
	e.mu.Lock()
	e.guards = append(e.guards, g)
	e.mu.Unlock()
	return g, nil
}

// WriteProtectionStats returns the sum of the writeprotect.Stats of every
// guard WithWriteProtection made (zero without it).
func (e *Env) WriteProtectionStats() writeprotect.Stats {
	e.mu.Lock()
	guards := slices.Clone(e.guards)
	e.mu.Unlock()
	var sum writeprotect.Stats
	for _, g := range guards {
		sum = sum.Add(g.Stats())
	}
	return sum
}

// delivered records that cmd was handed to a guard.
func (e *Env) delivered(cmd *topics.Envelope) {
	x := commandKey(cmd)
	ref := sagaRef{eventstore.Scope{Region: cmd.Region, Cluster: cmd.Cluster, Service: cmd.Service}, cmd.Domain, cmd.TxID}
	e.execMu.Lock()
	e.delivs[x]++
	if cmd.ActionDone {
		e.actionDone[x] = true
	}
	e.sagas[ref] = struct{}{}
	e.execMu.Unlock()
	e.stats.deliveries.Add(1)
}

// commandKey names the attempt cmd commands.
func commandKey(cmd *topics.Envelope) attemptKey {
	return attemptKey{Execution{TxID: cmd.TxID, Span: cmd.Span, Kind: cmd.Kind}, cmd.Attempt}
}

// ranWith records that x's handler ran and the guard answered reply.
func (e *Env) ranWith(x attemptKey, reply *topics.Envelope) {
	r := &topics.Envelope{Kind: x.Kind, Attempt: x.attempt, Outcome: reply.Outcome, Pause: reply.Pause, ActionDone: reply.ActionDone}
	e.execMu.Lock()
	e.results[x] = answer.Recorded{Attempt: x.attempt, Reply: r}
	e.execMu.Unlock()
}

// count records one execution of x, and a double effect if an earlier
// attempt's run was answered with a reply that answers x too.
func (e *Env) count(x attemptKey) {
	e.execMu.Lock()
	n := e.execs[x] + 1
	e.execs[x] = n
	e.total[x.Execution]++
	if r, ok := answeredEarlier(e.results, x); ok {
		e.doubles = append(e.doubles, fmt.Sprintf("%s ran after attempt %d replied %s (a double effect)", x, r.Attempt, r.Reply.Outcome))
	}
	e.execMu.Unlock()
	e.stats.executions.Add(1)
	if n > 1 {
		e.stats.duplicates.Add(1)
	}
}

// Executions returns how many times the handler of txID's span ran in
// kind, over all its attempts (see AttemptExecutions).
func (e *Env) Executions(txID string, span int, kind topics.Kind) int {
	e.execMu.Lock()
	defer e.execMu.Unlock()
	return e.total[Execution{TxID: txID, Span: span, Kind: kind}]
}

// AttemptExecutions returns how many times the handler of txID's span ran
// in kind for attempt (topics.Envelope.Attempt, from 1): exactly once
// means once per attempt, since a step re-driven after a retryable failure
// runs again with the next attempt.
func (e *Env) AttemptExecutions(txID string, span int, kind topics.Kind, attempt int) int {
	e.execMu.Lock()
	defer e.execMu.Unlock()
	return e.execs[attemptKey{Execution{TxID: txID, Span: span, Kind: kind}, attempt}]
}

// ExecutionCounts returns a copy of every execution count, each over all
// the attempts of its step (as Executions).
func (e *Env) ExecutionCounts() map[Execution]int {
	e.execMu.Lock()
	defer e.execMu.Unlock()
	return maps.Clone(e.total)
}

// DuplicateExecutions returns the executions beyond the first of their
// (transaction, span, kind, attempt), over the whole env.
func (e *Env) DuplicateExecutions() int { return int(e.stats.duplicates.Load()) }

// AssertExactlyOnce waits until every record produced so far has been
// handled (Settle), so that late duplicates are counted too, then checks
// that every step ran exactly once per attempt. A step re-driven after a
// retryable failure runs once per attempt (topics.Envelope.Attempt), and
// the attempt whose reply decided the step must be one that ran. It fails
// the test for every (transaction, span, kind, attempt)
//
//   - whose handler ran more than once, or
//   - whose handler ran after an earlier attempt's run was answered with a
//     reply that, by answer.ForAttempt, answers it too (ok, not paused): a
//     double effect across attempts (see the package documentation for
//     the re-invocations that are not), or
//   - whose reply ok or non_retryable is the one the saga recorded for its
//     step in the event store (the orchestrator's tryouts), although its
//     handler never ran in that attempt while its command did reach a
//     guard of the harness (a guard that replied without running the
//     step; that an earlier attempt ran does not excuse it). A
//     compensation whose action never ran under the harness, or ran and
//     was answered with a failure, may reply ok without running: that is
//     a null compensation (answer.Compensates). One whose action ran and
//     was answered ok (even if its reply then proved too large to send,
//     which makes the orchestrator compensate it), or whose command says
//     that the orchestrator holds the action's ok reply, must run.
//
// The tryouts are read once per saga whose commands reached a worker of
// the env, for the sagas of orchestrators started with Orchestrator. It
// reports whether no step failed these checks. The failure names the
// seed of the env's fault schedule (see WithSeed).
func (e *Env) AssertExactlyOnce() bool {
	e.t.Helper()
	e.Settle()
	e.execMu.Lock()
	counts, total, delivs := maps.Clone(e.execs), maps.Clone(e.total), maps.Clone(e.delivs)
	runs := runs{results: maps.Clone(e.results), actionDone: maps.Clone(e.actionDone)}
	sagas := slices.Collect(maps.Keys(e.sagas))
	bad := slices.Clone(e.doubles)
	e.execMu.Unlock()
	for x, n := range counts {
		if n > 1 {
			bad = append(bad, fmt.Sprintf("%s ran %d times", x, n))
		}
	}
	never, err := e.neverRan(sagas, counts, total, delivs, runs)
	if err != nil {
		e.t.Errorf("sagatest: AssertExactlyOnce: %v", err)
	}
	bad = append(bad, never...)
	if len(bad) == 0 {
		return err == nil
	}
	sort.Strings(bad)
	n, more := len(bad), ""
	if n > 10 {
		more = fmt.Sprintf("\n... and %d more", n-10)
		bad = bad[:10]
	}
	e.t.Errorf("sagatest: %d steps did not run exactly once:\n%s%s%s", n, strings.Join(bad, "\n"), more, e.replayHint())
	return false
}

// neverRan reads the tryouts of sagas and describes every step whose
// deciding reply (ok or non_retryable) answered an attempt that reached a
// guard but never ran, null compensations excepted.
func (e *Env) neverRan(sagas []sagaRef, counts map[attemptKey]int, total map[Execution]int, delivs map[attemptKey]int, runs runs) ([]string, error) {
	e.mu.Lock()
	stores := make(map[sagaRef]eventstore.Store, len(e.orchs))
	for _, o := range e.orchs {
		stores[sagaRef{scope: o.scope, domain: o.domain}] = o.store
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.timeout)
	defer cancel()
	var (
		mu   sync.Mutex
		out  []string
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 16)
	)
	for _, ref := range sagas {
		store := stores[sagaRef{scope: ref.scope, domain: ref.domain}]
		if store == nil {
			continue // not a saga of an orchestrator of the env
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			tries, err := store.Tryouts(ctx, ref.scope, ref.txID)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("tryouts of %s: %w", ref.txID, err))
				return
			}
			out = append(out, unexecuted(ref.txID, tries, counts, total, delivs, runs)...)
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// unexecuted describes the steps of txID whose deciding reply in tries
// (ok or non_retryable) answered an attempt whose command reached a guard
// but whose handler never ran, unless a run of an earlier attempt was
// answered with that outcome: the guard answers a later attempt (a step timeout
// re-sent the step while the first run's reply was late) with the reply
// it recorded for the earlier one. A handler that failed retryably excuses
// nothing.
func unexecuted(txID string, tries []eventstore.Tryout, counts map[attemptKey]int, total map[Execution]int, delivs map[attemptKey]int, runs runs) []string {
	final := make(map[Execution]eventstore.Tryout) // the deciding reply of each step
	for _, tr := range tries {
		if tr.Outcome == string(topics.OutcomeOK) || tr.Outcome == string(topics.OutcomeNonRetryable) {
			final[Execution{TxID: txID, Span: tr.Span, Kind: topics.Kind(tr.Kind)}] = tr
		}
	}
	var out []string
	for x, tr := range final {
		k := attemptKey{x, tr.Attempt}
		if counts[k] > 0 || delivs[k] == 0 || ranEarlierWith(runs.results, k, topics.Outcome(tr.Outcome)) {
			continue
		}
		if x.Kind == topics.KindRevert && !runs.compensates(k, total) {
			continue // a null compensation: its action never ran here, or failed
		}
		out = append(out, fmt.Sprintf("%s replied %s, but its handler never ran (%d deliveries)", k, tr.Outcome, delivs[k]))
	}
	return out
}

// Sagas is what WaitTerminal needs of an orchestrator; every
// *orchestrator.Orchestrator[T] has it.
type Sagas interface {
	Store() eventstore.Store
	Scope() eventstore.Scope
}

// WaitTerminal waits until every saga in ids is in a terminal state or
// DISABLED (frozen after outliving its transaction lifetime: only an
// admin's restore moves it again) and returns the states by transaction
// id. It fails the test, naming the sagas still running, if that takes
// longer than the env's timeout.
func (e *Env) WaitTerminal(o Sagas, ids ...string) map[string]eventstore.State {
	e.t.Helper()
	deadline := time.Now().Add(e.cfg.timeout)
	out := make(map[string]eventstore.State, len(ids))
	pending := slices.Clone(ids)
	for {
		var still []string
		var lastErr error
		for _, id := range pending {
			tx, err := o.Store().LoadTransaction(e.ctx, o.Scope(), id)
			switch {
			case err != nil:
				lastErr = err
				still = append(still, id)
			case tx.State.Terminal(), tx.State == eventstore.StateDisabled:
				out[id] = tx.State
			default:
				out[id] = tx.State
				still = append(still, id)
			}
		}
		if len(still) == 0 {
			return out
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("sagatest: %d of %d sagas not terminal after %v: %s (last error: %v)%s",
				len(still), len(ids), e.cfg.timeout, e.describe(o, still), lastErr, e.replayHint())
			return out
		}
		pending = still
		time.Sleep(20 * time.Millisecond)
	}
}

// describe summarises the sagas in ids for a failure message.
func (e *Env) describe(o Sagas, ids []string) string {
	var b strings.Builder
	for i, id := range ids {
		if i == 5 {
			fmt.Fprintf(&b, " ... and %d more", len(ids)-5)
			break
		}
		tx, err := o.Store().LoadTransaction(e.ctx, o.Scope(), id)
		if err != nil {
			fmt.Fprintf(&b, "[%s: %v] ", id, err)
			continue
		}
		fmt.Fprintf(&b, "[%s %s span %d %s %s attempt %d] ", id, tx.State, tx.Span, tx.Kind, tx.Endpoint, tx.Attempt)
	}
	return b.String()
}

// Settle waits until every record produced so far has been handled by
// every consumer of the env (workers, orchestrators and relays) and the
// handling committed, so that nothing is in flight. It fails the test if
// that takes longer than the env's timeout.
func (e *Env) Settle() {
	e.t.Helper()
	deadline := time.Now().Add(e.cfg.timeout)
	for {
		lag, err := e.lag()
		if err == nil && lag == "" {
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				lag = err.Error()
			}
			e.t.Fatalf("sagatest: not settled after %v: %s%s", e.cfg.timeout, lag, e.replayHint())
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// lag describes what is not yet handled ("" if nothing).
func (e *Env) lag() (string, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	type consumer struct {
		group, topic string
		share        bool
	}
	var groups []consumer
	var relays []*relay
	topicSet := map[string]bool{}
	e.mu.Lock()
	for _, s := range e.services {
		for _, in := range s.insts {
			groups = append(groups, consumer{in.group, s.topic, in.share})
		}
		topicSet[s.topic] = true
	}
	for _, o := range e.orchs {
		groups = append(groups, consumer{o.group, o.topic, o.share})
		topicSet[o.topic] = true
	}
	for _, r := range e.relays {
		relays = append(relays, r)
		topicSet[r.from] = true
	}
	e.mu.Unlock()
	names := slices.Sorted(maps.Keys(topicSet))
	if len(names) == 0 {
		return "", nil
	}
	before, err := e.adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return "", fmt.Errorf("sagatest: list end offsets: %w", err)
	}
	var behind []string
	seen := map[string]bool{}
	for _, c := range groups {
		if seen[c.group] {
			continue // several instances of one group
		}
		seen[c.group] = true
		if c.share {
			// A share group has handled everything below its start
			// offset (every record there accepted, rejected or archived),
			// and above it all but its lag.
			described, err := e.adm.DescribeShareGroupOffsets(ctx, c.group)
			if err == nil {
				err = described.Error()
			}
			if err != nil {
				return "", fmt.Errorf("sagatest: share offsets of %s: %w", c.group, err)
			}
			offs := described[c.group].Offsets
			before.Each(func(end kadm.ListedOffset) {
				if end.Topic != c.topic {
					return
				}
				at, lag := int64(0), int64(-1)
				if o, ok := offs.Lookup(end.Topic, end.Partition); ok && o.Err == nil && o.StartOffset >= 0 {
					// The broker moves the start offset on lazily; its
					// lag counts the records not yet acknowledged.
					at, lag = o.StartOffset, o.Lag
				}
				if at < end.Offset && lag != 0 {
					behind = append(behind, fmt.Sprintf("share group %s at %s[%d] %d of %d", c.group, end.Topic, end.Partition, at, end.Offset))
				}
			})
			continue
		}
		committed, err := fetchOffsets(ctx, e.adm, c.group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			committed, err = nil, nil
		}
		if err != nil {
			return "", fmt.Errorf("sagatest: fetch offsets of %s: %w", c.group, err)
		}
		before.Each(func(end kadm.ListedOffset) {
			if end.Topic != c.topic {
				return
			}
			at := int64(0)
			if o, ok := committed.Lookup(end.Topic, end.Partition); ok && o.At >= 0 {
				at = o.At
			}
			if at < end.Offset {
				behind = append(behind, fmt.Sprintf("group %s at %s[%d] %d of %d", c.group, end.Topic, end.Partition, at, end.Offset))
			}
		})
	}
	for _, r := range relays {
		before.Each(func(end kadm.ListedOffset) {
			if end.Topic != r.from {
				return
			}
			if at := r.position(end.Partition); at < end.Offset {
				behind = append(behind, fmt.Sprintf("relay at %s[%d] %d of %d", end.Topic, end.Partition, at, end.Offset))
			}
		})
	}
	if len(behind) > 0 {
		sort.Strings(behind)
		return strings.Join(behind, "; "), nil
	}
	// Nothing was produced while the offsets were read.
	after, err := e.adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return "", fmt.Errorf("sagatest: list end offsets: %w", err)
	}
	changed := ""
	after.Each(func(a kadm.ListedOffset) {
		if b, ok := before.Lookup(a.Topic, a.Partition); !ok || b.Offset != a.Offset {
			changed = fmt.Sprintf("%s[%d] grew while settling", a.Topic, a.Partition)
		}
	})
	return changed, nil
}

// ensureTopics creates names (if missing) with the env's partition count.
func (e *Env) ensureTopics(names ...string) error {
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.timeout)
	defer cancel()
	return topics.Ensure(ctx, e.adm, names, e.provision())
}

func (e *Env) provision() topics.Provision {
	return topics.Provision{Partitions: int32(e.cfg.partitions)}
}

// testWriter writes log lines to the test log.
type testWriter struct{ t TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// ranEarlierWith reports whether an attempt of k's step before k's own
// ran its handler and was answered with outcome, a reply that answers k
// too (answer.ForAttempt).
func ranEarlierWith(results map[attemptKey]answer.Recorded, k attemptKey, outcome topics.Outcome) bool {
	r, ok := answeredEarlier(results, k)
	return ok && r.Reply.Outcome == outcome
}

// runs is what the guards answered for the runs of the handlers, and
// which reverts said that the orchestrator holds their action's ok reply.
type runs struct {
	results    map[attemptKey]answer.Recorded
	actionDone map[attemptKey]bool
}

// compensates reports whether the revert k must run (answer.Compensates):
// its action ran under the harness and the guard's answer to its last run
// says its effect may be in place (no answer, as after a crash in the
// handler, counts as in place), or the revert said that the orchestrator
// holds the action's ok reply.
func (r runs) compensates(k attemptKey, total map[Execution]int) bool {
	action := Execution{TxID: k.TxID, Span: k.Span, Kind: topics.KindProcess}
	cmd := &topics.Envelope{Kind: topics.KindRevert, Attempt: k.attempt, ActionDone: r.actionDone[k]}
	p := answer.Process{Found: total[action] > 0}
	last := 0
	for a, rec := range r.results {
		if a.Execution == action && a.attempt > last {
			last, p.Recorded = a.attempt, rec
		}
	}
	return answer.Compensates(cmd, p)
}

// answeredEarlier returns the earliest attempt of k's step before k's own
// whose run was answered with a reply that, recorded by a guard, answers
// k too (answer.ForAttempt: an ok reply that did not pause the saga, or a
// failure that says the step's effect is in place).
func answeredEarlier(results map[attemptKey]answer.Recorded, k attemptKey) (answer.Recorded, bool) {
	cmd := &topics.Envelope{Kind: k.Kind, Attempt: k.attempt}
	for a := range k.attempt {
		if r, ok := results[attemptKey{k.Execution, a}]; ok && answer.ForAttempt(cmd, r) == answer.Replay {
			return r, true
		}
	}
	return answer.Recorded{}, false
}
