package checkout_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// root is the module's root, where the guide's commands run.
const root = "../../.."

// setupCommands are the guide's commands that start the servers: the test
// is given them by testenv instead.
var setupCommands = []*regexp.Regexp{
	regexp.MustCompile(`^docker compose up`),
	regexp.MustCompile(`^scripts/services (up|down)`),
	regexp.MustCompile(`^eval "\$\(scripts/services env\)"`),
}

// guideCommands returns the commands of docs/getting-started.md's ```sh
// blocks before its example-services section (comments stripped), in order.
func guideCommands(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	md, _, _ := strings.Cut(string(data), "\n## The example services")
	var out []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		trim := strings.TrimSpace(line)
		switch {
		case !in && trim == "```sh":
			in = true
		case in && trim == "```":
			in = false
		case in && trim != "":
			cmd, _, _ := strings.Cut(trim, " #")
			out = append(out, strings.TrimSpace(cmd))
		}
	}
	return out
}

// TestGettingStarted runs the commands of docs/getting-started.md, steps 1
// to 4, as a new user would, on the real Kafka and Cassandra (in a keyspace
// of its own): the demo, the schema, the quickstart's worker and
// orchestrator in two processes, and sagactl show. Every command of those
// steps must be one it runs (or a server setup it is given by testenv), so
// the guide cannot name a command nobody ran.
func TestGettingStarted(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	hosts, keyspace := testenv.CassandraKeyspace(t)
	if brokers == nil || hosts == nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	bin := t.TempDir()
	built := map[string]string{}
	build := func(pkg string) string {
		if b, ok := built[pkg]; ok {
			return b
		}
		out := filepath.Join(bin, filepath.Base(pkg))
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
		built[pkg] = out
		return out
	}
	// A region and a cluster other than the file's default: WithConfig
	// must carry them to both services, and sagactl show, reading the
	// same variables, must find the saga in eu/shop.
	servers := append(os.Environ(),
		"STACKSAGA_KAFKA_BROKERS="+strings.Join(brokers, ","),
		"STACKSAGA_INSTANCE_REGION=eu", "STACKSAGA_INSTANCE_REGION_CODE=7", "STACKSAGA_INSTANCE_CLUSTER=shop",
		"STACKSAGA_CASSANDRA_CONTACT_POINTS="+strings.Join(hosts, ","),
		"STACKSAGA_CASSANDRA_KEYSPACE="+keyspace)
	// The demo needs nothing installed: no endpoint in its environment.
	var bare []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KAFKA_BROKERS=") && !strings.HasPrefix(e, "STACKSAGA_KAFKA_BROKERS=") && !strings.HasPrefix(e, "CASSANDRA_HOSTS=") {
			bare = append(bare, e)
		}
	}
	// command turns a guide line "go run ./pkg args..." into a command of
	// the built binary, run from the module's root.
	command := func(line string, env []string) *exec.Cmd {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "go" || f[1] != "run" {
			t.Fatalf("getting-started: %q is neither a server setup nor a go run this test knows", line)
		}
		cmd := exec.CommandContext(ctx, build(f[2]), f[3:]...)
		cmd.Dir, cmd.Env = root, env
		return cmd
	}
	var ranDemo, ranSchema, ranShow bool
	var worker *exec.Cmd
	var workerOut testenv.LockedBuffer
	var compensated string
	for _, line := range guideCommands(t) {
		setup := false
		for _, re := range setupCommands {
			setup = setup || re.MatchString(line)
		}
		switch {
		case setup:
		case line == "go run ./cmd/sagademo":
			out, err := command(line, bare).CombinedOutput()
			if err != nil || !regexp.MustCompile(`(?m)^sagas=\d+ completed=\d+ .*stuck=0 `).Match(out) {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			ranDemo = true
		case strings.HasPrefix(line, "go run ./cmd/sagactl schema apply"):
			if out, err := command(line, servers).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			ranSchema = true
		case strings.HasPrefix(line, "go run ./examples/quickstart/payment-service"):
			worker = command(line, servers)
			worker.Stdout, worker.Stderr = &workerOut, &workerOut
			if err := worker.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = worker.Process.Signal(os.Interrupt)
				_ = worker.Wait()
			})
		case strings.HasPrefix(line, "go run ./examples/quickstart/order-service"):
			if worker == nil {
				t.Fatalf("%s: the guide starts the order-service before the payment-service", line)
			}
			out, err := command(line, servers).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s\npayment-service:\n%s", line, err, out, workerOut.String())
			}
			states := regexp.MustCompile(`(?m)^order o-(\d): saga (\S+) (\S+) `).FindAllStringSubmatch(string(out), -1)
			var got []string
			for _, s := range states {
				got = append(got, s[3])
				if s[3] == "COMPENSATED" {
					compensated = s[2]
				}
			}
			if strings.Join(got, " ") != "COMPLETED COMPLETED COMPENSATED" {
				t.Fatalf("%s: states %v, want COMPLETED COMPLETED COMPENSATED (the guide's); output:\n%s", line, got, out)
			}
		case strings.HasPrefix(line, "go run ./cmd/sagactl show "):
			if compensated == "" {
				t.Fatalf("%s: no saga to show (the guide shows one before running the order-service)", line)
			}
			f := strings.Fields(line)
			f[4] = compensated // the guide's example id
			out, err := command(strings.Join(f, " "), servers).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "COMPENSATED") || !strings.Contains(string(out), compensated) {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			ranShow = true
		default:
			t.Fatalf("getting-started: %q is not a command this test runs", line)
		}
	}
	if !ranDemo || !ranSchema || worker == nil || compensated == "" || !ranShow {
		t.Fatalf("the guide lacks a step: demo %v, schema %v, worker %v, orders %v, show %v", ranDemo, ranSchema, worker != nil, compensated != "", ranShow)
	}
	if !strings.Contains(workerOut.String(), "payment-service: running") {
		t.Errorf("payment-service output:\n%s", workerOut.String())
	}
}
