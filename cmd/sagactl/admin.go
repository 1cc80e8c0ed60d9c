package main

// The admin commands: list, show, restore.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/internal/secretflag"
	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// Exit codes.
const (
	exitOK              = 0
	exitFailure         = 1 // the store is unreachable, a query failed, the configuration is invalid
	exitUsage           = 2
	exitNotFound        = 3
	exitNotRestorable   = 4
	exitNotPaused       = 4 // resume: not paused, or a wrong correlation key
	defaultListLimit    = 50
	defaultAdminTimeout = 2 * time.Minute
)

// Environment variables of the scope (stacksaga.instance.* in the YAML).
const (
	envRegion  = "STACKSAGA_INSTANCE_REGION"
	envCluster = "STACKSAGA_INSTANCE_CLUSTER"
	envService = "STACKSAGA_INSTANCE_SERVICE"
)

// now is the clock of the admin commands (tests replace it).
var now = func() time.Time { return time.Now().UTC() }

// listNames are the lists of sagactl list: the one source of both usages
// and of the argument check.
var listNames = []string{"in-flight", "all", "retry-pending", "paused", "frozen", "disabled", "compensation-failed"}

// adminUsage is the help of list, show, restore, resume, cancel and
// terminate; LISTS stands for the list names.
var adminUsage = strings.ReplaceAll(`usage:
  sagactl list LISTS [--limit N] [--after TXID | --page P] [flags]
  sagactl list in-flight|all [--state S,S] [--domain D] [--older-than D] [--newer-than D]
                             [--business-key K --domain D] [--limit N] [--after TXID] [flags]
  sagactl show TXID [flags]
  sagactl restore TXID [--actor NAME] [flags]
  sagactl restore --all-disabled [--actor NAME] [flags]
  sagactl resume TXID CORRELATION_KEY [key=value ...] [--actor NAME] [flags]
  sagactl cancel|terminate TXID --reason TEXT --brokers H:9092 [--actor NAME] [flags]

list prints the sagas of one service, newest first (transaction ids made
by the orchestrator sort by creation time), with state, step, age and
reason:
  in-flight      every saga that has not ended: in any state but the terminal
                 COMPLETED, COMPENSATED, COMPENSATION_FAILED and TERMINATED
                 (so STARTED, IN_PROGRESS, PAUSED, RETRY_PENDING, FAILED,
                 CANCELLING, COMPENSATING, and DISABLED, which waits for an
                 admin). Read from the store alone: every saga the recovery
                 directory names over the days a retry node scans (each saga
                 in flight has a restore watchdog from its start) and every
                 saga of the frozen table, each state read from its row. No
                 index, no table scan: an empty list means every saga ended
                 (but one whose watchdog is older than lookback-days)
  all            every saga created in a time range, in any state (default
                 the last 24 hours, at most 31 days: --newer-than sets it):
                 read from the Trace Window's index (es_transactions_by_bucket,
                 fed by the orchestrator service through
                 tracewindow/cassandraindex), each state read from the store
  retry-pending  sagas parked in RETRY_PENDING with a retry registered: found
                 by walking the recovery directory's retry buckets (today -
                 lookback-days up to the farthest retry window), not by a
                 table scan; a RETRY_PENDING saga without a retry entry is
                 picked up by its restore watchdog instead
  paused         sagas PAUSED by a step (or a decision) until a resume: found
                 by walking the retry and restore buckets over the same days
                 (every saga in flight has a restore watchdog), with the event
                 waited for, the deadline (none: it waits for ever), how long
                 it has been paused, whether a resume was requested (CLAIM)
                 and the correlation key a resume must give
  frozen         every saga of the frozen table (es_frozen_transaction)
  disabled       frozen sagas now DISABLED (outlived transaction-lifetime)
  compensation-failed
                 frozen sagas now COMPENSATION_FAILED ("terminated", its
                 older name, still works, with a note: it does not list
                 TERMINATED sagas)
  Pages hold --limit sagas (default 50); the table ends with the --after
  cursor of the next page when there is one; --page P is page P (from 1;
  not with all).
  in-flight and all take filters, combined with AND:
  --state S,S         keep these states (in-flight: states that have not ended)
  --domain D          keep one saga domain
  --older-than D      keep sagas created at least D ago (e.g. 10m)
  --newer-than D      keep sagas created at most D ago (all: default 24h, at
                      most 744h)
  --business-key K    keep the saga the business key K names (with --domain:
                      keys are per domain)

show prints one saga (state, definition version, step, error, lifetime,
trace id, watchdog, frozen copy), its whole history: index, span, kind,
endpoint, attempt, outcome, error, started, duration, and its admin audit
trail: every admin action on it (when, who, action, detail, result, error),
from sagactl and the Trace Window. The lists show each saga's definition
version (DEF: the version of its domain's definition it started with).

restore makes a saga run again through the retry nodes (it sends nothing
itself): a DISABLED saga's lifetime restarts now; a DISABLED or
COMPENSATION_FAILED saga becomes RETRY_PENDING at its current step (a failed
compensation stays a compensation) with a new restore watchdog and leaves the
frozen table; then a retry is registered in the next window, so the next
retry-node pass after it sends the step again with attempt+1. A RETRY_PENDING
saga only gets a retry registered. --all-disabled restores every DISABLED
saga of the service. What was done is printed per saga.

resume asks for the resume of a PAUSED saga through the store alone (it
sends nothing itself; an orchestrator's Resume or resume webhook does the
same in one go): CORRELATION_KEY must be the key of the step that paused it
(see list paused), compared in constant time; the key=value pairs are the
resume context the next step receives (worker.Step.Resumed). It claims the
pause for the resume (so its deadline can no longer invoke the step again)
and registers a retry in the next window: a retry node continues the saga
on its first pass after that window. Resuming again with the same key does
nothing new and exits 0 (already resumed; a saga still waiting for its
retry node gets another retry registered).

restore and resume record each saga they act on in its admin audit trail
(the store's es_admin_audit, which show and the Trace Window show): who
(--actor, default sagactl:<os user>@<hostname>), when, the action (and for
resume the correlation key and the context's keys, never their values), the
result (ok; refused: wrong state, not found, wrong correlation key, bad
request; failed) and the error. A record that cannot be written (a keyspace
from before the audit table: run sagactl schema apply) is reported on stderr
as a warning and in the JSON's "audit" field; the exit code stays the
action's.

cancel asks the orchestrator that owns the saga's replies to cancel it: it
goes no further and compensates the steps it completed, in reverse (a step in
flight once its reply arrives); it ends COMPENSATED. terminate asks for it to
be stopped at once without compensating: it ends TERMINATED. Both read the
saga from the store (a saga that has ended is refused, exit 4; cancel refuses
a DISABLED saga too: restore or terminate it), then produce the request on the
domain's callback topic (--brokers, or env STACKSAGA_KAFKA_BROKERS; TLS and
SASL with the --kafka-* flags below, plaintext without them), where the orchestrator applies it in order with the saga's replies;
the saga's history then holds a "cancelled" or "terminated" row with the
actor and --reason (required, at most 1024 bytes). Both are audited as
restore and resume are.

flags (every command):
  --service NAME        the orchestrating service (required; env
                        STACKSAGA_INSTANCE_SERVICE, yaml stacksaga.instance.service)
  --region NAME         region (default "default"; env STACKSAGA_INSTANCE_REGION,
                        yaml stacksaga.instance.region)
  --cluster NAME        virtual cluster (default "default"; env
                        STACKSAGA_INSTANCE_CLUSTER, yaml stacksaga.instance.cluster)
  --config FILE         the services' YAML: its stacksaga.cassandra section
                        (connection, and recovery: window interval, lookback-days,
                        delays, so restore registers into the retry nodes' windows)
  --hosts H1:9042,H2    contact points (default 127.0.0.1:9042)
  --keyspace KS         keyspace (default stacksaga_event_store)
  --local-datacenter DC data centre (default datacenter1)
  --username U, --password-file FILE
                        the password is read from FILE (or env
                        STACKSAGA_CASSANDRA_PASSWORD); --password is refused, as
                        a flag shows the secret in the process list
  --timeout D           bound on the whole command (default 2m)
  --json                print one JSON document on stdout instead of text
  --actor NAME          restore, resume, cancel, terminate: who the audit
                        records (and cancel's and terminate's history row) name (default
                        sagactl:<os user>@<hostname>; at most 256 bytes)
  --kafka-tls, --kafka-tls-ca FILE, --kafka-tls-cert FILE --kafka-tls-key FILE,
  --kafka-sasl-user NAME, --kafka-sasl-mechanism plain|scram-sha-256|scram-sha-512,
  --kafka-sasl-password-env VAR
                        cancel, terminate: the Kafka client's TLS and SASL, as
                        sagademo and sagabench take them (the password from the
                        variable VAR, default KAFKA_SASL_PASSWORD; never a flag)
  Values come from --config, then the environment (STACKSAGA_CASSANDRA_*,
  STACKSAGA_INSTANCE_*), then the flags.

exit codes:
  0  done
  1  runtime error: store unreachable, a query failed, invalid configuration
  2  usage error
  3  saga not found (show, restore, resume, cancel, terminate)
  4  saga not restorable in its state (restore); saga not paused, or a
     wrong or stale correlation key (resume); saga ended, or DISABLED
     (cancel, terminate)
  restore --all-disabled exits 1 if any restore failed at run time, else 4
  if any was not restorable, else 3 if any was gone, else 0.
Errors go to stderr, one line each, naming what failed.

examples:
  sagactl list disabled --service order-service --config stacksaga.yaml
  sagactl list retry-pending --service order-service --limit 20 --after <next_after>
  sagactl show <txid> --service order-service --json
  sagactl restore --all-disabled --service order-service --config stacksaga.yaml
  sagactl list paused --service order-service --config stacksaga.yaml
  sagactl resume <txid> <txid>:1:process status=authorised payment_ref=psp-42 --service order-service
  sagactl list in-flight --service order-service --older-than 10m --json
  sagactl list all --service order-service --domain place-order --state COMPENSATED --newer-than 2h
`, "LISTS", strings.Join(listNames, "|"))

// adminFlags are the flags of list, show and restore.
type adminFlags struct {
	fs                                                   *flag.FlagSet
	config, hosts, keyspace, localDC, username, password *string
	passwordFile                                         *string
	region, cluster, service                             *string
	timeout                                              *time.Duration
	json                                                 *bool
	// list
	limit, page *int
	after       *string
	// list in-flight, all
	states, domain, businessKey *string
	olderThan, newerThan        *time.Duration
	// restore
	allDisabled *bool
	// restore, resume, cancel, terminate
	actor *string
	// cancel, terminate
	reason, brokers *string
	kafka           *kafkaflags.Flags
}

func newAdminFlags(cmd string) *adminFlags {
	fs := flag.NewFlagSet("sagactl "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f := &adminFlags{fs: fs}
	f.config = fs.String("config", "", "YAML file with a stacksaga section")
	f.hosts = fs.String("hosts", "", "contact points")
	f.keyspace = fs.String("keyspace", "", "keyspace")
	f.localDC = fs.String("local-datacenter", "", "local data centre")
	f.username = fs.String("username", "", "user")
	f.password = fs.String("password", "", "refused: use --password-file or STACKSAGA_CASSANDRA_PASSWORD")
	f.passwordFile = fs.String("password-file", "", "file holding the password")
	f.region = fs.String("region", "", "region")
	f.cluster = fs.String("cluster", "", "virtual cluster")
	f.service = fs.String("service", "", "orchestrating service")
	f.timeout = fs.Duration("timeout", defaultAdminTimeout, "bound on the command")
	f.json = fs.Bool("json", false, "JSON output")
	switch cmd {
	case "list":
		f.limit = fs.Int("limit", defaultListLimit, "page size")
		f.page = fs.Int("page", 0, "page number from 1")
		f.after = fs.String("after", "", "cursor")
		f.states = fs.String("state", "", "states, comma-separated")
		f.domain = fs.String("domain", "", "saga domain")
		f.businessKey = fs.String("business-key", "", "business key (with --domain)")
		f.olderThan = fs.Duration("older-than", 0, "created at least this long ago")
		f.newerThan = fs.Duration("newer-than", 0, "created at most this long ago")
	case "restore":
		f.allDisabled = fs.Bool("all-disabled", false, "restore every DISABLED saga")
	}
	if cmd == "restore" || cmd == "resume" || cmd == "cancel" || cmd == "terminate" {
		f.actor = fs.String("actor", "", "who the audit records name")
	}
	if cmd == "cancel" || cmd == "terminate" {
		f.reason = fs.String("reason", "", "why (recorded in the saga's history)")
		f.brokers = fs.String("brokers", "", "Kafka brokers")
		f.kafka = kafkaflags.Register(fs)
	}
	return f
}

// parse parses args with flags and positional arguments in any order.
func (f *adminFlags) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := secretflag.Parse(f.fs, args); err != nil {
			return nil, err
		}
		args = f.fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func (f *adminFlags) set() map[string]bool {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return set
}

// cli is one admin command's run.
type cli struct {
	stdout, stderr io.Writer
	json           bool
	scope          eventstore.Scope
	store          eventstore.Store
	ccfg           cassandra.Config
	rcfg           recovery.Config
	// actor names who runs restore and resume in their audit records.
	actor string
}

// failf prints one error line and returns code.
func (c *cli) failf(code int, format string, args ...any) int {
	return failf(c.stderr, code, format, args...)
}

func failf(stderr io.Writer, code int, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
	fmt.Fprintln(stderr, "sagactl: "+msg)
	return code
}

// runAdmin runs list, show or restore.
func runAdmin(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	f := newAdminFlags(cmd)
	pos, err := f.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, adminUsage)
		return exitOK
	}
	if err != nil {
		return failf(stderr, exitUsage, "%s: %v (see sagactl %s -h)", cmd, err, cmd)
	}
	set := f.set()

	// Arguments first: a usage error needs no store.
	var what string // list: the list; show, restore, resume: the TXID
	var lf listFilter
	var key string // resume: the correlation key
	var rc map[string]string
	var kafkaOpts []kgo.Opt // cancel, terminate: TLS and SASL
	switch cmd {
	case "list":
		var code int
		if what, lf, code = parseList(f, set, pos, stderr); code != exitOK {
			return code
		}
	case "show":
		if len(pos) != 1 || pos[0] == "" {
			return failf(stderr, exitUsage, "show: want one TXID, got %q (see sagactl show -h)", pos)
		}
		what = pos[0]
	case "restore":
		switch {
		case *f.allDisabled && len(pos) > 0:
			return failf(stderr, exitUsage, "restore: give a TXID or --all-disabled, not both")
		case !*f.allDisabled && (len(pos) != 1 || pos[0] == ""):
			return failf(stderr, exitUsage, "restore: want one TXID or --all-disabled, got %q (see sagactl restore -h)", pos)
		case len(pos) == 1:
			what = pos[0]
		}
	case "resume":
		if len(pos) < 2 || pos[0] == "" || pos[1] == "" {
			return failf(stderr, exitUsage, "resume: want TXID CORRELATION_KEY [key=value ...], got %q (see sagactl resume -h)", pos)
		}
		what, key = pos[0], pos[1]
		if rc, err = resumeContext(pos[2:]); err != nil {
			return failf(stderr, exitUsage, "resume: %v", err)
		}
	case "cancel", "terminate":
		if len(pos) != 1 || pos[0] == "" {
			return failf(stderr, exitUsage, "%s: want one TXID, got %q (see sagactl %s -h)", cmd, pos, cmd)
		}
		what = pos[0]
		if strings.TrimSpace(*f.reason) == "" {
			return failf(stderr, exitUsage, "%s: --reason is required (it is recorded in the saga's history)", cmd)
		}
		if *f.brokers == "" {
			*f.brokers = envBrokers(stderr)
		}
		if *f.brokers == "" {
			return failf(stderr, exitUsage, "%s: --brokers (or %s) is required: the request goes to the orchestrator through Kafka", cmd, envKafkaBrokers)
		}
		if kafkaOpts, err = f.kafka.Opts(os.LookupEnv); err != nil {
			return failf(stderr, exitUsage, "%s: %v", cmd, err)
		}
		if w := f.kafka.Warning(); w != "" {
			fmt.Fprintf(stderr, "sagactl: %s: warning: %s\n", cmd, w)
		}
	}
	if cmd != "list" && what != "" {
		if err := validTxID(what); err != nil {
			return failf(stderr, exitUsage, "%s: %v", cmd, err)
		}
	}
	if *f.timeout <= 0 {
		return failf(stderr, exitUsage, "%s: --timeout %v: want a positive duration", cmd, *f.timeout)
	}
	var actor string
	if f.actor != nil {
		actor = strings.TrimSpace(*f.actor)
		switch {
		case !set["actor"]:
			actor = defaultActor()
		case actor == "":
			return failf(stderr, exitUsage, "%s: --actor is empty", cmd)
		case len(actor) > eventstore.MaxAuditActorBytes || !utf8.ValidString(actor):
			return failf(stderr, exitUsage, "%s: --actor: want valid UTF-8 of at most %d bytes", cmd, eventstore.MaxAuditActorBytes)
		}
	}

	c := &cli{stdout: stdout, stderr: stderr, json: *f.json, actor: actor}
	var data []byte
	if *f.config != "" {
		if data, err = os.ReadFile(*f.config); err != nil {
			return c.failf(exitFailure, "read configuration: %v", err)
		}
	}
	scope, err := resolveScope(f, set, data)
	if err != nil {
		return c.failf(exitUsage, "%v", err)
	}
	c.scope = scope
	ccfg, err := cassandraConfig(f, set)
	if err != nil {
		return c.failf(exitFailure, "%v", err)
	}
	c.ccfg = ccfg
	if *f.config != "" {
		c.rcfg, err = recovery.LoadConfigFile(*f.config)
	} else {
		c.rcfg, err = recovery.LoadConfig(nil)
	}
	if err != nil {
		return c.failf(exitFailure, "%v", err)
	}

	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	store, err := cassandra.New(ctx, ccfg, cassandra.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return c.failf(exitFailure, "open the event store (%s, keyspace %s): %v", strings.Join(ccfg.ContactPoints, ","), ccfg.Keyspace, err)
	}
	defer store.Close()
	c.store = store

	switch cmd {
	case "list":
		page := recovery.Page{Limit: *f.limit, After: *f.after}
		if set["page"] {
			page.Offset = (*f.page - 1) * *f.limit
		}
		if what == "in-flight" || what == "all" {
			return c.listSagas(ctx, what, page, lf)
		}
		return c.list(ctx, what, page)
	case "show":
		return c.show(ctx, what)
	case "resume":
		return c.resume(ctx, what, key, rc)
	case "cancel", "terminate":
		return c.control(ctx, cmd, what, *f.reason, strings.Split(*f.brokers, ","), kafkaOpts)
	default:
		if *f.allDisabled {
			return c.restoreAllDisabled(ctx)
		}
		return c.restore(ctx, what)
	}
}

// resolveScope takes each part of the scope from its flag, its variable,
// the YAML's stacksaga.instance section, then the default.
func resolveScope(f *adminFlags, set map[string]bool, yamlData []byte) (eventstore.Scope, error) {
	var doc struct {
		Stacksaga struct {
			Instance struct {
				Region  string `yaml:"region"`
				Cluster string `yaml:"cluster"`
				Service string `yaml:"service"`
			} `yaml:"instance"`
		} `yaml:"stacksaga"`
	}
	if err := yamlconfig.Decode(yamlData, &doc); err != nil {
		return eventstore.Scope{}, fmt.Errorf("%s: %w", *f.config, err)
	}
	in := doc.Stacksaga.Instance
	env := yamlconfig.Env(os.LookupEnv)
	pick := func(flagName string, flagVal *string, envName, yamlVal, def string) string {
		if set[flagName] {
			return strings.TrimSpace(*flagVal)
		}
		if v, ok := env(envName); ok {
			return v
		}
		if v := strings.TrimSpace(yamlVal); v != "" {
			return v
		}
		return def
	}
	s := eventstore.Scope{
		Region:  pick("region", f.region, envRegion, in.Region, "default"),
		Cluster: pick("cluster", f.cluster, envCluster, in.Cluster, "default"),
		Service: pick("service", f.service, envService, in.Service, ""),
	}
	switch {
	case s.Service == "":
		return s, errors.New("no service: give --service (or STACKSAGA_INSTANCE_SERVICE, or stacksaga.instance.service in --config)")
	case s.Region == "":
		return s, errors.New("--region is empty")
	case s.Cluster == "":
		return s, errors.New("--cluster is empty")
	}
	return s, nil
}

// cassandraConfig is the connection configuration: --config, then the
// environment, then the flags.
func cassandraConfig(f *adminFlags, set map[string]bool) (cassandra.Config, error) {
	var cfg cassandra.Config
	var err error
	if *f.config != "" {
		cfg, err = cassandra.LoadConfigFile(*f.config)
	} else {
		cfg, err = cassandra.LoadConfig(nil)
	}
	if err != nil {
		return cfg, err
	}
	if set["hosts"] {
		cfg.ContactPoints = splitList(*f.hosts)
	}
	if set["keyspace"] {
		cfg.Keyspace = *f.keyspace
	}
	if set["local-datacenter"] {
		cfg.LocalDatacenter = *f.localDC
	}
	if set["username"] {
		cfg.Username = *f.username
	}
	if err := applyPassword(set, *f.passwordFile, &cfg.Password); err != nil {
		return cfg, err
	}
	cfg.CreateSchema = false // an admin tool never changes the schema
	return cfg, cfg.Validate()
}

// printJSON writes v as the command's one JSON document.
func (c *cli) printJSON(v any) int {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return c.failf(exitFailure, "write JSON: %v", err)
	}
	return exitOK
}

func (c *cli) scopeString() string {
	return c.scope.Region + "/" + c.scope.Cluster + "/" + c.scope.Service
}

// JSON shapes.

type jsonScope struct {
	Region  string `json:"region"`
	Cluster string `json:"cluster"`
	Service string `json:"service"`
}

// jsonPath is a recovery-directory row: Day and Slot are its keys (a
// synthetic date with second window intervals), WindowStart and WindowEnd
// the window's real time.
type jsonPath struct {
	Day         string    `json:"day"`
	Slot        int       `json:"slot"`
	Instance    string    `json:"instance"`
	Bucket      int       `json:"bucket"`
	WindowStart time.Time `json:"window_start,omitzero"`
	WindowEnd   time.Time `json:"window_end,omitzero"`
}

// jsonPath is p with its window's real time (tracewindow.WindowOf).
func (c *cli) jsonPath(p eventstore.RecoveryPath) jsonPath {
	jp := jsonPath{Day: p.Day.Format(time.DateOnly), Slot: p.MinuteOfDay, Instance: p.InstanceID, Bucket: p.Bucket}
	if w, ok := tracewindow.WindowOf(c.rcfg, p); ok {
		jp.WindowStart, jp.WindowEnd = w.Start.UTC(), w.End.UTC()
	}
	return jp
}

type jsonSaga struct {
	TxID     string `json:"tx_id"`
	Domain   string `json:"domain"`
	State    string `json:"state"`
	Version  int64  `json:"version"`
	Span     int    `json:"span"`
	Kind     string `json:"kind"`
	Endpoint string `json:"endpoint"`
	Attempt  int    `json:"attempt"`
	// Error is the saga's error when it explains its state; LastError an
	// earlier attempt's error the saga went on from (history; see
	// tracewindow.ErrorIsState).
	Error         string    `json:"error,omitempty"`
	LastError     string    `json:"last_error,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	LifetimeStart time.Time `json:"lifetime_start"`
	AgeSeconds    int64     `json:"age_seconds"`
	PausedUntil   time.Time `json:"paused_until,omitzero"`
	TraceID       string    `json:"trace_id,omitempty"`
	Watchdog      *jsonPath `json:"watchdog,omitempty"`
	// Definition is the version of the domain's definition the saga
	// started with (1 for a saga written before versions).
	Definition int `json:"definition_version"`
}

func (c *cli) jsonSaga(tx eventstore.Transaction, at time.Time) jsonSaga {
	current, past := tracewindow.SplitError(&tx)
	s := jsonSaga{
		TxID: tx.TxID, Domain: tx.Domain, State: string(tx.State), Version: tx.Version,
		Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, Attempt: tx.Attempt, Error: current, LastError: past,
		CreatedAt: tx.CreatedAt, UpdatedAt: tx.UpdatedAt, LifetimeStart: tx.LifetimeFrom(),
		AgeSeconds: int64(at.Sub(tx.CreatedAt) / time.Second), PausedUntil: tx.PausedUntil, TraceID: tx.TraceID,
		Definition: definitionOf(tx),
	}
	if tx.RestorePath != nil {
		p := c.jsonPath(*tx.RestorePath)
		s.Watchdog = &p
	}
	return s
}

type jsonPending struct {
	jsonSaga
	RetryDue time.Time  `json:"retry_due"`
	Retries  []jsonPath `json:"retries"`
}

type jsonPaused struct {
	jsonSaga
	PauseEvent string `json:"pause_event"`
	// CorrelationKey is the key sagactl resume (or a Resume) must give.
	CorrelationKey string    `json:"correlation_key"`
	PausedAt       time.Time `json:"paused_at"`
	PausedSeconds  int64     `json:"paused_seconds"`
	// Claim is "resume" when a resume was requested and a retry node has
	// yet to continue the saga, "deadline" when its deadline passed.
	Claim   string     `json:"claim,omitempty"`
	Entries []jsonPath `json:"entries"`
}

type jsonFrozen struct {
	jsonSaga
	FrozenState string    `json:"frozen_state"`
	Reason      string    `json:"reason"`
	FrozenAt    time.Time `json:"frozen_at"`
}

type jsonList struct {
	List  string    `json:"list"`
	Scope jsonScope `json:"scope"`
	Limit int       `json:"limit"`
	// Next is the --after cursor of the next page ("" on the last page).
	Next  string `json:"next_after"`
	Sagas any    `json:"sagas"`
	// TotalFrozen counts the frozen table's rows (frozen lists only).
	TotalFrozen *int `json:"total_frozen,omitempty"`
}

// list runs `sagactl list`.
func (c *cli) list(ctx context.Context, which string, page recovery.Page) int {
	at := now()
	out := jsonList{List: which, Scope: jsonScope(c.scope), Limit: page.Limit}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	if which == "retry-pending" {
		l, err := recovery.ListRetryPending(ctx, c.store, c.scope, c.rcfg, at, page)
		if err != nil {
			return c.failf(exitFailure, "list retry-pending in %s: %v", c.scopeString(), err)
		}
		out.Next = l.Next
		sagas := []jsonPending{}
		if !c.json && len(l.Sagas) > 0 {
			fmt.Fprintln(tw, "TXID\tSTATE\tDOMAIN\tDEF\tSTEP\tATTEMPT\tAGE\tRETRY DUE\tERROR")
		}
		for _, s := range l.Sagas {
			js := jsonPending{jsonSaga: c.jsonSaga(s.Transaction, at), RetryDue: s.Due, Retries: []jsonPath{}}
			for _, p := range s.Retries {
				js.Retries = append(js.Retries, c.jsonPath(p))
			}
			sagas = append(sagas, js)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", s.TxID, s.State, s.Domain, definitionOf(s.Transaction), step(s.Transaction), s.Attempt,
				age(at.Sub(s.CreatedAt)), due(s.Due, at), oneLine(s.Error, 100))
		}
		out.Sagas = sagas
	} else if which == "paused" {
		l, err := recovery.ListPaused(ctx, c.store, c.scope, c.rcfg, at, page)
		if err != nil {
			return c.failf(exitFailure, "list paused in %s: %v", c.scopeString(), err)
		}
		out.Next = l.Next
		sagas := []jsonPaused{}
		if !c.json && len(l.Sagas) > 0 {
			fmt.Fprintln(tw, "TXID\tDOMAIN\tDEF\tSTEP\tEVENT\tAGE\tPAUSED FOR\tDEADLINE\tCLAIM\tCORRELATION KEY")
		}
		for _, s := range l.Sagas {
			js := jsonPaused{jsonSaga: c.jsonSaga(s.Transaction, at), PauseEvent: s.PauseEvent, CorrelationKey: s.CorrelationKey,
				PausedAt: s.UpdatedAt, PausedSeconds: int64(at.Sub(s.UpdatedAt) / time.Second), Claim: s.Claim, Entries: []jsonPath{}}
			for _, p := range s.Entries {
				js.Entries = append(js.Entries, c.jsonPath(p))
			}
			sagas = append(sagas, js)
			claim := s.Claim
			switch claim {
			case "":
				claim = "-"
			case eventstore.ClaimResume:
				claim = "resume requested"
			case eventstore.ClaimDeadline:
				claim = "deadline passed"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.TxID, s.Domain, definitionOf(s.Transaction), step(s.Transaction), oneLine(s.PauseEvent, 60),
				age(at.Sub(s.CreatedAt)), age(at.Sub(s.UpdatedAt)), deadline(s.PausedUntil, at), claim, s.CorrelationKey)
		}
		out.Sagas = sagas
	} else {
		filter := map[string]recovery.FrozenFilter{"frozen": recovery.FrozenAll, "disabled": recovery.FrozenDisabled, "compensation-failed": recovery.FrozenTerminated}[which]
		l, err := recovery.ListFrozen(ctx, c.store, c.scope, filter, page)
		if err != nil {
			return c.failf(exitFailure, "list %s in %s: %v", which, c.scopeString(), err)
		}
		out.Next, out.TotalFrozen = l.Next, &l.Total
		sagas := []jsonFrozen{}
		if !c.json && len(l.Sagas) > 0 {
			fmt.Fprintln(tw, "TXID\tSTATE\tDOMAIN\tDEF\tSTEP\tAGE\tFROZEN\tREASON")
		}
		for _, s := range l.Sagas {
			js := jsonFrozen{jsonSaga: c.jsonSaga(s.Transaction, at), FrozenState: string(s.Transaction.State), Reason: s.Reason, FrozenAt: s.FrozenAt}
			js.State = string(s.LiveState)
			state := string(s.LiveState)
			if state == "" {
				state = "GONE"
				js.State = ""
			}
			sagas = append(sagas, js)
			reason := s.Reason
			if reason == "" {
				reason = s.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.TxID, state, s.Domain, definitionOf(s.Transaction), step(s.Transaction),
				age(at.Sub(s.CreatedAt)), age(at.Sub(s.FrozenAt))+" ago", oneLine(reason, 100))
		}
		out.Sagas = sagas
	}
	if c.json {
		return c.printJSON(out)
	}
	if n := countOf(out.Sagas); n == 0 {
		if page.After != "" || page.Offset > 0 {
			fmt.Fprintf(c.stdout, "no more %s sagas in %s\n", which, c.scopeString())
		} else {
			fmt.Fprintf(c.stdout, "no %s sagas in %s\n", which, c.scopeString())
		}
		return exitOK
	}
	if err := tw.Flush(); err != nil {
		return c.failf(exitFailure, "write: %v", err)
	}
	if out.Next != "" {
		fmt.Fprintf(c.stdout, "next page: --after %s\n", out.Next)
	}
	return exitOK
}

func countOf(v any) int {
	switch s := v.(type) {
	case []jsonPending:
		return len(s)
	case []jsonFrozen:
		return len(s)
	case []jsonPaused:
		return len(s)
	}
	return 0
}

// step formats a saga's current step: "span kind endpoint".
func step(tx eventstore.Transaction) string {
	if tx.Endpoint == "" {
		return "-"
	}
	return fmt.Sprintf("%d %s %s", tx.Span, tx.Kind, tx.Endpoint)
}

// age formats a duration for a table: 45s, 12m, 3h05m, 2d04h.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + age(-d)
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// due formats when a retry is due relative to at.
func due(t, at time.Time) string {
	if !t.After(at) {
		return "now (next scan)"
	}
	return "in " + age(t.Sub(at))
}

// deadline formats a pause's deadline relative to at.
func deadline(t, at time.Time) string {
	switch {
	case t.IsZero():
		return "none"
	case t.After(at):
		return "in " + age(t.Sub(at))
	}
	return "passed " + age(at.Sub(t)) + " ago"
}

// oneLine returns the first line of s, at most n runes.
func oneLine(s string, n int) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i] + " …"
	}
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	if s == "" {
		return "-"
	}
	return s
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// String formats a directory row: its window in real time ("window
// 2026-12-07T05:40:10Z..05:40:12Z"; the stored day and slot when the window
// is unknown), its instance and bucket.
func (p jsonPath) String() string {
	when := fmt.Sprintf("%s/%04d", p.Day, p.Slot)
	if !p.WindowStart.IsZero() {
		when = "window " + p.WindowStart.Format(time.RFC3339) + ".." + p.WindowEnd.Format("15:04:05Z07:00")
	}
	return fmt.Sprintf("%s instance %s bucket %d", when, p.Instance, p.Bucket)
}

type jsonTryout struct {
	Index      int       `json:"index"`
	Span       int       `json:"span"`
	Kind       string    `json:"kind"`
	Endpoint   string    `json:"endpoint"`
	Attempt    int       `json:"attempt"`
	Outcome    string    `json:"outcome"`
	Error      string    `json:"error,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	DurationMS *int64    `json:"duration_ms,omitempty"`
}

type jsonShow struct {
	Scope     jsonScope         `json:"scope"`
	Saga      jsonSaga          `json:"saga"`
	Completed []jsonCompleted   `json:"completed"`
	Frozen    *jsonFrozenCopy   `json:"frozen"`
	History   []jsonTryout      `json:"history"`
	Hints     map[string]string `json:"hints,omitempty"`
	// Audit is the saga's admin audit trail, oldest first; AuditError
	// says why it could not be read.
	Audit      []jsonAudit `json:"audit"`
	AuditError string      `json:"audit_error,omitempty"`
}

type jsonCompleted struct {
	Span        int    `json:"span"`
	Endpoint    string `json:"endpoint"`
	Compensable bool   `json:"compensable"`
}

type jsonFrozenCopy struct {
	State    string    `json:"state"`
	Reason   string    `json:"reason"`
	FrozenAt time.Time `json:"frozen_at"`
}

// show runs `sagactl show TXID`.
func (c *cli) show(ctx context.Context, txID string) int {
	at := now()
	tx, err := c.store.LoadTransaction(ctx, c.scope, txID)
	if errors.Is(err, eventstore.ErrNotFound) {
		return c.failf(exitNotFound, "show %s: no such saga in %s", txID, c.scopeString())
	}
	if err != nil {
		return c.failf(exitFailure, "show %s: load saga: %v", txID, err)
	}
	tries, err := c.store.Tryouts(ctx, c.scope, txID)
	if err != nil {
		return c.failf(exitFailure, "show %s: load history: %v", txID, err)
	}
	var frozen *jsonFrozenCopy
	switch f, err := c.store.GetFrozen(ctx, c.scope, txID); {
	case err == nil:
		frozen = &jsonFrozenCopy{State: string(f.State), Reason: f.Reason, FrozenAt: f.FrozenAt}
	case !errors.Is(err, eventstore.ErrNotFound):
		return c.failf(exitFailure, "show %s: read frozen copy: %v", txID, err)
	}
	out := jsonShow{Scope: jsonScope(c.scope), Saga: c.jsonSaga(tx, at), Frozen: frozen, History: []jsonTryout{}, Completed: []jsonCompleted{}, Hints: tx.Hints}
	out.Audit, out.AuditError = c.auditTrail(ctx, txID)
	for _, cs := range tx.Completed {
		out.Completed = append(out.Completed, jsonCompleted(cs))
	}
	for _, t := range tries {
		jt := jsonTryout{Index: t.Index, Span: t.Span, Kind: t.Kind, Endpoint: t.Endpoint, Attempt: t.Attempt,
			Outcome: t.Outcome, Error: t.Error, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt}
		if !t.StartedAt.IsZero() && !t.FinishedAt.IsZero() {
			ms := t.FinishedAt.Sub(t.StartedAt).Milliseconds()
			jt.DurationMS = &ms
		}
		out.History = append(out.History, jt)
	}
	if c.json {
		return c.printJSON(out)
	}

	w := c.stdout
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "saga\t%s\n", tx.TxID)
	fmt.Fprintf(tw, "scope\t%s\n", c.scopeString())
	fmt.Fprintf(tw, "domain\t%s\n", tx.Domain)
	fmt.Fprintf(tw, "definition\tversion %d\n", definitionOf(tx))
	fmt.Fprintf(tw, "state\t%s (version %d)\n", tx.State, tx.Version)
	fmt.Fprintf(tw, "step\t%s, attempt %d\n", step(tx), tx.Attempt)
	current, past := tracewindow.SplitError(&tx)
	fmt.Fprintf(tw, "error\t%s\n", oneLine(current, 200))
	if past != "" {
		fmt.Fprintf(tw, "last error\thistory, the saga went on: %s\n", oneLine(past, 200))
	}
	fmt.Fprintf(tw, "created\t%s (%s ago)\n", fmtTime(tx.CreatedAt), age(at.Sub(tx.CreatedAt)))
	fmt.Fprintf(tw, "updated\t%s (%s ago)\n", fmtTime(tx.UpdatedAt), age(at.Sub(tx.UpdatedAt)))
	lifetime := fmtTime(tx.LifetimeFrom())
	if expired := c.rcfg.Expired(tx.LifetimeFrom(), at); expired && !tx.State.Terminal() {
		lifetime += fmt.Sprintf(" (outlived the %v lifetime)", c.rcfg.TransactionLifetime)
	}
	fmt.Fprintf(tw, "lifetime from\t%s\n", lifetime)
	if !tx.PausedUntil.IsZero() {
		fmt.Fprintf(tw, "paused until\t%s\n", fmtTime(tx.PausedUntil))
	}
	if tx.TraceID != "" {
		fmt.Fprintf(tw, "trace\t%s\n", tx.TraceID)
	}
	if tx.RestorePath != nil {
		fmt.Fprintf(tw, "watchdog\t%s\n", c.jsonPath(*tx.RestorePath))
	} else {
		fmt.Fprintf(tw, "watchdog\t-\n")
	}
	var done []string
	for _, cs := range tx.Completed {
		done = append(done, fmt.Sprintf("%d %s", cs.Span, cs.Endpoint))
	}
	if len(done) == 0 {
		done = []string{"-"}
	}
	fmt.Fprintf(tw, "completed\t%s\n", strings.Join(done, ", "))
	if frozen != nil {
		fmt.Fprintf(tw, "frozen\t%s as %s: %s\n", fmtTime(frozen.FrozenAt), frozen.State, oneLine(frozen.Reason, 200))
	}
	if err := tw.Flush(); err != nil {
		return c.failf(exitFailure, "write: %v", err)
	}
	fmt.Fprintf(w, "\nhistory (%d tryouts)\n", len(tries))
	if len(tries) > 0 {
		if code := c.printHistory(tries); code != exitOK {
			return code
		}
	}
	return c.printAudit(out.Audit, out.AuditError)
}

// printAudit prints show's admin audit section.
func (c *cli) printAudit(recs []jsonAudit, readErr string) int {
	w := c.stdout
	if readErr != "" {
		fmt.Fprintf(w, "\nadmin audit: not available: %s\n", oneLine(readErr, 300))
		return exitOK
	}
	fmt.Fprintf(w, "\nadmin audit (%d records)\n", len(recs))
	if len(recs) == 0 {
		return exitOK
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WHEN\tACTOR\tACTION\tRESULT\tDETAIL\tERROR")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", fmtTime(r.At), cell(r.Actor, 80), cell(r.Action, 40), cell(r.Result, 60),
			cell(r.Detail, 120), cell(r.Error, 120))
	}
	if err := tw.Flush(); err != nil {
		return c.failf(exitFailure, "write: %v", err)
	}
	return exitOK
}

// cell is oneLine(s, n) without tabs, for a tabwriter cell.
func cell(s string, n int) string { return strings.ReplaceAll(oneLine(s, n), "\t", " ") }

// printHistory prints show's history table.
func (c *cli) printHistory(tries []eventstore.Tryout) int {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tSPAN\tKIND\tENDPOINT\tATTEMPT\tOUTCOME\tERROR\tSTARTED\tDURATION")
	for _, t := range tries {
		dur := "-"
		if !t.StartedAt.IsZero() && !t.FinishedAt.IsZero() {
			dur = t.FinishedAt.Sub(t.StartedAt).String()
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.Index, t.Span, t.Kind, t.Endpoint, t.Attempt,
			t.Outcome, oneLine(t.Error, 80), fmtTime(t.StartedAt), dur)
	}
	if err := tw.Flush(); err != nil {
		return c.failf(exitFailure, "write: %v", err)
	}
	return exitOK
}

type jsonRestore struct {
	TxID          string    `json:"tx_id"`
	From          string    `json:"from,omitempty"`
	To            string    `json:"to,omitempty"`
	Transitioned  bool      `json:"transitioned"`
	Version       int64     `json:"version,omitempty"`
	LifetimeStart time.Time `json:"lifetime_start,omitzero"`
	Watchdog      *jsonPath `json:"watchdog,omitempty"`
	Unfrozen      bool      `json:"unfrozen"`
	Retry         *jsonPath `json:"retry,omitempty"`
	RetryDue      time.Time `json:"retry_due,omitzero"`
	Span          int       `json:"span"`
	Kind          string    `json:"kind,omitempty"`
	Endpoint      string    `json:"endpoint,omitempty"`
	NextAttempt   int       `json:"next_attempt,omitempty"`
	Warnings      []string  `json:"warnings,omitempty"`
	// Error and Code are set when the restore failed (Code: the exit code
	// it maps to).
	Error string `json:"error,omitempty"`
	Code  int    `json:"code,omitempty"`
	// Audit says whether the restore's audit record was written:
	// "recorded", or "not recorded: <why>".
	Audit string `json:"audit"`
}

// restoreOne restores one saga and records it in its audit trail (detail:
// the audit record's); code is its exit code.
func (c *cli) restoreOne(ctx context.Context, w *recovery.Writer, txID, detail string) (jsonRestore, int) {
	res, err := recovery.Restore(ctx, c.store, w, c.scope, txID, now())
	out := jsonRestore{TxID: txID, From: string(res.From)}
	var code int
	result := eventstore.AuditOK
	switch {
	case err == nil:
	case errors.Is(err, recovery.ErrNotRestorable):
		code, result = exitNotRestorable, eventstore.AuditRefused+": wrong state"
	case errors.Is(err, eventstore.ErrNotFound) && res.From == "":
		code, result = exitNotFound, eventstore.AuditRefused+": not found"
		err = fmt.Errorf("no such saga in %s", c.scopeString())
	default:
		code, result = exitFailure, eventstore.AuditFailed
	}
	out.Audit = c.audit(ctx, txID, "restore", detail, result, err)
	if err != nil {
		out.Error, out.Code = fmt.Sprintf("restore %s: %v", txID, err), code
		return out, code
	}
	out.To, out.Transitioned, out.Unfrozen, out.Warnings = string(res.To), res.Transitioned, res.Unfrozen, res.Warnings
	out.LifetimeStart, out.RetryDue = res.LifetimeStart, res.RetryDue
	if res.Transitioned {
		out.Version = res.Version
	}
	if res.Watchdog != nil {
		p := c.jsonPath(*res.Watchdog)
		out.Watchdog = &p
	}
	rp := c.jsonPath(res.Retry)
	out.Retry = &rp
	out.Span, out.Kind, out.Endpoint, out.NextAttempt = res.Span, res.Kind, res.Endpoint, res.Attempt+1
	return out, exitOK
}

// printRestore prints what restoreOne did, in text.
func (c *cli) printRestore(r jsonRestore) {
	w := c.stdout
	if r.Transitioned {
		fmt.Fprintf(w, "restored %s: %s -> %s (version %d)\n", r.TxID, r.From, r.To, r.Version)
		fmt.Fprintf(w, "  lifetime restarts at %s\n", fmtTime(r.LifetimeStart))
		if r.Watchdog != nil {
			fmt.Fprintf(w, "  new restore watchdog: %s\n", r.Watchdog)
		}
	} else {
		fmt.Fprintf(w, "restored %s: already %s, retry registered\n", r.TxID, r.From)
	}
	if r.Unfrozen {
		fmt.Fprintf(w, "  removed from the frozen table\n")
	}
	fmt.Fprintf(w, "  retry registered: %s, due %s\n", r.Retry, fmtTime(r.RetryDue))
	fmt.Fprintf(w, "  the next retry-node pass after that sends span %d %s %s again with attempt %d\n", r.Span, r.Kind, r.Endpoint, r.NextAttempt)
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
}

func (c *cli) writer() (*recovery.Writer, error) {
	return recovery.NewWriter(c.store, c.rcfg, recovery.WithClock(now), recovery.WithLogger(slog.New(slog.DiscardHandler)))
}

// restore runs `sagactl restore TXID`.
func (c *cli) restore(ctx context.Context, txID string) int {
	w, err := c.writer()
	if err != nil {
		return c.failf(exitFailure, "restore %s: %v", txID, err)
	}
	r, code := c.restoreOne(ctx, w, txID, "")
	if code != exitOK {
		return c.failf(code, "%s", r.Error)
	}
	if c.json {
		return c.printJSON(r)
	}
	c.printRestore(r)
	return exitOK
}

type jsonRestoreAll struct {
	Scope    jsonScope     `json:"scope"`
	Disabled int           `json:"disabled"`
	Restored int           `json:"restored"`
	Failed   int           `json:"failed"`
	Results  []jsonRestore `json:"results"`
}

// restoreAllDisabled runs `sagactl restore --all-disabled`.
func (c *cli) restoreAllDisabled(ctx context.Context) int {
	w, err := c.writer()
	if err != nil {
		return c.failf(exitFailure, "restore --all-disabled: %v", err)
	}
	l, err := recovery.ListFrozen(ctx, c.store, c.scope, recovery.FrozenDisabled, recovery.Page{})
	if err != nil {
		return c.failf(exitFailure, "restore --all-disabled: list disabled sagas in %s: %v", c.scopeString(), err)
	}
	out := jsonRestoreAll{Scope: jsonScope(c.scope), Disabled: len(l.Sagas), Results: []jsonRestore{}}
	worst := exitOK
	rank := map[int]int{exitOK: 0, exitNotFound: 1, exitNotRestorable: 2, exitFailure: 3}
	for _, s := range l.Sagas {
		r, code := c.restoreOne(ctx, w, s.TxID, "restore --all-disabled")
		out.Results = append(out.Results, r)
		if code != exitOK {
			out.Failed++
			if rank[code] > rank[worst] {
				worst = code
			}
			failf(c.stderr, code, "%s", r.Error)
			continue
		}
		out.Restored++
		if !c.json {
			c.printRestore(r)
		}
	}
	if c.json {
		if code := c.printJSON(out); code != exitOK {
			return code
		}
		return worst
	}
	fmt.Fprintf(c.stdout, "restored %d of %d disabled sagas in %s\n", out.Restored, out.Disabled, c.scopeString())
	return worst
}

// definitionOf is the definition version a saga is driven by: its
// Definition, 1 for a row written before versions (0), as the
// orchestrator reads it.
func definitionOf(tx eventstore.Transaction) int { return max(tx.Definition, 1) }
