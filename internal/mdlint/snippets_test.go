package mdlint

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// snippetPrelude is what a ```go block marked `<!-- snippet: body -->` or
// `<!-- snippet: decls -->` is compiled with (docs/development.md, "Snippets
// in the docs"): the packages a snippet may name without importing them, and
// the variables and types the docs' fragments use without declaring them.
// An import or a name a snippet does not use costs nothing.
const snippetPrelude = `
// Order is the docs' entity: every field a snippet uses.
type Order struct {
	ID, Item              string
	Quantity              int
	Amount, Total         int64
	PaymentID, PaymentRef string
}

// pspClient is the payment service provider the docs' handlers call.
type pspClient struct{ ErrTimeout error }

func (pspClient) Charge(ctx context.Context, amount int64, key string) (string, error) { return "", nil }
func (pspClient) Refund(ctx context.Context, paymentID, key string) error          { return nil }
func (pspClient) Authorise(ctx context.Context, amount int64, key string) error     { return nil }

var (
	ctx              context.Context
	t                *testing.T
	psp              pspClient
	brokers          []string
	store            *cassandra.Store
	cassandraCfg     cassandra.Config
	scope            eventstore.Scope
	domain           orchestrator.Domain[Order]
	placeOrderDomain orchestrator.Domain[Order]
	o                *orchestrator.Orchestrator[Order]
	txID             string
	order            Order
	idempotencyKey   string
	chargeEndpoint   worker.Endpoint[Order]
	reserve, charge  orchestrator.Step
	ship, screen     orchestrator.Step
	myRevert         func(context.Context, *orchestrator.Saga[Order]) orchestrator.Decision
	mux              *http.ServeMux
	otlpExporter     sdktrace.SpanExporter
)
`

// snippetImports are the prelude's imports (name "" for the package's own).
var snippetImports = map[string]string{
	"context":                            "",
	"database/sql":                       "",
	"errors":                             "",
	"fmt":                                "",
	"log/slog":                           "",
	"net/http":                           "",
	"os":                                 "",
	"testing":                            "",
	"time":                               "",
	"go.opentelemetry.io/otel/sdk/trace": "sdktrace",
	"github.com/stacksaga-go/stacksaga/config":                     "",
	"github.com/stacksaga-go/stacksaga/eventstore":                 "",
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra":       "",
	"github.com/stacksaga-go/stacksaga/internal/testenv":           "",
	"github.com/stacksaga-go/stacksaga/orchestrator":               "",
	"github.com/stacksaga-go/stacksaga/recovery":                   "",
	"github.com/stacksaga-go/stacksaga/ringcoordinator":            "",
	"github.com/stacksaga-go/stacksaga/sagatest":                   "",
	"github.com/stacksaga-go/stacksaga/sqlbarrier":                 "",
	"github.com/stacksaga-go/stacksaga/telemetry":                  "",
	"github.com/stacksaga-go/stacksaga/telemetry/promexport":       "",
	"github.com/stacksaga-go/stacksaga/topics":                     "",
	"github.com/stacksaga-go/stacksaga/tracewindow":                "",
	"github.com/stacksaga-go/stacksaga/tracewindow/cassandraindex": "",
	"github.com/stacksaga-go/stacksaga/worker":                     "",
	"github.com/stacksaga-go/stacksaga/writeprotect":               "",
}

// goSnippet is one ```go block to compile, as the Go file that holds it.
type goSnippet struct {
	where string // file:line of the fence
	src   string
}

// snippetSource turns the body of a ```go block marked with wrapper into a Go
// file, or says why it cannot. A "…" stands for arguments left out and is
// dropped; a body's leading import declaration joins the prelude's imports.
// A //line directive maps the snippet's lines to the Markdown file's.
func snippetSource(file string, b Block, wrapper string) (string, error) {
	body := strings.ReplaceAll(b.Body, "…", "")
	line := fmt.Sprintf("//line %s:%d\n", filepath.ToSlash(file), b.Line+1)
	if wrapper == "file" {
		return line + body + "\n", nil
	}
	imports := map[string]string{}
	for p, n := range snippetImports {
		imports[p] = n
	}
	skip := 0 // lines of body taken by its own import declaration
	if strings.HasPrefix(strings.TrimSpace(body), "import") {
		end := strings.Index(body, ")")
		if end < 0 {
			return "", fmt.Errorf("an import declaration that does not end with ')'")
		}
		f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+body[:end+1], parser.ImportsOnly)
		if err != nil {
			return "", err
		}
		for _, s := range f.Imports {
			p, _ := strconv.Unquote(s.Path.Value)
			imports[p] = ""
			if s.Name != nil {
				imports[p] = s.Name.Name
			}
		}
		skip = strings.Count(body[:end+1], "\n")
		body = body[end+1:]
	}
	var src strings.Builder
	src.WriteString("package snippet\n\nimport (\n")
	for _, p := range slices.Sorted(maps.Keys(imports)) {
		fmt.Fprintf(&src, "\t%s %q\n", imports[p], p)
	}
	src.WriteString(")\n" + snippetPrelude)
	line = fmt.Sprintf("//line %s:%d\n", filepath.ToSlash(file), b.Line+1+skip)
	switch wrapper {
	case "decls":
		src.WriteString(line + body + "\n")
	case "body":
		src.WriteString("func _() {\n" + line + body + "\n}\n")
	default:
		return "", fmt.Errorf("unknown wrapper %q: want file, decls, body or illustrative", wrapper)
	}
	return src.String(), nil
}

// docGoSnippets returns the ```go blocks of README.md and docs/*.md to
// compile, and reports as errors the blocks that neither name their source
// file (TestGoSnippetsAreFromTheExamples) nor carry a snippet marker, and
// the illustrative ones that do not say why.
func docGoSnippets(t *testing.T) []goSnippet {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	md, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, md...)
	var out []goSnippet
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		for _, b := range blocksOf(t, f, "go") {
			where := fmt.Sprintf("%s:%d", rel, b.Line)
			first, _, _ := strings.Cut(strings.TrimSpace(b.Body), "\n")
			if src, ok := strings.CutPrefix(first, "// "); ok && strings.HasSuffix(src, ".go") && !strings.ContainsAny(src, " (") {
				continue // its lines are checked against that file
			}
			wrapper, reason, _ := strings.Cut(b.Marker, " ")
			switch {
			case b.Marker == "":
				t.Errorf("%s: a ```go block with no <!-- snippet: file|decls|body|illustrative REASON --> line before it (docs/development.md, \"Snippets in the docs\")", where)
				continue
			case wrapper == "illustrative":
				if len(strings.Fields(reason)) < 3 {
					t.Errorf("%s: an illustrative snippet must say why it is not compiled (<!-- snippet: illustrative REASON -->), got %q", where, b.Marker)
				}
				continue
			}
			src, err := snippetSource(rel, b, wrapper)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			out = append(out, goSnippet{where, src})
		}
	}
	return out
}

// TestGoSnippetsCompile type-checks every ```go block of README.md and
// docs/*.md against the module's packages, wrapped as its marker says, so a
// renamed function, a changed signature or a typo in the docs fails here.
// Only "declared and not used" and "imported and not used" are forgiven (a
// fragment shows a call, not what is done with its result).
func TestGoSnippetsCompile(t *testing.T) {
	snips := docGoSnippets(t)
	if len(snips) == 0 {
		t.Fatal("no ```go block to compile: the test checks nothing")
	}
	for _, e := range checkGoSnippets(t, snips) {
		t.Error(e)
	}
}

// TestGoSnippetCheckFindsErrors: a wrong call, an unknown name and a
// syntax error are each reported at their line of the Markdown file, and
// an unused variable or import is not.
func TestGoSnippetCheckFindsErrors(t *testing.T) {
	var snips []goSnippet
	for i, c := range []struct{ wrapper, body string }{
		{"body", "w, err := worker.New(\"payment-service\")\nerr = w.Run()"},
		{"body", "x := orchestrator.NoSuchThing"},
		{"decls", "func f() { x := 1 }"},
		{"body", "o.Start(ctx, Order{}, orchestrator.WithBrokers(...))"},
		{"file", "package p\n\nimport \"fmt\"\n"},
		{"body", "import (\n\t\"strings\"\n)\n\n_ = strings.ToUpper(txID)"},
	} {
		src, err := snippetSource("doc.md", Block{Line: 10 * (i + 1), Body: c.body}, c.wrapper)
		if err != nil {
			t.Fatal(err)
		}
		snips = append(snips, goSnippet{fmt.Sprintf("doc.md:%d", 10*(i+1)), src})
	}
	got := strings.Join(checkGoSnippets(t, snips), "\n")
	for _, want := range []string{
		"doc.md:12:", // not enough arguments in call to w.Run
		"doc.md:21:", // undefined: orchestrator.NoSuchThing
		"doc.md:41:", // expected operand, found '...'
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no error at %s in:\n%s", want, got)
		}
	}
	for _, not := range []string{"doc.md:11:", "doc.md:31:", "doc.md:5", "doc.md:6"} {
		if strings.Contains(got, not) {
			t.Errorf("an error at %s (unused names are forgiven) in:\n%s", not, got)
		}
	}
}

// checkGoSnippets parses and type-checks each snippet and returns its
// errors, each naming the Markdown file and line.
func checkGoSnippets(t *testing.T, snips []goSnippet) []string {
	fset := token.NewFileSet()
	var files []*ast.File
	var out []string
	need := map[string]bool{}
	for _, s := range snips {
		f, err := parser.ParseFile(fset, "snippet.go", s.src, parser.ParseComments)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: does not parse: %v", s.where, err))
			files = append(files, nil)
			continue
		}
		files = append(files, f)
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			need[p] = true
		}
	}
	imp := exportImporter(t, fset, slices.Sorted(maps.Keys(need)))
	for i, f := range files {
		if f == nil {
			continue
		}
		conf := types.Config{Importer: imp, Error: func(err error) {
			if te, ok := err.(types.Error); ok && te.Soft &&
				(strings.Contains(te.Msg, "declared and not used") || strings.Contains(te.Msg, "imported and not used")) {
				return
			}
			out = append(out, fmt.Sprintf("%s: %v", snips[i].where, err))
		}}
		_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
	}
	return out
}

// exportFiles maps an import path to its export data file, filled by
// exportImporter's go list runs (one per test binary when the snippets
// import nothing beyond the prelude).
var exportFiles = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// exportImporter returns an importer that reads the compiled export data of
// pkgs and their dependencies, built by go list -export (from the build
// cache when nothing changed; with -race when the test runs with it, so
// that `make test` reuses the archives of its other test binaries).
func exportImporter(t *testing.T, fset *token.FileSet, pkgs []string) types.Importer {
	t.Helper()
	exportFiles.Lock()
	defer exportFiles.Unlock()
	var missing []string
	for _, p := range pkgs {
		if _, ok := exportFiles.m[p]; !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		if len(exportFiles.m) == 0 {
			missing = append(missing, slices.Collect(maps.Keys(snippetImports))...)
		}
		args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}
		if raceBuild {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, missing...)...)
		cmd.Dir = filepath.Join("..", "..")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -export: %v\n%s", err, stderr.String())
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if p, file, ok := strings.Cut(l, " "); ok && file != "" {
				exportFiles.m[p] = file
			}
		}
	}
	export := maps.Clone(exportFiles.m)
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := export[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s (go list -export)", path)
		}
		return os.Open(file)
	})
}
