package sagatest

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/stacksaga-go/stacksaga/topics"
)

// FaultKind names a fault the harness injects into a worker instance.
type FaultKind string

// The faults of the schedule (CrashWorkersEvery, RestartWorkersEvery).
const (
	// FaultCrashBeforeHandler: the instance crashed in the handler before
	// it did anything (its guard had called run).
	FaultCrashBeforeHandler FaultKind = "crash before handler"
	// FaultCrashBeforeReply: the instance crashed after the handler ran
	// and the guard returned its reply, before the reply was sent.
	FaultCrashBeforeReply FaultKind = "crash before reply"
	// FaultRestart: the instance was restarted with redelivery once the
	// command's handler ran.
	FaultRestart FaultKind = "restart with redelivery"
)

// Fault is one fault the harness injected into a worker instance.
type Fault struct {
	Kind FaultKind
	// Service and Instance name the worker instance: the instance's index
	// in its service (1 is the twin of TwinWorkers).
	Service  string
	Instance int
	// Execution counts the instance's handler executions up to this one,
	// across its restarts and crashes (a crash before the handler counts
	// the execution it stopped): where the schedule put the fault.
	Execution int64
	// Step and Attempt name the command the instance was handling.
	Step    Execution
	Attempt int
}

// String returns "service#instance execution n: kind (txID/span/kind
// attempt a)".
func (f Fault) String() string {
	return fmt.Sprintf("%s#%d execution %d: %s (%s attempt %d)", f.Service, f.Instance, f.Execution, f.Kind, f.Step, f.Attempt)
}

// Seed returns the seed of the env's fault schedule (see WithSeed).
func (e *Env) Seed() int64 { return e.seed }

// Faults returns the faults the env injected so far, in order.
func (e *Env) Faults() []Fault {
	e.faultMu.Lock()
	defer e.faultMu.Unlock()
	return slices.Clone(e.faults)
}

// fault records that kind was injected into in at its execution n, while
// it handled cmd.
func (e *Env) fault(kind FaultKind, in *instance, n int64, cmd *topics.Envelope) {
	f := Fault{Kind: kind, Service: in.svc.name, Instance: in.idx, Execution: n, Step: commandKey(cmd).Execution, Attempt: cmd.Attempt}
	e.faultMu.Lock()
	e.faults = append(e.faults, f)
	e.faultMu.Unlock()
}

// maxListedFaults bounds the faults a failure message lists.
const maxListedFaults = 20

// replayHint is what a failure adds: the seed, how to replay it, and the
// faults injected.
func (e *Env) replayHint() string {
	e.reported.Store(true)
	faults := e.Faults()
	var b strings.Builder
	fmt.Fprintf(&b, "\nsagatest: fault schedule seed %d (replay it with sagatest.WithSeed(%d)); %d faults injected", e.seed, e.seed, len(faults))
	for i, f := range faults {
		if i == maxListedFaults {
			fmt.Fprintf(&b, "\n  ... and %d more", len(faults)-maxListedFaults)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(f.String())
	}
	return b.String()
}

// crashSchedule decides at which executions of one worker instance
// CrashWorkersEvery crashes it, and where.
type crashSchedule struct {
	mu    sync.Mutex
	every int64
	since int64 // executions since the instance started or last crashed
	next  int64 // the next crash comes when since reaches it
	after bool  // the next crash is after the reply was recorded
}

// newCrashSchedule returns the schedule of instance idx of service under
// seed: its first crash at an execution in [1, every], at a point the seed
// chooses, then every every executions, the points alternating.
func newCrashSchedule(seed int64, service string, idx, every int) *crashSchedule {
	h := fnv.New64a()
	h.Write([]byte(service + "\x00" + strconv.Itoa(idx)))
	x := splitmix64(uint64(seed) ^ h.Sum64())
	return &crashSchedule{every: int64(every), next: 1 + int64(x%uint64(every)), after: x>>63 == 1}
}

// due counts one execution and reports whether the instance crashes at it,
// and whether after the reply was recorded (else before the handler).
func (s *crashSchedule) due() (crash, after bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.since++
	if s.since != s.next {
		return false, false
	}
	s.since, s.next = 0, s.every
	after, s.after = s.after, !s.after
	return true, after
}

// splitmix64 is SplitMix64's finalizer: a fixed, well-mixed function of x
// (the schedule must not change with the Go version).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
