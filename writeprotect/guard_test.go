package writeprotect_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

func TestMemory(t *testing.T) {
	runScenarios(t, scale{concurrentTxs: 200, instances: 8, raceTxs: 300}, func(t *testing.T) *backend { return memoryBackend(t) })
}

func TestNewValidates(t *testing.T) {
	s := memory.New()
	if _, err := writeprotect.New(nil, writeprotect.Config{}); err == nil || !strings.Contains(err.Error(), "nil store") {
		t.Fatalf("nil store: %v", err)
	}
	_, err := writeprotect.New(s, writeprotect.Config{DefaultMode: "NOPE"},
		writeprotect.WithBackoff(0, time.Second), writeprotect.WithClock(nil), writeprotect.WithLogger(nil), writeprotect.WithCommitTimeout(0))
	if !errors.Is(err, writeprotect.ErrInvalidConfig) {
		t.Fatalf("bad config not reported: %v", err)
	}
	for _, want := range []string{"default-mode", "backoff", "nil clock", "nil logger", "commit timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	g, err := writeprotect.New(s, writeprotect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c := g.Config(); c.DefaultMode != writeprotect.RelaxedWithDedup || c.DefaultLease != 5*time.Second {
		t.Fatalf("defaults not filled: %+v", c)
	}
}

// A command without the orchestrator's scope cannot be keyed: it is
// refused with a non-retryable reply, not run unprotected.
func TestCommandWithoutScope(t *testing.T) {
	b := memoryBackend(t)
	g := b.guard(t, writeprotect.Strict)
	var h handler
	for _, mutate := range []func(*topics.Envelope){
		func(c *topics.Envelope) { c.Region = "" },
		func(c *topics.Envelope) { c.Service = "" },
		func(c *topics.Envelope) { c.Endpoint = "" },
		func(c *topics.Envelope) { c.Kind = "sideways" },
	} {
		cmd := command(uniqueScope(t), "tx", 1, topics.KindProcess)
		mutate(cmd)
		rep, err := g.Execute(context.Background(), cmd, h.run(cmd))
		if err != nil || rep.Outcome != topics.OutcomeNonRetryable || rep.Error != writeprotect.ErrNoScope.Error() {
			t.Fatalf("reply %+v, err %v", rep, err)
		}
	}
	if h.runs.Load() != 0 {
		t.Fatal("ran a command without scope")
	}
}

// A lease that outlives the wait makes Execute return ErrLeaseHeld (the
// worker retries later) instead of blocking forever.
func TestLeaseHeldReturnsError(t *testing.T) {
	storeClock, guardClock := newFakeClock(), newFakeClock()
	s := memory.New(memory.WithClock(storeClock.Now)) // frozen: the lease never expires
	g, err := writeprotect.New(s, writeprotect.Config{DefaultMode: writeprotect.Strict, DefaultLease: 2 * time.Second},
		writeprotect.WithClock(guardClock.Now), writeprotect.WithLogger(quietLogger()), writeprotect.WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cmd := command(uniqueScope(t), "tx-held", 1, topics.KindProcess)
	if ok, _, err := s.InsertMarker(context.Background(), eventstore.Marker{MarkerKey: writeprotect.MarkerKeyFor(cmd), State: eventstore.MarkerLeased, Owner: "other/1"}, 2*time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	var h handler
	errc := make(chan error, 1)
	go func() {
		_, err := g.Execute(context.Background(), cmd, h.run(cmd))
		errc <- err
	}()
	waitUntil(t, 10*time.Second, "the guard to wait", func() bool { return g.Stats().LeaseWaits == 1 })
	guardClock.Add(3*time.Second + time.Millisecond) // past the 2s lease plus a second
	select {
	case err := <-errc:
		if !errors.Is(err, writeprotect.ErrLeaseHeld) || !strings.Contains(err.Error(), "owner other/1") {
			t.Fatalf("Execute: %v, want ErrLeaseHeld naming the owner", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Execute did not give up")
	}
	if h.runs.Load() != 0 || g.Stats().LeaseHeld != 1 {
		t.Fatalf("runs %d, stats %+v", h.runs.Load(), g.Stats())
	}
	// Waiting is bounded by the context too.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitUntil(t, 10*time.Second, "the second wait", func() bool { return g.Stats().LeaseWaits == 2 })
		cancel()
	}()
	if _, err := g.Execute(ctx, cmd, h.run(cmd)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute after cancel: %v", err)
	}
}

// A compensation that arrives while its action runs (STRICT) waits for the
// action's commit and then runs: it is not taken for a null compensation.
func TestCompensationWaitsForRunningAction(t *testing.T) {
	b := memoryBackend(t)
	ga, gr := b.guard(t, writeprotect.Strict), b.guard(t, writeprotect.Strict)
	h := handler{block: make(chan struct{}), started: make(chan *topics.Envelope, 2)}
	scope := uniqueScope(t)
	process := command(scope, "tx-wait", 1, topics.KindProcess)
	revert := command(scope, "tx-wait", 1, topics.KindRevert)
	var wg sync.WaitGroup
	var pr, rr *topics.Envelope
	wg.Go(func() { pr = execute(t, ga, process, h.run(process)) })
	<-h.started
	wg.Go(func() { rr = execute(t, gr, revert, h.run(revert)) })
	waitUntil(t, 10*time.Second, "the compensation to wait", func() bool { return gr.Stats().LeaseWaits == 1 })
	close(h.block) // the action finishes and commits
	<-h.started
	wg.Wait()
	if pr.Outcome != topics.OutcomeOK || rr.Outcome != topics.OutcomeOK || str(rr.Payload) != "entity-v1|revert-run-2" {
		t.Fatalf("replies %+v / %+v", pr, rr)
	}
	if st := gr.Stats(); st.NullCompensations != 0 || st.Executions != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A RELAXED instance that meets a STRICT instance's lease (the domain's
// mode differs between deployments) waits for it as well.
func TestRelaxedWaitsForStrictLease(t *testing.T) {
	b := memoryBackend(t)
	strict, relaxed := b.guard(t, writeprotect.Strict), b.guard(t, writeprotect.RelaxedWithDedup)
	h := handler{block: make(chan struct{}), started: make(chan *topics.Envelope, 1)}
	cmd := command(uniqueScope(t), "tx-mixed", 1, topics.KindProcess)
	var wg sync.WaitGroup
	var r1, r2 *topics.Envelope
	wg.Go(func() { r1 = execute(t, strict, cmd, h.run(cmd)) })
	<-h.started
	wg.Go(func() { r2 = execute(t, relaxed, cmd, h.run(cmd)) })
	waitUntil(t, 10*time.Second, "the relaxed guard to wait", func() bool { return relaxed.Stats().LeaseWaits == 1 })
	close(h.block)
	wg.Wait()
	if h.runs.Load() != 1 {
		t.Fatalf("ran %d times", h.runs.Load())
	}
	if err := sameReply(r1, r2); err != nil {
		t.Fatal(err)
	}
}

// The handler's context ends before the lease may: the lease less a
// second (Cassandra's whole-second TTLs), less the clock-skew margin, less
// the commit's reserve (a tenth of the lease), counted from before the
// insert. A handler that ignores it and runs past what the lease is certain
// to last is counted.
func TestStrictRunDeadlineAndOverrun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []writeprotect.Option
		runFor time.Duration
	}{
		{"default skew", nil, 5*time.Second - time.Second - 500*time.Millisecond - 500*time.Millisecond},
		{"no skew", []writeprotect.Option{writeprotect.WithClockSkew(0)}, 5*time.Second - time.Second - 500*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := memoryBackend(t)
			g := b.guard(t, writeprotect.Strict, tc.opts...)
			cmd := command(uniqueScope(t), "tx-deadline", 1, topics.KindProcess)
			var deadline, called time.Time
			var hasDeadline bool
			before := time.Now()
			rep := execute(t, g, cmd, func(ctx context.Context) *topics.Envelope {
				called = time.Now()
				deadline, hasDeadline = ctx.Deadline()
				b.clock.Add(b.lease - time.Second) // past what the lease is certain to last
				return &topics.Envelope{Outcome: topics.OutcomeOK, Payload: pl("done")}
			})
			if !hasDeadline || deadline.Before(before.Add(tc.runFor)) || deadline.After(called.Add(tc.runFor)) {
				t.Fatalf("handler deadline %v (has %v), want %v after the insert (between %v and %v)", deadline, hasDeadline,
					tc.runFor, before.Add(tc.runFor), called.Add(tc.runFor))
			}
			if rep.Outcome != topics.OutcomeOK || str(rep.Payload) != "done" {
				t.Fatalf("reply %+v", rep)
			}
			if st := g.Stats(); st.LeaseOverruns != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
	b := memoryBackend(t)
	var hasDeadline bool
	// RELAXED imposes no deadline.
	r := b.guard(t, writeprotect.RelaxedWithDedup)
	cmd2 := command(uniqueScope(t), "tx-deadline-2", 1, topics.KindProcess)
	if _, err := r.Execute(context.Background(), cmd2, func(ctx context.Context) *topics.Envelope {
		_, hasDeadline = ctx.Deadline()
		return &topics.Envelope{Outcome: topics.OutcomeOK}
	}); err != nil {
		t.Fatal(err)
	}
	if hasDeadline {
		t.Fatal("RELAXED run has a deadline")
	}
}

// Store failures: before the run nothing runs and Execute asks to retry;
// after the run the reply is sent anyway; a failed fence read (with
// WithTerminalFence) frees the lease so the retry does not wait for it.
func TestStoreFailures(t *testing.T) {
	b := memoryBackend(t)
	fs := &faultStore{Store: b.store}
	b.store = fs
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			g := b.guard(t, mode, writeprotect.WithTerminalFence())
			var h handler
			scope := uniqueScope(t)
			cmd := command(scope, "tx-fail", 1, topics.KindProcess)
			ctx := context.Background()

			if mode == writeprotect.Strict {
				fs.insertErr.Store(injected())
			} else {
				fs.getErr.Store(injected())
			}
			if _, err := g.Execute(ctx, cmd, h.run(cmd)); !errors.Is(err, errInjected) {
				t.Fatalf("marker failure: %v", err)
			}
			fs.insertErr.Store(nil)
			fs.getErr.Store(nil)

			fs.loadErr.Store(injected())
			if _, err := g.Execute(ctx, cmd, h.run(cmd)); !errors.Is(err, errInjected) {
				t.Fatalf("fence failure: %v", err)
			}
			fs.loadErr.Store(nil)
			if _, err := b.store.GetMarker(ctx, writeprotect.MarkerKeyFor(cmd)); !errors.Is(err, eventstore.ErrNotFound) {
				t.Fatalf("marker left after a failed fence read: %v", err)
			}
			if h.runs.Load() != 0 {
				t.Fatal("ran despite store failures")
			}

			fs.putErr.Store(injected())
			puts := fs.puts.Load()
			rep, err := g.Execute(ctx, cmd, h.run(cmd))
			fs.putErr.Store(nil)
			if err != nil || rep == nil || rep.Outcome != topics.OutcomeOK || h.runs.Load() != 1 {
				t.Fatalf("commit failure: reply %+v, err %v, runs %d", rep, err, h.runs.Load())
			}
			if n := fs.puts.Load() - puts; n != 3 {
				t.Fatalf("commit tried %d times, want 3", n)
			}
			if st := g.Stats(); st.CommitFailures != 1 {
				t.Fatalf("stats %+v", st)
			}

			// The barrier's reads fail too.
			revert := command(scope, "tx-fail-2", 1, topics.KindRevert)
			fs.getErr.Store(injected())
			if _, err := g.Execute(ctx, revert, h.run(revert)); !errors.Is(err, errInjected) {
				t.Fatalf("barrier read failure: %v", err)
			}
			fs.getErr.Store(nil)
			fs.insertErr.Store(injected())
			if _, err := g.Execute(ctx, revert, h.run(revert)); !errors.Is(err, errInjected) {
				t.Fatalf("null compensation failure: %v", err)
			}
			fs.insertErr.Store(nil)
		})
	}
}

// Issue 14 item 2 (the guard's part): a committed marker whose recorded
// reply cannot be decoded means the step ran but what it replied is lost.
// The duplicate gets a non-retryable failure that says the step ran
// (ActionDone), so the orchestrator compensates this step too instead of
// only the ones before it.
func TestUnreadableRecordedReplySaysTheStepRan(t *testing.T) {
	ctx := context.Background()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			b := memoryBackend(t)
			g := b.guard(t, mode)
			cmd := command(uniqueScope(t), "tx-unreadable", 2, topics.KindProcess)
			if err := b.store.PutMarker(ctx, eventstore.Marker{MarkerKey: writeprotect.MarkerKeyFor(cmd), State: eventstore.MarkerCommitted,
				Owner: "earlier/1", Reply: []byte("\xc1 not msgpack")}); err != nil {
				t.Fatal(err)
			}
			var h handler
			rep, err := g.Execute(ctx, cmd, h.run(cmd))
			if err != nil || rep == nil {
				t.Fatalf("Execute: %+v, %v", rep, err)
			}
			if h.runs.Load() != 0 {
				t.Fatal("the step ran again")
			}
			if rep.Outcome != topics.OutcomeNonRetryable || !rep.ActionDone || !strings.Contains(rep.Error, "unreadable") {
				t.Fatalf("reply %+v; want a non-retryable failure with ActionDone", rep)
			}
			if rep.Type != topics.TypeReply || rep.TxID != cmd.TxID || rep.Span != cmd.Span || rep.Kind != topics.KindProcess {
				t.Fatalf("reply not addressed to the command: %+v", rep)
			}
			wire, err := topics.Encode(rep)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := topics.Decode(wire); err != nil || !got.ActionDone {
				t.Fatalf("decoded reply %+v, %v; ActionDone lost on the wire", got, err)
			}
		})
	}
}

// A run that returns no reply records nothing.
func TestNilReplyReleases(t *testing.T) {
	for _, mode := range modes {
		b := memoryBackend(t)
		g := b.guard(t, mode)
		cmd := command(uniqueScope(t), "tx-nil", 1, topics.KindProcess)
		runs := 0
		for range 2 {
			if rep := execute(t, g, cmd, func(context.Context) *topics.Envelope { runs++; return nil }); rep != nil {
				t.Fatalf("%s: reply %+v", mode, rep)
			}
		}
		if runs != 2 || g.Stats().Released != 2 {
			t.Fatalf("%s: runs %d, stats %+v", mode, runs, g.Stats())
		}
	}
}

// Add sums every counter (a field added to Stats but not to Add fails).
func TestStatsAdd(t *testing.T) {
	var a, b writeprotect.Stats
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range va.NumField() {
		va.Field(i).SetUint(uint64(i + 1))
		vb.Field(i).SetUint(100)
	}
	sum := reflect.ValueOf(a.Add(b))
	for i := range sum.NumField() {
		if got := sum.Field(i).Uint(); got != uint64(i+101) {
			t.Errorf("%s: %d, want %d", sum.Type().Field(i).Name, got, i+101)
		}
	}
}
