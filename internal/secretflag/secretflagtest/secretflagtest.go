// Package secretflagtest holds the check every command's test runs over its
// flags: a secret in any string flag is refused with secretflag's message,
// which does not repeat it.
package secretflagtest

import (
	"flag"
	"regexp"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/secretflag"
)

// Secret is the value every string flag is given: a libpq keyword DSN with a
// password (the form the URL check missed), pointing at a closed loopback
// port should a command try it.
const Secret = "host=127.0.0.1 port=1 user=app password=planted-s3cret-4711 dbname=shop"

var defaultLine = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9._-]*) (string|value)$`)

// StringFlags returns the names of the flags a FlagSet's PrintDefaults output
// help lists as taking a string (or a flag.Value).
func StringFlags(help string) []string {
	var out []string
	for _, m := range defaultLine.FindAllStringSubmatch(help, -1) {
		out = append(out, m[1])
	}
	return out
}

// FlagSetStrings returns the names of fs's flags that are not bool, int or
// duration flags.
func FlagSetStrings(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		if name, _ := flag.UnquoteUsage(f); name == "string" || name == "value" {
			out = append(out, f.Name)
		}
	})
	return out
}

// Refused fails t unless parse, given "--<name>" Secret for every name of
// names (after the arguments prefix), fails with an error (or output) that
// carries secretflag's message, and never repeats Secret. parse returns the
// error text and whatever the command wrote.
func Refused(t *testing.T, command string, names []string, parse func(args []string) (errText string)) {
	t.Helper()
	if len(names) == 0 {
		t.Fatalf("%s: no string flag found", command)
	}
	want := secretflag.ErrSecret.Error()
	for _, name := range names {
		got := parse([]string{"--" + name, Secret})
		if !strings.Contains(got, "--"+name+": "+want) {
			t.Errorf("%s --%s <secret>: %q; want %q", command, name, got, "--"+name+": "+want)
		}
		if strings.Contains(got, "planted-s3cret") {
			t.Errorf("%s --%s: the answer repeats the secret: %q", command, name, got)
		}
	}
}
