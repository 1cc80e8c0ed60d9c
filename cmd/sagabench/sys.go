package main

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// measure is what one phase (framework or floor) achieved.
type measure struct {
	Sagas   int     `json:"sagas"`
	Seconds float64 `json:"seconds"`
	// Rate is sagas per second.
	Rate float64 `json:"sagas_per_s"`
	// End-to-end latencies in milliseconds.
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
	// CPUPerSaga is this process's user+system CPU time per saga, in
	// milliseconds (the in-process broker included in embedded cells).
	CPUPerSaga float64 `json:"cpu_ms_per_saga"`
	// BoxCPU is how busy the whole machine's CPUs were during the phase,
	// in percent (-1 when unknown).
	BoxCPU float64 `json:"box_cpu_pct"`
	// StealPct is the share of the machine's CPU time the hypervisor gave
	// to other guests during the phase, in percent (-1 when unknown;
	// counted in BoxCPU). On a shared virtual machine it is one reason
	// the rates of one build swing between runs.
	StealPct float64 `json:"steal_pct"`
	// KafkaCPUPerSaga and CassandraCPUPerSaga are the CPU time per saga,
	// in milliseconds, of the local Kafka broker and Cassandra processes
	// (found by their main class in /proc; -1 when not found, as for the
	// embedded broker, whose CPU is this process's).
	KafkaCPUPerSaga     float64 `json:"kafka_cpu_ms_per_saga"`
	CassandraCPUPerSaga float64 `json:"cassandra_cpu_ms_per_saga"`
	// ServicesJITPct is the share of those servers' CPU time during the
	// phase that their JVMs' JIT compiler threads took, in percent (-1
	// when unknown). A freshly started broker or Cassandra compiles for
	// tens of thousands of sagas; while it does, the phase measures the
	// compiler as much as the saga (see warm.go).
	ServicesJITPct float64 `json:"services_jit_pct"`
	// ProduceMs is the mean round trip of the phase's Kafka produce
	// requests, in milliseconds (produceClock; 0 when none was timed).
	ProduceMs float64 `json:"produce_ms,omitempty"`
	// NotCompleted is how many of the phase's sagas of the framework ended
	// in another state than COMPLETED (compensated: the place-order saga
	// fails no step, so each is a step the infrastructure failed).
	NotCompleted int `json:"not_completed,omitempty"`
}

// meter measures a phase: wall time, this process's CPU time and the
// machine's CPU use.
type meter struct {
	t0                 time.Time
	cpu0               time.Duration
	busy0, all, steal0 uint64
	boxOK              bool
	svc0               map[string]svcCPU
}

func startMeter() *meter {
	m := &meter{t0: time.Now(), cpu0: processCPU(), svc0: serviceCPU()}
	m.busy0, m.all, m.steal0, m.boxOK = boxCPU()
	return m
}

// stop returns the phase's measure, given the latencies of its sagas.
func (m *meter) stop(lat []time.Duration) measure {
	elapsed := time.Since(m.t0)
	cpu := processCPU() - m.cpu0
	svc := serviceCPU()
	out := measure{Sagas: len(lat), Seconds: elapsed.Seconds(), BoxCPU: -1, StealPct: -1, KafkaCPUPerSaga: -1, CassandraCPUPerSaga: -1, ServicesJITPct: -1}
	if len(lat) == 0 {
		return out
	}
	var all, jit time.Duration
	for name, dst := range map[string]*float64{"kafka": &out.KafkaCPUPerSaga, "cassandra": &out.CassandraCPUPerSaga} {
		if t0, ok := m.svc0[name]; ok {
			if t1, ok := svc[name]; ok && t1.total >= t0.total {
				*dst = ms(t1.total-t0.total) / float64(len(lat))
				all += t1.total - t0.total
				jit += max(t1.jit-t0.jit, 0) // a compiler thread that ended takes its time with it
			}
		}
	}
	if all > 0 {
		out.ServicesJITPct = 100 * min(float64(jit)/float64(all), 1)
	}
	out.Rate = float64(len(lat)) / elapsed.Seconds()
	out.CPUPerSaga = ms(cpu) / float64(len(lat))
	s := slices.Clone(lat)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	out.P50, out.P99, out.Max = ms(quantile(s, 0.50)), ms(quantile(s, 0.99)), ms(s[len(s)-1])
	out.Mean = ms(sum) / float64(len(s))
	if busy1, all1, steal1, ok := boxCPU(); ok && m.boxOK && all1 > m.all {
		out.BoxCPU = 100 * float64(busy1-m.busy0) / float64(all1-m.all)
		out.StealPct = 100 * float64(steal1-m.steal0) / float64(all1-m.all)
	}
	return out
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// boxCPU reads the machine's busy, total and stolen CPU ticks from
// /proc/stat.
func boxCPU() (busy, total, steal uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	return parseProcStat(string(b))
}

// parseProcStat reads the first ("cpu") line of /proc/stat: user nice
// system idle iowait irq softirq steal guest guest_nice.
func parseProcStat(stat string) (busy, total, steal uint64, ok bool) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, 0, false
	}
	var idle uint64
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, 0, false
		}
		if i >= 8 { // guest and guest_nice are already counted in user
			break
		}
		total += v
		switch i {
		case 3, 4: // idle, iowait
			idle += v
		case 7:
			steal = v
		}
	}
	return total - idle, total, steal, true
}

// loadAvg returns the 1, 5 and 15 minute load averages (zeros when
// unknown).
func loadAvg() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

// services maps a local server to a string of its command line.
var services = map[string]string{"kafka": "kafka.Kafka", "cassandra": "org.apache.cassandra.service.CassandraDaemon"}

// clockTick is the unit of /proc/<pid>/stat times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// svcCPU is a local server's CPU time so far, and the part of it that its
// JVM's JIT compiler threads took.
type svcCPU struct{ total, jit time.Duration }

// serviceCPU returns the CPU time so far of the local Kafka broker and
// Cassandra processes it finds in /proc (none elsewhere).
func serviceCPU() map[string]svcCPU {
	out := make(map[string]svcCPU)
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, d := range dirs {
		pid := d.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + pid + "/cmdline")
		if err != nil {
			continue
		}
		for name, marker := range services {
			if !strings.Contains(string(cmd), marker) {
				continue
			}
			if t, ok := statCPU("/proc/" + pid + "/stat"); ok {
				c := out[name]
				c.total += t
				c.jit += jitCPU(pid)
				out[name] = c
			}
		}
	}
	return out
}

// jitCPU sums the CPU time of a JVM's JIT compiler threads: HotSpot names
// them "C1 CompilerThread<n>" and "C2 CompilerThread<n>" (a thread's comm
// is cut at 15 bytes).
func jitCPU(pid string) time.Duration {
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, t := range tasks {
		dir := "/proc/" + pid + "/task/" + t.Name()
		comm, err := os.ReadFile(dir + "/comm")
		if err != nil || !isJITThread(string(comm)) {
			continue
		}
		if c, ok := statCPU(dir + "/stat"); ok {
			sum += c
		}
	}
	return sum
}

// isJITThread says whether a thread's comm names a JIT compiler thread.
func isJITThread(comm string) bool {
	c := strings.TrimSpace(comm)
	return strings.HasPrefix(c, "C1 CompilerThre") || strings.HasPrefix(c, "C2 CompilerThre")
}

// statCPU reads a process's or thread's user+system time from its stat
// file (/proc/<pid>/stat, /proc/<pid>/task/<tid>/stat).
func statCPU(path string) (time.Duration, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// Fields after the command name (in parentheses, may hold spaces):
	// state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * clockTick, true
}
