package main

// sagactl trace-window: the Trace Window of one service, served from the
// event store alone.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/tracewindow/cassandraindex"
)

// envTraceWindowToken holds the admin token of trace-window (a flag would
// show it in the process list).
const envTraceWindowToken = "STACKSAGA_TRACE_WINDOW_TOKEN"

// envTraceWindowReadToken holds the bearer token that reads (the admin token
// reads too).
const envTraceWindowReadToken = "STACKSAGA_TRACE_WINDOW_READ_TOKEN"

const traceWindowUsage = `usage:
  sagactl trace-window --service NAME [--addr 127.0.0.1:8088] [--config FILE] [flags]

trace-window serves the Trace Window of one service (its sagas' timelines,
compensation trails, retry audits and live health, as a web page and a JSON
API under /api/) from the Cassandra event store alone, until interrupted.
Open the printed address in a browser.

Finding a saga by transaction id needs nothing else. Listing recent sagas
(by domain, time range and state) and the in-flight counts read the index
table es_transactions_by_bucket that the orchestrator service writes when it
wires tracewindow/cassandraindex; without it the list says so.

Every API read needs a bearer token: the one in
STACKSAGA_TRACE_WINDOW_READ_TOKEN, or the admin token (which reads too); the
page asks for it. --anonymous-reads serves every saga's data to anyone who
can reach the address instead: only on loopback or behind a proxy that
authenticates.

It is read-only unless --admin is given: then the saga page offers restore
(recovery.Restore: a DISABLED, COMPENSATION_FAILED or RETRY_PENDING saga goes
back to the retry nodes, as sagactl restore does), authorised by the bearer
token in STACKSAGA_TRACE_WINDOW_TOKEN (at least 16 bytes), which the page
asks for.
Every restore is recorded in the saga's admin audit trail (who: "admin-token
from <address>", when, the result), which the saga page and sagactl show
show; on a keyspace without the audit table (run sagactl schema apply) the
action still runs, and its answer says the record was not written.

flags:
  --addr HOST:PORT      where to listen (default 127.0.0.1:8088; keep it on
                        loopback or behind an authenticating proxy)
  --admin               enable the restore action (needs the token)
  --allowed-host NAMES  comma-separated host names the page is served under
                        besides IP addresses and localhost (e.g. the name a
                        proxy or your DNS gives it); a request for any other
                        Host is refused with 421 (DNS rebinding)
  --anonymous-reads     serve reads without a token (see above)
  --health-window D     how far back the health counts look (default: the
                        transaction lifetime of --config, 24h)
  --trace-link TEMPLATE link to your tracing UI on the saga page, with
                        {trace_id} (the saga's OpenTelemetry trace id) and {tx_id}
                        replaced, e.g. http://localhost:16686/trace/{trace_id}
  --service, --region, --cluster, --config, --hosts, --keyspace,
  --local-datacenter, --username, --password-file   as for sagactl list
  --timeout D           bound on connecting to Cassandra (default 2m)

exit codes: 0 stopped by a signal, 1 runtime error, 2 usage error.
`

// traceWindowFlags are sagactl trace-window's flags: the admin commands'
// and the page's own.
type traceWindowFlags struct {
	*adminFlags
	addr, traceLink, allowedHosts *string
	admin, anonymous              *bool
	healthWindow                  *time.Duration
}

func newTraceWindowFlags() traceWindowFlags {
	f := traceWindowFlags{adminFlags: newAdminFlags("trace-window")}
	f.addr = f.fs.String("addr", "127.0.0.1:8088", "listen address")
	f.admin = f.fs.Bool("admin", false, "enable admin actions")
	f.anonymous = f.fs.Bool("anonymous-reads", false, "serve reads without a token")
	f.healthWindow = f.fs.Duration("health-window", 0, "health window")
	f.traceLink = f.fs.String("trace-link", "", "tracing UI link template")
	f.allowedHosts = f.fs.String("allowed-host", "", "comma-separated host names served besides IP addresses and localhost")
	return f
}

// runTraceWindow runs sagactl trace-window until ctx ends or a signal.
func runTraceWindow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	tf := newTraceWindowFlags()
	f, addr, admin, anonymous, healthWindow, traceLink, allowedHosts := tf.adminFlags, tf.addr, tf.admin, tf.anonymous, tf.healthWindow, tf.traceLink, tf.allowedHosts
	pos, err := f.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, traceWindowUsage)
		return exitOK
	}
	if err != nil {
		return failf(stderr, exitUsage, "trace-window: %v (see sagactl trace-window -h)", err)
	}
	if len(pos) > 0 {
		return failf(stderr, exitUsage, "trace-window: unexpected arguments %q (see sagactl trace-window -h)", pos)
	}
	if *f.timeout <= 0 {
		return failf(stderr, exitUsage, "trace-window: --timeout %v: want a positive duration", *f.timeout)
	}
	if *healthWindow < 0 {
		return failf(stderr, exitUsage, "trace-window: --health-window %v: want a positive duration", *healthWindow)
	}
	token := strings.TrimSpace(os.Getenv(envTraceWindowToken))
	if *admin && len(token) < tracewindow.MinTokenLen {
		return failf(stderr, exitUsage, "trace-window: --admin needs a token of at least %d bytes in %s", tracewindow.MinTokenLen, envTraceWindowToken)
	}
	readToken := strings.TrimSpace(os.Getenv(envTraceWindowReadToken))
	if readToken != "" && len(readToken) < tracewindow.MinTokenLen {
		return failf(stderr, exitUsage, "trace-window: %s must be at least %d bytes", envTraceWindowReadToken, tracewindow.MinTokenLen)
	}
	if readToken == "" && *admin {
		readToken = token // the admin token reads too
	}
	set := f.set()
	var data []byte
	if *f.config != "" {
		if data, err = os.ReadFile(*f.config); err != nil {
			return failf(stderr, exitFailure, "read configuration: %v", err)
		}
	}
	scope, err := resolveScope(f, set, data)
	if err != nil {
		return failf(stderr, exitUsage, "trace-window: %v", err)
	}
	if readToken == "" && !*anonymous {
		return failf(stderr, exitUsage, "trace-window: reads need a token of at least %d bytes in %s (or %s with --admin), or --anonymous-reads",
			tracewindow.MinTokenLen, envTraceWindowReadToken, envTraceWindowToken)
	}
	ccfg, err := cassandraConfig(f, set)
	if err != nil {
		return failf(stderr, exitFailure, "%v", err)
	}
	var rcfg recovery.Config
	if *f.config != "" {
		rcfg, err = recovery.LoadConfigFile(*f.config)
	} else {
		rcfg, err = recovery.LoadConfig(nil)
	}
	if err != nil {
		return failf(stderr, exitFailure, "%v", err)
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	store, err := cassandra.New(cctx, ccfg, cassandra.WithLogger(quiet))
	if err != nil {
		return failf(stderr, exitFailure, "open the event store (%s, keyspace %s): %v", strings.Join(ccfg.ContactPoints, ","), ccfg.Keyspace, err)
	}
	defer store.Close()
	// sagactl never changes the schema: the orchestrator service's index
	// creates its tables.
	idx, err := cassandraindex.New(cctx, ccfg, cassandraindex.WithoutSchema(), cassandraindex.WithLogger(logger))
	if err != nil {
		return failf(stderr, exitFailure, "open the listing index: %v", err)
	}
	defer idx.Close()
	if _, err := idx.Domains(cctx, scope); errors.Is(err, cassandraindex.ErrNoTable) {
		logger.Warn("sagactl trace-window: no listing index in this keyspace: sagas can be found by transaction id only (wire tracewindow/cassandraindex into the orchestrator service)")
	} else {
		// Write into the index what a killed orchestrator service took
		// with its queue, from the store, while the page serves.
		var repairs sync.WaitGroup
		defer repairs.Wait()
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		repairs.Go(func() {
			res, err := tracewindow.Repair(rctx, store, idx, scope, rcfg, now())
			if err != nil {
				logger.Warn("sagactl trace-window: index repair from the store", "err", err)
				return
			}
			logger.Info("sagactl trace-window: index repaired from the store", "directory", res.Directory, "checked", res.Indexed, "moved", res.Moved, "truncated", res.Truncated)
		})
	}

	opts := []tracewindow.Option{tracewindow.WithIndex(idx), tracewindow.WithRecovery(rcfg), tracewindow.WithLogger(logger),
		tracewindow.WithClock(now)}
	if *healthWindow > 0 {
		opts = append(opts, tracewindow.WithHealthWindow(*healthWindow))
	}
	if *traceLink != "" {
		opts = append(opts, tracewindow.WithTraceLink(*traceLink))
	}
	if *allowedHosts != "" {
		opts = append(opts, tracewindow.WithAllowedHosts(strings.Split(*allowedHosts, ",")...))
	}
	mode := "read-only"
	if readToken != "" {
		opts = append(opts, tracewindow.WithReadToken(readToken))
		mode += ", reads need a bearer token"
	} else {
		opts = append(opts, tracewindow.WithAnonymousReads())
		mode += ", anonymous reads"
	}
	if *admin {
		w, err := recovery.NewWriter(store, rcfg, recovery.WithClock(now), recovery.WithLogger(logger))
		if err != nil {
			return failf(stderr, exitFailure, "%v", err)
		}
		opts = append(opts, tracewindow.WithAdmin(tracewindow.Admin{Token: token, Restore: tracewindow.RecoveryRestore(store, w, scope, now)}))
		mode = "admin actions: restore (bearer token from " + envTraceWindowToken + ")" + strings.TrimPrefix(mode, "read-only")
	}
	h, err := tracewindow.New(store, scope, opts...)
	if err != nil {
		return failf(stderr, exitFailure, "%v", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return failf(stderr, exitFailure, "trace-window: listen on %s: %v", *addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	fmt.Fprintf(stdout, "trace window of %s/%s/%s on http://%s/ (%s)\n", scope.Region, scope.Cluster, scope.Service, ln.Addr(), mode)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return failf(stderr, exitFailure, "trace-window: serve: %v", err)
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	return exitOK
}
