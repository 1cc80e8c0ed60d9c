package main

import (
	"bytes"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/secretflag/secretflagtest"
)

// Every string flag of sagabench refuses a value carrying a password (the libpq
// keyword form here) with secretflag's one message (issue 48 item 3).
func TestEveryFlagRefusesSecrets(t *testing.T) {
	parseWith := func(args []string) string {
		var out bytes.Buffer
		_, err := parse(args, &out)
		if err != nil {
			out.WriteString(err.Error())
		}
		return out.String()
	}
	secretflagtest.Refused(t, "sagabench", secretflagtest.StringFlags(parseWith([]string{"--help"})), parseWith)
}
