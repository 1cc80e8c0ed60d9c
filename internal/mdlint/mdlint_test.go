package mdlint

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/config"
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

// TestReadmeYAMLKeysAreKnown: every ```yaml block of the README and docs is
// a stacksaga document that config.Load (the loader of a service's whole
// file) accepts: only keys the loaders read, and values every section's
// checks accept, so a user who copies one is not refused at start. A block
// that is not a whole document says so with <!-- snippet: illustrative
// REASON --> (docs/development.md, "Snippets in the docs").
func TestReadmeYAMLKeysAreKnown(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	if md, err := filepath.Glob(filepath.Join(root, "docs", "*.md")); err == nil {
		files = append(files, md...)
	}
	n := 0
	for _, f := range files {
		for _, b := range blocksOf(t, f, "yaml") {
			if w, reason, _ := strings.Cut(b.Marker, " "); w == "illustrative" && len(strings.Fields(reason)) >= 3 {
				continue
			}
			if !strings.HasPrefix(strings.TrimSpace(b.Body), "stacksaga:") {
				t.Errorf("%s:%d: a ```yaml block that is not a stacksaga: document and not marked <!-- snippet: illustrative REASON -->", f, b.Line)
				continue
			}
			n++
			if _, err := config.Load([]byte(b.Body)); err != nil {
				t.Errorf("%s:%d: YAML block: config.Load: %v", f, b.Line, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no stacksaga: YAML block found in the README: the test checks nothing")
	}
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
		for _, b := range blocksOf(t, f, "go") {
			lines := strings.Split(b.Body, "\n")
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

// blocksOf returns the fenced blocks of the Markdown file f whose info
// string is lang.
func blocksOf(t *testing.T, f, lang string) []Block {
	t.Helper()
	all, err := Blocks(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []Block
	for _, b := range all {
		if b.Info == lang {
			out = append(out, b)
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

// TestBlocks: each fence's line, info string, body and the snippet marker
// of the line before it (blank lines between allowed; any other line in
// between drops it).
func TestBlocks(t *testing.T) {
	p := filepath.Join(t.TempDir(), "doc.md")
	body := strings.Join([]string{
		"<!-- snippet: body -->",
		"",
		"```go",
		"x := 1",
		"",
		"```",
		"<!-- snippet: illustrative the reason -->",
		"text between",
		"~~~yaml",
		"a: 1",
		"```",
		"~~~",
		"```",
		"unclosed",
	}, "\n")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Blocks(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Line: 3, Info: "go", Marker: "body", Body: "x := 1\n"},
		{Line: 9, Info: "yaml", Body: "a: 1\n```"},
		{Line: 13, Body: "unclosed"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Blocks:\n got %#v\nwant %#v", got, want)
	}
}
