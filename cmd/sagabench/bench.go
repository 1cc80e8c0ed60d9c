package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/topics"
)

// bench runs cells and returns the report. A cell that fails is reported
// with its error; the others still run.
func bench(ctx context.Context, o options, cells []cellSpec, stderr io.Writer) (*report, error) {
	rep := &report{
		Sagas: o.sagas, Warmup: o.warmup, NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Kafka: o.kafka, Cassandra: o.cassandra, LoadStart: loadAvg(), Started: time.Now().UTC(),
	}
	progress := func(format string, args ...any) {
		if !o.quiet {
			fmt.Fprintf(stderr, "sagabench: "+format+"\n", args...)
		}
	}
	runID := randomID()
	var cass *cassandra.Store
	var floorCQL *floorSession
	defer func() {
		if cass != nil {
			_ = cass.Close()
		}
		if floorCQL != nil {
			floorCQL.close()
		}
	}()
	for _, spec := range cells {
		res := &cellResult{Cell: spec.Name, Infra: spec.Infra, Mode: strings.ToUpper(spec.Mode), Concurrency: spec.Concurrency, Store: "memory"}
		rep.Cells = append(rep.Cells, res)
		if spec.Cassandra {
			res.Store = "cassandra"
		}
		switch {
		case spec.RealKafka && o.kafka == "":
			res.Skipped = "no --kafka (or KAFKA_BROKERS)"
			progress("%s: skipped: %s", spec.Name, res.Skipped)
			continue
		case spec.Cassandra && o.cassandra == "":
			res.Skipped = "no --cassandra (or CASSANDRA_HOSTS)"
			progress("%s: skipped: %s", spec.Name, res.Skipped)
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if spec.Cassandra && cass == nil {
			var err error
			if cass, err = openStore(ctx, o); err != nil {
				return nil, err
			}
			if floorCQL, err = openFloorSession(ctx, o); err != nil {
				return nil, err
			}
		}
		progress("%s: %s, %d sagas (+%d warm-up)", spec.Name, spec.describe(), o.sagas, o.warmup)
		if err := runCell(ctx, o, spec, runID, cass, floorCQL, res, newLogger(stderr, o.verbose), progress); err != nil {
			res.Error = err.Error()
			progress("%s: failed: %v", spec.Name, err)
		}
		res.Load = loadAvg()
	}
	rep.LoadEnd = loadAvg()
	rep.Targets = append(checkTargets(rep.Cells), telemetryTargets(rep.Cells)...)
	return rep, nil
}

// runCell measures the framework in spec, then its floor.
func runCell(ctx context.Context, o options, spec cellSpec, runID string, cass *cassandra.Store, fs *floorSession, res *cellResult, logger *slog.Logger, progress func(string, ...any)) error {
	brokers := splitList(o.kafka)
	if !spec.RealKafka {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("start in-process broker: %w", err)
		}
		defer c.Close()
		brokers = c.ListenAddrs()
	}
	suffix := "b" + runID + "-" + spec.Name
	names := placeorder.DefaultNames().WithSuffix(suffix)
	if spec.RealKafka {
		// Leave the shared broker as it was found.
		defer deleteTopics(brokers, frameworkTopics(names))
	}
	var store eventstore.Store = memory.New()
	if cass != nil && spec.Cassandra {
		store = cass
	}
	fw := &framework{spec: spec, brokers: brokers, store: store, cass: cass, names: names, logger: logger}
	m, rt, err := fw.run(ctx, o.warmup, o.sagas, o.timeout)
	if err != nil {
		return fmt.Errorf("framework: %w", err)
	}
	res.Framework = notUsed(spec, m)
	res.RoundTrips = rt
	progress("%s: framework %.1f sagas/s, p50 %.1fms, p99 %.1fms, %.2f cpu-ms/saga", spec.Name, m.Rate, m.P50, m.P99, m.CPUPerSaga)
	if o.telemetry >= 0 {
		// The same framework run again with telemetry on, on fresh topics.
		tel, err := newBenchTelemetry(o.telemetry)
		if err != nil {
			return err
		}
		tnames := placeorder.DefaultNames().WithSuffix(suffix + "-tel")
		if spec.RealKafka {
			defer deleteTopics(brokers, frameworkTopics(tnames))
		}
		tfw := &framework{spec: spec, brokers: brokers, store: store, cass: cass, names: tnames, logger: logger, tel: tel}
		tm, _, err := tfw.run(ctx, o.warmup, o.sagas, o.timeout)
		_ = tel.close()
		if err != nil {
			return fmt.Errorf("framework with telemetry: %w", err)
		}
		tm = notUsed(spec, tm)
		res.Telemetry, res.TelemetryCost = &tm, telemetryCost(m, tm)
		progress("%s: with telemetry (trace ratio %g) %.1f sagas/s, %.2f cpu-ms/saga: costs %.1f%% of the throughput",
			spec.Name, o.telemetry, tm.Rate, tm.CPUPerSaga, 100*res.TelemetryCost)
	}
	if o.noFloor {
		return nil
	}
	plan := planFromRoundTrips(rt)
	fl := &floor{spec: spec, brokers: brokers, session: fs, plan: plan, topicPrefix: "sagabench.floor-" + suffix, valueSize: envelopeSize()}
	if spec.RealKafka {
		defer func() { deleteTopics(brokers, fl.topics()) }()
	}
	both, err := fl.run(ctx, true, plan.perSaga() > 0, o.warmup, o.sagas, o.timeout)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	both = notUsed(spec, both)
	res.Floor = &both
	res.Ratio = m.Rate / both.Rate
	progress("%s: floor %.1f sagas/s, p50 %.1fms (framework/floor %.2f)", spec.Name, both.Rate, both.P50, res.Ratio)
	if plan.perSaga() > 0 {
		hops, err := fl.run(ctx, true, false, o.warmup, o.sagas, o.timeout)
		if err != nil {
			return fmt.Errorf("floor (Kafka hops alone): %w", err)
		}
		stmts, err := fl.run(ctx, false, true, o.warmup, o.sagas, o.timeout)
		if err != nil {
			return fmt.Errorf("floor (statements alone): %w", err)
		}
		hops, stmts = notUsed(spec, hops), notUsed(spec, stmts)
		res.FloorKafka, res.FloorCQL = &hops, &stmts
		progress("%s: floor halves: Kafka hops alone %.1f sagas/s, statements alone %.1f sagas/s", spec.Name, hops.Rate, stmts.Rate)
	}
	return nil
}

// openStore opens the framework's Cassandra store, creating the schema.
func openStore(ctx context.Context, o options) (*cassandra.Store, error) {
	cfg := cassandra.DefaultConfig()
	cfg.ContactPoints = splitList(o.cassandra)
	cfg.Keyspace = o.keyspace
	cfg.Replication = cassandra.SimpleReplication(1)
	cfg.CreateSchema = true
	s, err := cassandra.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cassandra store: %w", err)
	}
	return s, nil
}

// frameworkTopics lists the topics the framework provisions for names.
func frameworkTopics(n placeorder.Names) []string {
	var ts []string
	for _, svc := range []string{n.Inventory, n.Payment, n.Shipping} {
		ts = append(ts, topics.WorkerTopics(svc)...)
	}
	return append(ts, topics.OrchestratorTopics(n.Domain)...)
}

// deleteTopics deletes names on brokers, best effort.
func deleteTopics(brokers []string, names []string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _ = kadm.NewClient(cl).DeleteTopics(ctx, names...)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func randomID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// notUsed blanks the CPU figures of the local servers a cell does not use
// (their CPU then belongs to someone else).
func notUsed(spec cellSpec, m measure) measure {
	if !spec.RealKafka {
		m.KafkaCPUPerSaga = -1
	}
	if !spec.Cassandra {
		m.CassandraCPUPerSaga = -1
	}
	return m
}
