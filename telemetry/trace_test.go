package telemetry_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/telemetry"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Environment of the worker process the trace test starts: the test binary
// run again with envWorkerService set runs a worker instead of the tests.
const (
	envWorkerService = "STACKSAGA_TELEMETRY_TEST_WORKER"
	envWorkerBrokers = "STACKSAGA_TELEMETRY_TEST_BROKERS"
)

func TestMain(m *testing.M) {
	if svc := os.Getenv(envWorkerService); svc != "" {
		os.Exit(workerProcess(svc, strings.Split(os.Getenv(envWorkerBrokers), ",")))
	}
	os.Exit(m.Run())
}

// order is the test saga's entity.
type order struct {
	Fail  bool     `msgpack:"fail"`
	Steps []string `msgpack:"steps"`
}

// spanJSON is a finished span as the worker process reports it.
type spanJSON struct {
	Name         string            `json:"name"`
	Kind         string            `json:"kind"`
	TraceID      string            `json:"trace_id"`
	SpanID       string            `json:"span_id"`
	ParentSpanID string            `json:"parent_span_id,omitempty"`
	ParentRemote bool              `json:"parent_remote"`
	Status       string            `json:"status"`
	Attrs        map[string]string `json:"attrs"`
	Events       []eventJSON       `json:"events,omitempty"`
	Service      string            `json:"service"`
}

type eventJSON struct {
	Name  string            `json:"name"`
	Attrs map[string]string `json:"attrs"`
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func toJSON(spans tracetest.SpanStubs) []spanJSON {
	out := make([]spanJSON, 0, len(spans))
	for _, s := range spans {
		j := spanJSON{
			Name: s.Name, Kind: s.SpanKind.String(),
			TraceID: s.SpanContext.TraceID().String(), SpanID: s.SpanContext.SpanID().String(),
			ParentRemote: s.Parent.IsRemote(), Status: s.Status.Code.String(), Attrs: attrMap(s.Attributes),
		}
		if s.Parent.IsValid() {
			j.ParentSpanID = s.Parent.SpanID().String()
		}
		if s.Resource != nil {
			if v, ok := s.Resource.Set().Value(semconv.ServiceNameKey); ok {
				j.Service = v.AsString()
			}
		}
		for _, e := range s.Events {
			j.Events = append(j.Events, eventJSON{Name: e.Name, Attrs: attrMap(e.Attributes)})
		}
		out = append(out, j)
	}
	return out
}

// workerProcess runs the test saga's worker for service until its stdin
// closes, tracing into an in-memory exporter and logging JSON through
// telemetry.LogHandler to stderr; it prints "ready" once the worker has its
// partitions, then its finished spans as one JSON array on stdout.
func workerProcess(service string, brokers []string) int {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))))
	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(os.Stderr, nil)))
	// The test made the topics (retrying while a loaded broker times out).
	w, err := worker.New(service, worker.WithBrokers(brokers...), worker.WithTracerProvider(tp), worker.WithLogger(logger), worker.WithoutProvision())
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	step := func(name string, fail bool) func(ctx context.Context, s *worker.Step, in order) (order, error) {
		return func(ctx context.Context, s *worker.Step, in order) (order, error) {
			logger.InfoContext(ctx, "step ran", "tx", s.TxID, "endpoint", s.Endpoint, "kind", string(s.Kind))
			if fail && in.Fail {
				return in, worker.NonRetryable(errors.New(name + ": refused"))
			}
			in.Steps = append(in.Steps, string(s.Kind)+":"+name)
			return in, nil
		}
	}
	for _, e := range []worker.Endpoint[order]{
		{Name: "reserve", Process: step("reserve", false), Revert: step("reserve", false)},
		{Name: "charge", Process: step("charge", false), Revert: step("charge", false)},
		{Name: "ship", Process: step("ship", true)},
	} {
		if err := worker.Register(w, e); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			return 1
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()
	select {
	case <-w.Running():
	case err := <-runErr:
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	w.Close()
	if err := <-runErr; err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	_ = tp.ForceFlush(context.Background())
	if err := json.NewEncoder(os.Stdout).Encode(toJSON(exp.GetSpans())); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

// workerProc is the worker process of a test.
type workerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *testenv.LockedBuffer
}

func startWorker(t *testing.T, service string, brokers []string) *workerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorkerService+"="+service, envWorkerBrokers+"="+strings.Join(brokers, ","))
	p := &workerProc{cmd: cmd, stderr: &testenv.LockedBuffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdout = bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the worker process: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	ready := make(chan error, 1)
	go func() {
		line, err := p.stdout.ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("worker process said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("worker process: %v\nstderr:\n%s", err, p.stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("worker process not ready after 3 minutes\nstderr:\n%s", p.stderr.String())
	}
	return p
}

// stop closes the worker's stdin and returns its spans.
func (p *workerProc) stop(t *testing.T) []spanJSON {
	t.Helper()
	_ = p.stdin.Close()
	var spans []spanJSON
	decoded := make(chan error, 1)
	go func() { decoded <- json.NewDecoder(p.stdout).Decode(&spans) }()
	select {
	case err := <-decoded:
		if err != nil {
			t.Fatalf("worker spans: %v\nstderr:\n%s", err, p.stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("worker process did not report its spans\nstderr:\n%s", p.stderr.String())
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("worker process: %v\nstderr:\n%s", err, p.stderr.String())
	}
	return spans
}

// ensureTopics creates names (2 partitions), trying again while a loaded
// broker times out, for up to three minutes.
func ensureTopics(t *testing.T, brokers []string, names []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := topics.Ensure(ctx, kadm.NewClient(cl), names, topics.Provision{Partitions: 2, ReplicationFactor: 1})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("create topics %v: %v", names, err)
		}
		t.Logf("create topics: %v; trying again", err)
		time.Sleep(time.Second)
	}
}

// stepOf names a step attempt by span, kind and attempt, as span attributes
// and the "command sent" event say.
func stepOf(attrs map[string]string) string {
	return attrs[string(telemetry.AttrStepSpan)] + "/" + attrs[string(telemetry.AttrStepKind)] + "/" + attrs[string(telemetry.AttrAttempt)]
}

// A saga over real Kafka yields one trace: the orchestrator's start span is
// its only root, every worker step span (in another process) is a child of
// the orchestrator span that sent its command, every orchestrator reply span
// a child of the worker span that replied, the trace id is on the saga row,
// and the worker's log records carry the step span's trace and span ids.
func TestTraceAcrossProcesses(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	service := testenv.UniqueName(t, "otelw")
	domain := testenv.UniqueName(t, "oteld")
	ensureTopics(t, brokers, append(topics.WorkerTopics(service), topics.OrchestratorTopics(domain)...))
	wp := startWorker(t, service, brokers)

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("otel-orders"))))
	ended := make(chan orchestrator.Event, 16)
	steps := []orchestrator.Step{{Service: service, Endpoint: "reserve"}, {Service: service, Endpoint: "charge"}, {Service: service, Endpoint: "ship"}}
	store := memory.New() // outlives the orchestrator, to read the rows at the end
	defer store.Close()
	o, err := orchestrator.New("otel-orders", orchestrator.Domain[order]{Name: domain, OnNext: orchestrator.Sequence[order](steps...)},
		orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store), orchestrator.WithTracerProvider(tp), orchestrator.WithoutRecovery(),
		orchestrator.WithoutProvision(),
		orchestrator.WithListener(func(e orchestrator.Event) {
			if e.To.Terminal() {
				ended <- e
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- o.Run(ctx) }()
	defer o.Close()
	select {
	case <-o.Running():
	case err := <-runErr:
		t.Fatalf("Run: %v", err)
	}
	okTx, err := o.Start(ctx, order{})
	if err != nil {
		t.Fatal(err)
	}
	badTx, err := o.Start(ctx, order{Fail: true})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]eventstore.State{}
	for len(states) < 2 {
		select {
		case e := <-ended:
			states[e.TxID] = e.To
		case <-ctx.Done():
			t.Fatalf("sagas not terminal: %v\nworker stderr:\n%s", states, wp.stderr.String())
		}
	}
	if states[okTx] != eventstore.StateCompleted || states[badTx] != eventstore.StateCompensated {
		t.Fatalf("states %v", states)
	}
	// Closing waits for the reply in flight, so every span has ended.
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	workerSpans := wp.stop(t)
	orchSpans := toJSON(exp.GetSpans())

	for _, c := range []struct {
		tx    string
		steps []string // worker spans, in order: span/kind/attempt
	}{
		{okTx, []string{"0/process/1", "1/process/1", "2/process/1"}},
		{badTx, []string{"0/process/1", "1/process/1", "2/process/1", "1/revert/1", "0/revert/1"}},
	} {
		t.Run(c.tx, func(t *testing.T) {
			checkSagaTrace(t, o, domain, c.tx, c.steps, orchSpans, workerSpans, wp.stderr.String())
		})
	}
}

func checkSagaTrace(t *testing.T, o *orchestrator.Orchestrator[order], domain, tx string, steps []string, orchAll, workerAll []spanJSON, workerLog string) {
	saga, err := o.Get(context.Background(), tx)
	if err != nil {
		t.Fatal(err)
	}
	row, err := o.Store().LoadTransaction(context.Background(), o.Scope(), tx)
	if err != nil {
		t.Fatal(err)
	}
	trace := saga.TraceID
	if len(trace) != 32 || row.TraceID != trace || !strings.Contains(row.TraceParent, "-"+trace+"-") {
		t.Fatalf("saga TraceID %q, row TraceID %q TraceParent %q", trace, row.TraceID, row.TraceParent)
	}
	pick := func(all []spanJSON) []spanJSON {
		var out []spanJSON
		for _, s := range all {
			if s.Attrs[string(telemetry.AttrTxID)] == tx {
				out = append(out, s)
			}
		}
		return out
	}
	orch, work := pick(orchAll), pick(workerAll)
	byID := map[string]spanJSON{}
	for _, s := range append(append([]spanJSON(nil), orch...), work...) {
		if s.TraceID != trace {
			t.Errorf("span %q (%s) in trace %s, want the saga's %s", s.Name, s.Service, s.TraceID, trace)
		}
		byID[s.SpanID] = s
	}
	// One root: the orchestrator's start span.
	var roots []string
	for _, s := range orch {
		if s.ParentSpanID == "" {
			roots = append(roots, s.Name)
		}
	}
	if len(roots) != 1 || roots[0] != domain+" start" {
		t.Errorf("roots %v, want [%s start]", roots, domain)
	}
	// The worker spans: one per step attempt, in the saga's order, each a
	// child of the orchestrator span that sent its command.
	if len(work) != len(steps) {
		t.Fatalf("%d worker spans, want %d: %+v", len(work), len(steps), work)
	}
	for i, w := range work {
		if got := stepOf(w.Attrs); got != steps[i] {
			t.Errorf("worker span %d is step %s, want %s", i, got, steps[i])
		}
		if w.Kind != "consumer" || w.Service == "otel-orders" || !w.ParentRemote {
			t.Errorf("worker span %q: kind %s, service %s, remote parent %v", w.Name, w.Kind, w.Service, w.ParentRemote)
		}
		wantName := strings.SplitN(steps[i], "/", 3)[1] + " " + w.Attrs[string(telemetry.AttrEndpoint)]
		if w.Name != wantName {
			t.Errorf("worker span name %q, want %q", w.Name, wantName)
		}
		parent, ok := byID[w.ParentSpanID]
		if !ok || parent.Service != "otel-orders" {
			t.Errorf("worker span %q (step %s): parent %s is not an orchestrator span", w.Name, steps[i], w.ParentSpanID)
			continue
		}
		// The sender: Start sent the first command; the span that applied
		// step i-1's reply sent step i's.
		if i == 0 && parent.Name != domain+" start" ||
			i > 0 && (parent.Name != domain+" reply" || stepOf(parent.Attrs) != steps[i-1]) {
			t.Errorf("worker span %q (step %s): parent %q (step %s) did not send that command", w.Name, steps[i], parent.Name, stepOf(parent.Attrs))
		}
		failed := len(steps) == 5 && steps[i] == "2/process/1" // the ship step of the failing saga
		if wantOutcome := map[bool]string{false: "ok", true: "non_retryable"}[failed]; w.Attrs[string(telemetry.AttrOutcome)] != wantOutcome {
			t.Errorf("worker span %q: outcome %q, want %q", w.Name, w.Attrs[string(telemetry.AttrOutcome)], wantOutcome)
		}
		if failed != (w.Status == codes.Error.String()) {
			t.Errorf("worker span %q: status %s", w.Name, w.Status)
		}
		if w.Attrs[string(telemetry.AttrDuplicate)] != "" || w.Attrs[string(semconv.MessagingSystemKey)] != "kafka" {
			t.Errorf("worker span %q attributes %v", w.Name, w.Attrs)
		}
	}
	// The orchestrator's reply spans: one per step result, each a child of
	// the worker span that replied.
	var replies int
	for _, s := range orch {
		switch s.Name {
		case domain + " start":
		case domain + " reply":
			replies++
			parent, ok := byID[s.ParentSpanID]
			if !ok || parent.Service == "otel-orders" || stepOf(parent.Attrs) != stepOf(s.Attrs) || !s.ParentRemote {
				t.Errorf("reply span for step %s: parent %s (%+v) is not the worker span of that step", stepOf(s.Attrs), s.ParentSpanID, parent)
			}
		default:
			t.Errorf("unexpected orchestrator span %q", s.Name)
		}
	}
	if replies != len(steps) {
		t.Errorf("%d reply spans, want %d", replies, len(steps))
	}
	// The worker's log records carry the step span's ids.
	logged := map[string]bool{}
	for _, line := range strings.Split(workerLog, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "step ran" || rec["tx"] != tx {
			continue
		}
		if rec[telemetry.LogTraceID] != trace {
			t.Errorf("log record %s: trace_id %v, want %s", line, rec[telemetry.LogTraceID], trace)
		}
		id, _ := rec[telemetry.LogSpanID].(string)
		if s, ok := byID[id]; !ok || s.Service == "otel-orders" {
			t.Errorf("log record %s: span_id %q is not a worker span of the saga", line, id)
		}
		logged[id] = true
	}
	if len(logged) != len(steps) {
		t.Errorf("%d step spans logged, want %d\n%s", len(logged), len(steps), workerLog)
	}
}
