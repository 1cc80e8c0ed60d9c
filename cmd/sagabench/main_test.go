package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// runBench runs the command and returns its stdout, failing on a non-zero
// exit.
func runBench(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"--quiet"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("sagabench %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func decode(t *testing.T, out string) report {
	t.Helper()
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	return r
}

// positive checks that every named value is above zero.
func positive(t *testing.T, cell string, vals map[string]float64) {
	t.Helper()
	for name, v := range vals {
		if !(v > 0) {
			t.Errorf("%s: %s = %v, want > 0", cell, name, v)
		}
	}
}

// The embedded cells run quickly: the table has its header and one row
// per cell with every column, and the JSON numbers are positive.
func TestEmbeddedCells(t *testing.T) {
	args := []string{"--sagas", "40", "--warmup", "5", "--cells", "embedded-c1,embedded-c64", "--kafka", "", "--cassandra", ""}
	table := runBench(t, args...)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	var header []string
	rows := map[string][]string{}
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && f[0] == "cell":
			header = f
		case len(f) > 0 && strings.HasPrefix(f[0], "embedded-c") && len(f) > 3 && f[1] != ">=" && rows[f[0]] == nil:
			rows[f[0]] = f // the table's row comes before the cell's lines after the table
		}
	}
	if strings.Join(header, " ") != strings.Join(tableHeader, " ") {
		t.Fatalf("table header %q, want %q\n%s", header, tableHeader, table)
	}
	for _, cell := range []string{"embedded-c1", "embedded-c64"} {
		row := rows[cell]
		if len(row) != len(tableHeader) {
			t.Fatalf("row %s has %d columns, want %d: %q\n%s", cell, len(row), len(tableHeader), row, table)
		}
		for i, col := range tableHeader {
			switch col {
			case "sagas/s", "p50_ms", "p99_ms", "max_ms", "mean_ms", "cpu_ms/saga", "floor/s", "floor_p50", "floor_mean", "ratio":
				if v, err := strconv.ParseFloat(row[i], 64); err != nil || v <= 0 {
					t.Errorf("%s %s = %q, want a positive number", cell, col, row[i])
				}
			}
		}
	}
	if !strings.Contains(table, "ratio = framework sagas/s / floor sagas/s") {
		t.Errorf("no notes under the table:\n%s", table)
	}

	r := decode(t, runBench(t, append(args, "--json")...))
	if len(r.Cells) != 2 || r.Sagas != 40 {
		t.Fatalf("%d cells of %d sagas, want 2 of 40", len(r.Cells), r.Sagas)
	}
	for _, c := range r.Cells {
		if c.Error != "" || c.Skipped != "" {
			t.Fatalf("%s: error %q, skipped %q", c.Cell, c.Error, c.Skipped)
		}
		f := c.Framework
		if f.Sagas != 40 || c.Floor == nil || c.Floor.Sagas != 40 {
			t.Fatalf("%s: measured %d sagas, floor %+v", c.Cell, f.Sagas, c.Floor)
		}
		positive(t, c.Cell, map[string]float64{
			"sagas/s": f.Rate, "p50": f.P50, "p99": f.P99, "max": f.Max, "mean": f.Mean, "cpu/saga": f.CPUPerSaga,
			"floor sagas/s": c.Floor.Rate, "floor p50": c.Floor.P50, "ratio": c.Ratio,
		})
		if f.P50 > f.P99 || f.P99 > f.Max {
			t.Errorf("%s: p50 %v, p99 %v, max %v out of order", c.Cell, f.P50, f.P99, f.Max)
		}
		if c.RoundTrips != nil || c.FloorCQL != nil {
			t.Errorf("%s: Cassandra figures with the in-memory store", c.Cell)
		}
	}
}

// One small Cassandra cell on real services: round trips by kind, the
// floor and its two halves.
func TestCassandraCellRealServices(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	hosts, keyspace := testenv.CassandraKeyspace(t)
	r := decode(t, runBench(t, "--json", "--sagas", "40", "--warmup", "5", "--cells", "cassandra-relaxed-c64", "--warm-services", "30",
		"--kafka", strings.Join(brokers, ","), "--cassandra", strings.Join(hosts, ","), "--keyspace", keyspace, "--timeout", "2m"))
	if len(r.Cells) != 1 {
		t.Fatalf("%d cells", len(r.Cells))
	}
	c := r.Cells[0]
	if c.Error != "" || c.Skipped != "" {
		t.Fatalf("error %q, skipped %q", c.Error, c.Skipped)
	}
	if c.RoundTrips == nil || c.Floor == nil || c.FloorKafka == nil || c.FloorCQL == nil {
		t.Fatalf("missing figures: %+v", c)
	}
	rt := c.RoundTrips
	positive(t, c.Cell, map[string]float64{
		"sagas/s": c.Framework.Rate, "p50": c.Framework.P50, "round trips": rt.Total, "reads": rt.Reads,
		"floor": c.Floor.Rate, "floor kafka": c.FloorKafka.Rate, "floor statements": c.FloorCQL.Rate, "ratio": c.Ratio,
	})
	if sum := rt.Reads + rt.Writes + rt.LWTs + rt.Batches + rt.Other; sum < rt.Total-0.01 || sum > rt.Total+0.01 {
		t.Errorf("round trips by kind sum to %v, total %v", sum, rt.Total)
	}
	if len(r.Targets) == 0 {
		t.Error("no targets checked")
	}
	// The servers' JIT share: a percentage when they run on this machine
	// (their CPU is read from /proc, as scripts/services runs them),
	// unknown otherwise.
	local := c.Framework.KafkaCPUPerSaga >= 0 && c.Framework.CassandraCPUPerSaga >= 0
	if jit := c.Framework.ServicesJITPct; local && (jit < 0 || jit > 100) || !local && jit != -1 {
		t.Errorf("services' JIT share %v (servers local: %v)", jit, local)
	}
	w := r.ServicesWarmup
	if w == nil || w.Cell != "cassandra-relaxed-c64" || w.Sagas != 30 || len(w.JITPct) != 1 {
		t.Fatalf("--warm-services 30: %+v", w)
	}
	if jit := w.JITPct[0]; local && (jit < 0 || jit > 100) || w.Warm != (jit >= 0 && jit < warmJITPct) {
		t.Errorf("warm-up chunk's JIT share %v, warm %v", jit, w.Warm)
	}
}

func TestParse(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parse([]string{"--sagas", "100", "--kafka", "", "--cassandra", ""}, &stderr)
	if err != nil || o.warmup != 10 || o.timeout != 5*time.Minute || o.rounds != 3 {
		t.Errorf("parse: %+v, %v", o, err)
	}
	for _, bad := range [][]string{
		{"--sagas", "0"},
		{"--rounds", "0"},
		{"--warm-services", "-1"},
		{"--kafka", "", "--cassandra", "127.0.0.1:9042"},
		{"extra"},
	} {
		if _, err := parse(bad, &stderr); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
	var out bytes.Buffer
	if code := run([]string{"--cells", "nothing-*"}, &out, &stderr); code != 2 {
		t.Errorf("--cells matching nothing: exit %d, want 2", code)
	}
	if code := run([]string{"--cells", "list"}, &out, &stderr); code != 0 || strings.Count(out.String(), "\n") != len(matrix()) {
		t.Errorf("--cells list: exit %d\n%s", code, out.String())
	}
}

func TestSelectCells(t *testing.T) {
	got, err := selectCells(matrix(), "cassandra-*-c64, embedded-c1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
	}
	if want := "embedded-c1 cassandra-relaxed-c64 cassandra-strict-c64"; strings.Join(names, " ") != want {
		t.Errorf("selected %v, want %s (matrix order)", names, want)
	}
	if all, _ := selectCells(matrix(), ""); len(all) != 11 {
		t.Errorf("default selects %d cells, want 11 (every cell but the node-down ones)", len(all))
	}
}

// The floor issues as many statements of each kind as the framework's
// averages, over the sagas of a run, dealt over the seven stages.
func TestFloorPlanMatchesAverages(t *testing.T) {
	rt := roundTripsOf(cassandra.Stats{
		Reads: 900, Writes: 400, LWTs: 100, Batches: 300,
		Tables: map[string]cassandra.TableStats{
			"es_transaction":        {Writes: 300, LWTs: 100, Batched: 300},
			"es_transaction_tryout": {Writes: 300, Batched: 300},
			"es_execution_markers":  {Reads: 900, Writes: 400},
		},
	}, 100)
	p := planFromRoundTrips(rt)
	if p.perBatch != 2 || p.condBatches != 0 || p.perSaga() != 17 {
		t.Fatalf("plan %+v from %+v", p, rt)
	}
	counts := map[stmtKind]int{}
	for i := range 100 {
		st := p.stages(i)
		n := 0
		for _, s := range st {
			for _, k := range s {
				counts[k]++
				n++
			}
		}
		if n != 17 {
			t.Fatalf("saga %d has %d statements, want 17", i, n)
		}
		if len(st[0]) == 0 || st[0][0] != stmtLWT {
			t.Fatalf("saga %d starts with %v, want its LWT", i, st[0])
		}
	}
	if counts[stmtRead] != 900 || counts[stmtWrite] != 400 || counts[stmtLWT] != 100 || counts[stmtBatch] != 300 {
		t.Errorf("statements over 100 sagas: %v", counts)
	}
	total := 0
	for i := range 1000 {
		total += share(2.37, i)
	}
	if total != 2370 {
		t.Errorf("share(2.37) over 1000 sagas = %d, want 2370", total)
	}
}

// A missed goal says what the floor allows and what bounds it.
func TestTargetsExplainMisses(t *testing.T) {
	defer func(n int) { cpus = n }(cpus)
	cpus = 2
	floorM := measure{Sagas: 10, Rate: 250, Mean: 30, P50: 25, CPUPerSaga: 1, KafkaCPUPerSaga: 2, CassandraCPUPerSaga: 5, BoxCPU: 99}
	cells := []*cellResult{{
		Cell: "cassandra-relaxed-c64", Infra: "cassandra-relaxed", Concurrency: 64,
		Framework:  measure{Sagas: 10, Rate: 200, Mean: 300, P50: 280, CPUPerSaga: 1.5, BoxCPU: 99, KafkaCPUPerSaga: -1, CassandraCPUPerSaga: -1},
		RoundTrips: &roundTrips{Total: 12, Reads: 3, Writes: 6, Batches: 3},
		Floor:      &floorM, FloorKafka: &measure{Rate: 600}, FloorCQL: &measure{Rate: 300},
		Ratio: 0.8,
	}}
	ts := checkTargets(cells)
	if len(ts) != 2 {
		t.Fatalf("targets %v", ts)
	}
	miss := ts[0]
	if miss.Met || miss.Floor != 250 || !strings.Contains(miss.Why, "out of reach") ||
		!strings.Contains(miss.Why, "the Cassandra statements bound it") || !strings.Contains(miss.Why, "at most 250 sagas/s") {
		t.Errorf("missed target: %+v", miss)
	}
	if ratio := ts[1]; !ratio.Met || ratio.Got != 0.8 {
		t.Errorf("ratio target: %+v", ratio)
	}
	if strings.Contains(miss.Why, "warming") {
		t.Errorf("warm servers (JIT 0%%) said to be warming: %s", miss.Why)
	}
	// Servers whose JIT compilers took a large share of their CPU were
	// still warming up: both verdicts say so; an unknown share says
	// nothing.
	for _, jit := range []float64{30, -1} {
		cells[0].Framework.ServicesJITPct = jit
		cells[0].Ratio = 0.5
		for _, tg := range checkTargets(cells) {
			if said := strings.Contains(tg.Why, "JIT compilers took 30% of their CPU"); said != (jit == 30) {
				t.Errorf("JIT share %v: %s: %s", jit, tg.Name, tg.Why)
			}
		}
	}

	// A latency goal the floor misses: out of reach; a framework faster
	// than the floor is told what bounds it instead.
	for _, fwMean := range []float64{35, 26} {
		c1 := []*cellResult{{
			Cell: "cassandra-relaxed-c1", Infra: "cassandra-relaxed", Concurrency: 1,
			Framework:  measure{Sagas: 10, Rate: 1000 / fwMean, Mean: fwMean, P50: fwMean, CPUPerSaga: 9, BoxCPU: 40, KafkaCPUPerSaga: -1, CassandraCPUPerSaga: -1},
			RoundTrips: &roundTrips{Total: 12, Reads: 3, Writes: 6, Batches: 3},
			Floor:      &measure{Sagas: 10, Rate: 35, Mean: 28, P50: 27, CPUPerSaga: 8, KafkaCPUPerSaga: -1, CassandraCPUPerSaga: -1},
			FloorKafka: &measure{Mean: 12}, FloorCQL: &measure{Mean: 18},
			Ratio: 28 / fwMean,
		}}
		lat := checkTargets(c1)[0]
		beats := strings.Contains(lat.Why, "is under it")
		if lat.Met || lat.Floor != 28 || !strings.Contains(lat.Why, "out of reach") || !strings.Contains(lat.Why, "Kafka hops alone take 12.0 ms") ||
			beats != (fwMean < 28) {
			t.Errorf("framework mean %v: latency target %+v", fwMean, lat)
		}
	}
}

// --telemetry runs each cell's framework a second time with OpenTelemetry
// on and reports its cost, checked as a target.
func TestTelemetryCost(t *testing.T) {
	args := []string{"--sagas", "40", "--warmup", "5", "--cells", "embedded-c1", "--kafka", "", "--cassandra", "", "--no-floor", "--telemetry", "1", "--telemetry-rounds", "3"}
	r := decode(t, runBench(t, append(args, "--json")...))
	if len(r.Cells) != 1 {
		t.Fatalf("%d cells, want 1", len(r.Cells))
	}
	c := r.Cells[0]
	if c.Telemetry == nil || c.Telemetry.Sagas != 40 || !(c.Telemetry.Rate > 0) {
		t.Fatalf("telemetry measure %+v, want 40 sagas at a positive rate", c.Telemetry)
	}
	if len(c.TelemetryCosts) != 3 || c.TelemetryCost != c.TelemetryCosts[1] || c.TelemetryCosts[0] > c.TelemetryCosts[1] || c.TelemetryCosts[1] > c.TelemetryCosts[2] {
		t.Errorf("telemetry cost %v, rounds %v: want the median of 3 sorted rounds", c.TelemetryCost, c.TelemetryCosts)
	}
	// The median round's run without telemetry is the row's (a fresh run,
	// not the cell's first), and its cost is computed against it.
	if p := c.TelemetryPlain; p == nil || p.Sagas != 40 || c.Framework != *p ||
		math.Abs(c.TelemetryCost-(1-c.Telemetry.Rate/p.Rate)) > 1e-9 {
		t.Errorf("run without telemetry %+v (row %+v): want the median round's, whose rate gives the cost %v", p, c.Framework, c.TelemetryCost)
	}
	// The SDK's floor: the saga's spans as they ended (the
	// start, then per step the worker's and the reply's: 1+2*3), each with
	// attributes, and their CPU as a share of the cell's.
	// A redelivery could add a span to a saga, hence the margin.
	f := c.TelemetryFloor
	if f == nil || f.SpansPerSaga < 7 || f.SpansPerSaga >= 7.5 || f.AttrsPerSpan < 3 || !(f.CPUPerSaga > 0) || !(f.Share > 0 && f.Share < 1) ||
		math.Abs(f.Share-f.CPUPerSaga/(c.TelemetryPlain.CPUPerSaga+f.CPUPerSaga)) > 1e-9 {
		t.Fatalf("telemetry floor %+v: want 7 spans per saga with attributes, a positive CPU and its share of the cell's", f)
	}
	// The floor's loop itself: every saga traced, with its 7 spans.
	if f.Sagas < 40 || f.Roots != int64(f.Sagas) || f.Spans != 7*f.Roots {
		t.Errorf("floor loop ran %d sagas and ended %d spans, %d of them roots: want every saga's 7", f.Sagas, f.Spans, f.Roots)
	}
	var found bool
	for _, tg := range r.Targets {
		if tg.Cell == c.Cell && strings.Contains(tg.Name, "telemetry cost") {
			found = true
			if tg.Got != c.TelemetryCost || tg.Met != (c.TelemetryCost <= maxTelemetryCost) {
				t.Errorf("target %+v does not match the cost %v", tg, c.TelemetryCost)
			}
		}
	}
	if !found {
		t.Errorf("no telemetry target in %+v", r.Targets)
	}
	table := runBench(t, args...)
	if !strings.Contains(table, "embedded-c1 with telemetry: ") || !strings.Contains(table, "embedded-c1 telemetry floor: the SDK alone, 7.0 spans per traced saga") {
		t.Errorf("no telemetry or telemetry floor line in the table:\n%s", table)
	}
	// Half the sagas traced: still 7 spans per traced saga.
	r = decode(t, runBench(t, "--sagas", "30", "--warmup", "2", "--cells", "embedded-c1", "--kafka", "", "--cassandra", "", "--no-floor", "--telemetry", "0.5", "--telemetry-rounds", "1", "--json"))
	// The floor's loop makes the 7 spans of a sampled saga and none of the
	// others.
	if f := r.Cells[0].TelemetryFloor; f == nil || f.SpansPerSaga < 7 || f.SpansPerSaga >= 7.5 ||
		f.Roots <= 0 || f.Roots >= int64(f.Sagas) || f.Spans != 7*f.Roots {
		t.Errorf("half the sagas traced: floor %+v, want 7 spans per traced saga, some sagas traced and some not", f)
	}
	// Metrics only: no spans, so no floor.
	r = decode(t, runBench(t, "--sagas", "20", "--warmup", "2", "--cells", "embedded-c1", "--kafka", "", "--cassandra", "", "--no-floor", "--telemetry", "0", "--telemetry-rounds", "1", "--json"))
	if c := r.Cells[0]; c.Telemetry == nil || c.TelemetryFloor != nil {
		t.Errorf("metrics only: telemetry %+v, floor %+v: want a measure and no floor", c.Telemetry, c.TelemetryFloor)
	}
	var stderr bytes.Buffer
	if _, err := parse([]string{"--telemetry", "1.5"}, &stderr); err == nil {
		t.Error("--telemetry 1.5 accepted")
	}
	if _, err := parse([]string{"--telemetry", "1", "--telemetry-rounds", "0"}, &stderr); err == nil {
		t.Error("--telemetry-rounds 0 accepted")
	}
}

// A missed telemetry target says it is out of reach when the SDK's floor
// alone costs more than the target, and otherwise points at sampling.
func TestTelemetryTargetOutOfReach(t *testing.T) {
	plain := measure{Rate: 1000, CPUPerSaga: 0.3, KafkaCPUPerSaga: -1, CassandraCPUPerSaga: -1}
	tel := measure{Rate: 750, CPUPerSaga: 0.4}
	cell := func(share float64) *cellResult {
		return &cellResult{Cell: "embedded-c256", Framework: plain, TelemetryPlain: &plain, Telemetry: &tel, TelemetryCost: 0.25,
			TelemetryCosts: []float64{0.05, 0.25, 0.3}, TelemetryFloor: &sdkFloor{SpansPerSaga: 7, AttrsPerSpan: 9, CPUPerSaga: 0.05, Share: share}}
	}
	ts := telemetryTargets([]*cellResult{cell(0.14), cell(0.05)})
	if len(ts) != 2 || ts[0].Met || ts[1].Met {
		t.Fatalf("targets %+v: want two misses", ts)
	}
	if w := ts[0].Why; !strings.Contains(w, "out of reach at this sampling") || !strings.Contains(w, "0.050 cpu-ms per saga for its 7.0 spans per traced saga") ||
		!strings.Contains(w, "14.0% of the throughput of a cell bound by its 0.30 cpu-ms per saga") {
		t.Errorf("floor above the target: %q", w)
	}
	if w := ts[1].Why; strings.Contains(w, "out of reach") || !strings.Contains(w, "sample fewer sagas") {
		t.Errorf("floor below the target: %q", w)
	}
	if s := ts[0].String(); !strings.Contains(s, "--telemetry-rounds") {
		t.Errorf("straddling telemetry rounds should point at --telemetry-rounds: %s", s)
	}
}

// --rounds N measures a cell's framework and floor N times in alternating
// order: the row shows the median round, every round's ratio is listed
// sorted, and a line after the table gives them. --rounds 0 is refused.
func TestRounds(t *testing.T) {
	args := []string{"--sagas", "40", "--warmup", "5", "--cells", "embedded-c1", "--kafka", "", "--cassandra", "", "--rounds", "3"}
	r := decode(t, runBench(t, append(args, "--json")...))
	if len(r.Cells) != 1 || r.Rounds != 3 {
		t.Fatalf("%d cells, %d rounds, want 1 cell of 3 rounds", len(r.Cells), r.Rounds)
	}
	c := r.Cells[0]
	if c.Error != "" || c.Skipped != "" || c.Floor == nil {
		t.Fatalf("error %q, skipped %q, floor %+v", c.Error, c.Skipped, c.Floor)
	}
	if len(c.Ratios) != 3 || !sort.Float64sAreSorted(c.Ratios) || c.Ratios[0] <= 0 {
		t.Fatalf("ratios by round %v, want 3 positive ones, sorted", c.Ratios)
	}
	if c.Ratio != c.Ratios[1] {
		t.Errorf("ratio %v, want the median round's %v (rounds %v)", c.Ratio, c.Ratios[1], c.Ratios)
	}
	if got := c.Framework.Rate / c.Floor.Rate; math.Abs(got-c.Ratio) > 1e-9*c.Ratio {
		t.Errorf("framework %v sagas/s / floor %v = %v, want the median round's ratio %v", c.Framework.Rate, c.Floor.Rate, got, c.Ratio)
	}
	if c.Framework.Sagas != 40 || c.Floor.Sagas != 40 {
		t.Errorf("median round measured %d framework and %d floor sagas, want 40", c.Framework.Sagas, c.Floor.Sagas)
	}

	// The table, and the progress lines: the first run is named as no
	// round, then rounds 1 to 3, the framework first in rounds 1 and 3,
	// the floor first in round 2.
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	table, progress := stdout.String(), stderr.String()
	for _, want := range []string{": framework (first run: counts the statements, warms the services; not a round)",
		": framework (round 1 of 3)", ": floor (round 1 of 3)", ": framework (round 2 of 3)", ": floor (round 2 of 3)",
		": framework (round 3 of 3)", ": floor (round 3 of 3)"} {
		if strings.Count(progress, want) != 1 {
			t.Errorf("progress names %q %d times, want once:\n%s", want, strings.Count(progress, want), progress)
		}
	}
	order := func(a, b string) {
		if strings.Index(progress, a) > strings.Index(progress, b) {
			t.Errorf("%q after %q:\n%s", a, b, progress)
		}
	}
	order(": framework (first run:", ": framework (round 1 of 3)")
	order(": framework (round 1 of 3)", ": floor (round 1 of 3)")
	order(": floor (round 2 of 3)", ": framework (round 2 of 3)")
	order(": framework (round 3 of 3)", ": floor (round 3 of 3)")
	if strings.Contains(progress, "round 4") {
		t.Errorf("progress names a fourth round:\n%s", progress)
	}
	if !strings.Contains(table, "embedded-c1 framework/floor by round: ") || !strings.Contains(table, "(median shown)") {
		t.Errorf("no line of ratios by round:\n%s", table)
	}
	if !strings.Contains(table, "the median of 3 rounds") {
		t.Errorf("the notes do not say the ratio is a median of rounds:\n%s", table)
	}
	one := runBench(t, "--sagas", "40", "--warmup", "5", "--cells", "embedded-c1", "--kafka", "", "--cassandra", "", "--rounds", "1")
	if strings.Contains(one, "by round") || !strings.Contains(one, "one round") {
		t.Errorf("--rounds 1 table:\n%s", one)
	}

	stderr.Reset()
	if _, err := parse([]string{"--rounds", "0"}, &stderr); err == nil || !strings.Contains(err.Error(), "--rounds") {
		t.Errorf("--rounds 0: %v, want an error naming --rounds", err)
	}
}

// A latency-bound cell's missed ratio is split into what the produce round
// trips of its two runs account for and the framework's own work; a
// throughput-bound one is told in CPU per saga.
func TestRatioMissSplitsLatency(t *testing.T) {
	c1 := &cellResult{
		Cell: "kafka-memory-c1", Infra: "kafka-memory", Concurrency: 1, Ratio: 0.6,
		Framework: measure{Sagas: 10, Rate: 125, Mean: 8, P50: 7, CPUPerSaga: 3, ProduceMs: 1.0},
		Floor:     &measure{Sagas: 10, Rate: 200, Mean: 5, P50: 4, CPUPerSaga: 2, ProduceMs: 0.6},
	}
	c64 := &cellResult{
		Cell: "kafka-memory-c64", Infra: "kafka-memory", Concurrency: 64, Ratio: 0.5,
		Framework: measure{Sagas: 10, Rate: 500, Mean: 100, P50: 90, CPUPerSaga: 1.5, ProduceMs: 3},
		Floor:     &measure{Sagas: 10, Rate: 1000, Mean: 60, P50: 50, CPUPerSaga: 0.75, ProduceMs: 2},
	}
	cass := &cellResult{
		Cell: "cassandra-relaxed-c1", Infra: "cassandra-relaxed", Concurrency: 1, Ratio: 0.6,
		Framework:  measure{Sagas: 10, Rate: 30, Mean: 33, P50: 30, CPUPerSaga: 10, ProduceMs: 1.5},
		Floor:      &measure{Sagas: 10, Rate: 50, Mean: 20, P50: 19, CPUPerSaga: 8, ProduceMs: 1.5},
		RoundTrips: &roundTrips{Total: 12, Reads: 3, Writes: 6, Batches: 3},
	}
	var ts []target
	for _, tg := range checkTargets([]*cellResult{c1, c64, cass}) {
		if strings.Contains(tg.Name, "framework/floor") {
			ts = append(ts, tg)
		}
	}
	if len(ts) != 3 || ts[0].Met || ts[1].Met || ts[2].Met {
		t.Fatalf("targets %+v, want three missed ratios", ts)
	}
	if w := ts[2].Why; !strings.Contains(w, "accounts for 0.0 ms") || !strings.Contains(w, "leaving 13.0 ms a saga of the framework's own work between hops and its statements") {
		t.Errorf("cassandra c1 miss %q: want the rest to name the statements", w)
	}
	// Gap 3.0 ms; 6 produces a saga at 0.4 ms more each: 2.4 ms; 0.6 left.
	for _, want := range []string{"adds 3.0 ms to the floor's 5.0 ms mean", "took 1.00 ms against the floor's 0.60 ms",
		"at 6 a saga accounts for 2.4 ms", "leaving 0.6 ms a saga of the framework's own work", "3.00 cpu-ms per saga against the floor's 2.00"} {
		if !strings.Contains(ts[0].Why, want) {
			t.Errorf("c1 miss %q lacks %q", ts[0].Why, want)
		}
	}
	if w := ts[1].Why; !strings.Contains(w, "adds 40.0 ms to the floor's 50.0 ms median") || strings.Contains(w, "produce") {
		t.Errorf("c64 miss %q: want the median gap and CPU, not the produce split", w)
	}
}

// TestParseProcStat: busy counts everything but idle and iowait (steal
// included), guest time is not counted twice, and steal is reported.
func TestIsJITThread(t *testing.T) {
	for comm, want := range map[string]bool{
		"C2 CompilerThre\n": true, "C1 CompilerThre": true, "C2 CompilerThre": true,
		"GC Thread#0\n": false, "MutationStage-1": false, "java": false, "": false,
	} {
		if got := isJITThread(comm); got != want {
			t.Errorf("isJITThread(%q) = %v", comm, got)
		}
	}
}

// --warm-services warms with the first cell that loads both servers.
func TestWarmCell(t *testing.T) {
	cells := matrix()
	for _, tc := range []struct {
		kafka, cassandra, want string
	}{
		{"k:9092", "c:9042", "cassandra-relaxed-c1"},
		{"k:9092", "", "kafka-memory-c1"},
		{"", "", ""},
	} {
		spec, ok := warmCell(options{kafka: tc.kafka, cassandra: tc.cassandra}, cells)
		if ok != (tc.want != "") || spec.Name != tc.want {
			t.Errorf("kafka %q cassandra %q: %q %v, want %q", tc.kafka, tc.cassandra, spec.Name, ok, tc.want)
		}
	}
	only, _ := selectCells(matrix(), "kafka-*-c64,cassandra-strict-c64")
	if spec, _ := warmCell(options{kafka: "k", cassandra: "c"}, only); spec.Name != "cassandra-strict-c64" {
		t.Errorf("selected cells: warmed with %q, want cassandra-strict-c64", spec.Name)
	}
}

func TestParseProcStat(t *testing.T) {
	stat := "cpu  100 5 50 800 20 3 2 40 30 1\ncpu0 50 2 25 400 10 1 1 20 15 0\n"
	busy, total, steal, ok := parseProcStat(stat)
	if !ok || total != 1020 || busy != 200 || steal != 40 {
		t.Errorf("busy %d total %d steal %d ok %v, want 200 1020 40 true", busy, total, steal, ok)
	}
	// An old kernel without the steal column.
	if busy, total, steal, ok := parseProcStat("cpu 1 2 3 4 5\n"); !ok || busy != 6 || total != 15 || steal != 0 {
		t.Errorf("short line: busy %d total %d steal %d ok %v", busy, total, steal, ok)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 x 3 4 5"} {
		if _, _, _, ok := parseProcStat(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestTargetRoundsStraddle: a verdict taken from rounds on both sides of
// the threshold says so, for a floor (ratio) and a ceiling (telemetry
// cost); rounds on one side, or a single round, do not.
func TestTargetRoundsStraddle(t *testing.T) {
	ratio := target{Name: "c framework/floor >= 0.7", Want: 0.7, Got: 0.67}
	if r := ratio.withRounds([]float64{0.58, 0.67, 0.85}, false); !r.Straddles ||
		!strings.Contains(r.String(), "rounds 0.58-0.85 straddle the target") {
		t.Errorf("ratio rounds 0.58-0.85 around 0.7: %+v %q", r, r.String())
	}
	if r := ratio.withRounds([]float64{0.71, 0.8, 0.9}, false); r.Straddles || strings.Contains(r.String(), "straddle") {
		t.Errorf("ratio rounds all above 0.7 taken for straddling: %+v", r)
	}
	if r := ratio.withRounds([]float64{0.5, 0.6, 0.69}, false); r.Straddles {
		t.Errorf("ratio rounds all below 0.7 taken for straddling: %+v", r)
	}
	if r := ratio.withRounds([]float64{0.6}, false); r.Straddles || r.Rounds != nil {
		t.Errorf("one round: %+v", r)
	}
	cost := target{Name: "c telemetry cost <= 10%", Want: 0.10, Got: 0.08}
	if r := cost.withRounds([]float64{-0.08, 0.08, 0.27}, true); !r.Straddles {
		t.Errorf("cost rounds -8%%..27%% around 10%%: %+v", r)
	}
	if r := cost.withRounds([]float64{0.15, 0.2, 0.3}, true); r.Straddles {
		t.Errorf("cost rounds all above 10%% taken for straddling: %+v", r)
	}
	if r := cost.withRounds([]float64{0.0, 0.05, 0.1}, true); r.Straddles {
		t.Errorf("cost rounds all within 10%% taken for straddling: %+v", r)
	}
}

// The span counter counts every span that ends, the roots and the
// attributes, also those the batch processor drops when its queue is full.
func TestSpanCounterCountsWhatTheBatcherDrops(t *testing.T) {
	c := &spanCounter{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}, sdktrace.WithMaxQueueSize(1), sdktrace.WithBatchTimeout(time.Hour)),
		sdktrace.WithSpanProcessor(c))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("test")
	for range 500 {
		ctx, root := tr.Start(context.Background(), "root")
		_, child := tr.Start(ctx, "child")
		child.SetAttributes(attribute.Int("a", 1), attribute.Int("b", 2))
		child.End()
		root.End()
	}
	if got := [3]int64{c.spans.Load(), c.roots.Load(), c.attrs.Load()}; got != [3]int64{1000, 500, 1000} {
		t.Errorf("spans, roots, attributes = %v, want [1000 500 1000]", got)
	}
}

// --fresh runs the Cassandra cells in a keyspace of their own and drops it
// at the end: nothing of the run is left on the node.
func TestFreshKeyspaceIsDropped(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	hosts := testenv.CassandraHosts(t)
	prefix := "fresh_" + randomID()
	r := decode(t, runBench(t, "--json", "--fresh", "--no-floor", "--sagas", "10", "--warmup", "2", "--cells", "cassandra-relaxed-c1",
		"--kafka", strings.Join(brokers, ","), "--cassandra", strings.Join(hosts, ","), "--keyspace", prefix, "--timeout", "2m"))
	if c := r.Cells[0]; c.Error != "" || c.Skipped != "" || c.Framework.Sagas != 10 {
		t.Fatalf("cell: error %q, skipped %q, %d of 10 completed", c.Error, c.Skipped, c.Framework.Sagas)
	}
	if !strings.HasPrefix(r.Keyspace, prefix+"_") || len(r.Keyspace) != len(prefix)+7 {
		t.Fatalf("the run's keyspace is %q, want %s_ and its id", r.Keyspace, prefix)
	}
	cl := gocql.NewCluster(hosts...)
	cl.Timeout = time.Minute
	s, err := cl.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var names []string
	iter := s.Query("SELECT keyspace_name FROM system_schema.keyspaces").Iter()
	for name := ""; iter.Scan(&name); {
		names = append(names, name)
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			t.Errorf("keyspace %s is left after the run", n)
		}
	}
	if len(names) == 0 {
		t.Fatal("no keyspaces listed")
	}
}

// With --fresh, a keyspace name sagabench would have to quote, or one too
// long for Cassandra once the run's id is added, is refused before anything
// runs: nothing is created, and nothing but the run's own keyspace is ever
// dropped. Without it the store checks the name, as before.
func TestKeyspaceNameIsChecked(t *testing.T) {
	var stderr bytes.Buffer
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--fresh", "--keyspace", strings.Repeat("k", 41)}, true},
		{[]string{"--fresh", "--keyspace", strings.Repeat("k", 42)}, false},
		{[]string{"--fresh", "--keyspace", "stacksaga_bench --"}, false},
		{[]string{"--fresh", "--keyspace", "Bench"}, false},
		{[]string{"--fresh", "--keyspace", "1bench"}, false},
		{[]string{"--keyspace", "Bench"}, true},
	} {
		_, err := parse(tc.args, &stderr)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "--keyspace")):
			t.Errorf("%q: %v, want an error naming --keyspace", tc.args, err)
		}
	}
}
