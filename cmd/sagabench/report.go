package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// report is the whole run.
type report struct {
	Started    time.Time `json:"started"`
	Sagas      int       `json:"sagas_per_cell"`
	Warmup     int       `json:"warmup_per_cell"`
	Rounds     int       `json:"rounds_per_cell"` // framework/floor rounds (1 with --no-floor)
	NoFloor    bool      `json:"no_floor,omitempty"`
	NumCPU     int       `json:"num_cpu"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	Kafka      string    `json:"kafka,omitempty"`
	// KafkaSecurity describes the real Kafka clients' TLS and SASL
	// (empty: plaintext); CassandraTLS says the Cassandra connections
	// used TLS.
	KafkaSecurity string `json:"kafka_security,omitempty"`
	Cassandra     string `json:"cassandra,omitempty"`
	CassandraTLS  bool   `json:"cassandra_tls,omitempty"`
	Keyspace      string `json:"keyspace,omitempty"` // the Cassandra cells' (with --fresh, the run's own, dropped at the end)
	// KeyspaceLeft, with --fresh, says why the run's keyspace could not be
	// dropped (empty when it was).
	KeyspaceLeft string `json:"keyspace_left,omitempty"`
	// ClusterKafka, ClusterCassandra and ClusterKeyspace are the cluster
	// cells' endpoints and keyspace (empty when none ran); ClusterDown
	// lists the Cassandra nodes that refused connections when they started.
	ClusterKafka     string   `json:"cluster_kafka,omitempty"`
	ClusterCassandra string   `json:"cluster_cassandra,omitempty"`
	ClusterKeyspace  string   `json:"cluster_keyspace,omitempty"`
	ClusterDown      []string `json:"cluster_down,omitempty"`
	// ServicesWarmup is what --warm-services ran before the cells (nil
	// without it).
	ServicesWarmup *servicesWarmup `json:"services_warmup,omitempty"`
	LoadStart      [3]float64      `json:"load_start"`
	LoadEnd        [3]float64      `json:"load_end"`
	Cells          []*cellResult   `json:"cells"`
	Targets        []target        `json:"targets"`
}

// cellResult is one row.
type cellResult struct {
	Cell        string `json:"cell"`
	Infra       string `json:"infra"`
	Store       string `json:"store"`
	Mode        string `json:"mode"`
	Concurrency int    `json:"concurrency"`
	// Framework is the framework's measure in the median round (by
	// ratio; the only run with --no-floor).
	Framework measure `json:"framework"`
	// RoundTrips are the framework's Cassandra requests per saga in its
	// first run (nil with the in-memory store).
	RoundTrips *roundTrips `json:"round_trips_per_saga,omitempty"`
	// Floor is the minimal loop with the Kafka hops and the statements,
	// in the median round; FloorKafka and FloorCQL are its halves,
	// measured once after the rounds (set when the cell has statements).
	Floor      *measure `json:"floor,omitempty"`
	FloorKafka *measure `json:"floor_kafka_hops,omitempty"`
	FloorCQL   *measure `json:"floor_statements,omitempty"`
	// Ratio is framework/floor throughput in the median round, Ratios
	// every round's, sorted.
	Ratio  float64   `json:"framework_over_floor,omitempty"`
	Ratios []float64 `json:"framework_over_floor_rounds,omitempty"`
	// Telemetry is the framework's measure with OpenTelemetry on
	// (--telemetry) in the median round and TelemetryPlain the same
	// round's run without it, TelemetryCost the fraction of throughput it
	// cost there, TelemetryCosts every round's, sorted. TelemetryFloor is
	// what the SDK's spans alone cost (nil without traces).
	Telemetry      *measure  `json:"framework_with_telemetry,omitempty"`
	TelemetryPlain *measure  `json:"framework_without_telemetry,omitempty"`
	TelemetryCost  float64   `json:"telemetry_cost,omitempty"`
	TelemetryCosts []float64 `json:"telemetry_cost_rounds,omitempty"`
	TelemetryFloor *sdkFloor `json:"telemetry_floor,omitempty"`
	// Load is the load average when the cell ended.
	Load    [3]float64 `json:"load"`
	Skipped string     `json:"skipped,omitempty"`
	Error   string     `json:"error,omitempty"`
}

// telemetryPlain is the run without telemetry that the cell's telemetry
// cost compares with: the median telemetry round's (the row's framework
// run when none was recorded).
func (c *cellResult) telemetryPlain() measure {
	if c.TelemetryPlain != nil {
		return *c.TelemetryPlain
	}
	return c.Framework
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// tableHeader names the table's columns.
var tableHeader = []string{
	"cell", "sagas/s", "p50_ms", "p99_ms", "max_ms", "mean_ms", "rt/saga", "r/w/lwt/batch", "cpu_ms/saga", "kafka_cpu", "cql_cpu", "jit%",
	"floor/s", "floor_p50", "floor_mean", "ratio", "floor_kafka/s", "floor_stmts/s", "produce_ms", "box_cpu%", "steal%", "load1",
}

// rows returns the table's rows, one per cell, as strings.
func (r *report) rows() [][]string {
	var out [][]string
	for _, c := range r.Cells {
		row := []string{c.Cell}
		switch {
		case c.Skipped != "":
			row = append(row, "skipped: "+c.Skipped)
			out = append(out, row)
			continue
		case c.Error != "" && c.Framework.Sagas == 0:
			row = append(row, "failed: "+c.Error)
			out = append(out, row)
			continue
		}
		f := c.Framework
		row = append(row, num(f.Rate, 1), num(f.P50, 1), num(f.P99, 1), num(f.Max, 1), num(f.Mean, 1))
		if rt := c.RoundTrips; rt != nil {
			row = append(row, num(rt.Total, 1), fmt.Sprintf("%s/%s/%s/%s", num(rt.Reads, 1), num(rt.Writes, 1), num(rt.LWTs, 1), num(rt.Batches, 1)))
		} else {
			row = append(row, "-", "-")
		}
		row = append(row, num(f.CPUPerSaga, 2), opt(f.KafkaCPUPerSaga, 2), opt(f.CassandraCPUPerSaga, 2), opt(f.ServicesJITPct, 0))
		if fl := c.Floor; fl != nil {
			row = append(row, num(fl.Rate, 1), num(fl.P50, 1), num(fl.Mean, 1), num(c.Ratio, 2))
		} else {
			row = append(row, "-", "-", "-", "-")
		}
		for _, m := range []*measure{c.FloorKafka, c.FloorCQL} {
			if m != nil {
				row = append(row, num(m.Rate, 1))
			} else {
				row = append(row, "-")
			}
		}
		switch {
		case f.ProduceMs <= 0:
			row = append(row, "-")
		case c.Floor != nil && c.Floor.ProduceMs > 0:
			row = append(row, num(f.ProduceMs, 2)+"/"+num(c.Floor.ProduceMs, 2))
		default:
			row = append(row, num(f.ProduceMs, 2))
		}
		row = append(row, opt(f.BoxCPU, 0), opt(f.StealPct, 0))
		row = append(row, num(c.Load[0], 2))
		out = append(out, row)
	}
	return out
}

func num(v float64, prec int) string { return fmt.Sprintf("%.*f", prec, v) }

// opt is num, or "-" for a negative (unknown) value.
func opt(v float64, prec int) string {
	if v < 0 {
		return "-"
	}
	return num(v, prec)
}

// notes explain the columns under the table, for cells of the given
// number of framework/floor rounds, or measured without a floor.
func notes(rounds int, noFloor bool) []string {
	head := []string{"ratio = framework sagas/s / floor sagas/s (one round: the framework run, then the floor run), after a",
		"first framework run that counts the statements and warms the services (a cell's first run is its slowest)."}
	switch {
	case noFloor:
		head = []string{"No floor (--no-floor): a row is the framework's one run in the cell (its first); with --telemetry, the",
			"median telemetry round's run without telemetry (after that first run)."}
	case rounds > 1:
		head = []string{
			fmt.Sprintf("ratio = framework sagas/s / floor sagas/s, the median of %d rounds (a framework run and a floor run each, in", rounds),
			"alternating order, the framework first in round 1); the framework and floor columns are the median round's. A first",
			"framework run before the rounds counts the statements and warms the services (a cell's first run is its slowest).",
		}
	}
	return append(head,
		"The floor is the same cell's Kafka hops (command, reply, x3) and the framework's Cassandra statements per saga (same",
		"kinds and batch sizes, spread over the saga's 7 stages, a stage's statements at once), issued by a minimal loop without",
		"the framework at the same concurrency; floor_kafka/s and floor_stmts/s are its two halves alone, run once. cpu_ms/saga",
		"is this process (embedded cells include the in-process broker); kafka_cpu and cql_cpu are the local broker's and",
		"Cassandra's CPU ms per saga (any other client's load on them included); jit% is the part of those two that their JVMs'",
		"JIT compilers took: over a few percent the servers were still warming up, so their CPU per saga and the rates are not",
		"yet what they will be (a freshly started pair takes tens of thousands of sagas; see --warm-services); produce_ms is the mean Kafka produce round",
		"trip, framework/floor, from request queued to response read; box_cpu% is the whole machine during the framework run;",
		"steal% is the part of it a hypervisor gave to other guests (rates swing with it on a shared VM, CPU per saga less);",
		"load1 is the load average at the cell's end.",
	)
}

// writeTable prints the table, the notes and the targets.
func (r *report) writeTable(w io.Writer) {
	fmt.Fprintf(w, "sagabench: %d sagas per cell (+%d warm-up), %d CPUs, GOMAXPROCS %d, load average %.2f %.2f %.2f at start, %.2f %.2f %.2f at end\n",
		r.Sagas, r.Warmup, r.NumCPU, r.GOMAXPROCS, r.LoadStart[0], r.LoadStart[1], r.LoadStart[2], r.LoadEnd[0], r.LoadEnd[1], r.LoadEnd[2])
	if sw := r.ServicesWarmup; sw != nil {
		shares := make([]string, len(sw.JITPct))
		for i, v := range sw.JITPct {
			shares[i] = opt(v, 0) + "%"
		}
		state := "warm"
		if !sw.Warm {
			state = fmt.Sprintf("not yet warm (%d%% or more)", warmJITPct)
		}
		fmt.Fprintf(w, "sagabench: servers warmed with %d sagas of %s first; their JIT compilers' share of their CPU by chunk of %d sagas: %s, %s\n",
			sw.Sagas, sw.Cell, warmChunk, strings.Join(shares, " "), state)
	}
	if r.KafkaSecurity != "" || r.CassandraTLS {
		var sec []string
		if r.KafkaSecurity != "" {
			sec = append(sec, "Kafka over "+r.KafkaSecurity)
		}
		if r.CassandraTLS {
			sec = append(sec, "Cassandra over TLS")
		}
		fmt.Fprintf(w, "sagabench: %s\n", strings.Join(sec, "; "))
	}
	if r.ClusterKeyspace != "" {
		down := "every Cassandra node up"
		if len(r.ClusterDown) > 0 {
			down = "Cassandra node(s) down: " + strings.Join(r.ClusterDown, ", ")
		}
		fmt.Fprintf(w, "sagabench: cluster cells on Kafka %s, Cassandra %s, keyspace %s (replication factor %d, QUORUM/SERIAL), %s; no floor; their kafka_cpu and cql_cpu count every local broker and Cassandra node, the cluster's and the single ones\n",
			r.ClusterKafka, r.ClusterCassandra, r.ClusterKeyspace, clusterReplicationFactor, down)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(tableHeader, "\t")+"\t")
	for _, row := range r.rows() {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	_ = tw.Flush()
	for _, c := range r.Cells {
		if c.Error != "" && c.Framework.Sagas > 0 {
			fmt.Fprintf(w, "%s: %s\n", c.Cell, c.Error)
		}
	}
	for _, c := range r.Cells {
		if f := c.Framework; f.Sagas > 0 && (c.Store == "cassandra-cluster" || f.NotCompleted > 0) {
			fmt.Fprintf(w, "%s: %d of %d measured sagas COMPLETED, %d compensated\n", c.Cell, f.Sagas-f.NotCompleted, f.Sagas, f.NotCompleted)
		}
	}
	for _, line := range notes(r.Rounds, r.NoFloor) {
		fmt.Fprintln(w, line)
	}
	for _, c := range r.Cells {
		if len(c.Ratios) > 1 {
			rounds := make([]string, len(c.Ratios))
			for i, v := range c.Ratios {
				rounds[i] = num(v, 2)
			}
			fmt.Fprintf(w, "%s framework/floor by round: %s (median shown)\n", c.Cell, strings.Join(rounds, " "))
		}
	}
	for _, c := range r.Cells {
		if rt := c.RoundTrips; rt != nil && len(rt.Tables) > 0 {
			names := make([]string, 0, len(rt.Tables))
			for n := range rt.Tables {
				names = append(names, n)
			}
			sort.Strings(names)
			var parts []string
			for _, n := range names {
				t := rt.Tables[n]
				if t.Reads+t.Writes+t.LWTs < 0.05 {
					continue // a few statements over the whole cell (a recovery scan, say)
				}
				parts = append(parts, fmt.Sprintf("%s r%s w%s lwt%s (batched %s)", n, num(t.Reads, 1), num(t.Writes, 1), num(t.LWTs, 1), num(t.Batched, 1)))
			}
			fmt.Fprintf(w, "%s statements per saga by table: %s\n", c.Cell, strings.Join(parts, ", "))
		}
	}
	for _, c := range r.Cells {
		if t := c.Telemetry; t != nil {
			plain := c.telemetryPlain()
			rounds := make([]string, len(c.TelemetryCosts))
			for i, v := range c.TelemetryCosts {
				rounds[i] = num(100*v, 1) + "%"
			}
			fmt.Fprintf(w, "%s with telemetry: %s sagas/s (without: %s), %s cpu-ms/saga (without: %s), p50 %s ms, steal %s%% (without: %s%%): costs %s%% of the throughput (median of rounds %s)\n",
				c.Cell, num(t.Rate, 1), num(plain.Rate, 1), num(t.CPUPerSaga, 2), num(plain.CPUPerSaga, 2), num(t.P50, 1),
				opt(t.StealPct, 0), opt(plain.StealPct, 0), num(100*c.TelemetryCost, 1), strings.Join(rounds, " "))
			if f := c.TelemetryFloor; f != nil {
				fmt.Fprintf(w, "%s telemetry floor: the SDK alone, %s spans per traced saga with %s attributes each, costs %s cpu-ms per saga: %s%% of the throughput where %s cpu-ms per saga bound it\n",
					c.Cell, num(f.SpansPerSaga, 1), num(f.AttrsPerSpan, 1), num(f.CPUPerSaga, 3), num(100*f.Share, 1), num(boundCPU(plain), 2))
			}
		}
	}
	if len(r.Targets) > 0 {
		fmt.Fprintln(w, "targets (issues 10 and 12):")
		for _, t := range r.Targets {
			fmt.Fprintf(w, "  %s\n", t.String())
		}
	}
}
