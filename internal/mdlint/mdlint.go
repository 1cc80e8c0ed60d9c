// Package mdlint checks the project's Markdown the way a reader meets it
// rendered: every code fence closes (a fence line with text after it does
// not close a fence, and swallows what follows), every relative link and
// in-page anchor resolves, and no two headings of a file share an anchor.
// Its test runs it over README.md and docs/ in `make test`.
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

// doc is one parsed Markdown file.
type doc struct {
	path     string
	headings []heading
	links    []link
	problems []Problem
}

var (
	fenceRe   = regexp.MustCompile("^ {0,3}(```+|~~~+)(.*)$")
	headingRe = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkRe    = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeRe    = regexp.MustCompile("`+[^`]*`+")
	inlineRe  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// parse reads path and collects its headings, links and fence problems.
func parse(path string) (*doc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := &doc{path: path}
	var fence string // the opening fence's marker while inside a fence
	fenceLine := 0
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			marker, rest := m[1], strings.TrimSpace(m[2])
			switch {
			case fence == "":
				fence, fenceLine = marker, n
			case marker[0] == fence[0] && len(marker) >= len(fence) && rest == "":
				fence = ""
			case marker[0] == fence[0] && rest != "":
				d.problems = append(d.problems, Problem{path, n,
					fmt.Sprintf("fence line with text after it (%q) does not close the fence opened at line %d: put the text on its own line", rest, fenceLine)})
			}
			continue
		}
		if fence != "" {
			continue
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
		d.problems = append(d.problems, Problem{path, fenceLine, "code fence never closed"})
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
