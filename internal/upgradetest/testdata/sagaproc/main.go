// Command sagaproc is the mixed-version test's process (internal/upgradetest):
// an orchestrator or a worker of a two-step saga (reserve, then charge;
// a charge over the limit is declined and the saga compensates), on real
// Kafka and Cassandra. The test builds it twice: in this tree, and copied
// into the previous release's tree (git archive of its tag). It uses only
// the API both versions share, so one source serves both.
//
//	sagaproc -role worker -brokers B -hosts H -keyspace KS -worker-service W
//	sagaproc -role orchestrator -brokers B -hosts H -keyspace KS -service S -domain D -worker-service W -orders N -prefix P
//
// It prints one line per event on stdout, which the test reads:
//
//	running                          joined its group
//	started ORDER TXID               (orchestrator) a saga started
//	ran TXID ENDPOINT KIND           (worker) a handler ran (KIND process|revert)
//	starts done                      (orchestrator) -orders started, or -stop-file appeared
//	stopped                          Run returned after SIGINT
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// Order is the saga's entity.
type Order struct {
	OrderID  string `msgpack:"order_id"`
	Amount   int64  `msgpack:"amount"`
	Reserved bool   `msgpack:"reserved,omitempty"`
	Charged  bool   `msgpack:"charged,omitempty"`
}

// limit is the largest amount the charge accepts.
const limit = 1000

var errDeclined = errors.New("declined")

var (
	role     = flag.String("role", "", "orchestrator or worker")
	brokers  = flag.String("brokers", "", "Kafka brokers")
	hosts    = flag.String("hosts", "", "Cassandra contact points")
	keyspace = flag.String("keyspace", "", "Cassandra keyspace")
	service  = flag.String("service", "", "the orchestrating service")
	domain   = flag.String("domain", "", "the saga domain")
	wservice = flag.String("worker-service", "", "the worker's service")
	orders   = flag.Int("orders", 0, "orchestrator: sagas to start")
	every    = flag.Duration("every", 50*time.Millisecond, "orchestrator: time between starts")
	prefix   = flag.String("prefix", "o", "orchestrator: order id prefix")
	delay    = flag.Duration("delay", 100*time.Millisecond, "worker: time each handler takes")
	stopFile = flag.String("stop-file", "", "orchestrator: start no more sagas once this file exists")
)

var outMu sync.Mutex

// say prints one line on stdout at once.
func say(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func main() {
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := cassandra.New(ctx, cassandra.Config{
		ContactPoints: strings.Split(*hosts, ","), Keyspace: *keyspace, RequestTimeout: time.Minute,
	}, cassandra.WithLogger(logger))
	if err != nil {
		fail(err)
	}
	defer store.Close()
	switch *role {
	case "worker":
		err = runWorker(ctx, store, logger)
	case "orchestrator":
		err = runOrchestrator(ctx, store, logger)
	default:
		err = fmt.Errorf("-role %q: want orchestrator or worker", *role)
	}
	if err != nil {
		fail(err)
	}
	say("stopped")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "sagaproc:", err)
	os.Exit(1)
}

func runWorker(ctx context.Context, store *cassandra.Store, logger *slog.Logger) error {
	guard, err := writeprotect.New(store, writeprotect.Config{DefaultMode: writeprotect.Strict})
	if err != nil {
		return err
	}
	w, err := worker.New(*wservice, worker.WithBrokers(strings.Split(*brokers, ",")...),
		worker.WithGuard(guard), worker.WithLogger(logger))
	if err != nil {
		return err
	}
	defer w.Close()
	handler := func(endpoint string) func(context.Context, *worker.Step, Order) (Order, error) {
		return func(_ context.Context, s *worker.Step, o Order) (Order, error) {
			time.Sleep(*delay)
			kind := "process"
			if s.Kind == topics.KindRevert {
				kind = "revert"
			}
			say("ran %s %s %s", s.TxID, endpoint, kind)
			switch {
			case endpoint == "charge" && kind == "process" && o.Amount > limit:
				return o, worker.NonRetryable(errDeclined)
			case endpoint == "reserve":
				o.Reserved = kind == "process"
			case endpoint == "charge":
				o.Charged = kind == "process"
			}
			return o, nil
		}
	}
	for _, ep := range []string{"reserve", "charge"} {
		if err := worker.Register(w, worker.Endpoint[Order]{Name: ep, Process: handler(ep), Revert: handler(ep)}); err != nil {
			return err
		}
	}
	go func() {
		select {
		case <-w.Running():
			say("running")
		case <-ctx.Done():
		}
	}()
	return w.Run(ctx)
}

func runOrchestrator(ctx context.Context, store *cassandra.Store, logger *slog.Logger) error {
	o, err := orchestrator.New(*service, orchestrator.Domain[Order]{
		Name: *domain,
		OnNext: orchestrator.Sequence[Order](
			orchestrator.Step{Service: *wservice, Endpoint: "reserve"},
			orchestrator.Step{Service: *wservice, Endpoint: "charge"},
		),
	}, orchestrator.WithBrokers(strings.Split(*brokers, ",")...), orchestrator.WithStore(store),
		orchestrator.WithLogger(logger))
	if err != nil {
		return err
	}
	defer o.Close()
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	select {
	case <-o.Running():
		say("running")
	case err := <-done:
		return err
	}
	for i := 1; i <= *orders; i++ {
		if *stopFile != "" {
			if _, err := os.Stat(*stopFile); err == nil {
				break
			}
		}
		amount := int64(100)
		if i%4 == 0 {
			amount = limit + 1 // declined: compensates
		}
		id := fmt.Sprintf("%s-%d", *prefix, i)
		txID, err := o.Start(ctx, Order{OrderID: id, Amount: amount})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("start %s: %w", id, err)
		}
		say("started %s %s %d", id, txID, amount)
		select {
		case <-time.After(*every):
		case <-ctx.Done():
		}
	}
	say("starts done")
	return <-done
}
