package sagatest_test

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/sagatest"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Tests of the fault schedule: where CrashWorkersEvery crashes, and its
// replay from a seed (issue 42.3).

// oneAtATime starts count sagas one after the other, each once the one
// before has ended (every rejectEvery-th rejected; 0: none): with one
// command in flight, every instance handles the same commands in the same
// order on every run. It returns the ids in start order.
func oneAtATime(t *testing.T, env *sagatest.Env, o *orchestrator.Orchestrator[Order], count, rejectEvery int) []string {
	t.Helper()
	var ids []string
	for i := range count {
		reject := rejectEvery > 0 && i%rejectEvery == rejectEvery-1
		id, err := o.Start(t.Context(), Order{ID: fmt.Sprint(i), Reject: reject})
		if err != nil {
			t.Fatalf("start saga %d: %v", i, err)
		}
		want := eventstore.StateCompleted
		if reject {
			want = eventstore.StateCompensated
		}
		if s := env.WaitTerminal(o, id)[id]; s != want {
			t.Fatalf("saga %d ended %s, want %s", i, s, want)
		}
		ids = append(ids, id)
	}
	return ids
}

// unguardedShipping guards the inventory and payment services with a
// guard that records replies and leaves the shipping service without
// duplicate protection.
func unguardedShipping() sagatest.Option {
	inventory, payment := newMemoGuard(), newMemoGuard()
	return sagatest.WithGuard(func(svc string) worker.Guard {
		switch svc {
		case fixed.inventory:
			return inventory
		case fixed.payment:
			return payment
		}
		return nil
	})
}

// 42.3: every instance that crashes twice crashes at both points, so the
// missing duplicate protection of the shipping service is found: one of
// its crashes comes after its handler ran, and the redelivered command
// runs it again. With one crash counter for the whole env, the shipping
// instance crashed only before its handler (its crashes were always the
// odd ones) and AssertExactlyOnce passed.
func TestCrashWorkersEveryAlternatesPerInstance(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	env := sagatest.New(ft, unguardedShipping(), sagatest.CrashWorkersEvery(2))
	o := start(env, fixed)
	oneAtATime(t, env, o, 6, 0)
	st := env.Stats()
	t.Logf("stats %+v", st)
	if env.AssertExactlyOnce() {
		t.Fatalf("AssertExactlyOnce passed although the shipping service has no duplicate protection (stats %+v)", st)
	}
	if len(ft.errors) != 1 || !strings.Contains(ft.errors[0], "/2/process attempt 1 ran 2 times") {
		t.Errorf("errors = %q, want shipping steps that ran twice", ft.errors)
	}
	// Every instance alternates: crashed n times, it crashed n/2 times
	// (rounded down) at each point at least.
	points := map[string]map[sagatest.FaultKind]int{}
	for _, f := range env.Faults() {
		if points[f.Service] == nil {
			points[f.Service] = map[sagatest.FaultKind]int{}
		}
		points[f.Service][f.Kind]++
	}
	for _, svc := range []string{fixed.inventory, fixed.payment, fixed.shipping} {
		before, after := points[svc][sagatest.FaultCrashBeforeHandler], points[svc][sagatest.FaultCrashBeforeReply]
		if n := before + after; n < 2 || before < n/2 || after < n/2 {
			t.Errorf("%s crashed %d times before its handler and %d times before its reply (seed %d): want both, alternating",
				svc, before, after, env.Seed())
		}
	}
}

// A failing fault schedule replays from the seed its failure prints: the
// same faults at the same executions of the same instances, the same
// assertion failure. With sagas run one at a time the instances handle the
// same commands in the same order, so the run repeats; transaction ids
// differ between runs and are compared by the sagas' start order.
func TestSeedReplaysFailingSchedule(t *testing.T) {
	type outcome struct {
		seed   int64
		faults []string
		failed []string
	}
	runOnce := func(opts ...sagatest.Option) outcome {
		ft := &fakeT{}
		defer ft.cleanup()
		env := sagatest.New(ft, append([]sagatest.Option{unguardedShipping(), sagatest.CrashWorkersEvery(3)}, opts...)...)
		o := start(env, fixed)
		ids := oneAtATime(t, env, o, 8, 4)
		if env.AssertExactlyOnce() || len(ft.errors) != 1 {
			t.Fatalf("AssertExactlyOnce passed without the shipping service's duplicate protection, or failed more than once: %q", ft.errors)
		}
		m := regexp.MustCompile(`fault schedule seed (-?\d+) \(replay it with sagatest\.WithSeed\((-?\d+)\)\)`).FindStringSubmatch(ft.errors[0])
		if m == nil || m[1] != m[2] || m[1] != strconv.FormatInt(env.Seed(), 10) {
			t.Fatalf("the failure does not name the seed %d: %q", env.Seed(), ft.errors[0])
		}
		byStart := strings.NewReplacer(func() []string {
			var r []string
			for i, id := range ids {
				r = append(r, id, fmt.Sprintf("saga%d", i))
			}
			return r
		}()...)
		var out outcome
		out.seed = env.Seed()
		for _, f := range env.Faults() {
			out.faults = append(out.faults, byStart.Replace(f.String()))
		}
		for _, line := range strings.Split(ft.errors[0], "\n") {
			out.failed = append(out.failed, byStart.Replace(line))
		}
		sort.Strings(out.failed) // sorted by transaction id
		return out
	}
	first := runOnce() // a random seed
	t.Logf("seed %d, faults:\n%s", first.seed, strings.Join(first.faults, "\n"))
	if len(first.faults) < 6 {
		t.Fatalf("only %d faults injected: %q", len(first.faults), first.faults)
	}
	again := runOnce(sagatest.WithSeed(first.seed))
	if !slices.Equal(again.faults, first.faults) {
		t.Errorf("replayed faults differ:\n%s\nfirst run:\n%s", strings.Join(again.faults, "\n"), strings.Join(first.faults, "\n"))
	}
	if !slices.Equal(again.failed, first.failed) {
		t.Errorf("replayed failure differs:\n%s\nfirst run:\n%s", strings.Join(again.failed, "\n"), strings.Join(first.failed, "\n"))
	}
}

// The seed decides the schedule: of these fixed seeds, not all give the
// same faults (each instance's first crash comes at its 1st, 2nd or 3rd
// execution, before its handler or before its reply).
func TestSeedChangesSchedule(t *testing.T) {
	seen := map[string]int64{}
	for _, seed := range []int64{1, 2, 3} {
		ft := &fakeT{}
		env := sagatest.New(ft, sagatest.WithGuard(shared(newMemoGuard())), sagatest.CrashWorkersEvery(3), sagatest.WithSeed(seed))
		o := start(env, fixed)
		oneAtATime(t, env, o, 2, 0)
		var fs []string
		for _, f := range env.Faults() {
			fs = append(fs, fmt.Sprintf("%s#%d %d %s", f.Service, f.Instance, f.Execution, f.Kind))
		}
		seen[strings.Join(fs, "; ")] = seed
		ft.cleanup()
		if env.Seed() != seed {
			t.Errorf("Seed() = %d, want %d", env.Seed(), seed)
		}
	}
	if len(seen) < 2 {
		t.Errorf("seeds 1, 2 and 3 gave one schedule: %v", seen)
	}
}

// CrashWorkersEvery(1) would crash every redelivery again: refused.
func TestCrashWorkersEveryOne(t *testing.T) {
	ft := &fakeT{}
	func() {
		defer func() { _ = recover() }()
		sagatest.New(ft, sagatest.CrashWorkersEvery(1))
	}()
	ft.cleanup()
	if !strings.Contains(ft.fatal, "CrashWorkersEvery(1)") {
		t.Errorf("fatal = %q", ft.fatal)
	}
}

// A test that fails by itself (not in the harness) is told the seed when
// it ends; a test that passes is not.
func TestSeedPrintedWhenTestFails(t *testing.T) {
	for _, failed := range []bool{true, false} {
		ft := &fakeT{failed: failed}
		env := sagatest.New(ft, sagatest.CrashWorkersEvery(3))
		ft.cleanup()
		want := fmt.Sprintf("fault schedule seed %d (replay it with sagatest.WithSeed(%d))", env.Seed(), env.Seed())
		printed := slices.ContainsFunc(ft.logs, func(l string) bool { return strings.Contains(l, want) })
		if printed != failed {
			t.Errorf("failed %v: logs %q, want the seed printed only if the test failed", failed, ft.logs)
		}
	}
}
