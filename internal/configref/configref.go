// Package configref is the configuration reference of StackSaga: every key
// of the stacksaga YAML document, every environment variable and every
// functional option, with its type, default and meaning. The keys' table
// is here, its defaults are read from the packages' own constants and
// default configurations, and the options are read from the packages'
// documentation (go/doc over their source), so that docs/configuration.md,
// which Render produces (go generate ./internal/configref), and the code
// cannot disagree: the package's test fails when the file is stale, when a
// key of yamlconfig.Keys is missing or extra, or when the environment
// variables listed are not exactly those the loaders look up.
package configref

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Entry is one YAML key of the stacksaga document.
type Entry struct {
	// Key is the full key; a "*" segment stands for any name (a domain, a
	// service, an endpoint, a data centre).
	Key string
	// Type is the value's type as written in YAML.
	Type string
	// Default is the value used when the key is absent ("" for none).
	Default string
	// Env is the environment variable that overrides the key ("" for
	// none). For a key under a "*" segment it overrides the name
	// "default" only.
	Env string
	// Meaning says what the key does.
	Meaning string
	// Reader is the package (or program) that reads the key.
	Reader string
}

// env returns the environment variable of a key by the loaders' rule:
// STACKSAGA_ and the key below stacksaga, upper case, '.' and '-' turned
// into '_', a "*" into DEFAULT.
func env(key string) string {
	k := strings.TrimPrefix(key, "stacksaga.")
	k = strings.ReplaceAll(k, "*", "default")
	return "STACKSAGA_" + strings.NewReplacer(".", "_", "-", "_").Replace(strings.ToUpper(k))
}

// dur writes d as a Go duration without its zero tails ("24h", "1m").
func dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func itoa(n int) string { return strconv.Itoa(n) }

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Entries returns the table of every key, in the order of yamlconfig.Keys.
func Entries() []Entry {
	cd := cassandra.DefaultConfig()
	wd := writeprotect.DefaultConfig()
	rd := ringcoordinator.DefaultConfig()
	const (
		cas  = "eventstore/cassandra (also sagactl, tracewindow/cassandraindex)"
		wp   = "writeprotect"
		rec  = "recovery"
		tp   = "topics (LoadGroupConfig)"
		ring = "ringcoordinator"
	)
	c := func(k string) string { return "stacksaga.cassandra." + k }
	retry := func(prefix string, envOn bool) []Entry {
		e := func(k string) string {
			if envOn {
				return env(prefix + k)
			}
			return ""
		}
		scope := "the domain's"
		if strings.Contains(prefix, "endpoints") {
			scope = `the endpoint's ("service/endpoint")`
		}
		return []Entry{
			{prefix + "delay-windows", "integer ≥ 1", itoa(recovery.DefaultRetryDelayWindows), e("delay-windows"), "windows ahead at which the durable retry of a failed attempt is registered (" + scope + " policy)", rec},
			{prefix + "max-attempts", "integer ≥ 0", "0", e("max-attempts"), "attempts of a step, the first included, before a retryable failure is final (0: until the transaction lifetime ends)", rec},
			{prefix + "backoff-multiplier", "number ≥ 1", ftoa(recovery.DefaultBackoffMultiplier), e("backoff-multiplier"), "multiplies the retry delay after each failed attempt", rec},
			{prefix + "max-delay-windows", "integer", itoa(recovery.DefaultMaxDelayWindows), e("max-delay-windows"), "caps the durable retry's delay in windows, before jitter", rec},
			{prefix + "jitter", "number 0..1", ftoa(recovery.DefaultJitter), e("jitter"), "adds up to this fraction of the delay at random", rec},
			{prefix + "initial-interval", "duration", dur(recovery.DefaultInitialInterval), e("initial-interval"), "delay of the first in-process retry by the orchestrator that parked the saga (0: windows only)", rec},
			{prefix + "max-interval", "duration", dur(recovery.DefaultMaxInterval), e("max-interval"), "caps the in-process retry delay", rec},
			{prefix + "step-timeout", "duration", dur(recovery.DefaultStepTimeout), e("step-timeout"), "start-to-close timeout of a step attempt: past it the attempt fails retryably (0: none)", rec},
		}
	}
	group := func(prefix, what string) []Entry {
		return []Entry{
			{prefix + "group-type", "CONSUMER or SHARE", string(topics.GroupConsumer), "", "how " + what + " is consumed: a classic consumer group or a Kafka 4 share group", tp},
			{prefix + "delivery-count-limit", "integer " + itoa(topics.MinDeliveryLimit) + ".." + itoa(topics.MaxDeliveryLimit), itoa(topics.DefaultDeliveryLimit), "", "SHARE: deliveries of a record before it is dead-lettered", tp},
			{prefix + "record-lock-duration", "duration", dur(topics.DefaultRecordLock), "", "SHARE: the acquisition lock; bounds how long a dead instance keeps its records", tp},
			{prefix + "session-timeout", "duration", dur(topics.DefaultSessionTimeout), "", "CONSUMER: how long a dead member holds its partitions", tp},
		}
	}
	out := []Entry{
		{"stacksaga.instance.region", "string", rd.Region, env("stacksaga.instance.region"), "the region of the deployment (transaction ids carry its code; the store's partitions and the ring are scoped by it)", ring + ", sagactl"},
		{"stacksaga.instance.cluster", "string", rd.Cluster, env("stacksaga.instance.cluster"), "the virtual cluster within the region", ring + ", sagactl"},
		{"stacksaga.instance.service", "string", "", env("stacksaga.instance.service"), "the orchestrating service whose sagas sagactl reads (orchestrator.WithConfig refuses another service's file)", "sagactl, orchestrator.WithConfig"},
		{"stacksaga.instance.region-code", "integer 1..4095", "1 for the region default", env("stacksaga.instance.region-code"), "the region's 12-bit code in transaction ids (a region other than default needs one)", "orchestrator.WithConfig"},
		{"stacksaga.instance.strict-names", "boolean", "false", env("stacksaga.instance.strict-names"), "refuse to start when a configured domain or service name (write-protection.domains, kafka.orchestrator.domains, kafka.worker.services) matches nothing the orchestrator or worker registers; false: warn", "orchestrator.WithConfig, worker.WithConfig (config.CheckNames)"},

		{c("contact-points"), "list of host[:port]", strings.Join(cd.ContactPoints, ","), cassandra.EnvContactPoints, "Cassandra contact points (the variable: comma-separated)", cas},
		{c("keyspace"), "string", cd.Keyspace, cassandra.EnvKeyspace, "the keyspace of the StackSaga tables", cas},
		{c("local-datacenter"), "string", cd.LocalDatacenter, cassandra.EnvLocalDatacenter, "the data centre DC-aware routing prefers and LOCAL_* levels are local to", cas},
		{c("username"), "string", "", cassandra.EnvUsername, "PasswordAuthenticator user", cas},
		{c("password"), "string", "", cassandra.EnvPassword, "PasswordAuthenticator password (prefer the variable or sagactl's --password-file)", cas},
		{c("tls.enabled"), "boolean", "false", cassandra.EnvTLSEnabled, "TLS to the nodes with the system's roots (any other tls key implies it; false turns it off whatever else is set)", cas},
		{c("tls.ca-file"), "path", "", cassandra.EnvTLSCAFile, "PEM certificates that sign the nodes' certificates", cas},
		{c("tls.cert-file"), "path", "", cassandra.EnvTLSCertFile, "client certificate (PEM), for require_client_auth", cas},
		{c("tls.key-file"), "path", "", cassandra.EnvTLSKeyFile, "the client certificate's private key (PEM)", cas},
		{c("tls.server-name"), "string", "", cassandra.EnvTLSServerName, "the name every node's certificate must carry (else its IP address)", cas},
		{c("tls.insecure-skip-verify"), "boolean", "false", cassandra.EnvTLSInsecureSkipVerify, "encrypt without authenticating the nodes (tests only)", cas},
		{c("read-consistency-level"), "LOCAL_QUORUM or QUORUM", string(cd.ReadConsistency), cassandra.EnvReadConsistency, "consistency of reads", cas},
		{c("write-consistency-level"), "LOCAL_QUORUM or QUORUM", string(cd.WriteConsistency), cassandra.EnvWriteConsistency, "consistency of writes", cas},
		{c("serial-consistency-level"), "LOCAL_SERIAL or SERIAL", string(cd.SerialConsistency), cassandra.EnvSerialConsistency, "consistency of the lightweight transactions (STRICT across data centres needs SERIAL)", cas},
		{c("request-timeout"), "duration", dur(cd.RequestTimeout), cassandra.EnvRequestTimeout, "bound on one request", cas},
		{c("connect-timeout"), "duration", dur(cd.ConnectTimeout), cassandra.EnvConnectTimeout, "bound on opening a connection", cas},
		{c("connections-per-host"), "integer ≥ 1", itoa(cd.ConnectionsPerHost), "", "connection pool size per host", cas},
		{c("timestamp-generator"), "server or client", cd.TimestampGenerator, "", "who assigns write timestamps: the coordinator (server) or this process's clock (client)", cas},
		{c("reconnection-policy.base-delay"), "duration", dur(cd.ReconnectionPolicy.BaseDelay), "", "first delay of the exponential reconnection policy", cas},
		{c("reconnection-policy.max-delay"), "duration", dur(cd.ReconnectionPolicy.MaxDelay), "", "cap of the reconnection delay", cas},
		{c("reconnection-policy.max-retries"), "integer ≥ 1", itoa(cd.ReconnectionPolicy.MaxRetries), "", "attempts to open a connection", cas},
		{c("replication.class"), "NetworkTopologyStrategy or SimpleStrategy", cd.Replication.Class, cassandra.EnvReplication, "keyspace replication when the schema is created (the variable takes SimpleStrategy:<rf> or NetworkTopologyStrategy:<dc>=<rf>,…)", cas},
		{c("replication.replication-factor"), "integer ≥ 1", "1 (SimpleStrategy)", "", "SimpleStrategy's replication factor", cas},
		{c("replication.datacenters.*"), "integer ≥ 1", "{<local-datacenter>: 3} (NetworkTopologyStrategy)", "", "NetworkTopologyStrategy's replication factor per data centre", cas},
		{c("create-schema"), "boolean", strconv.FormatBool(cd.CreateSchema), cassandra.EnvCreateSchema, "apply (and upgrade) the schema at start; else `sagactl schema apply`", cas},

		{c("write-protection.default-mode"), "STRICT or RELAXED_WITH_DEDUP", string(wd.DefaultMode), writeprotect.EnvDefaultMode, "the guard's mode for domains without their own", wp},
		{c("write-protection.default-lease-duration"), "duration (whole seconds, 2s..5m)", dur(wd.DefaultLease), writeprotect.EnvDefaultLease, "STRICT lease: how long an execution holds its step before another instance may take it over", wp},
		{c("write-protection.marker-retention"), "duration", dur(wd.MarkerRetention), writeprotect.EnvMarkerRetention, "how long a committed execution marker outlives its saga (at least the transaction lifetime)", wp},
		{c("write-protection.domains.*.mode"), "STRICT or RELAXED_WITH_DEDUP", "default-mode", "", "the domain's mode", wp},
		{c("write-protection.domains.*.lease-duration"), "duration", "default-lease-duration", "", "the domain's STRICT lease", wp},

		{c("transaction-lifetime"), "duration", dur(recovery.DefaultTransactionLifetime), writeprotect.EnvTransactionLifetime, "how long a saga may be re-driven; past it, it is frozen DISABLED", rec + ", " + wp},
		{c("transaction.lifetime"), "duration", dur(recovery.DefaultTransactionLifetime), "", "the same as transaction-lifetime (the seed's spelling)", rec + ", " + wp},
		{c("recovery.window-interval-minutes"), "integer dividing 1440", itoa(int(recovery.DefaultInterval / time.Minute)), env(c("recovery.window-interval-minutes")), "the recovery window, in minutes", rec},
		{c("recovery.window-interval"), "duration", "", env(c("recovery.window-interval")), "the recovery window as a duration (under a minute for tests and demos)", rec},
		{c("recovery.bucket-size"), "integer ≤ " + itoa(recovery.MaxBucketSize), itoa(recovery.DefaultBucketSize), env(c("recovery.bucket-size")), "directory rows after which an instance moves to its next bucket of a window", rec},
		{c("recovery.concurrency"), "integer ≥ 1", itoa(recovery.DefaultConcurrency), env(c("recovery.concurrency")), "re-drives in flight per retry node", rec},
		{c("recovery.lookback-days"), "integer ≥ 1", itoa(recovery.DefaultLookbackDays), env(c("recovery.lookback-days")), "days before today a retry node scans", rec},
		{c("recovery.page-size"), "integer ≥ 1", itoa(recovery.DefaultPageSize), env(c("recovery.page-size")), "directory rows read per request", rec},
	}
	out = append(out, retry(c("recovery.retry.domains.*."), true)...)
	out = append(out, retry(c("recovery.retry.domains.*.endpoints.*."), false)...)
	out = append(out, Entry{c("recovery.restore.domains.*.delay-windows"), "integer ≥ 1", itoa(recovery.DefaultRestoreDelayWindows), env(c("recovery.restore.domains.*.delay-windows")), "windows after which a saga's restore watchdog fires if the saga has not moved", rec})
	out = append(out, Entry{c("recovery.deadline.domains.*.saga-timeout"), "duration ≥ 0", "0 (none)", env(c("recovery.deadline.domains.*.saga-timeout")), "how long a saga may take to complete its forward steps (Temporal's workflow execution timeout): past it, the saga fails non-retryably (\"saga timed out\") and compensates", rec})
	kf := func(k, typ, def, envName, meaning string) Entry {
		return Entry{"stacksaga.kafka." + k, typ, def, envName, meaning, "internal/kafkaflags (orchestrator.WithConfig, worker.WithConfig)"}
	}
	out = append(out,
		kf("brokers", "list of host:port", kafkaflags.DefaultBroker, kafkaflags.EnvBrokers, "the Kafka seed brokers (the variable: comma-separated; "+kafkaflags.DeprecatedEnvBrokers+" is still read, with a deprecation warning)"),
		kf("tls.enabled", "boolean", "false", "", "dial the brokers over TLS with the system's roots (any other tls key implies it)"),
		kf("tls.ca-file", "path", "", "", "PEM certificates that sign the brokers' certificates"),
		kf("tls.cert-file", "path", "", "", "client certificate (PEM), for mutual TLS"),
		kf("tls.key-file", "path", "", "", "the client certificate's private key (PEM)"),
		kf("sasl.mechanism", "plain, scram-sha-256 or scram-sha-512", kafkaflags.Plain, "", "the SASL mechanism (needs sasl.user)"),
		kf("sasl.user", "string", "", "", "authenticate with SASL as this user"),
		kf("sasl.password-env", "environment variable name", kafkaflags.DefaultPasswordEnv, "", "the variable holding the SASL password (never in the file)"),
	)
	out = append(out, group("stacksaga.kafka.orchestrator.domains.*.", "an orchestrator domain's callback topic")...)
	out = append(out, group("stacksaga.kafka.worker.services.*.", "a worker service's command topic")...)
	r := func(k, typ, def, meaning string) Entry {
		return Entry{"stacksaga." + k, typ, def, env("stacksaga." + k), meaning, ring}
	}
	out = append(out,
		r("coordinator.deploy.index-based", "boolean", strconv.FormatBool(rd.IndexBased), "take the role from the StatefulSet ordinal of the host name (-0 is the master)"),
		r("coordinator.deploy.role", "master, slave or master-slave", string(rd.Role), "the role when not index-based"),
		r("coordinator.deploy.ordinal", "integer", "from the host name", "the StatefulSet ordinal"),
		r("coordinator.cycle", "duration", dur(rd.Cycle), "the publish cycle (every node of a ring must use the same)"),
		r("coordinator.publish-offset", "duration", "half the cycle", "when in a cycle the master publishes the next split"),
		r("coordinator.http.address", "host:port or off", rd.HTTPAddr, "/healthz and /readyz"),
		r("coordinator.token-file", "path", "", "file holding the shared token (else STACKSAGA_COORDINATOR_TOKEN)"),
		r("coordinator.insecure", "boolean", "false", "run without a token (logs a warning)"),
		r("agent.master.host", "host", rd.MasterHost, "the master's bind address"),
		r("agent.master.port", "port", itoa(rd.MasterPort), "the master's port"),
		r("agent.master.lazy-rebalance-cycles", "integer ≥ 0", "0", "cycles a departed slave's slot is kept before the ring is re-split without it (0: re-split at the next cycle; WithLazyRebalance)"),
		r("agent.master.max-slaves", "integer ≥ 1", itoa(rd.MaxSlaves), "slaves registered at once"),
		r("agent.slave.host", "host", rd.SlaveHost, "the slave's bind address"),
		r("agent.slave.port", "port", itoa(rd.SlavePort), "the slave's port"),
		r("agent.slave.advertised-host", "host", "the host name", "how retry nodes reach the slave"),
		r("agent.slave.advertised-port", "port", "agent.slave.port", "how retry nodes reach the slave"),
		r("agent.slave.target-master.host", "host", rd.TargetMasterHost, "the slave's master"),
		r("agent.slave.target-master.port", "port", itoa(rd.TargetMasterPort), "the slave's master's port"),
		r("agent.connector.target-master.host", "host", "", "a retry node's master"),
		r("agent.connector.target-master.port", "port", itoa(rd.ConnectorMasterPort), "a retry node's master's port"),
		r("agent.connector.guard", "duration", "cycle/30", "a retry node stops scanning this long before its minute ends"),
		r("agent.reconnect.min-backoff", "duration", dur(rd.MinBackoff), "first reconnection delay"),
		r("agent.reconnect.max-backoff", "duration", dur(rd.MaxBackoff), "cap of the reconnection delay"),
	)
	return out
}

// OtherEnv are the environment variables that override no YAML key.
var OtherEnv = []struct{ Name, Meaning string }{
	{ringcoordinator.EnvToken, "the ring coordinator's shared token (at least 16 bytes; never a flag), for master, slaves and connectors"},
	{"STACKSAGA_TRACE_WINDOW_TOKEN", "examples/order-service: the Trace Window's admin token (admin actions are off without it)"},
	{"STACKSAGA_TRACE_WINDOW_READ_TOKEN", "examples/order-service and sagactl trace-window: the Trace Window's read token"},
	{"STACKSAGA_WEBHOOK_SECRET", "examples/order-service: the secret that signs payment callbacks and resume webhooks (at least 16 bytes)"},
	{"STACKSAGA_WEBHOOK_SECRET_FILE", "examples/order-service: a file holding that secret"},
	{"STACKSAGA_INSTANCE_ID", "the example services: the instance id in their consumer groups (static membership)"},
	{"STACKSAGA_METRICS_ADDR", "the example services: serve Prometheus metrics at this address"},
	{"STACKSAGA_REQUIRE_SERVICES", "tests: 1 turns a missing Kafka or Cassandra into a failure instead of a skip (make test sets it)"},
	{"STACKSAGA_TEST_KAFKA_IMAGE", "tests: the Kafka image testenv starts with Docker"},
	{"STACKSAGA_TEST_CASSANDRA_IMAGE", "tests: the Cassandra image testenv starts with Docker"},
	{"KAFKA_BROKERS", "deprecated name of STACKSAGA_KAFKA_BROKERS (read when that is unset, with a warning); tests and scripts/services still set it"},
	{"CASSANDRA_HOSTS", "the examples, the demo, sagabench and tests: Cassandra contact points, comma-separated"},
	{"KAFKA_SASL_PASSWORD", "the demo, sagabench and stacksaga.kafka.sasl: the SASL password (--kafka-sasl-password-env or sasl.password-env names another variable)"},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "the example services: export traces over OTLP/HTTP to this endpoint"},
}

// OptionPackages are the packages whose functional options Render lists,
// as import paths relative to the module.
var OptionPackages = []string{"orchestrator", "worker", "writeprotect", "recovery", "eventstore/cassandra", "eventstore/memory", "tracewindow", "tracewindow/cassandraindex", "ringcoordinator", "sagatest", "telemetry/promexport"}

// Option is one functional option of a package.
type Option struct {
	Package, Name, Signature, Doc string
}

// Options reads the functional options of OptionPackages from the module's
// source at root: the exported functions whose result type is the
// package's Option (or StartOption), with the first sentence of their
// documentation.
func Options(root string) ([]Option, error) {
	var out []Option
	for _, rel := range OptionPackages {
		dir := filepath.Join(root, filepath.FromSlash(rel))
		fset := token.NewFileSet()
		var files []*ast.File
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			files = append(files, f)
		}
		p, err := doc.NewFromFiles(fset, files, "github.com/stacksaga-go/stacksaga/"+rel)
		if err != nil {
			return nil, err
		}
		for _, t := range p.Types {
			if t.Name != "Option" && t.Name != "StartOption" {
				continue
			}
			for _, f := range t.Funcs {
				var sig strings.Builder
				sig.WriteString(f.Name)
				_ = printer.Fprint(&sig, fset, &ast.FuncType{Params: f.Decl.Type.Params})
				s := strings.TrimPrefix(sig.String(), f.Name+"func")
				out = append(out, Option{Package: p.Name, Name: f.Name, Signature: path(rel) + "." + f.Name + s, Doc: firstSentence(p.Synopsis(f.Doc))})
			}
		}
	}
	return out, nil
}

func path(rel string) string { return filepath.Base(rel) }

func firstSentence(s string) string { return strings.TrimSpace(s) }

func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

// Render returns docs/configuration.md, reading the options from the
// module's source at root.
func Render(root string) (string, error) {
	opts, err := Options(root)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("## YAML keys\n\n")
	b.WriteString("| key | type | default | environment | meaning | read by |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, e := range Entries() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", e.Key, cell(e.Type), cell(code(e.Default)), code(e.Env), cell(e.Meaning), cell(e.Reader))
	}
	b.WriteString(envHeader)
	b.WriteString("| variable | meaning |\n| --- | --- |\n")
	for _, e := range OtherEnv {
		fmt.Fprintf(&b, "| `%s` | %s |\n", e.Name, cell(e.Meaning))
	}
	b.WriteString(optHeader)
	pkg := ""
	for _, o := range opts {
		if o.Package != pkg {
			pkg = o.Package
			fmt.Fprintf(&b, "\n### Package `%s`\n\n| option | meaning |\n| --- | --- |\n", pkgPath(o))
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", cell(o.Signature), cell(o.Doc))
	}
	return b.String(), nil
}

func pkgPath(o Option) string {
	for _, rel := range OptionPackages {
		if filepath.Base(rel) == o.Package {
			return rel
		}
	}
	return o.Package
}

// WriteFile writes Render(root) to path.
func WriteFile(root, path string) error {
	s, err := Render(root)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(s), fs.FileMode(0o644))
}

const header = `# Configuration reference

<!-- Generated by go generate ./internal/configref from the code; do not edit.
     TestConfigurationReference fails when this file and the code disagree. -->

Every key of the ` + "`stacksaga`" + ` YAML document, every environment variable and every functional
option, with its type, default and meaning. The sample configuration is
[examples/stacksaga.yaml](../examples/stacksaga.yaml), a development profile for the single-node
servers; its comments say what to change for a cluster.

**How the file is read.** ` + "`config.LoadFile`" + ` reads a service's whole document in one call
(instance, Cassandra, write protection, recovery, Kafka group types) and reports the problems of
every section together; each section is loaded by the package that owns it, which can also read it
alone (` + "`cassandra.LoadConfigFile`" + `, ` + "`writeprotect.LoadConfigFile`" + `, ` + "`recovery.LoadConfigFile`" + `,
` + "`topics.LoadGroupConfig`" + `); the ring coordinator's service reads its keys with
` + "`ringcoordinator.LoadConfigFile`" + `, and ` + "`sagactl --config`" + ` the instance and Cassandra sections. Every loader checks the whole document against the one list of
keys below (` + "`internal/yamlconfig.Keys`" + `): a key under ` + "`stacksaga:`" + ` that no loader reads fails at
start, naming its full key, its line and the nearest known key, so a misspelt key (a
` + "`tls: {ca_file: …}`" + `) can never be ignored silently. Keys outside ` + "`stacksaga:`" + ` are the
application's. Durations are Go durations (` + "`5s`" + `, ` + "`1m30s`" + `) or ISO-8601 (` + "`PT5S`" + `). An
environment variable, when set and not empty, overrides its key; invalid values fail at start with
every problem listed, each naming its key.

`

const envHeader = `
## Other environment variables

`

const optHeader = `
## Functional options

The options of the packages' constructors (` + "`orchestrator.New`" + `, ` + "`worker.New`" + `,
` + "`writeprotect.New`" + `, ` + "`cassandra.New`" + `, ` + "`tracewindow.New`" + `, ` + "`sagatest.New`" + `, …), with the first
sentence of their documentation; the whole of it is on
[pkg.go.dev](https://pkg.go.dev/github.com/stacksaga-go/stacksaga).
`
