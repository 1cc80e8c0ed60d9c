package sagatest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/sagatest"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Without faults every step runs once and every delivery executes.
func TestBaseline(t *testing.T) {
	env := sagatest.New(t)
	o := start(env, fixed)
	ids, want := run(t, o, 30, 5)
	checkEnd(t, env, o, ids, want, 1)
	if !env.AssertExactlyOnce() {
		t.Error("AssertExactlyOnce failed without faults")
	}
	st := env.Stats()
	if n := int64(len(expected(want))); st.Deliveries != n || st.Executions != n || st.DuplicateExecutions != 0 {
		t.Errorf("stats %+v, want %d deliveries and executions", st, n)
	}
	if got := env.Executions(ids[0], 0, topics.KindProcess); got != 1 {
		t.Errorf("Executions(first saga, 0, process) = %d", got)
	}
}

// DuplicateCommands(2) delivers each command three times: without a guard
// every step runs three times, and the sagas still end right because the
// orchestrator ignores the stale replies.
func TestDuplicateCommands(t *testing.T) {
	env := sagatest.New(t, sagatest.DuplicateCommands(2))
	o := start(env, fixed)
	ids, want := run(t, o, 20, 4)
	checkEnd(t, env, o, ids, want, 3)
	st := env.Stats()
	steps := int64(len(expected(want)))
	if st.CommandCopies != 2*steps || st.DuplicateExecutions != 2*steps || int64(env.DuplicateExecutions()) != 2*steps {
		t.Errorf("stats %+v, want %d command copies and duplicate executions", st, 2*steps)
	}
	if s := o.Stats(); s.StaleReplies != 2*steps {
		t.Errorf("orchestrator saw %d stale replies, want %d", s.StaleReplies, 2*steps)
	}
}

// AssertExactlyOnce fails the test for each step that ran twice.
func TestAssertExactlyOnceReports(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	env := sagatest.New(ft, sagatest.DuplicateCommands(1))
	o := start(env, fixed)
	ids, _ := run(t, o, 1, 0)
	env.WaitTerminal(o, ids...)
	if env.AssertExactlyOnce() {
		t.Error("AssertExactlyOnce passed with every command run twice")
	}
	if len(ft.errors) != 1 || !strings.Contains(ft.errors[0], "3 steps did not run exactly once") ||
		!strings.Contains(ft.errors[0], ids[0]+"/1/process attempt 1 ran 2 times") {
		t.Errorf("errors = %q", ft.errors)
	}
}

// With a guard that records replies, the same duplicates run once.
func TestDuplicateCommandsGuarded(t *testing.T) {
	env := sagatest.New(t, sagatest.DuplicateCommands(2), sagatest.WithGuard(shared(newMemoGuard())))
	o := start(env, fixed)
	ids, want := run(t, o, 20, 4)
	checkEnd(t, env, o, ids, want, 1)
	env.AssertExactlyOnce()
	if st := env.Stats(); st.Deliveries != 3*int64(len(expected(want))) {
		t.Errorf("stats %+v: want every command delivered three times", st)
	}
}

// DuplicateReplies(2) delivers each reply three times; the orchestrator
// applies one and ignores the copies.
func TestDuplicateReplies(t *testing.T) {
	env := sagatest.New(t, sagatest.DuplicateReplies(2))
	o := start(env, fixed)
	ids, want := run(t, o, 20, 4)
	checkEnd(t, env, o, ids, want, 1)
	steps := int64(len(expected(want)))
	if st := env.Stats(); st.ReplyCopies != 2*steps {
		t.Errorf("stats %+v, want %d reply copies", st, 2*steps)
	}
	if s := o.Stats(); s.StaleReplies != 2*steps || s.Replies != steps {
		t.Errorf("orchestrator stats %+v, want %d replies applied and %d stale", s, steps, 2*steps)
	}
}

// TwinWorkers hands every command to two instances at once: without a
// guard both run it; with a guard one does.
func TestTwinWorkers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []sagatest.Option
		times int
	}{
		{"unguarded", nil, 2},
		{"guarded", []sagatest.Option{sagatest.WithGuard(shared(newMemoGuard()))}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := sagatest.New(t, append(tc.opts, sagatest.TwinWorkers())...)
			o := start(env, fixed)
			ids, want := run(t, o, 20, 4)
			checkEnd(t, env, o, ids, want, tc.times)
			steps := int64(len(expected(want)))
			st := env.Stats()
			t.Logf("stats %+v", st)
			if st.Deliveries < 2*steps {
				t.Errorf("stats %+v: want every command delivered to both twins", st)
			}
			// Most commands reach both twins within the window.
			if st.TwinMeetings < steps/2 {
				t.Errorf("only %d of %d commands reached the twins together", st.TwinMeetings, steps)
			}
		})
	}
}

// A restart redelivers what the worker handled since the previous restart.
func TestRestartWorker(t *testing.T) {
	env := sagatest.New(t)
	o := start(env, fixed)
	ids, want := run(t, o, 10, 0)
	checkEnd(t, env, o, ids, want, 1)

	env.RestartWorker(fixed.payment) // its commands since the start come again
	env.Settle()
	again := func(ids []string, span, times int) {
		t.Helper()
		for _, id := range ids {
			for s := range 3 {
				want := 1
				if s == span {
					want = times
				}
				if n := env.Executions(id, s, topics.KindProcess); n != want {
					t.Errorf("%s span %d ran %d times, want %d", id, s, n, want)
				}
			}
		}
	}
	again(ids, 1, 2)

	env.RestartWorker(fixed.payment) // nothing new since the last restart
	env.Settle()
	again(ids, 1, 2)

	more, want2 := run(t, o, 5, 0)
	checkEnd(t, env, o, more, want2, 1)
	env.RestartWorker(fixed.payment) // only the new sagas' commands
	env.Settle()
	again(ids, 1, 2)
	again(more, 1, 2)
	if st := env.Stats(); st.Restarts != 3 {
		t.Errorf("stats %+v, want 3 restarts", st)
	}
	for _, id := range ids {
		if s, _ := o.Get(t.Context(), id); s.State != eventstore.StateCompleted {
			t.Errorf("saga %s is %s after the redeliveries", id, s.State)
		}
	}
}

// RestartWorkersEvery crashes workers while sagas run: unguarded steps run
// again, guarded ones do not, and every saga ends right either way.
func TestRestartWorkersEvery(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []sagatest.Option
		guarded bool
	}{
		{"unguarded", nil, false},
		{"guarded", []sagatest.Option{sagatest.WithGuard(shared(newMemoGuard()))}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := sagatest.New(t, append(tc.opts, sagatest.RestartWorkersEvery(7))...)
			o := start(env, fixed)
			ids, want := run(t, o, 30, 5)
			got := env.WaitTerminal(o, ids...)
			for _, id := range ids {
				if got[id] != want[id] {
					t.Errorf("saga %s ended %s, want %s", id, got[id], want[id])
				}
			}
			env.Settle()
			st := env.Stats()
			t.Logf("stats %+v", st)
			if st.Restarts == 0 {
				t.Fatalf("stats %+v: no restart", st)
			}
			if tc.guarded {
				env.AssertExactlyOnce()
			} else if st.DuplicateExecutions == 0 {
				t.Errorf("stats %+v: restarts redelivered nothing", st)
			}
			for x := range expected(want) {
				if env.Executions(x.TxID, x.Span, x.Kind) == 0 {
					t.Errorf("%s never ran", x)
				}
			}
		})
	}
}

// ReorderReplies writes a copy of each reply of a saga again after the
// saga's next reply: the orchestrator gets every reply but the last one of
// each saga a second time, after a reply with another (span, kind), and
// ignores it; the sagas end right.
func TestReorderReplies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []sagatest.Option
		copies int64 // replies per step without the reordering
	}{
		{"single", nil, 1},
		{"duplicated commands", []sagatest.Option{sagatest.DuplicateCommands(2), sagatest.WithGuard(shared(newMemoGuard()))}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := sagatest.New(t, append(tc.opts, sagatest.ReorderReplies())...)
			o := start(env, fixed)
			ids, want := run(t, o, 20, 4)
			checkEnd(t, env, o, ids, want, 1)
			env.AssertExactlyOnce()
			steps := int64(len(expected(want)))
			st, os := env.Stats(), o.Stats()
			t.Logf("harness %+v\norchestrator %+v", st, os)
			// Every new reply of a saga releases the copy of the one before.
			if reordered := steps - int64(len(ids)); st.ReorderedReplies != reordered {
				t.Errorf("%d replies reordered, want %d", st.ReorderedReplies, reordered)
			}
			if n := staleReplies(t, env, fixed.domain); n != int(st.ReorderedReplies) {
				t.Errorf("%d stale replies on the callback topic after a newer one, want %d", n, st.ReorderedReplies)
			}
			if os.Replies != steps || os.StaleReplies != (tc.copies-1)*steps+st.ReorderedReplies {
				t.Errorf("orchestrator applied %d replies and ignored %d, want %d and %d",
					os.Replies, os.StaleReplies, steps, (tc.copies-1)*steps+st.ReorderedReplies)
			}
		})
	}
}

// CrashWorkersEvery crashes worker instances in the middle of commands:
// under STRICT the redeliveries meet the live lease (a crash before the
// handler) or the committed marker (a crash before the reply), and every
// step runs once; without a guard, the steps crashed before their reply
// run again. Every saga ends right either way.
func TestCrashWorkersEvery(t *testing.T) {
	cfg := writeprotect.DefaultConfig()
	cfg.DefaultMode, cfg.DefaultLease = writeprotect.Strict, writeprotect.MinLease
	for _, tc := range []struct {
		name    string
		opts    []sagatest.Option
		guarded bool
	}{
		{"unguarded", nil, false},
		{"strict", []sagatest.Option{sagatest.WithWriteProtectionConfig(cfg)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := sagatest.New(t, append(tc.opts, sagatest.CrashWorkersEvery(8))...)
			o := start(env, fixed)
			ids, want := run(t, o, 24, 4)
			got := env.WaitTerminal(o, ids...)
			for _, id := range ids {
				if got[id] != want[id] {
					t.Errorf("saga %s ended %s, want %s", id, got[id], want[id])
				}
			}
			env.Settle()
			st, wp := env.Stats(), env.WriteProtectionStats()
			t.Logf("harness %+v\nwrite protection %+v", st, wp)
			if st.CrashesInRun == 0 || st.CrashesBeforeReply == 0 || st.Restarts != 0 {
				t.Errorf("stats %+v: want crashes at both points and no restart with redelivery", st)
			}
			for x := range expected(want) {
				if env.Executions(x.TxID, x.Span, x.Kind) == 0 {
					t.Errorf("%s never ran", x)
				}
			}
			if !tc.guarded {
				if st.DuplicateExecutions < st.CrashesBeforeReply {
					t.Errorf("stats %+v: the steps crashed before their reply did not run again", st)
				}
				return
			}
			env.AssertExactlyOnce()
			checkMarkers(t, env, o, want, true)
			if wp.LeaseWaits == 0 || wp.DuplicatesSkipped == 0 {
				t.Errorf("write protection %+v: want redeliveries that met a live lease and a committed marker", wp)
			}
		})
	}
}

// AssertExactlyOnce fails for a step that has a reply in the event store
// but whose handler never ran: here a guard answers span 1 without running
// it.
func TestAssertExactlyOnceNeverRan(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	env := sagatest.New(ft, sagatest.WithGuard(func(string) worker.Guard { return liar{} }))
	o := start(env, fixed)
	ids, _ := run(t, o, 2, 0)
	env.WaitTerminal(o, ids...)
	if env.AssertExactlyOnce() {
		t.Error("AssertExactlyOnce passed with a step that never ran")
	}
	if len(ft.errors) != 1 || !strings.Contains(ft.errors[0], "2 steps did not run exactly once") {
		t.Fatalf("errors = %q", ft.errors)
	}
	for _, id := range ids {
		if want := id + "/1/process attempt 1 replied ok, but its handler never ran (1 deliveries)"; !strings.Contains(ft.errors[0], want) {
			t.Errorf("errors = %q, want %q", ft.errors[0], want)
		}
	}
}

// liar replies ok to span 1 without running it.
type liar struct{}

func (liar) Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	if cmd.Span != 1 {
		return run(ctx), nil
	}
	r := *cmd
	r.Outcome = topics.OutcomeOK
	return &r, nil
}

// Every knob at once, guarded: exactly once.
func TestAllFaultsGuarded(t *testing.T) {
	env := sagatest.New(t,
		sagatest.DuplicateCommands(2), sagatest.DuplicateReplies(1), sagatest.TwinWorkers(),
		sagatest.RestartWorkersEvery(10), sagatest.CrashWorkersEvery(15), sagatest.ReorderReplies(),
		sagatest.WithGuard(shared(newMemoGuard())))
	o := start(env, fixed)
	ids, want := run(t, o, 40, 4)
	checkEnd(t, env, o, ids, want, 1)
	env.AssertExactlyOnce()
	st := env.Stats()
	t.Logf("stats %+v", st)
	if st.CommandCopies == 0 || st.ReplyCopies == 0 || st.Restarts == 0 || st.TwinMeetings == 0 ||
		st.CrashesInRun == 0 || st.CrashesBeforeReply == 0 || st.ReorderedReplies == 0 {
		t.Errorf("stats %+v: a knob did nothing", st)
	}
	if n := staleReplies(t, env, fixed.domain); n != int(st.ReorderedReplies) {
		t.Errorf("%d stale replies on the callback topic after a newer one, want %d", n, st.ReorderedReplies)
	}
}

// The harness leaves no goroutine behind.
func TestNoGoroutinesLeft(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Run("env", func(t *testing.T) {
		env := sagatest.New(t,
			sagatest.DuplicateCommands(1), sagatest.DuplicateReplies(1), sagatest.TwinWorkers(),
			sagatest.RestartWorkersEvery(10), sagatest.CrashWorkersEvery(7), sagatest.ReorderReplies())
		o := start(env, fixed)
		ids, _ := run(t, o, 10, 3)
		env.WaitTerminal(o, ids...)
	})
	if err := goleak.Find(ignore, goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).run")); err != nil {
		t.Error(err)
	}
}

// Invalid options fail New with every problem named.
func TestInvalidOptions(t *testing.T) {
	ft := &fakeT{}
	func() {
		defer func() { _ = recover() }()
		sagatest.New(ft, sagatest.DuplicateCommands(-1), sagatest.WithPartitions(0), sagatest.WithTimeout(0),
			sagatest.WithCassandra(nil, ""), sagatest.WithStore(nil), sagatest.RestartWorkersEvery(-1), sagatest.CrashWorkersEvery(-2))
	}()
	for _, want := range []string{"negative copies", "partitions 0", "timeout 0s", "WithCassandra needs",
		"RestartWorkersEvery(-1) < 0", "CrashWorkersEvery(-2) < 0"} {
		if !strings.Contains(ft.fatal, want) {
			t.Errorf("New's failure %q does not mention %q", ft.fatal, want)
		}
	}
}

// A worker that cannot register fails the test.
func TestRegisterError(t *testing.T) {
	ft := &fakeT{}
	env := sagatest.New(ft)
	func() {
		defer func() { _ = recover() }()
		sagatest.Worker(env, "svc", func(*worker.Worker) error { return context.Canceled })
	}()
	ft.cleanup()
	if !strings.Contains(ft.fatal, "register") {
		t.Errorf("fatal = %q", ft.fatal)
	}
}

// WaitTerminal names the sagas still running when it gives up.
func TestWaitTerminalTimeout(t *testing.T) {
	ft := &fakeT{}
	env := sagatest.New(ft, sagatest.WithTimeout(300*time.Millisecond))
	// Only the first step's worker runs: sagas stop at span 1.
	sagatest.Worker(env, fixed.inventory, func(w *worker.Worker) error {
		return worker.Register(w, worker.Endpoint[Order]{Name: "reserve", Process: func(_ context.Context, _ *worker.Step, o Order) (Order, error) { return o, nil }})
	})
	o := sagatest.Orchestrator(env, fixed.order, fixed.saga())
	id, err := o.Start(context.Background(), Order{ID: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		env.WaitTerminal(o, id)
	}()
	ft.cleanup()
	if !strings.Contains(ft.fatal, "1 of 1 sagas not terminal") || !strings.Contains(ft.fatal, id) {
		t.Errorf("fatal = %q", ft.fatal)
	}
}

// fakeT records failures; Fatalf panics to stop the caller as
// runtime.Goexit would.
type fakeT struct {
	mu       sync.Mutex
	fatal    string
	errors   []string
	logs     []string
	failed   bool // as if the test had failed by itself
	cleanups []func()
}

func (f *fakeT) Helper() {}
func (f *fakeT) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}
func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	panic("fatal")
}
func (f *fakeT) Logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}
func (f *fakeT) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed || f.fatal != "" || len(f.errors) > 0
}
func (f *fakeT) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// STRICT write protection runs every step once under duplicated commands
// and replies, twin instances and restarts, and leaves one marker per step,
// expiring after the retention.
func TestWriteProtectionStrict(t *testing.T) {
	env := sagatest.New(t, sagatest.WithWriteProtection(writeprotect.Strict),
		sagatest.DuplicateCommands(2), sagatest.DuplicateReplies(1), sagatest.TwinWorkers(), sagatest.RestartWorkersEvery(40))
	o := start(env, fixed)
	ids, want := run(t, o, 60, 10)
	checkEnd(t, env, o, ids, want, 1)
	env.AssertExactlyOnce()
	checkMarkers(t, env, o, want, true)
	wp := env.WriteProtectionStats()
	t.Logf("stats %+v\nwrite protection %+v", env.Stats(), wp)
	if wp.DuplicatesSkipped == 0 || wp.Executions != uint64(len(expected(want))) {
		t.Errorf("write protection stats %+v: want %d executions and skipped duplicates", wp, len(expected(want)))
	}
}

// RELAXED_WITH_DEDUP runs every step once under sequential duplicates.
func TestWriteProtectionRelaxed(t *testing.T) {
	env := sagatest.New(t, sagatest.WithWriteProtection(writeprotect.RelaxedWithDedup),
		sagatest.DuplicateCommands(2), sagatest.DuplicateReplies(1), sagatest.RestartWorkersEvery(40))
	o := start(env, fixed)
	ids, want := run(t, o, 60, 10)
	checkEnd(t, env, o, ids, want, 1)
	env.AssertExactlyOnce()
	checkMarkers(t, env, o, want, true)
	t.Logf("stats %+v\nwrite protection %+v", env.Stats(), env.WriteProtectionStats())
}

// checkMarkers checks the markers the guards left behind: the
// orchestrator keeps a finished saga's markers (it no longer deletes its
// partition), so every step that ran has one, COMMITTED (a null
// compensation's action: COMPENSATED_EMPTY), and it expires after the
// guards' retention (DefaultMarkerRetention): markers must not stay
// forever. Unless everyStep, a step may lack its marker (its commit
// failed). It first settles the env: a worker writes a step's marker while
// it sends the reply (writeprotect.Guard.ExecuteOverlapped), so a saga can
// end before its last marker lands; the command is committed after it.
func checkMarkers(t *testing.T, env *sagatest.Env, o *orchestrator.Orchestrator[Order], want map[string]eventstore.State, everyStep bool) {
	t.Helper()
	env.Settle()
	retention := writeprotect.DefaultMarkerRetention
	exp := expected(want)
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 5 {
			t.Errorf(format, args...)
		}
	}
	for id := range want {
		ms, err := env.Store().ListMarkers(t.Context(), o.Scope(), id)
		if err != nil {
			t.Fatal(err)
		}
		steps := 0
		for x := range exp {
			if x.TxID == id {
				steps++
			}
		}
		if len(ms) > steps || (everyStep && len(ms) != steps) {
			report("saga %s (%s) ended with %d markers, want one per step (%d)", id, want[id], len(ms), steps)
		}
		for _, m := range ms {
			if m.State != eventstore.MarkerCommitted && m.State != eventstore.MarkerCompensatedEmpty {
				report("saga %s ended with a %s marker %+v", id, m.State, m.MarkerKey)
			}
			if m.TTL <= 0 || m.TTL > retention {
				report("saga %s: marker %d/%s expires in %v, want within the retention (%v)", id, m.Span, m.Kind, m.TTL, retention)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d marker problems in %d finished sagas", bad, len(want))
	}
}

// A command delivered again after its saga ended (its worker restarted
// with redelivery) finds its step's marker, which the orchestrator keeps:
// it is skipped and its recorded reply re-sent, and the orchestrator
// ignores that reply as stale. No guard reads the saga's state (the
// terminal fence is off by default) and none takes a compensation for one
// whose action marker was lost. In-process broker and memory store, and
// real Kafka and Cassandra.
func TestLateDuplicatesAfterEnd(t *testing.T) {
	for _, backend := range []string{"memory", "cassandra"} {
		for _, mode := range []writeprotect.Mode{writeprotect.Strict, writeprotect.RelaxedWithDedup} {
			t.Run(backend+"/"+string(mode), func(t *testing.T) {
				var env *sagatest.Env
				n := fixed
				if backend == "cassandra" {
					env, n = realEnv(t, sagatest.WithWriteProtection(mode)), uniqueNames(t)
				} else {
					env = sagatest.New(t, sagatest.WithWriteProtection(mode))
				}
				o := start(env, n)
				ids, want := run(t, o, 10, 5)
				checkEnd(t, env, o, ids, want, 1)
				before, stale := env.WriteProtectionStats(), o.Stats().StaleReplies

				// The payment service gets every command it handled again:
				// each saga's charge, and the compensated sagas' refunds.
				env.RestartWorker(n.payment)
				redelivered := uint64(len(ids))
				for _, s := range want {
					if s == eventstore.StateCompensated {
						redelivered++
					}
				}
				waitFor(t, "the recorded replies of the late duplicates", func() bool {
					return o.Stats().StaleReplies-stale >= int64(redelivered)
				})
				env.AssertExactlyOnce()
				wp := env.WriteProtectionStats()
				t.Logf("write protection before %+v\nafter %+v", before, wp)
				if wp.DuplicatesSkipped-before.DuplicatesSkipped != redelivered || wp.Executions != before.Executions ||
					wp.TerminalFenced != 0 || wp.MissingActionMarkers != 0 || wp.NullCompensations != 0 {
					t.Errorf("write protection %+v after %+v: want %d duplicates skipped and nothing else", wp, before, redelivered)
				}
				if got := o.Stats().StaleReplies - stale; got != int64(redelivered) {
					t.Errorf("the orchestrator ignored %d replies after the end, want the %d recorded ones", got, redelivered)
				}
				for _, id := range ids {
					if s, err := o.Get(t.Context(), id); err != nil || s.State != want[id] {
						t.Errorf("saga %s: %+v, %v after the late duplicates, want %s", id, s.State, err, want[id])
					}
				}
				checkMarkers(t, env, o, want, true)
			})
		}
	}
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
