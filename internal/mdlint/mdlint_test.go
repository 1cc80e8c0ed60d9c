package mdlint

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// TestRepositoryMarkdown lints README.md and every Markdown file under docs/:
// fences close, relative links and anchors resolve, headings are unique.
func TestRepositoryMarkdown(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	problems, err := Check(files...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestCheckFindsEachProblem plants one of each problem and a clean twin.
func TestCheckFindsEachProblem(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("other.md", "# Other\n\n## Part two\n")
	write("pic.png", "png")
	bad := write("bad.md", strings.Join([]string{
		"# Title",
		"",
		"```sh",
		"echo hi",
		"``` The text after the fence",
		"## Swallowed heading",
		"```",
		"",
		"## Same",
		"## Same",
		"[ok](#title) [gone](#nowhere) [file](missing.md) [pic](pic.png)",
		"[other](other.md#part-two) [other-bad](other.md#part-three) [web](https://example.invalid/x)",
		"`[in code](#nowhere)`",
		"```go",
		"never closed",
	}, "\n"))
	problems, err := Check(bad, filepath.Join(dir, "other.md"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`bad.md:5: fence line with text after it ("The text after the fence") does not close the fence opened at line 3`,
		"bad.md:14: code fence never closed",
		"bad.md:10: heading anchor #same repeats the heading at line 9",
		"bad.md:11: link to #nowhere: no heading has that anchor",
		"bad.md:11: link to missing.md:",
		"bad.md:12: link to other.md#part-three: other.md has no heading with anchor #part-three",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing problem %q in:\n%s", want, all)
		}
	}
	if len(got) != 6 {
		t.Errorf("got %d problems, want 6:\n%s", len(got), all)
	}
}

func TestAnchor(t *testing.T) {
	for in, want := range map[string]string{
		"The Cassandra event store and write protection": "the-cassandra-event-store-and-write-protection",
		"`sagatest`: the harness":                        "sagatest-the-harness",
		"Pause/resume (STRICT)":                          "pauseresume-strict",
		"See [the docs](docs/x.md) now":                  "see-the-docs-now",
	} {
		if got := Anchor(in); got != want {
			t.Errorf("Anchor(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestReadmeYAMLKeysAreKnown: every YAML block of the README and docs that
// configures StackSaga (a stacksaga: root) uses only keys the loaders read, so
// a user who copies one is not refused at start.
func TestReadmeYAMLKeysAreKnown(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	if md, err := filepath.Glob(filepath.Join(root, "docs", "*.md")); err == nil {
		files = append(files, md...)
	}
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range yamlBlocks(string(data)) {
			if !strings.HasPrefix(strings.TrimSpace(block), "stacksaga:") {
				continue
			}
			n++
			if err := yamlconfig.CheckKnown([]byte(block)); err != nil {
				t.Errorf("%s: YAML block %d: %v", f, i+1, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no stacksaga: YAML block found in the README: the test checks nothing")
	}
}

// yamlBlocks returns the bodies of the ```yaml fences of a Markdown text.
func yamlBlocks(md string) []string {
	var out []string
	var cur []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		trim := strings.TrimSpace(line)
		switch {
		case !in && trim == "```yaml":
			in, cur = true, nil
		case in && trim == "```":
			in = false
			out = append(out, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return out
}

// TestGoSnippetsAreFromTheExamples: a ```go block of the README or docs/
// whose first line names a Go file of the repository (`// examples/x/main.go`)
// shows only lines of that file (compared without their indentation), so
// the quickstart's snippets are code that compiles and cannot drift from it.
func TestGoSnippetsAreFromTheExamples(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	if md, err := filepath.Glob(filepath.Join(root, "docs", "*.md")); err == nil {
		files = append(files, md...)
	}
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range fencedBlocks(string(data), "go") {
			lines := strings.Split(block, "\n")
			src, ok := strings.CutPrefix(strings.TrimSpace(lines[0]), "// ")
			if !ok || !strings.HasSuffix(src, ".go") || strings.ContainsAny(src, " (") {
				continue
			}
			n++
			code, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(src)))
			if err != nil {
				t.Errorf("%s: a Go block names %s: %v", f, src, err)
				continue
			}
			have := map[string]bool{}
			for _, l := range strings.Split(string(code), "\n") {
				have[strings.TrimSpace(l)] = true
			}
			for _, l := range lines[1:] {
				if l = strings.TrimSpace(l); l != "" && !have[l] {
					t.Errorf("%s: the block from %s shows a line that is not in that file: %q", f, src, l)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no Go block naming its source file: the test checks nothing")
	}
}

// fencedBlocks returns the bodies of the fences of a Markdown text whose
// info string is lang.
func fencedBlocks(md, lang string) []string {
	var out []string
	var cur []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		trim := strings.TrimSpace(line)
		switch {
		case !in && trim == "```"+lang:
			in, cur = true, nil
		case in && trim == "```":
			in = false
			out = append(out, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return out
}

// TestBenchmarkChartMatchesFigures: every bar pair of docs/benchmarks-c64.svg
// (the framework's rate and its floor) is a figure docs/benchmarks.md
// reports as "<rate>/s at 64 (floor <floor>", so the chart cannot drift from
// the measurements it draws.
func TestBenchmarkChartMatchesFigures(t *testing.T) {
	svg, err := os.ReadFile(filepath.Join("..", "..", "docs", "benchmarks-c64.svg"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join("..", "..", "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(md)), " ")
	floors := regexp.MustCompile(`>floor (\d+)/s<`).FindAllStringSubmatch(string(svg), -1)
	rates := regexp.MustCompile(`>(\d+)/s \(`).FindAllStringSubmatch(string(svg), -1)
	if len(floors) == 0 || len(floors) != len(rates) {
		t.Fatalf("chart: %d floors, %d rates", len(floors), len(rates))
	}
	for i := range floors {
		if want := rates[i][1] + "/s at 64 (floor " + floors[i][1]; !strings.Contains(text, want) {
			t.Errorf("chart bar %d: %q is not a figure of docs/benchmarks.md", i+1, want)
		}
	}
}
