// Package mdlint checks the project's Markdown the way a reader meets it
// rendered: every code fence closes (a fence line with text after it does
// not close a fence, and swallows what follows), every relative link and
// in-page anchor resolves, and no two headings of a file share an anchor.
// Its test runs it over README.md and docs/ in `make test`.
//
// Blocks and Commands give the tests the code blocks (with their
// `<!-- snippet: ... -->` markers) and the shell commands of a file, from
// the same fence scanner: the package's tests compile the Go blocks, load
// the YAML blocks and check the commands; cmd/sagactl's and the example
// order-service's tests check the sagactl and curl commands
// (docs/development.md, "Snippets in the docs").
package mdlint

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Problem is one finding, with the file and 1-based line it is on.
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// heading is an ATX heading with its anchor.
type heading struct {
	line   int
	anchor string
}

// link is an inline link or image target outside code.
type link struct {
	line   int
	target string
}

// Block is one fenced code block of a Markdown file.
type Block struct {
	// Line is the 1-based line of the opening fence; the body starts on
	// the next line.
	Line int
	// Info is the opening fence's info string ("go", "yaml", "sh", "").
	Info string
	// Marker is the text of a `<!-- snippet: ... -->` comment on the
	// line before the fence (blank lines between allowed), without the
	// "snippet:" prefix, trimmed; "" when there is none. The docs' tests
	// read it: see docs/development.md, "Snippets in the docs".
	Marker string
	// Body is the text between the fences, without them.
	Body string
}

// doc is one parsed Markdown file.
type doc struct {
	path     string
	headings []heading
	links    []link
	blocks   []Block
	problems []Problem
}

var (
	fenceRe   = regexp.MustCompile("^ {0,3}(```+|~~~+)(.*)$")
	headingRe = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkRe    = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeRe    = regexp.MustCompile("`+[^`]*`+")
	inlineRe  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	markerRe  = regexp.MustCompile(`^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$`)
)

// Blocks returns the fenced code blocks of the Markdown file at path, in
// order (an unclosed last fence included, up to the end of the file).
func Blocks(path string) ([]Block, error) {
	d, err := parse(path)
	if err != nil {
		return nil, err
	}
	return d.blocks, nil
}

// parse reads path and collects its headings, links and fence problems.
func parse(path string) (*doc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := &doc{path: path}
	var fence string // the opening fence's marker while inside a fence
	var body []string
	marker := "" // the snippet marker of the last non-blank line outside fences
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			mark, rest := m[1], strings.TrimSpace(m[2])
			switch {
			case fence == "":
				fence, body = mark, nil
				d.blocks = append(d.blocks, Block{Line: n, Info: rest, Marker: marker})
				marker = ""
				continue
			case mark[0] == fence[0] && len(mark) >= len(fence) && rest == "":
				fence = ""
				d.blocks[len(d.blocks)-1].Body = strings.Join(body, "\n")
				continue
			case mark[0] == fence[0] && rest != "":
				d.problems = append(d.problems, Problem{path, n,
					fmt.Sprintf("fence line with text after it (%q) does not close the fence opened at line %d: put the text on its own line", rest, d.blocks[len(d.blocks)-1].Line)})
			}
		}
		if fence != "" {
			body = append(body, line)
			continue
		}
		if strings.TrimSpace(line) != "" {
			marker = ""
			if m := markerRe.FindStringSubmatch(line); m != nil {
				marker = m[1]
			}
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			d.headings = append(d.headings, heading{n, Anchor(m[2])})
			continue
		}
		for _, m := range linkRe.FindAllStringSubmatch(codeRe.ReplaceAllString(line, ""), -1) {
			d.links = append(d.links, link{n, m[1]})
		}
	}
	if fence != "" {
		last := &d.blocks[len(d.blocks)-1]
		last.Body = strings.Join(body, "\n")
		d.problems = append(d.problems, Problem{path, last.Line, "code fence never closed"})
	}
	return d, nil
}

// Anchor is the id GitHub gives a heading: lower case, punctuation other
// than '-' and '_' dropped, spaces turned into '-'. Inline code marks and
// link syntax are dropped first.
func Anchor(text string) string {
	text = inlineRe.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Check lints the Markdown files given, resolving relative links against each
// file's directory (a link into another Markdown file of the list has its
// anchor checked too). It returns every problem found, in file order.
func Check(paths ...string) ([]Problem, error) {
	docs := map[string]*doc{}
	var order []*doc
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		d, err := parse(abs)
		if err != nil {
			return nil, err
		}
		d.path = p
		docs[abs] = d
		order = append(order, d)
	}
	var out []Problem
	for _, d := range order {
		out = append(out, d.problems...)
		seen := map[string]int{}
		for _, h := range d.headings {
			if first, ok := seen[h.anchor]; ok {
				out = append(out, Problem{d.path, h.line,
					fmt.Sprintf("heading anchor #%s repeats the heading at line %d: links to it reach only the first", h.anchor, first)})
				continue
			}
			seen[h.anchor] = h.line
		}
		abs, _ := filepath.Abs(d.path)
		for _, l := range d.links {
			if msg := resolve(docs, abs, seen, l.target); msg != "" {
				out = append(out, Problem{d.path, l.line, msg})
			}
		}
	}
	return out, nil
}

// resolve checks one link target of the file at from (whose anchors are own)
// and returns what is wrong with it, or "".
func resolve(docs map[string]*doc, from string, own map[string]int, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return "" // outside links are not fetched (no network)
	}
	path, frag, _ := strings.Cut(target, "#")
	if path == "" {
		if _, ok := own[frag]; !ok {
			return fmt.Sprintf("link to #%s: no heading has that anchor", frag)
		}
		return ""
	}
	abs := filepath.Join(filepath.Dir(from), filepath.FromSlash(path))
	if _, err := os.Stat(abs); err != nil {
		return fmt.Sprintf("link to %s: %v", target, err)
	}
	if frag == "" {
		return ""
	}
	d, ok := docs[abs]
	if !ok {
		return "" // an anchor in a file outside the checked set is not checked
	}
	for _, h := range d.headings {
		if h.anchor == frag {
			return ""
		}
	}
	return fmt.Sprintf("link to %s: %s has no heading with anchor #%s", target, path, frag)
}

// Command is one simple command of a shell block of a Markdown file: the
// words after quote removal, the NAME=value assignments before them.
type Command struct {
	// Line is the 1-based line of the Markdown file it is on.
	Line int
	// Env holds the assignments that precede the command (FOO=bar cmd).
	Env []string
	// Args is the command and its arguments.
	Args []string
}

// Commands returns the commands of the shell blocks of the Markdown file at
// path: blocks with info string "sh" or none. In a block where some lines
// start with a "$ " prompt, only those are commands (the rest is output);
// otherwise every line is. A line is split into words as the shell would
// (quotes removed, "#" starting a comment) and into commands at &&, ||, ;,
// | and &; `eval "$(cmd)"` yields cmd. A line the splitter cannot end (an
// open quote: a command continued on the next line) yields nothing.
func Commands(path string) ([]Command, error) {
	blocks, err := Blocks(path)
	if err != nil {
		return nil, err
	}
	var out []Command
	for _, b := range blocks {
		if b.Info != "sh" && b.Info != "" {
			continue
		}
		lines := strings.Split(b.Body, "\n")
		prompted := false
		for _, l := range lines {
			prompted = prompted || strings.HasPrefix(l, "$ ")
		}
		for i, l := range lines {
			if prompted {
				var ok bool
				if l, ok = strings.CutPrefix(l, "$ "); !ok {
					continue
				}
			}
			words, ok := shellWords(l)
			if !ok {
				continue
			}
			out = append(out, commandsOf(b.Line+1+i, words)...)
		}
	}
	return out, nil
}

// commandsOf splits words at the shell's command separators.
func commandsOf(line int, words []string) []Command {
	var out []Command
	cur := Command{Line: line}
	flush := func() {
		if len(cur.Args) == 2 && cur.Args[0] == "eval" && strings.HasPrefix(cur.Args[1], "$(") && strings.HasSuffix(cur.Args[1], ")") {
			if inner, ok := shellWords(cur.Args[1][2 : len(cur.Args[1])-1]); ok {
				out = append(out, commandsOf(line, inner)...)
			}
		} else if len(cur.Args) > 0 {
			out = append(out, cur)
		}
		cur = Command{Line: line}
	}
	for _, w := range words {
		switch {
		case w == "&&" || w == "||" || w == ";" || w == "|" || w == "&":
			flush()
		case len(cur.Args) == 0 && assignRe.MatchString(w):
			cur.Env = append(cur.Env, w)
		default:
			cur.Args = append(cur.Args, w)
		}
	}
	flush()
	return out
}

var assignRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// shellWords splits a line into words and operators, removing quotes; an
// unquoted # at the start of a word ends the line. A $(...) is kept whole,
// as part of its word. It reports false for an open quote or $(.
func shellWords(line string) ([]string, bool) {
	var words []string
	var w strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == ' ' || r == '\t':
			end()
		case r == '#' && !inWord:
			end()
			return words, true
		case r == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, false
			}
			w.WriteString(string(rs[i+1 : j]))
			inWord, i = true, j
		case r == '"' || (r == '$' && i+1 < len(rs) && rs[i+1] == '('):
			// A double-quoted string or a $(...), each ending at its
			// closer at depth 0 of parentheses and quotes within.
			j, depth, quote := i+1, 0, r == '"'
			if !quote {
				j, depth = i+2, 1
			}
			for ; j < len(rs); j++ {
				c := rs[j]
				if c == '\\' && j+1 < len(rs) {
					j++
					continue
				}
				if c == '$' && j+1 < len(rs) && rs[j+1] == '(' {
					depth++
					j++
					continue
				}
				if c == ')' && depth > 0 {
					depth--
					if depth == 0 && !quote {
						break
					}
					continue
				}
				if c == '"' && quote && depth == 0 {
					break
				}
			}
			if j >= len(rs) {
				return nil, false
			}
			if quote {
				for k := i + 1; k < j; k++ {
					if rs[k] == '\\' && k+1 < j && strings.ContainsRune("\"\\$`", rs[k+1]) {
						k++
					}
					w.WriteRune(rs[k])
				}
			} else {
				w.WriteString(string(rs[i : j+1]))
			}
			inWord, i = true, j
		case r == '&' || r == '|' || r == ';':
			end()
			if i+1 < len(rs) && (rs[i+1] == r) && r != ';' {
				i++
				words = append(words, string(r)+string(r))
			} else {
				words = append(words, string(r))
			}
		case r == '\\' && i+1 < len(rs):
			w.WriteRune(rs[i+1])
			inWord, i = true, i+1
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	end()
	return words, true
}
