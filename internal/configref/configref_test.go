package configref

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

const root = "../.."

// TestConfigurationReference: docs/configuration.md is what Render makes of
// the code now. Regenerate it with go generate ./internal/configref.
func TestConfigurationReference(t *testing.T) {
	want, err := Render(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("docs/configuration.md is stale (run go generate ./internal/configref); first difference at line %d:\nfile: %s\ncode: %s", i+1, g, w)
			}
		}
	}
}

// TestEveryKeyOnce: the reference lists exactly the keys the loaders
// accept (yamlconfig.Keys), each once.
func TestEveryKeyOnce(t *testing.T) {
	var got []string
	for _, e := range Entries() {
		got = append(got, e.Key)
		if e.Type == "" || e.Meaning == "" || e.Reader == "" {
			t.Errorf("%s: type, meaning and reader are required: %+v", e.Key, e)
		}
	}
	want := slices.Clone(yamlconfig.Keys)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("reference keys differ from yamlconfig.Keys:\nonly in the reference: %v\nonly in Keys: %v", minus(got, want), minus(want, got))
	}
}

// TestEnvironmentVariables: the variables the reference gives to keys are
// exactly those the loaders look up (recorded from their lookups), plus
// sagactl's scope variables.
func TestEnvironmentVariables(t *testing.T) {
	asked := map[string]bool{}
	lookup := func(name string) (string, bool) { asked[name] = true; return "", false }
	c := cassandra.DefaultConfig()
	if err := c.ApplyEnv(lookup); err != nil {
		t.Fatal(err)
	}
	w := writeprotect.DefaultConfig()
	if err := w.ApplyEnv(lookup); err != nil {
		t.Fatal(err)
	}
	if _, err := recovery.LoadConfigWithEnv(nil, lookup); err != nil {
		t.Fatal(err)
	}
	if _, err := ringcoordinator.LoadConfigWithEnv(nil, lookup); err != nil {
		t.Fatal(err)
	}
	if _, err := kafkaflags.LoadConfigWithEnv(nil, lookup); err != nil {
		t.Fatal(err)
	}
	delete(asked, kafkaflags.DeprecatedEnvBrokers) // listed in OtherEnv
	delete(asked, kafkaflags.DefaultPasswordEnv)   // read only with sasl.user; listed in OtherEnv
	// sagactl's scope (cmd/sagactl resolveScope; its tests cover it).
	for _, v := range []string{"STACKSAGA_INSTANCE_REGION", "STACKSAGA_INSTANCE_CLUSTER", "STACKSAGA_INSTANCE_SERVICE", "STACKSAGA_INSTANCE_REGION_CODE", "STACKSAGA_INSTANCE_STRICT_NAMES"} {
		asked[v] = true
	}
	delete(asked, ringcoordinator.EnvToken)
	var want, got []string
	for v := range asked {
		want = append(want, v)
	}
	seen := map[string]bool{}
	for _, e := range Entries() {
		if e.Env != "" && !seen[e.Env] {
			seen[e.Env] = true
			got = append(got, e.Env)
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("environment variables differ from the loaders' lookups:\nonly in the reference: %v\nonly looked up: %v", minus(got, want), minus(want, got))
	}
	for _, e := range OtherEnv {
		if seen[e.Name] {
			t.Errorf("%s is listed twice", e.Name)
		}
	}
}

// TestOptionsFound: the option listing reads every package it names, and
// finds the constructors' options users need most.
func TestOptionsFound(t *testing.T) {
	opts, err := Options(root)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, o := range opts {
		have[o.Package+"."+o.Name] = true
		if o.Doc == "" {
			t.Errorf("%s.%s has no documentation", o.Package, o.Name)
		}
	}
	for _, want := range []string{"orchestrator.WithRetryNode", "orchestrator.WithRecovery", "orchestrator.WithStore", "orchestrator.WithBusinessKey", "worker.WithGuard", "tracewindow.WithReadToken", "sagatest.TwinWorkers", "recovery.WithRanges"} {
		if !have[want] {
			t.Errorf("option %s not found", want)
		}
	}
}

func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}
