package upgradetest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// root is the module's root, seen from this package's directory.
const root = "../.."

// limit is testdata/sagaproc's charge limit: a larger amount is declined
// and the saga compensates.
const limit = 1000

// TestMixedVersions is the rolling upgrade of issue 40, item 4, on the real
// Kafka and Cassandra: the previous release (PreviousRelease, built from
// its git tag) and this one, in separate processes (testdata/sagaproc) on
// the same topics and keyspace.
//
//  1. The keyspace is made by the previous release's `sagactl schema
//     apply`; this version's `schema diff` lists what it lacks.
//  2. Old orchestrator, new worker (orchestrator switched mid-run): the
//     old orchestrator starts sagas on the old schema, the keyspace is
//     migrated by this version's `sagactl schema apply` under it, a new
//     worker serves its commands, and the old orchestrator is stopped with
//     sagas in flight; a new orchestrator finishes them and starts more.
//     This version's `sagactl show` reads a saga the old release wrote.
//  3. New orchestrator, old worker (worker switched mid-run): a new
//     orchestrator starts sagas, an old worker serves them and is stopped
//     with steps in flight; a new worker takes over.
//
// Every saga ends once, in the state its amount decides (COMPLETED, or
// COMPENSATED for a declined charge), and each of its steps ran exactly
// once (a compensated saga's reserve reverted once), by the workers' own
// counts of their handlers' runs, summed over the old and the new worker.
func TestMixedVersions(t *testing.T) {
	testenv.Long(t, "builds the previous release and runs five processes")
	brokers := testenv.KafkaBrokers(t)
	hosts, keyspace := testenv.CassandraKeyspace(t)
	if brokers == nil || hosts == nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	defer cancel()
	old := previousTree(t, ctx)
	bin := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "sagaproc", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(old, "cmd", "upgradetest-sagaproc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "cmd", "upgradetest-sagaproc", "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	oldProc := goBuild(t, ctx, old, "./cmd/upgradetest-sagaproc", filepath.Join(bin, "old-sagaproc"))
	oldCtl := goBuild(t, ctx, old, "./cmd/sagactl", filepath.Join(bin, "old-sagactl"))
	newProc := goBuild(t, ctx, root, "./internal/upgradetest/testdata/sagaproc", filepath.Join(bin, "new-sagaproc"))
	newCtl := goBuild(t, ctx, root, "./cmd/sagactl", filepath.Join(bin, "new-sagactl"))
	t.Logf("%s and this version built in %v", PreviousRelease, time.Since(began).Round(time.Second))

	hostList, brokerList := strings.Join(hosts, ","), strings.Join(brokers, ",")
	cass := []string{"--hosts", hostList, "--keyspace", keyspace}

	// 1. The previous release makes the keyspace; this one sees what it lacks.
	out := run(t, ctx, oldCtl, append([]string{"schema", "apply", "--timeout", "5m"}, cass...)...)
	t.Logf("%s schema apply:\n%s", PreviousRelease, out)
	if out := run(t, ctx, newCtl, append([]string{"schema", "diff", "--timeout", "5m"}, cass...)...); !strings.Contains(out, "definition_version") {
		t.Fatalf("schema diff of a %s keyspace lists no definition_version column:\n%s", PreviousRelease, out)
	}

	u := testenv.UniqueName(t, "mv")
	domainB, workerB, serviceB := "ordb-"+u, "stockb-"+u, "ordersb-"+u
	domainA, workerA, serviceA := "orda-"+u, "stocka-"+u, "ordersa-"+u
	ensureTopics(t, ctx, brokers, domainA, domainB, workerA, workerB)
	common := []string{"-brokers", brokerList, "-hosts", hostList, "-keyspace", keyspace, "-delay", "300ms"}
	orchArgs := func(service, domain, wservice, prefix string, orders int, every time.Duration, stopFile string) []string {
		return append([]string{"-role", "orchestrator", "-service", service, "-domain", domain, "-worker-service", wservice,
			"-prefix", prefix, "-orders", strconv.Itoa(orders), "-every", every.String(), "-stop-file", stopFile}, common...)
	}
	noStop := filepath.Join(bin, "never")
	workerArgs := func(wservice string) []string {
		return append([]string{"-role", "worker", "-worker-service", wservice}, common...)
	}
	var store *cassandra.Store // opened once the keyspace is migrated

	// 2. Old orchestrator, new worker; the orchestrator switched mid-run.
	t.Run("OldOrchestratorNewWorker", func(t *testing.T) {
		oldOrch := startProc(t, ctx, "old orchestrator", oldProc, orchArgs(serviceB, domainB, workerB, "b1", 60, 250*time.Millisecond, noStop)...)
		waitFor(t, 3*time.Minute, "the old orchestrator starting 3 sagas on the old schema", func() bool {
			return len(oldOrch.fields("started")) >= 3
		}, oldOrch)
		out := run(t, ctx, newCtl, append([]string{"schema", "apply", "--timeout", "5m"}, cass...)...)
		if !strings.Contains(out, "upgraded: ALTER TABLE") || !strings.Contains(out, "definition_version") {
			t.Fatalf("schema apply of a %s keyspace upgraded nothing:\n%s", PreviousRelease, out)
		}
		if out := run(t, ctx, newCtl, append([]string{"schema", "diff", "--timeout", "5m"}, cass...)...); !strings.Contains(out, "up to date") {
			t.Fatalf("schema diff after apply:\n%s", out)
		}
		var err error
		store, err = cassandra.New(ctx, cassandra.Config{ContactPoints: hosts, Keyspace: keyspace, RequestTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		newWorker := startProc(t, ctx, "new worker", newProc, workerArgs(workerB)...)
		// The old orchestrator drives the new worker's replies: it sent
		// charges, which it does only on a reserve's reply.
		waitFor(t, 3*time.Minute, "the new worker running 3 charges of the old orchestrator's sagas", func() bool {
			return count(newWorker.fields("ran"), "charge", "process") >= 3
		}, oldOrch, newWorker)
		oldOrch.stop(t)
		scope := eventstore.Scope{Region: orchestrator.DefaultRegion, Cluster: "default", Service: serviceB}
		first := startedSagas(oldOrch)
		if open := unfinished(t, ctx, store, scope, first); len(open) == 0 {
			t.Fatalf("no saga of the old orchestrator was in flight when it stopped (%d started): the switch proves nothing", len(first))
		} else {
			t.Logf("old orchestrator stopped with %d of its %d sagas in flight", len(open), len(first))
		}
		newOrch := startProc(t, ctx, "new orchestrator", newProc, orchArgs(serviceB, domainB, workerB, "b2", 8, 150*time.Millisecond, noStop)...)
		waitFor(t, 3*time.Minute, "the new orchestrator starting its 8 sagas", func() bool {
			return len(newOrch.fields("started")) == 8
		}, newOrch, newWorker)
		all := startedSagas(oldOrch, newOrch)
		checkEndedOnce(t, ctx, store, scope, all, []*proc{newWorker}, []*proc{newWorker, newOrch}, oldOrch)

		// This version's sagactl reads a saga the previous release wrote
		// on its own schema, before the migration.
		var firstTx string
		for _, f := range oldOrch.fields("started") {
			if f[0] == "b1-1" {
				firstTx = f[1]
			}
		}
		show := run(t, ctx, newCtl, append([]string{"show", firstTx, "--json", "--service", serviceB}, cass...)...)
		if !regexp.MustCompile(`"state":\s*"COMPLETED"`).MatchString(show) || !regexp.MustCompile(`"definition_version":\s*1\b`).MatchString(show) {
			t.Errorf("sagactl show of %s's saga %s: want COMPLETED, definition version 1:\n%s", PreviousRelease, firstTx, show)
		}
		newOrch.stop(t)
		newWorker.stop(t)
	})
	if store == nil {
		t.Fatal("the keyspace was not migrated: the second half cannot run")
	}
	defer store.Close()

	// 3. New orchestrator, old worker; the worker switched mid-run.
	t.Run("NewOrchestratorOldWorker", func(t *testing.T) {
		scope := eventstore.Scope{Region: orchestrator.DefaultRegion, Cluster: "default", Service: serviceA}
		stopA := filepath.Join(bin, "stop-a")
		newOrch := startProc(t, ctx, "new orchestrator", newProc, orchArgs(serviceA, domainA, workerA, "a", 60, 250*time.Millisecond, stopA)...)
		oldWorker := startProc(t, ctx, "old worker", oldProc, workerArgs(workerA)...)
		waitFor(t, 3*time.Minute, "the old worker running 3 charges of the new orchestrator's sagas", func() bool {
			return count(oldWorker.fields("ran"), "charge", "process") >= 3
		}, newOrch, oldWorker)
		oldWorker.stop(t)
		newWorker := startProc(t, ctx, "new worker", newProc, workerArgs(workerA)...)
		waitFor(t, 3*time.Minute, "the new worker running 3 charges", func() bool {
			return count(newWorker.fields("ran"), "charge", "process") >= 3
		}, newOrch, newWorker)
		if err := os.WriteFile(stopA, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the orchestrator to stop starting sagas", func() bool {
			return len(newOrch.fields("starts")) == 1
		}, newOrch, newWorker)
		sagas := startedSagas(newOrch)
		checkEndedOnce(t, ctx, store, scope, sagas, []*proc{oldWorker, newWorker}, []*proc{newOrch, newWorker})
		// Some saga had its reserve run by the old worker and its charge by
		// the new one: its steps straddled the switch.
		oldRan, newRan := byTx(oldWorker.fields("ran")), byTx(newWorker.fields("ran"))
		straddled := 0
		for tx := range sagas {
			if oldRan[tx] > 0 && newRan[tx] > 0 {
				straddled++
			}
		}
		if straddled == 0 {
			t.Errorf("no saga ran steps on both the old and the new worker (%d sagas): the switch proves nothing", len(sagas))
		}
		t.Logf("%d sagas, %d with steps on both workers", len(sagas), straddled)
		newOrch.stop(t)
		newWorker.stop(t)
	})
}

// previousTree extracts PreviousRelease's tree (git archive) into a
// temporary directory and returns it. A clone without the tag (a shallow
// one) fetches the tags first; if the tag is still missing the test fails.
func previousTree(t *testing.T, ctx context.Context) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Unavailable(t, "git, to build the previous release "+PreviousRelease)
		return ""
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--is-inside-work-tree").CombinedOutput(); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("a git checkout of the module to build %s from (%v: %s)", PreviousRelease, err, bytes.TrimSpace(out)))
		return ""
	}
	rev := previousRevision(t, ctx)
	cmd := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", rev)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("git archive %s: %v: %s", PreviousRelease, err, stderr.String())
	}
	dir := t.TempDir()
	if err := untar(dir, bytes.NewReader(data)); err != nil {
		t.Fatalf("extract %s: %v", PreviousRelease, err)
	}
	return dir
}

// previousRevision is what git archive builds PreviousRelease from: its
// tag, or its commit (PreviousReleaseCommit) in a clone without tags. A
// shallow clone missing the commit is deepened (git fetch --unshallow, then
// a fetch of the commit itself) before the test gives up.
func previousRevision(t *testing.T, ctx context.Context) string {
	t.Helper()
	has := func(rev string) bool {
		return exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--quiet", rev+"^{commit}").Run() == nil
	}
	if has(PreviousRelease) {
		return PreviousRelease
	}
	if has(PreviousReleaseCommit) {
		t.Logf("tag %s is not in this clone: building its commit %s", PreviousRelease, PreviousReleaseCommit)
		return PreviousReleaseCommit
	}
	var tried []string
	for _, args := range [][]string{
		{"fetch", "--quiet", "--tags", "--unshallow"},
		{"fetch", "--quiet", "--tags"},
		{"fetch", "--quiet", "origin", PreviousReleaseCommit},
	} {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...).CombinedOutput()
		tried = append(tried, fmt.Sprintf("git %s: %v %s", strings.Join(args, " "), err, bytes.TrimSpace(out)))
		if has(PreviousReleaseCommit) {
			return PreviousReleaseCommit
		}
	}
	t.Fatalf("the previous release %s (commit %s) is in neither this clone's tags nor its history, and fetching did not bring it (%s). "+
		"The mixed-version test builds that release from git: test in a full clone of the repository",
		PreviousRelease, PreviousReleaseCommit, strings.Join(tried, "; "))
	return ""
}

// untar writes the directories and regular files of the tar stream r
// under dir.
func untar(dir string, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if !filepath.IsLocal(name) {
			return fmt.Errorf("%q: not a path inside the tree", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// goBuild builds pkg of the module in dir into out (GOCACHE makes a
// rebuild of an unchanged tree quick).
func goBuild(t *testing.T, ctx context.Context, dir, pkg, out string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in %s: %v\n%s", pkg, dir, err, b)
	}
	return out
}

// run runs a command to its end and returns its output; it fails t if the
// command fails.
func run(t *testing.T, ctx context.Context, bin string, args ...string) string {
	t.Helper()
	b, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, b)
	}
	return string(b)
}

// ensureTopics creates the saga domains' and the workers' topics.
func ensureTopics(t *testing.T, ctx context.Context, brokers []string, domainA, domainB, workerA, workerB string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	names := append(topics.WorkerTopics(workerA), topics.WorkerTopics(workerB)...)
	names = append(names, topics.OrchestratorTopics(domainA)...)
	names = append(names, topics.OrchestratorTopics(domainB)...)
	if err := topics.Ensure(ctx, kadm.NewClient(cl), names, topics.Provision{Partitions: 3, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
}

// proc is a running sagaproc.
type proc struct {
	name        string
	cmd         *exec.Cmd
	out, errOut testenv.LockedBuffer
	done        chan struct{}
	err         error // Wait's, once done is closed
}

// startProc starts bin; the process is killed when t ends if still running.
func startProc(t *testing.T, ctx context.Context, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errOut
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop interrupts the process (a graceful stop: handlers in flight finish,
// offsets are committed, the group is left) and waits for it to end.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGINT)
	}
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not stop within 2m of SIGINT\n%s", p.name, p.String())
	}
	if p.err != nil || len(p.fields("stopped")) != 1 {
		t.Fatalf("%s stopped badly: %v\n%s", p.name, p.err, p.String())
	}
}

// fields returns the fields after the first of every stdout line whose
// first field is word.
func (p *proc) fields(word string) [][]string {
	var out [][]string
	for _, line := range strings.Split(p.out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == word {
			out = append(out, f[1:])
		}
	}
	return out
}

// String is the process's output, for a failure's message.
func (p *proc) String() string {
	return fmt.Sprintf("--- %s stdout (last 3000 bytes):\n%s\n--- %s stderr (last 3000 bytes):\n%s", p.name, tail(p.out.String()), p.name, tail(p.errOut.String()))
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}

// waitFor polls cond until it holds; it fails t after timeout, or as soon
// as one of procs has exited.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		var dump strings.Builder
		for _, p := range procs {
			dump.WriteString(p.String() + "\n")
		}
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("waiting for %s: %s exited (%v)\n%s", what, p.name, p.err, dump.String())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %v\n%s", what, timeout, dump.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// count counts the "ran" lines of endpoint and kind.
func count(ran [][]string, endpoint, kind string) int {
	n := 0
	for _, f := range ran {
		if len(f) == 3 && f[1] == endpoint && f[2] == kind {
			n++
		}
	}
	return n
}

// byTx counts the "ran" lines per saga.
func byTx(ran [][]string) map[string]int {
	m := map[string]int{}
	for _, f := range ran {
		if len(f) == 3 {
			m[f[0]]++
		}
	}
	return m
}

// startedSagas returns the sagas the orchestrators started, by txID, with
// their amounts.
func startedSagas(orchs ...*proc) map[string]int64 {
	m := map[string]int64{}
	for _, o := range orchs {
		for _, f := range o.fields("started") {
			if len(f) == 3 {
				amount, _ := strconv.ParseInt(f[2], 10, 64)
				m[f[1]] = amount
			}
		}
	}
	return m
}

// unfinished returns the sagas not yet in a terminal state in the store.
func unfinished(t *testing.T, ctx context.Context, store *cassandra.Store, scope eventstore.Scope, sagas map[string]int64) []string {
	t.Helper()
	var open []string
	for tx := range sagas {
		got, err := store.LoadTransaction(ctx, scope, tx)
		if err != nil {
			t.Fatalf("load %s: %v", tx, err)
		}
		if !got.State.Terminal() {
			open = append(open, tx)
		}
	}
	return open
}

// checkEndedOnce waits until every saga is terminal in the store, then
// checks its state (COMPLETED, or COMPENSATED when its charge was over the
// limit) and that every step ran once by the workers' counts: reserve and
// charge processed once each, and for a compensated saga reserve reverted
// once (the declined charge is not compensated: it did nothing).
//
// workers are the processes whose runs count, live those that must stay up
// meanwhile; stopped are shown with the others when the check fails.
func checkEndedOnce(t *testing.T, ctx context.Context, store *cassandra.Store, scope eventstore.Scope, sagas map[string]int64, workers, live []*proc, stopped ...*proc) {
	t.Helper()
	all := append(append(append([]*proc{}, workers...), live...), stopped...)
	runs := map[string]int{}
	deadline := time.Now().Add(4 * time.Minute)
	for open := unfinished(t, ctx, store, scope, sagas); len(open) > 0; open = unfinished(t, ctx, store, scope, sagas) {
		for _, p := range live {
			if p.exited() {
				t.Fatalf("waiting for the %d sagas to end: %s exited (%v)\n%s", len(sagas), p.name, p.err, p.String())
			}
		}
		if time.Now().After(deadline) {
			ran := map[string][]string{}
			for _, w := range workers {
				for _, f := range w.fields("ran") {
					if len(f) == 3 {
						ran[f[0]] = append(ran[f[0]], w.name+": "+f[1]+" "+f[2])
					}
				}
			}
			var lines []string
			for i, tx := range open {
				if i == 20 {
					lines = append(lines, "…")
					break
				}
				got, _ := store.LoadTransaction(ctx, scope, tx)
				lines = append(lines, fmt.Sprintf("%s (amount %d): %s span %d %s %s attempt %d, updated %s; ran %v",
					tx, sagas[tx], got.State, got.Span, got.Kind, got.Endpoint, got.Attempt, got.UpdatedAt.Format(time.RFC3339Nano), ran[tx]))
			}
			var dump strings.Builder
			for _, p := range all {
				dump.WriteString(p.String() + "\n")
			}
			t.Fatalf("%d of %d sagas not ended within 4m:\n%s\n%s", len(open), len(sagas), strings.Join(lines, "\n"), dump.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, w := range workers {
		for _, f := range w.fields("ran") {
			if len(f) != 3 {
				continue
			}
			if _, ok := sagas[f[0]]; !ok {
				t.Errorf("%s ran %v of a saga no orchestrator started", w.name, f)
			}
			runs[strings.Join(f, " ")]++
		}
	}
	var bad []string
	for tx, amount := range sagas {
		got, err := store.LoadTransaction(ctx, scope, tx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"reserve process": 1, "charge process": 1, "reserve revert": 0, "charge revert": 0}
		wantState := eventstore.StateCompleted
		if amount > limit {
			wantState = eventstore.StateCompensated
			want["reserve revert"] = 1
		}
		if got.State != wantState {
			bad = append(bad, fmt.Sprintf("%s (amount %d): %s, want %s (error %q)", tx, amount, got.State, wantState, got.Error))
		}
		for k, n := range want {
			if runs[tx+" "+k] != n {
				bad = append(bad, fmt.Sprintf("%s (amount %d): %s ran %d times, want %d", tx, amount, k, runs[tx+" "+k], n))
			}
		}
	}
	if len(bad) > 0 {
		var dump strings.Builder
		for _, p := range all {
			dump.WriteString(p.String() + "\n")
		}
		t.Fatalf("%d sagas: %d problems:\n%s\n%s", len(sagas), len(bad), strings.Join(bad, "\n"), dump.String())
	}
}
