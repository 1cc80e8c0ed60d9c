package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
)

// warmChunk is how many sagas one chunk of --warm-services runs, and
// warmJITPct the JIT share of the servers' CPU in a chunk under which they
// count as warm. A freshly started broker and Cassandra on the 2-core
// development box spent 52% of their CPU compiling in the first 2,000
// RELAXED sagas at concurrency 64, 15% in the sixth chunk and 4% in the
// eleventh; until then their CPU per saga, and every rate with it,
// measures the compilers as much as the saga.
const (
	warmChunk  = 2000
	warmJITPct = 5
)

// servicesWarmup is what --warm-services did before the cells.
type servicesWarmup struct {
	// Cell is the cell whose framework ran the warm-up sagas.
	Cell  string `json:"cell"`
	Sagas int    `json:"sagas"`
	// JITPct is each chunk's share of the servers' CPU that their JIT
	// compilers took, in percent.
	JITPct []float64 `json:"jit_pct_by_chunk"`
	// Warm says the last chunk's share was under warmJITPct; false when
	// the --warm-services budget ran out first, or the servers' threads
	// could not be read (no local broker or Cassandra in /proc).
	Warm bool `json:"warm"`
}

// warmCell picks the cell that warms the servers: the first real-Kafka
// cell that uses Cassandra (it loads both servers), else the first
// real-Kafka cell; ok is false when no selected cell uses a real server.
func warmCell(o options, cells []cellSpec) (cellSpec, bool) {
	var first *cellSpec
	for i, c := range cells {
		if !c.RealKafka || c.Cluster || o.kafka == "" || c.Cassandra && o.cassandra == "" {
			continue
		}
		if c.Cassandra {
			return c, true
		}
		if first == nil {
			first = &cells[i]
		}
	}
	if first == nil {
		return cellSpec{}, false
	}
	return *first, true
}

// warmServices runs spec's framework, unmeasured, in chunks of warmChunk
// sagas (fewer for a smaller budget) until a chunk's JIT share is under
// warmJITPct or o.warmServices sagas have run, on topics of its own that
// it deletes at the end.
func warmServices(ctx context.Context, o options, spec cellSpec, runID string, cass *cassandra.Store, logger *slog.Logger, progress func(string, ...any)) (*servicesWarmup, error) {
	brokers := splitList(o.kafka)
	var made []string // every chunk's topics
	defer func() { deleteTopics(brokers, o.kafkaOpts, made) }()
	var store eventstore.Store = memory.New()
	if spec.Cassandra {
		store = cass
	}
	w := &servicesWarmup{Cell: spec.Name}
	for w.Sagas < o.warmServices && !w.Warm {
		// Fresh topics for each chunk, as for each run of a cell.
		names := placeorder.DefaultNames().WithSuffix(fmt.Sprintf("b%s-warm%d", runID, len(w.JITPct)+1))
		made = append(made, frameworkTopics(names)...)
		fw := &framework{spec: spec, brokers: brokers, kafkaOpts: o.kafkaOpts, store: store, cass: cass, names: names, logger: logger}
		n := min(warmChunk, o.warmServices-w.Sagas)
		m, _, err := fw.run(ctx, 0, n, o.timeout)
		if err != nil {
			return w, fmt.Errorf("warming the services with %s: %w", spec.Name, err)
		}
		w.Sagas += n
		w.JITPct = append(w.JITPct, m.ServicesJITPct)
		w.Warm = m.ServicesJITPct >= 0 && m.ServicesJITPct < warmJITPct
		progress("warming the services with %s: %d sagas, %.1f sagas/s, JIT %s%% of the servers' CPU", spec.Name, w.Sagas, m.Rate, opt(m.ServicesJITPct, 1))
		if m.ServicesJITPct < 0 {
			break // nothing to watch: the servers are not local
		}
	}
	return w, nil
}
