package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/mdlint"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// loopbackAddr is a host:port on loopback in a documented command line.
var loopbackAddr = regexp.MustCompile(`(127\.0\.0\.1|localhost):\d+`)

// TestDocCommands runs every sagactl command line of README.md and
// docs/*.md (`sagactl ...` and `go run ./cmd/sagactl ...`, with the
// environment assignments before them) through sagactl as a user would
// type it, with every server address turned into one nothing listens on:
// none may end in a usage error (exit 2: an unknown flag or subcommand, a
// missing argument, no service, a token it needs), so a command the docs
// show cannot have been renamed or lost a required part. What a command
// then does on the servers is the business of the end-to-end tests; here
// it fails to connect (exit 1) or, for the print commands, succeeds.
// getting-started.md's commands also run on the real servers
// (TestGettingStarted, examples/quickstart/checkout).
func TestDocCommands(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	md, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, md...)
	closed := testenv.ClosedAddr(t)
	n := 0
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		cmds, err := mdlint.Commands(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			args := c.Args
			switch {
			case len(args) > 0 && args[0] == "sagactl":
				args = args[1:]
			case len(args) > 2 && args[0] == "go" && args[1] == "run" && args[2] == "./cmd/sagactl":
				args = args[3:]
			default:
				continue
			}
			n++
			t.Run(strings.ReplaceAll(rel, "/", "_")+":"+itoa(c.Line), func(t *testing.T) {
				clearAdminEnv(t)
				// The brokers of a command without --brokers: the one
				// variable at the closed port (the deprecated one unset).
				t.Setenv(envKafkaBrokers, closed)
				t.Setenv(kafkaflags.DeprecatedEnvBrokers, "")
				t.Setenv(envTraceWindowToken, "")
				t.Setenv(envTraceWindowReadToken, "")
				t.Setenv(envSQLBarrierDSN, "")
				// The Cassandra of a --config file is overridden by the
				// environment, the flags' addresses are rewritten.
				t.Setenv(cassandra.EnvContactPoints, closed)
				for _, e := range c.Env {
					k, v, _ := strings.Cut(e, "=")
					t.Setenv(k, loopbackAddr.ReplaceAllString(v, closed))
				}
				run := make([]string, len(args))
				for i, a := range args {
					switch {
					case i > 0 && args[i-1] == "--addr":
						a = "127.0.0.1:0" // a listen address
					case i > 0 && args[i-1] == "--config" && !filepath.IsAbs(a):
						a = filepath.Join(root, a)
					case a == "<txid>":
						a = "01a248d8-98cb-8001-8112-9d9eae1ef6ea"
					default:
						a = loopbackAddr.ReplaceAllString(a, closed)
					}
					run[i] = a
				}
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				var out, errOut bytes.Buffer
				code := runFn(ctx, run, &out, &errOut)
				t.Logf("sagactl %q: exit %d: %s", run, code, strings.TrimSpace(errOut.String()))
				if code == exitUsage {
					t.Errorf("%s:%d: sagactl %s: usage error (exit %d): %s", rel, c.Line, strings.Join(args, " "), code, errOut.String())
				}
				if (len(args) > 1 && args[1] == "print") != (code == exitOK) {
					t.Errorf("%s:%d: sagactl %s: exit %d (only the print commands can succeed without servers): %s", rel, c.Line, strings.Join(args, " "), code, errOut.String())
				}
			})
		}
	}
	if n < 5 {
		t.Fatalf("only %d sagactl command lines in the docs: the extraction finds nothing", n)
	}
}

// runFn is run, named so that the subtests' run slice does not shadow it.
var runFn = run

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}
