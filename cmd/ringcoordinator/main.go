// Command ringcoordinator runs the ring coordinator of StackSaga's retry
// nodes: a master, a slave, or both in one process (the topologies of seed
// 001, the design document of the retry architecture; see docs/design.md).
//
//	ringcoordinator [--config stacksaga.yaml] [--role master|slave|master-slave]
//	                [--index-based [--ordinal N] [--hostname H]]
//	                [--region R] [--cluster C]
//	                [--master-listen host:port] [--slave-listen host:port]
//	                [--advertise host:port] [--target-master host:port]
//	                [--http host:port|off] [--cycle 1m] [--publish-offset 30s]
//	                [--lazy-rebalance-cycles N] [--log-level info] [--log-format text|json]
//
// Values come from the stacksaga keys of --config (see
// ringcoordinator.Config), then the STACKSAGA_* environment variables, then
// the flags. With --index-based (stacksaga.coordinator.deploy.index-based)
// the role follows the StatefulSet ordinal ending the host name: ordinal 0
// is the master, any other a slave. When one process runs both roles the
// slave registers with the local master unless --target-master is given.
// --cycle shortens the minute for demos (e.g. 10s, publishing at its
// midpoint).
//
// Every node of the ring presents a shared token (16 bytes or more) from the
// environment variable STACKSAGA_COORDINATOR_TOKEN or the file named by
// stacksaga.coordinator.token-file (never a flag); without one the process
// refuses to start unless stacksaga.coordinator.insecure is true. The roles
// bind 127.0.0.1 unless --master-listen / --slave-listen (or the host keys)
// say otherwise.
//
// HTTP: /healthz answers 200 while the process runs; /readyz answers 200
// once every role is ready (the master serving, the slave registered with
// its master) and 503 before, both with the current assignment as JSON.
// SIGINT or SIGTERM shuts down gracefully. Exit codes: 0 after a shutdown,
// 1 runtime error, 2 usage or configuration error.
//
//	ringcoordinator probe URL
//
// GETs URL (e.g. http://127.0.0.1:7080/readyz) and exits 0 on a 200: a
// health check for images without a shell.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/secretflag"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
)

const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// settings is the resolved configuration of a process.
type settings struct {
	cfg           ringcoordinator.Config
	master, slave bool
	hostname      string
	targetSet     bool // --target-master given
	logLevel      slog.Level
	logJSON       bool
}

// resolve reads the configuration file, the environment and the flags.
func resolve(args []string, lookup func(string) (string, bool), stderr io.Writer) (settings, error) {
	fs := flag.NewFlagSet("ringcoordinator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		configPath = fs.String("config", "", "YAML file with the stacksaga keys")
		role       = fs.String("role", "", "master, slave or master-slave (stacksaga.coordinator.deploy.role)")
		indexBased = fs.Bool("index-based", false, "role from the StatefulSet ordinal: 0 master, others slaves")
		ordinal    = fs.Int("ordinal", -1, "StatefulSet ordinal (default: from the host name, <name>-<ordinal>)")
		hostname   = fs.String("hostname", "", "host name (default: the machine's)")
		region     = fs.String("region", "", "stacksaga.instance.region")
		cluster    = fs.String("cluster", "", "stacksaga.instance.cluster (the virtual cluster)")
		masterL    = fs.String("master-listen", "", "master's RSocket address (stacksaga.agent.master.host/port)")
		slaveL     = fs.String("slave-listen", "", "slave's RSocket address (stacksaga.agent.slave.host/port)")
		advertise  = fs.String("advertise", "", "address orchestrators use to reach the slave (stacksaga.agent.slave.advertised-host/port)")
		target     = fs.String("target-master", "", "master the slave registers with (stacksaga.agent.slave.target-master.host/port)")
		httpAddr   = fs.String("http", "", "address of /healthz and /readyz, or off (stacksaga.coordinator.http.address)")
		cycle      = fs.Duration("cycle", 0, "publish cycle, 1m in production (stacksaga.coordinator.cycle)")
		offset     = fs.Duration("publish-offset", 0, "publish instant within the cycle, default half of it")
		lazy       = fs.Int("lazy-rebalance-cycles", 0, "cycles a departed slave's slot is kept (stacksaga.agent.master.lazy-rebalance-cycles)")
		logLevel   = fs.String("log-level", "info", "debug, info, warn or error")
		logFormat  = fs.String("log-format", "text", "text or json")
	)
	if err := secretflag.Parse(fs, args); err != nil {
		return settings{}, err
	}
	if fs.NArg() > 0 {
		return settings{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var data []byte
	if *configPath != "" {
		b, err := os.ReadFile(*configPath)
		if err != nil {
			return settings{}, fmt.Errorf("read configuration: %w", err)
		}
		data = b
	}
	cfg, err := ringcoordinator.LoadConfigWithEnv(data, lookup)
	if err != nil {
		return settings{}, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	hostPort := func(flagName, v string, host *string, port *int) {
		h, p, err := net.SplitHostPort(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: %w", flagName, v, err))
			return
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("--%s %q: bad port", flagName, v))
			return
		}
		*host, *port = h, n
	}
	if set["role"] {
		cfg.Role = ringcoordinator.Role(strings.ToLower(*role))
	}
	if set["index-based"] {
		cfg.IndexBased = *indexBased
	}
	if set["ordinal"] {
		cfg.Ordinal = *ordinal
	}
	if set["region"] {
		cfg.Region = *region
	}
	if set["cluster"] {
		cfg.Cluster = *cluster
	}
	if set["master-listen"] {
		hostPort("master-listen", *masterL, &cfg.MasterHost, &cfg.MasterPort)
	}
	if set["slave-listen"] {
		hostPort("slave-listen", *slaveL, &cfg.SlaveHost, &cfg.SlavePort)
	}
	if set["advertise"] {
		hostPort("advertise", *advertise, &cfg.AdvertisedHost, &cfg.AdvertisedPort)
	}
	if set["target-master"] {
		hostPort("target-master", *target, &cfg.TargetMasterHost, &cfg.TargetMasterPort)
	}
	if set["http"] {
		cfg.HTTPAddr = *httpAddr
	}
	if set["cycle"] {
		cfg.Cycle = *cycle
	}
	if set["publish-offset"] {
		cfg.PublishOffset = *offset
	}
	if set["lazy-rebalance-cycles"] {
		cfg.LazyRebalanceCycles = *lazy
	}
	if err := errors.Join(errs...); err != nil {
		return settings{}, err
	}
	if err := cfg.Validate(); err != nil {
		return settings{}, err
	}
	s := settings{cfg: cfg, hostname: *hostname, targetSet: set["target-master"]}
	if s.hostname == "" {
		s.hostname, _ = os.Hostname()
	}
	s.master, s.slave, err = cfg.Roles(s.hostname)
	if err != nil {
		return settings{}, err
	}
	if err := s.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return settings{}, fmt.Errorf("--log-level: %w", err)
	}
	switch *logFormat {
	case "text":
	case "json":
		s.logJSON = true
	default:
		return settings{}, fmt.Errorf("--log-format %q: want text or json", *logFormat)
	}
	return s, nil
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "probe" {
		return probe(ctx, args[1:], stdout, stderr)
	}
	s, err := resolve(args, lookup, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "ringcoordinator:", err)
		return exitUsage
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: s.logLevel})
	if s.logJSON {
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: s.logLevel})
	}
	log := slog.New(handler)
	ringcoordinator.SetRSocketLogger(log)
	if err := serve(ctx, s, log); err != nil {
		log.Error("ringcoordinator: stopped on an error", "err", err)
		return exitFailure
	}
	return exitOK
}

// serve runs the roles and the HTTP endpoints until ctx ends.
func serve(ctx context.Context, s settings, log *slog.Logger) error {
	cfg := s.cfg
	opts := []ringcoordinator.Option{ringcoordinator.WithConfig(cfg), ringcoordinator.WithLogger(log)}
	var master *ringcoordinator.Master
	var slave *ringcoordinator.Slave
	if s.master {
		m, err := ringcoordinator.NewMaster(append(opts, ringcoordinator.WithListen(cfg.MasterListenAddr()))...)
		if err != nil {
			return err
		}
		master = m
	}
	if s.slave {
		target := cfg.TargetMasterAddr()
		if master != nil && !s.targetSet {
			target = master.Addr()
		}
		advertise := advertised(cfg, s.hostname)
		sl, err := ringcoordinator.NewSlave(append(opts, ringcoordinator.WithListen(cfg.SlaveListenAddr()),
			ringcoordinator.WithMaster(target), ringcoordinator.WithAdvertise(advertise))...)
		if err != nil {
			if master != nil {
				_ = master.Close()
			}
			return err
		}
		slave = sl
	}
	roles := []string{}
	if master != nil {
		roles = append(roles, "master")
		log.Info("ringcoordinator: master listening", "addr", master.Addr())
	}
	if slave != nil {
		roles = append(roles, "slave")
		log.Info("ringcoordinator: slave listening", "addr", slave.Addr(), "advertised", slave.AdvertisedAddr())
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	start := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	if master != nil {
		start("master", master.Run)
	}
	if slave != nil {
		start("slave", slave.Run)
	}

	var srv *http.Server
	if addr := cfg.HTTPAddr; addr != "" && addr != "off" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("http: %w", err)
		}
		srv = &http.Server{Handler: handlers(roles, master, slave), ReadHeaderTimeout: 5 * time.Second}
		log.Info("ringcoordinator: http listening", "addr", ln.Addr().String())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("http: %w", err)
				cancel()
			}
		}()
	}
	log.Info("ringcoordinator: started", "roles", strings.Join(roles, "+"), "region", cfg.Region, "cluster", cfg.Cluster,
		"cycle", cfg.Cycle, "publish_offset", cfg.EffectivePublishOffset())

	<-ctx.Done()
	log.Info("ringcoordinator: shutting down")
	if srv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		scancel()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	log.Info("ringcoordinator: stopped")
	return errors.Join(all...)
}

// probe GETs its URL argument: 0 on a 200, 1 otherwise.
func probe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: ringcoordinator probe URL")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
	if err != nil {
		fmt.Fprintln(stderr, "ringcoordinator probe:", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "ringcoordinator probe:", err)
		return exitFailure
	}
	defer resp.Body.Close()
	_, _ = io.Copy(stdout, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return exitFailure
	}
	return exitOK
}

// advertised is the slave's address for orchestrators: the configured
// advertised host (else the bind host if specific, else the host name)
// and port (else the bind port).
func advertised(cfg ringcoordinator.Config, hostname string) string {
	host := cfg.AdvertisedHost
	if host == "" {
		if ip := net.ParseIP(cfg.SlaveHost); cfg.SlaveHost != "" && (ip == nil || !ip.IsUnspecified()) {
			host = cfg.SlaveHost
		} else {
			host = hostname
		}
	}
	port := cfg.AdvertisedPort
	if port == 0 {
		port = cfg.SlavePort // 0 too for a free port: the slave puts its bound port
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// readiness is the JSON of /healthz and /readyz.
type readiness struct {
	Ready  bool                        `json:"ready"`
	Roles  []string                    `json:"roles"`
	Master *ringcoordinator.Assignment `json:"master,omitempty"`
	Slave  *ringcoordinator.Assignment `json:"slave,omitempty"`
}

func handlers(roles []string, master *ringcoordinator.Master, slave *ringcoordinator.Slave) http.Handler {
	state := func() readiness {
		now := time.Now()
		r := readiness{Ready: true, Roles: roles}
		if master != nil {
			a := master.Assignment(now)
			r.Master = &a
		}
		if slave != nil {
			a := slave.Assignment(now)
			r.Slave = &a
			r.Ready = r.Ready && a.Connected
		}
		return r
	}
	write := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		write(w, http.StatusOK, map[string]any{"status": "ok", "roles": roles})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		r := state()
		code := http.StatusOK
		if !r.Ready {
			code = http.StatusServiceUnavailable
		}
		write(w, code, r)
	})
	return mux
}
