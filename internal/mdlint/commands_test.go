package mdlint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDocCommands checks the commands of the shell blocks of README.md and
// docs/*.md (Commands) that name something of the repository:
//   - go run PKG, go build -o BIN PKG (and BIN later), go test PKG: the
//     package exists, and every -flag/--flag given is one the program
//     defines (its package's flag calls and those of the repository's
//     packages it imports, flag names given as literals or constants);
//   - scripts/services SUB: SUB and every flag are in the script's usage;
//   - make TARGET: the Makefile has the target.
//
// sagactl's command lines are run through sagactl's own parsing by
// cmd/sagactl's TestDocCommands, and getting-started.md's are run on the
// real servers by TestGettingStarted (examples/quickstart/checkout).
func TestDocCommands(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	md, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, md...)
	usage := servicesUsage(t, root)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	flagsOf := map[string]map[string]bool{}
	n := 0
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		cmds, err := Commands(f)
		if err != nil {
			t.Fatal(err)
		}
		built := map[string]string{} // go build -o BIN PKG: BIN → PKG
		for _, c := range cmds {
			where := fmt.Sprintf("%s:%d", rel, c.Line)
			a := c.Args
			var pkg string
			var args []string
			switch {
			case len(a) >= 3 && a[0] == "go" && a[1] == "run":
				pkg, args = a[2], a[3:]
			case len(a) >= 5 && a[0] == "go" && a[1] == "build" && a[2] == "-o":
				built[a[3]] = a[4]
				pkg = a[4]
			case len(a) >= 3 && a[0] == "go" && a[1] == "test":
				n++
				for _, p := range a[2:] {
					if strings.HasPrefix(p, "./") {
						if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(p, "/..."))); err != nil {
							t.Errorf("%s: go test %s: %v", where, p, err)
						}
					}
				}
				continue
			case built[a[0]] != "":
				pkg, args = built[a[0]], a[1:]
			case a[0] == "scripts/services":
				n++
				for _, w := range a[1:] {
					if !regexp.MustCompile(`(?m)(^|[ |\[])` + regexp.QuoteMeta(w) + `($|[ |\]])`).MatchString(usage) {
						t.Errorf("%s: scripts/services %s: %q is not in the script's usage (its header)", where, strings.Join(a[1:], " "), w)
					}
				}
				continue
			case a[0] == "make":
				n++
				for _, w := range a[1:] {
					if !strings.Contains(w, "=") && !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(w)+`:`).Match(makefile) {
						t.Errorf("%s: make %s: the Makefile has no target %q", where, w, w)
					}
				}
				continue
			default:
				continue
			}
			n++
			if pkg == "./cmd/sagactl" {
				continue // cmd/sagactl's TestDocCommands parses them
			}
			flags, ok := flagsOf[pkg]
			if !ok {
				flags, err = programFlags(root, pkg)
				if err != nil {
					t.Errorf("%s: %s: %v", where, pkg, err)
					continue
				}
				flagsOf[pkg] = flags
			}
			for _, w := range args {
				name, ok := strings.CutPrefix(w, "-")
				if !ok {
					continue
				}
				name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
				if !flags[name] {
					t.Errorf("%s: %s has no flag -%s (its flags: %v)", where, pkg, name, sortedKeys(flags))
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d commands checked: the extraction finds nothing", n)
	}
}

// servicesUsage returns the usage lines of scripts/services (its header's
// "#   scripts/services ..." lines and their continuations).
func servicesUsage(t *testing.T, root string) string {
	data, err := os.ReadFile(filepath.Join(root, "scripts", "services"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "#   scripts/services "); ok {
			b.WriteString(rest + "\n")
		}
	}
	if b.Len() == 0 {
		t.Fatal("scripts/services: no usage lines")
	}
	return b.String()
}

// programFlags returns the names of the flags the main package pkg (a
// ./path of the repository) defines: the first string argument of
// flag.X(name, ...) / fs.X(name, ...) and the second of the XVar forms, in
// its files and in those of the repository's packages it imports,
// transitively. A name given as a constant of those packages is resolved.
func programFlags(root, pkg string) (map[string]bool, error) {
	const module = "github.com/stacksaga-go/stacksaga/"
	fset := token.NewFileSet()
	var files []*ast.File
	seen := map[string]bool{}
	var load func(dir string) error
	load = func(dir string) error {
		if seen[dir] {
			return nil
		}
		seen[dir] = true
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(root, dir, e.Name()), nil, 0)
			if err != nil {
				return err
			}
			files = append(files, f)
			for _, im := range f.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				if sub, ok := strings.CutPrefix(p, module); ok && (strings.HasPrefix(sub, "internal/") || strings.HasPrefix(sub, "examples/")) {
					if err := load(sub); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	if err := load(strings.TrimPrefix(pkg, "./")); err != nil {
		return nil, err
	}
	consts := map[string]string{} // Name and pkg.Name → value
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							consts[id.Name] = v
							consts[f.Name.Name+"."+id.Name] = v
						}
					}
				}
			}
		}
	}
	str := func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				v, err := strconv.Unquote(e.Value)
				return v, err == nil
			}
		case *ast.Ident:
			v, ok := consts[e.Name]
			return v, ok
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok {
				v, ok := consts[x.Name+"."+e.Sel.Name]
				return v, ok
			}
		}
		return "", false
	}
	defs := regexp.MustCompile(`^(String|Int|Int64|Uint|Uint64|Bool|Duration|Float64|Func|BoolFunc|TextVar|Var|StringVar|IntVar|Int64Var|UintVar|Uint64Var|BoolVar|DurationVar|Float64Var)$`)
	flags := map[string]bool{"h": true, "help": true}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !defs.MatchString(sel.Sel.Name) {
				return true
			}
			i := 0
			if strings.HasSuffix(sel.Sel.Name, "Var") {
				i = 1
			}
			if i < len(call.Args) {
				if name, ok := str(call.Args[i]); ok {
					flags[name] = true
				}
			}
			return true
		})
	}
	return flags, nil
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestCommands: prompts, comments, quotes, separators, assignments and
// eval "$(...)" are read as the shell would.
func TestCommands(t *testing.T) {
	p := filepath.Join(t.TempDir(), "doc.md")
	body := strings.Join([]string{
		"```sh",
		`go run ./cmd/x --a 'b c' # comment`,
		`eval "$(scripts/services env)" && make test TEST_FLAGS='-skip X'`,
		`A=1 B="2 3" tool x & other y; last "q \" r" | grep z`,
		"```",
		"```text",
		"not a command",
		"```",
		"```",
		"$ go run ./cmd/y --n 1",
		"output line",
		`$ printf '%s' "open`,
		"```",
	}, "\n")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmds, err := Commands(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Command{
		{2, nil, []string{"go", "run", "./cmd/x", "--a", "b c"}},
		{3, nil, []string{"scripts/services", "env"}},
		{3, nil, []string{"make", "test", "TEST_FLAGS=-skip X"}},
		{4, []string{"A=1", "B=2 3"}, []string{"tool", "x"}},
		{4, nil, []string{"other", "y"}},
		{4, nil, []string{"last", `q " r`}},
		{4, nil, []string{"grep", "z"}},
		{10, nil, []string{"go", "run", "./cmd/y", "--n", "1"}},
	}
	if !reflect.DeepEqual(cmds, want) {
		t.Errorf("Commands:\n got %#v\nwant %#v", cmds, want)
	}
}
