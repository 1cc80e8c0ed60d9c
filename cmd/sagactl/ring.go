package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/secretflag"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
)

// runRing prints the ring coordinator's assignment: which node holds which
// token range for this minute and the next. It presents the token in
// STACKSAGA_COORDINATOR_TOKEN.
func runRing(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sagactl ring", flag.ContinueOnError)
	fs.SetOutput(stderr)
	master := fs.String("master", "127.0.0.1:7070", "ring coordinator master (host:port)")
	asJSON := fs.Bool("json", false, "print the assignment as one JSON document")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the master and its slaves")
	if err := secretflag.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sagactl ring: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// The coordinator's token, if it has one, comes from the environment
	// only (never a flag: it would show in the process list).
	a, err := ringcoordinator.FetchAssignment(ctx, *master, ringcoordinator.WithToken(os.Getenv(ringcoordinator.EnvToken)))
	if err != nil {
		fmt.Fprintln(stderr, "sagactl ring:", err)
		return exitFailure
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(a); err != nil {
			return exitFailure
		}
		return exitOK
	}
	if err := ringcoordinator.FormatAssignment(stdout, a, time.Now()); err != nil {
		fmt.Fprintln(stderr, "sagactl ring:", err)
		return exitFailure
	}
	return exitOK
}
