package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
)

// target is one goal of the performance issue, checked against a cell.
type target struct {
	Name string  `json:"name"`
	Cell string  `json:"cell"`
	Want float64 `json:"want"`
	Got  float64 `json:"got"`
	// Floor is what the cell's floor reaches on the same metric (0:
	// unknown).
	Floor float64 `json:"floor,omitempty"`
	Met   bool    `json:"met"`
	// Why explains a miss: what the floor allows and what bounds it.
	Why string `json:"why,omitempty"`
	// Rounds are the figures of the cell's rounds, sorted, when the verdict
	// is the median of several; Straddles says that some rounds met the
	// target and others missed it, so that on this machine the run's noise,
	// not the build, decided the verdict.
	Rounds    []float64 `json:"rounds,omitempty"`
	Straddles bool      `json:"rounds_straddle,omitempty"`
	// roundsFlag is the flag that sets how many rounds the verdict takes.
	roundsFlag string
}

// withRounds sets t's rounds and whether they straddle its threshold:
// atMost is true for a target that is a ceiling (telemetry cost), false
// for a floor (framework/floor ratio).
func (t target) withRounds(rounds []float64, atMost bool) target {
	if len(rounds) < 2 {
		return t
	}
	t.Rounds = rounds
	t.roundsFlag = "--rounds"
	lo, hi := slices.Min(rounds), slices.Max(rounds)
	if atMost {
		t.roundsFlag = "--telemetry-rounds"
		t.Straddles = lo <= t.Want && hi > t.Want
	} else {
		t.Straddles = lo < t.Want && hi >= t.Want
	}
	return t
}

func (t target) String() string {
	verdict := "met"
	if !t.Met {
		verdict = "MISSED"
	}
	s := fmt.Sprintf("%-40s %-6s got %s", t.Name, verdict, num(t.Got, 2))
	if t.Floor > 0 {
		s += fmt.Sprintf(", floor %s", num(t.Floor, 2))
	}
	if t.Straddles {
		s += fmt.Sprintf(" (rounds %s-%s straddle the target: noise decided this verdict, rerun with more %s)",
			num(slices.Min(t.Rounds), 2), num(slices.Max(t.Rounds), 2), t.roundsFlag)
	}
	if t.Why != "" {
		s += ": " + t.Why
	}
	return s
}

// goal is a throughput or latency target of one cell.
type goal struct {
	cell    string
	latency bool // mean_ms at most want; otherwise sagas/s at least want
	want    float64
}

var goals = []goal{
	{"cassandra-relaxed-c64", false, 400},
	{"cassandra-strict-c64", false, 200},
	{"cassandra-relaxed-c1", true, 20},
	{"embedded-c256", false, 5000},
}

// minRatio is the framework/floor target of every real-services cell.
const minRatio = 0.7

// checkTargets evaluates the goals of the cells that ran.
func checkTargets(cells []*cellResult) []target {
	byName := make(map[string]*cellResult)
	for _, c := range cells {
		if c.Skipped == "" && c.Error == "" && c.Framework.Sagas > 0 {
			byName[c.Cell] = c
		}
	}
	var out []target
	for _, g := range goals {
		c := byName[g.cell]
		if c == nil {
			continue
		}
		t := target{Cell: g.cell, Want: g.want}
		if g.latency {
			t.Name = fmt.Sprintf("%s mean <= %s ms", g.cell, num(g.want, 0))
			t.Got = c.Framework.Mean
			t.Met = t.Got <= g.want
			if c.Floor != nil {
				t.Floor = c.Floor.Mean
			}
		} else {
			t.Name = fmt.Sprintf("%s >= %s sagas/s", g.cell, num(g.want, 0))
			t.Got = c.Framework.Rate
			t.Met = t.Got >= g.want
			if c.Floor != nil {
				t.Floor = c.Floor.Rate
			}
		}
		if !t.Met {
			t.Why = whyMissed(c, g)
		}
		out = append(out, t)
	}
	for _, c := range cells {
		if byName[c.Cell] == nil || !strings.HasPrefix(c.Infra, "kafka-") && !strings.HasPrefix(c.Infra, "cassandra-") || c.Floor == nil {
			continue
		}
		t := target{Name: fmt.Sprintf("%s framework/floor >= %.1f", c.Cell, minRatio), Cell: c.Cell, Want: minRatio, Got: c.Ratio, Met: c.Ratio >= minRatio}
		t = t.withRounds(c.Ratios, false)
		if !t.Met {
			t.Why = whyRatioMissed(c)
		}
		out = append(out, t)
	}
	return out
}

// whyRatioMissed explains a framework/floor ratio under minRatio. A
// latency-bound cell (concurrency 1) runs one saga at a time, so its ratio
// is the floor's mean latency over the framework's: the gap is split into
// what the produce round trips of the two runs account for (2*steps a saga;
// the broker's answer and the clients' scheduling, which drift between the
// runs of a shared machine) and the rest, the framework's own work between
// the hops. A throughput-bound cell is bound by CPU, so its gap is told in
// CPU per saga.
func whyRatioMissed(c *cellResult) string {
	fw, fl := c.Framework, c.Floor
	cpu := fmt.Sprintf("spends %s cpu-ms per saga against the floor's %s", num(fw.CPUPerSaga, 2), num(fl.CPUPerSaga, 2))
	if c.Concurrency != 1 || fw.ProduceMs <= 0 || fl.ProduceMs <= 0 {
		return fmt.Sprintf("the framework adds %s ms to the floor's %s ms median and %s: "+
			"that is the framework's own work on the same hops and statements (envelopes, state, guards, commits)%s",
			num(fw.P50-fl.P50, 1), num(fl.P50, 1), cpu, stillWarming(fw))
	}
	gap := fw.Mean - fl.Mean
	inProduce := 2 * steps * (fw.ProduceMs - fl.ProduceMs)
	rest := "the framework's own work between hops"
	if c.RoundTrips != nil {
		// The framework's statements carry its rows, heavier than the
		// floor's: their latency is in the rest too.
		rest = "the framework's own work between hops and its statements, whose rows are heavier than the floor's"
	}
	return fmt.Sprintf("the framework adds %s ms to the floor's %s ms mean; its produce round trips took %s ms against the floor's %s ms "+
		"in the same round, which at %d a saga accounts for %s ms of the gap (the broker's answer and the clients' scheduling, "+
		"which drift between runs on a shared machine), leaving %s ms a saga of %s; it %s",
		num(gap, 1), num(fl.Mean, 1), num(fw.ProduceMs, 2), num(fl.ProduceMs, 2), 2*steps, num(inProduce, 1), num(gap-inProduce, 1), rest, cpu)
}

// whyMissed explains a missed throughput or latency goal with the floor.
func whyMissed(c *cellResult, g goal) string {
	if c.Floor == nil {
		return "no floor measured (--no-floor)"
	}
	fl := c.Floor
	floorMeets := fl.Rate >= g.want
	unit, floorVal := "sagas/s", fl.Rate
	if g.latency {
		floorMeets, unit, floorVal = fl.Mean <= g.want, "ms mean", fl.Mean
	}
	if floorMeets {
		return fmt.Sprintf("within the floor's reach (%s %s without the framework, framework/floor %s): the framework's own work misses it (%s cpu-ms/saga against the floor's %s)",
			num(floorVal, 1), unit, num(c.Ratio, 2), num(c.Framework.CPUPerSaga, 2), num(fl.CPUPerSaga, 2))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "out of reach on this machine: the floor itself, with no framework, reaches only %s %s", num(floorVal, 1), unit)
	if k, s := c.FloorKafka, c.FloorCQL; k != nil && s != nil {
		if g.latency {
			fmt.Fprintf(&b, " (the %d Kafka hops alone take %s ms, the %s statements alone %s ms, a stage's statements at once)",
				2*steps, num(k.Mean, 1), num(c.RoundTrips.Total-c.RoundTrips.Other, 1), num(s.Mean, 1))
		} else {
			bound := "the Kafka hops"
			switch {
			case s.Rate < 0.8*k.Rate:
				bound = "the Cassandra statements"
			case k.Rate >= 0.8*s.Rate:
				bound = "the Kafka hops and the Cassandra statements together"
			}
			fmt.Fprintf(&b, "; Kafka hops alone reach %s sagas/s and the %s statements per saga alone %s sagas/s, so %s bound it",
				num(k.Rate, 1), num(c.RoundTrips.Total-c.RoundTrips.Other, 1), num(s.Rate, 1), bound)
		}
	}
	if g.latency && c.Framework.Mean < fl.Mean {
		// The floor issues a stage's statements, then its hop; the
		// framework overlaps some of them with the hops, so it can beat
		// the floor's latency, and then the floor is not what bounds it.
		before := "a marker read"
		if c.Mode == "STRICT" {
			before = "the lease's LWT"
		}
		fmt.Fprintf(&b, "; the framework's %s ms mean is under it: it overlaps statements with hops (a reply's produce with "+
			"the step's record, the next command with the transition), so what bounds it is the hops and the statements a saga "+
			"must wait for (the create, with its watchdog, before the first command, %s before each handler, the final transition)",
			num(c.Framework.Mean, 1), before)
	}
	if c.Framework.BoxCPU >= 0 {
		fmt.Fprintf(&b, "; the machine's CPUs were %s%% busy during the framework run (brokers, database and this process share them)", num(c.Framework.BoxCPU, 0))
	}
	b.WriteString(stillWarming(c.Framework))
	if limit, how := cpuBound(*fl, cpus); limit > 0 && !g.latency {
		fmt.Fprintf(&b, "; the floor costs %s, so %d CPUs allow at most %s sagas/s with nothing else running", how, cpus, num(limit, 0))
	}
	return b.String()
}

// stillWarming is the clause a verdict gets when the servers' JIT
// compilers took warmJITPct or more of their CPU during m: the servers
// were still warming up, so m measures their compilers too.
func stillWarming(m measure) string {
	if m.ServicesJITPct < warmJITPct {
		return ""
	}
	return fmt.Sprintf("; the broker's and Cassandra's JIT compilers took %s%% of their CPU during the framework run: they were still warming up "+
		"(a freshly started pair compiles for tens of thousands of sagas), so rerun with --warm-services to measure them warm", num(m.ServicesJITPct, 0))
}

// cpus is the machine's CPU count, for the CPU-bound limit.
var cpus = runtime.NumCPU()

// cpuBound returns the sagas/s that n CPUs allow when a saga costs m's CPU
// time (this process, the broker, Cassandra), and the sum spelled out; 0
// when the servers' CPU is unknown.
func cpuBound(m measure, n int) (float64, string) {
	if m.KafkaCPUPerSaga < 0 {
		return 0, ""
	}
	total := m.CPUPerSaga + m.KafkaCPUPerSaga
	how := fmt.Sprintf("%s cpu-ms per saga here + %s in the broker", num(m.CPUPerSaga, 2), num(m.KafkaCPUPerSaga, 2))
	if m.CassandraCPUPerSaga >= 0 {
		total += m.CassandraCPUPerSaga
		how += fmt.Sprintf(" + %s in Cassandra", num(m.CassandraCPUPerSaga, 2))
	}
	if total <= 0 {
		return 0, ""
	}
	return float64(n) * 1000 / total, how + fmt.Sprintf(" = %s ms", num(total, 2))
}
