package placeorder

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/stacksaga-go/stacksaga/worker"
)

// Brokers returns the Kafka brokers named by flagValue, else by the
// KAFKA_BROKERS environment variable, else 127.0.0.1:9092.
func Brokers(flagValue string) []string {
	v := flagValue
	if v == "" {
		v = os.Getenv("KAFKA_BROKERS")
	}
	if v == "" {
		v = "127.0.0.1:9092"
	}
	return strings.Split(v, ",")
}

// WorkerMain is the whole main of an example worker service: it parses
// the --kafka flag, runs the worker with register's endpoints until SIGINT
// or SIGTERM, and exits non-zero on failure.
func WorkerMain(service string, register func(*worker.Worker, Observer) error) {
	kafka := flag.String("kafka", "", "Kafka brokers, comma-separated (default $KAFKA_BROKERS or 127.0.0.1:9092)")
	flag.Parse()
	if err := RunWorker(service, Brokers(*kafka), register); err != nil {
		slog.Error("worker stopped", "service", service, "err", err)
		os.Exit(1)
	}
}

// RunWorker runs a worker for service with the endpoints register adds,
// until SIGINT or SIGTERM. It is the whole main of the example workers.
func RunWorker(service string, brokers []string, register func(*worker.Worker, Observer) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := worker.New(service, worker.WithBrokers(brokers...))
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
