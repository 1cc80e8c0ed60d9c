package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/secretflag/secretflagtest"
)

// Every string flag of every sagactl command refuses a value carrying a
// password (here the libpq keyword form) with secretflag's one message
// (issue 48 item 3), before the command connects to anything.
func TestEveryCommandRefusesSecretFlags(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a command that got past its flags must not wait on anything
	for _, c := range []struct {
		prefix []string
		names  []string // nil: the string flags its --help lists
	}{
		{prefix: []string{"schema", "print"}}, {prefix: []string{"schema", "apply"}}, {prefix: []string{"schema", "diff"}},
		{prefix: []string{"sql-barrier", "print"}}, {prefix: []string{"sql-barrier", "apply"}}, {prefix: []string{"ring"}},
		{[]string{"list"}, secretflagtest.FlagSetStrings(newAdminFlags("list").fs)},
		{[]string{"show"}, secretflagtest.FlagSetStrings(newAdminFlags("show").fs)},
		{[]string{"restore"}, secretflagtest.FlagSetStrings(newAdminFlags("restore").fs)},
		{[]string{"resume"}, secretflagtest.FlagSetStrings(newAdminFlags("resume").fs)},
		{[]string{"cancel"}, secretflagtest.FlagSetStrings(newAdminFlags("cancel").fs)},
		{[]string{"terminate"}, secretflagtest.FlagSetStrings(newAdminFlags("terminate").fs)},
		{[]string{"trace-window"}, secretflagtest.FlagSetStrings(newTraceWindowFlags().fs)},
		{[]string{"dlt", "list"}, secretflagtest.FlagSetStrings(newDLTFlags().fs)},
		{[]string{"dlt", "show"}, secretflagtest.FlagSetStrings(newDLTFlags().fs)},
		{[]string{"dlt", "replay"}, secretflagtest.FlagSetStrings(newDLTFlags().fs)},
	} {
		command := "sagactl " + strings.Join(c.prefix, " ")
		runWith := func(args []string) string {
			var out bytes.Buffer
			run(ctx, append(append([]string{}, c.prefix...), args...), &out, &out)
			return out.String()
		}
		if c.names == nil {
			c.names = secretflagtest.StringFlags(runWith([]string{"--help"}))
		}
		secretflagtest.Refused(t, command, c.names, runWith)
	}
}

// A flag named password is refused whatever its value, with the same
// message.
func TestPasswordFlagRefusedWithTheOneMessage(t *testing.T) {
	var out bytes.Buffer
	run(context.Background(), []string{"schema", "apply", "--password", "hunter2"}, &out, &out)
	if s := out.String(); !strings.Contains(s, "--password: refused") || strings.Contains(s, "hunter2") {
		t.Fatalf("sagactl schema apply --password hunter2: %q", s)
	}
}
