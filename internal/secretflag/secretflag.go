// Package secretflag decides whether a command-line value carries a secret:
// a password given as a flag is visible to every user of the machine in the
// process list (ps, /proc/<pid>/cmdline) and often lands in shell history.
// Every command of the module (sagactl, ringcoordinator, sagabench,
// sagademo) parses its flags with Parse, which refuses such a value whatever
// the flag, with one message naming the safe alternative.
package secretflag

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// ErrSecret is wrapped by the error of a flag whose value carries a secret.
var ErrSecret = errors.New("refused: the value carries a password, which would show in the process list and shell history; " +
	"give it in an environment variable or a file instead")

// keyword matches a password given as key=value: a libpq keyword
// (password=x, quoted 'x y' too), a URL query parameter (?password=x&) or a
// JDBC/ODBC property (;pwd=x). Group 1 is the value.
var keyword = regexp.MustCompile(`(?i)(?:^|[\s?&;,])(?:password|passwd|pass|pwd|sslpassword)\s*=\s*('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^\s&;,]*)`)

// Carries reports whether the value v carries a secret: a URL with a
// password in its userinfo (scheme://user:pw@host), or a non-empty password
// given as a key=value pair (libpq keywords, quoted or not; URL query
// parameters; JDBC/ODBC properties). An empty password is not a secret.
func Carries(v string) bool {
	for _, m := range keyword.FindAllStringSubmatch(v, -1) {
		if strings.Trim(m[1], `'"`) != "" {
			return true
		}
	}
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if urlPassword(f) {
			return true
		}
	}
	return false
}

// urlPassword reports whether s is a URL whose userinfo has a password. A
// URL that does not parse but has "user:...@" before its path counts too.
func urlPassword(s string) bool {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return false
	}
	if u, err := url.Parse(s); err == nil {
		if u.User == nil {
			return false
		}
		p, set := u.User.Password()
		return set && p != ""
	}
	host, _, _ := strings.Cut(rest, "/")
	info, _, found := strings.Cut(host, "@")
	_, pw, colon := strings.Cut(info, ":")
	return found && colon && pw != ""
}

// Check returns an error wrapping ErrSecret, naming the flag, if value
// carries a secret, or if the flag is a password flag (its name is password
// or ends in -password) given any non-empty value; the error does not repeat
// the value.
func Check(name, value string) error {
	passwordFlag := name == "password" || strings.HasSuffix(name, "-password")
	if Carries(value) || (passwordFlag && value != "") {
		return fmt.Errorf("--%s: %w", name, ErrSecret)
	}
	return nil
}

// Parse parses args into fs, then checks every flag set on the command
// line with Check; when fs has a flag named after the refused one plus
// "-file" (--dsn-file for --dsn), the refusal names it. A refusal is written to fs.Output(), as fs writes its own
// parse errors, and returned.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		err := Check(f.Name, f.Value.String())
		if err != nil && fs.Lookup(f.Name+"-file") != nil {
			err = fmt.Errorf("%w (--%s-file FILE)", err, f.Name)
		}
		errs = append(errs, err)
	})
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(fs.Output(), err)
		return err
	}
	return nil
}
