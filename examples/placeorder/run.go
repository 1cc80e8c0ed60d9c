package placeorder

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Brokers returns the Kafka brokers named by flagValue, else by
// STACKSAGA_KAFKA_BROKERS (or the deprecated KAFKA_BROKERS, with a
// warning), else 127.0.0.1:9092.
func Brokers(flagValue string) []string {
	if b := kafkaflags.SplitBrokers(flagValue); len(b) > 0 {
		return b
	}
	b, deprecated, ok := kafkaflags.EnvBrokersOf(os.LookupEnv)
	if !ok {
		return []string{kafkaflags.DefaultBroker}
	}
	if deprecated {
		slog.Warn(kafkaflags.DeprecationNote)
	}
	return b
}

// EnvInstanceID is the environment variable that gives an example service
// its instance id in its consumer groups (--instance-id;
// orchestrator.WithInstanceID, worker.WithInstanceID): a process killed
// and restarted with the same id takes its partitions back as soon as it
// has joined, instead of after its session timeout. Give each process its
// own id, stable across its restarts (a StatefulSet's pod name:
// STACKSAGA_INSTANCE_ID=$(POD_NAME)); two live processes must never share
// one (the one that joined first stops with topics.ErrInstanceFenced).
// Unset: a dynamic member.
const EnvInstanceID = "STACKSAGA_INSTANCE_ID"

// InstanceIDFlag registers the --instance-id flag on fs, whose default is
// $STACKSAGA_INSTANCE_ID (EnvInstanceID), looked up with getenv.
func InstanceIDFlag(fs *flag.FlagSet, getenv func(string) string) *string {
	return fs.String("instance-id", getenv(EnvInstanceID), "this process's instance id in its Kafka consumer groups, stable across its restarts and unique among live processes (default $"+EnvInstanceID+"; empty: a dynamic member, whose partitions wait out its session timeout after a crash)")
}

// WorkerMain is the whole main of an example worker service: it parses
// the --kafka, --metrics-addr, --instance-id and --config flags (a YAML
// file applied whole: WorkerConfig), sets up telemetry (SetupTelemetry:
// traces when OTEL_EXPORTER_OTLP_ENDPOINT is set, /metrics at
// --metrics-addr), runs the worker with register's endpoints until SIGINT
// or SIGTERM, and exits non-zero on failure. extra are more worker options
// (a guard, say).
func WorkerMain(service string, register func(*worker.Worker, Observer) error, extra ...worker.Option) {
	kafka := flag.String("kafka", "", "Kafka brokers, comma-separated (default $STACKSAGA_KAFKA_BROKERS or 127.0.0.1:9092)")
	metricsAddr := flag.String("metrics-addr", os.Getenv(EnvMetricsAddr), "serve Prometheus metrics at http://ADDR/metrics (default $"+EnvMetricsAddr+"; empty: no metrics)")
	instanceID := InstanceIDFlag(flag.CommandLine, os.Getenv)
	path := flag.String("config", "", "a StackSaga YAML file applied whole (worker.WithConfig: region, cluster, brokers, group; its write protection as the guard)")
	flag.Parse()
	tel, err := SetupTelemetry(context.Background(), service, *metricsAddr)
	if err != nil {
		slog.Error("telemetry", "service", service, "err", err)
		os.Exit(1)
	}
	brokers := Brokers(*kafka)
	var opts []worker.Option
	if *path != "" {
		fileOpts, closeStore, err := WorkerConfig(context.Background(), *path, *kafka, len(extra) > 0)
		if err != nil {
			slog.Error("configuration", "service", service, "err", err)
			os.Exit(1)
		}
		defer closeStore()
		brokers, opts = nil, fileOpts // the file's (or --kafka's)
	}
	opts = append(opts, extra...)
	if *instanceID != "" {
		opts = append(opts, worker.WithInstanceID(*instanceID))
	}
	if tel.TracerProvider != nil {
		opts = append(opts, worker.WithTracerProvider(tel.TracerProvider))
	}
	if tel.MeterProvider != nil {
		opts = append(opts, worker.WithMeterProvider(tel.MeterProvider))
		slog.Info("metrics", "service", service, "url", tel.MetricsURL)
	}
	err = RunWorker(service, brokers, register, opts...)
	_ = tel.Close()
	if err != nil {
		slog.Error("worker stopped", "service", service, "err", err)
		os.Exit(1)
	}
}

// RunWorker runs a worker for service with the endpoints register adds and
// the options opts, until SIGINT or SIGTERM. It is the whole main of the
// example workers.
func RunWorker(service string, brokers []string, register func(*worker.Worker, Observer) error, opts ...worker.Option) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := worker.New(service, append([]worker.Option{worker.WithBrokers(brokers...)}, opts...)...)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := register(w, func(s *worker.Step) {
		slog.Info("step", "service", service, "tx", s.TxID, "span", s.Span, "kind", s.Kind, "endpoint", s.Endpoint, "attempt", s.Attempt)
	}); err != nil {
		return err
	}
	slog.Info("worker running", "service", service, "brokers", brokers)
	if err := w.Run(ctx); err != nil {
		return fmt.Errorf("%s: %w", service, err)
	}
	return nil
}
