// Command order-service is an example service that embeds a StackSaga
// orchestrator for the place-order saga and exposes it over HTTP:
//
//	POST /orders       {"customer_id":"c-1","item":"book","quantity":1,"amount":1999}
//	                   → 202 {"transaction_id":"…"}; with an Idempotency-Key
//	                   header (printable ASCII, up to 255 bytes), a repeat of
//	                   the key → 200 {"transaction_id":"<the first order's>"},
//	                   header Idempotent-Replayed: true, nothing started
//	GET  /orders/{id}  → the saga's state, order and step history; with
//	                   ?wait=10s (at most 1m) once the saga has ended, or
//	                   as it is when the wait is over
//	POST /payments/callback {"transaction_id":"…","payment_ref":"…","status":"authorised"}
//	                   → 200 {"status":"resumed"}: the payment gateway's webhook
//	POST /sagas/resume {"transaction_id":"…","correlation_key":"…","context":{…}}
//	                   → the generic resume webhook (orchestrator.ResumeHandler)
//	GET  /trace-window/ → the Trace Window (package tracewindow): the sagas
//	                   with their timelines, compensation trails and retry
//	                   audit in the browser, and its JSON API under
//	                   /trace-window/api/; read-only unless
//	                   STACKSAGA_TRACE_WINDOW_TOKEN is set (then restore,
//	                   re-drive, re-send and resume are offered, behind
//	                   that bearer token)
//
// Both webhooks take only callbacks signed with the secret in
// $STACKSAGA_WEBHOOK_SECRET (or the file $STACKSAGA_WEBHOOK_SECRET_FILE
// names; at least 16 bytes): header StackSaga-Signature (see
// orchestrator.VerifyWebhook). Without a secret they answer 503 (the rest
// of the service runs; a warning says why): the payment reference is
// derived from the transaction id, so it cannot authorise a callback.
//
// An order posted with "async_payment": true pauses after its payment step
// (PAUSED, waiting for PAYMENT_AUTHORISATION, deadline 15 minutes) until
// the gateway's callback names it by its order.payment_ref: "authorised"
// ships it, anything else compensates it. The service is its own retry
// node, so a passed deadline invokes the payment step again (it then fails
// and the order is compensated), and a resume requested with
// `sagactl resume` is continued.
//
// Run Kafka first (docker compose up -d, or make services-up), the three
// example workers, then:
//
//	STACKSAGA_KAFKA_BROKERS=127.0.0.1:9092 go run ./examples/order-service --addr :8080
//
// With STACKSAGA_INSTANCE_ID (or --instance-id) set to a name that stays
// with the process across restarts (a StatefulSet's pod name), a killed
// and restarted order-service applies the replies that came meanwhile as
// soon as it is back, instead of after its session timeout; two live
// processes must never share it (see docs/operations.md).
//
// With OTEL_EXPORTER_OTLP_ENDPOINT set (http://127.0.0.1:4318 for the Jaeger
// of `docker compose --profile observability up`) it traces its sagas over
// OTLP; with --metrics-addr it serves Prometheus metrics at /metrics there.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/stacksaga-go/stacksaga/config"
	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "HTTP listen address (loopback by default: its API and Trace Window read every saga's data; bind wider only behind authentication)")
	kafka := flag.String("kafka", "", "Kafka brokers, comma-separated (default $STACKSAGA_KAFKA_BROKERS or 127.0.0.1:9092)")
	cass := flag.String("cassandra", os.Getenv("CASSANDRA_HOSTS"), "Cassandra contact points for the event store, comma-separated (default $CASSANDRA_HOSTS; empty: in-memory store, lost on restart)")
	keyspace := flag.String("keyspace", "stacksaga_event_store", "Cassandra keyspace (created with SimpleStrategy RF 1 if missing)")
	metricsAddr := flag.String("metrics-addr", os.Getenv(placeorder.EnvMetricsAddr), "serve Prometheus metrics at http://ADDR/metrics (default $"+placeorder.EnvMetricsAddr+"; empty: no metrics)")
	traceLink := flag.String("trace-link", "", "the Trace Window links each saga's trace id with this URL template ({trace_id}, {tx_id}), e.g. http://127.0.0.1:16686/trace/{trace_id} for Jaeger")
	cfgPath := flag.String("config", "", "the stacksaga configuration file, applied whole (instance, brokers, groups, recovery, the Cassandra store); --kafka overrides its brokers, and --cassandra/--keyspace are not used with it")
	instanceID := placeorder.InstanceIDFlag(flag.CommandLine, os.Getenv)
	flag.Parse()
	tw := traceWindowConfig{link: *traceLink, token: os.Getenv(envTraceWindowToken), readToken: os.Getenv(envTraceWindowReadToken)}
	// Without a token, the Trace Window's reads are anonymous only while the
	// service listens on loopback alone.
	tw.anonymous = loopbackOnly(*addr)
	secret, err := webhookSecretFromEnv(os.Getenv)
	if err != nil {
		slog.Error("order-service: invalid webhook secret", "err", err)
		os.Exit(1)
	}
	if secret == nil {
		slog.Warn("order-service: no $" + envWebhookSecret + " (or $" + envWebhookSecretFile + "): POST /payments/callback and POST /sagas/resume are disabled (503); an unsigned callback could ship an unpaid order")
	}
	var extra []orchestrator.Option
	if *instanceID != "" {
		extra = append(extra, orchestrator.WithInstanceID(*instanceID))
	}
	build := func(ctx context.Context, tel *placeorder.Telemetry) (*service, error) {
		if *cfgPath != "" {
			return newOrchestratorFromFile(ctx, *cfgPath, *kafka, tel, tw, extra...)
		}
		return newOrchestrator(ctx, placeorder.Brokers(*kafka), *cass, *keyspace, tel, tw, extra...)
	}
	if err := run(*addr, *metricsAddr, secret, build); err != nil {
		slog.Error("order-service stopped", "err", err)
		os.Exit(1)
	}
}

// run serves the order-service built by build until SIGINT or SIGTERM.
func run(addr, metricsAddr string, webhookSecret []byte, build func(context.Context, *placeorder.Telemetry) (*service, error)) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Traces when OTEL_EXPORTER_OTLP_ENDPOINT is set, metrics at
	// metricsAddr; both off otherwise.
	tel, err := placeorder.SetupTelemetry(ctx, placeorder.OrderService, metricsAddr)
	if err != nil {
		return err
	}
	defer func() { _ = tel.Close() }()
	if tel.MetricsURL != "" {
		slog.Info("metrics", "url", tel.MetricsURL)
	}
	svc, err := build(ctx, tel)
	if err != nil {
		return err
	}
	defer svc.close()
	o := svc.o
	api, err := newAPI(o, svc.traceWindow, webhookSecret)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		errc <- o.Run(ctx)
		// A Run that ends on its own (fenced by another process with
		// this instance id) stops the service: its API would take
		// orders that no orchestrator here moves on.
		stop()
	}()
	srv := &http.Server{Addr: addr, Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	slog.Info("order-service listening", "addr", addr, "scope", o.Scope())
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		stop()
		<-errc
		return err
	}
	return <-errc
}

// service is the order-service's orchestrator and its Trace Window.
type service struct {
	o           *orchestrator.Orchestrator[placeorder.Order]
	traceWindow http.Handler
	// close releases the store and the listing index (after o's Run).
	close func()
}

// newOrchestrator builds the place-order orchestrator on Kafka brokers, with
// the Cassandra event store when hosts are given (else the in-memory one),
// traced and measured as tel says (nil: neither), and its Trace Window. It
// is a retry node too. extra options come last (tests add a clock).
func newOrchestrator(ctx context.Context, brokers []string, cassandraHosts, keyspace string, tel *placeorder.Telemetry, twc traceWindowConfig, extra ...orchestrator.Option) (*service, error) {
	var ccfg *cassandra.Config
	if cassandraHosts != "" {
		cfg := cassandra.DefaultConfig()
		cfg.ContactPoints = strings.Split(cassandraHosts, ",")
		cfg.Keyspace = keyspace
		cfg.Replication = cassandra.SimpleReplication(1)
		cfg.CreateSchema = true
		ccfg = &cfg
	}
	return assemble(ctx, []orchestrator.Option{orchestrator.WithBrokers(brokers...)}, ccfg, orderScope, tel, twc, extra...)
}

// newOrchestratorFromFile is newOrchestrator configured by the stacksaga
// document at path, applied whole (orchestrator.WithConfig): its instance
// (region, cluster), brokers with TLS/SASL, groups and recovery, and the
// Cassandra store when the file has a stacksaga.cassandra section. A
// non-empty kafkaFlag overrides the file's brokers.
func newOrchestratorFromFile(ctx context.Context, path, kafkaFlag string, tel *placeorder.Telemetry, twc traceWindowConfig, extra ...orchestrator.Option) (*service, error) {
	cfg, err := config.LoadFile(path)
	if err != nil {
		return nil, err
	}
	if b := kafkaflags.SplitBrokers(kafkaFlag); len(b) > 0 {
		cfg.Kafka.Brokers = b
	}
	var ccfg *cassandra.Config
	if cfg.Has(config.SectionCassandra) {
		ccfg = &cfg.Cassandra
	}
	scope := eventstore.Scope{Region: cfg.Instance.Region, Cluster: cfg.Instance.Cluster, Service: placeorder.OrderService}
	return assemble(ctx, []orchestrator.Option{orchestrator.WithConfig(cfg)}, ccfg, scope, tel, twc, extra...)
}

// assemble builds the orchestrator from base options (its brokers), on the
// Cassandra store of ccfg (nil: the in-memory one), its listing index and
// Trace Window over scope, the scope its sagas are written in.
func assemble(ctx context.Context, base []orchestrator.Option, ccfg *cassandra.Config, scope eventstore.Scope, tel *placeorder.Telemetry, twc traceWindowConfig, extra ...orchestrator.Option) (*service, error) {
	if tel == nil {
		tel = &placeorder.Telemetry{}
	}
	opts := append(base,
		orchestrator.WithRetryNode(),
		orchestrator.WithListener(func(e orchestrator.Event) {
			slog.Info("saga", "tx", e.TxID, "from", e.From, "to", e.To, "endpoint", e.Endpoint, "outcome", e.Outcome)
		}),
	)
	closeStore := func() {}
	if ccfg != nil {
		store, err := cassandra.New(ctx, *ccfg)
		if err != nil {
			return nil, err
		}
		closeStore = func() { _ = store.Close() }
		opts = append(opts, orchestrator.WithStore(store))
		if tel.MeterProvider != nil {
			if _, err := store.RegisterMetrics(tel.MeterProvider); err != nil {
				closeStore()
				return nil, err
			}
		}
	}
	if tel.TracerProvider != nil {
		opts = append(opts, orchestrator.WithTracerProvider(tel.TracerProvider))
	}
	if tel.MeterProvider != nil {
		opts = append(opts, orchestrator.WithMeterProvider(tel.MeterProvider))
	}
	idx, closeIndex, err := newListingIndex(ctx, ccfg)
	if err != nil {
		closeStore()
		return nil, err
	}
	closeAll := func() { closeIndex(); closeStore() }
	opts = append(opts, orchestrator.WithListener(tracewindow.Listener(idx, scope)))
	o, err := orchestrator.New(placeorder.OrderService, placeorder.Saga(), append(opts, extra...)...)
	if err != nil {
		closeAll()
		return nil, err
	}
	tw, err := newTraceWindow(o, idx, scope, twc)
	if err != nil {
		closeAll()
		return nil, err
	}
	return &service{o: o, traceWindow: tw, close: closeAll}, nil
}

// loopbackOnly reports whether the listen address addr binds loopback only
// (127.0.0.0/8, ::1 or localhost; not ":8080" or 0.0.0.0).
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
