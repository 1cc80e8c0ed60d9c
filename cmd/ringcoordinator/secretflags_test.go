package main

import (
	"bytes"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/secretflag/secretflagtest"
)

// Every string flag of ringcoordinator refuses a value carrying a password
// (the libpq keyword form here) with secretflag's one message (issue 48
// item 3).
func TestEveryFlagRefusesSecrets(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	resolveWith := func(args []string) string {
		var out bytes.Buffer
		_, err := resolve(args, none, &out)
		if err != nil {
			out.WriteString(err.Error())
		}
		return out.String()
	}
	secretflagtest.Refused(t, "ringcoordinator", secretflagtest.StringFlags(resolveWith([]string{"--help"})), resolveWith)
}
