package tracewindow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/tracewindow/cassandraindex"
	"github.com/stacksaga-go/stacksaga/worker"
)

// browserReadToken is the Trace Window's read token in the browser test.
const browserReadToken = "browser-read-token-0123456789"

// chromiumPath finds Debian's chromium (or another Chrome). Without one the
// test skips, or fails when STACKSAGA_REQUIRE_SERVICES asks for everything.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Unavailable(t, "a headless Chromium on PATH: install Debian's chromium (apt-get install -y chromium; .ci/run does it when it is missing)")
	return ""
}

// twOrder is the browser test's saga entity; its flags steer the workers.
type twOrder struct {
	ID          string   `msgpack:"id"`
	Amount      int      `msgpack:"amount"`
	Items       []string `msgpack:"items"`
	FailShip    bool     `msgpack:"fail_ship"`
	RetryCharge bool     `msgpack:"retry_charge"`
	SlowShip    bool     `msgpack:"slow_ship"`
	Steps       []string `msgpack:"steps"`
}

// Handler times: the timeline's bars last at least this long.
var stepSleep = map[string]time.Duration{"reserve": 30 * time.Millisecond, "charge": 60 * time.Millisecond, "ship": 20 * time.Millisecond}

const revertSleep = 25 * time.Millisecond

// browserRig is an orchestrator on real Kafka and Cassandra, its workers,
// a Cassandra index fed by the orchestrator, and the Trace Window over them.
type browserRig struct {
	t        *testing.T
	store    *cassandra.Store
	idx      *cassandraindex.Index
	o        *orchestrator.Orchestrator[twOrder]
	scope    eventstore.Scope
	srv      *httptest.Server
	base     string // the Trace Window's URL
	artifact string
}

func newBrowserRig(t *testing.T) *browserRig {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	hosts, ks := testenv.CassandraKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := cassandra.Config{ContactPoints: hosts, Keyspace: ks, Replication: cassandra.SimpleReplication(1), CreateSchema: true}
	store, err := cassandra.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	idx, err := cassandraindex.New(ctx, cfg, cassandraindex.WithFlushInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idx.Close() })

	u := testenv.UniqueName(t, "tw")
	domain, svcStock, svcPay, service := "order-"+u, "stock-"+u, "pay-"+u, "orders-"+u
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	names := append(topics.WorkerTopics(svcStock), topics.WorkerTopics(svcPay)...)
	names = append(names, topics.OrchestratorTopics(domain)...)
	err = topics.Ensure(ctx, kadm.NewClient(cl), names, topics.Provision{Partitions: 2, ReplicationFactor: 1})
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}

	handler := func(name string) func(context.Context, *worker.Step, twOrder) (twOrder, error) {
		return func(ctx context.Context, s *worker.Step, in twOrder) (twOrder, error) {
			d := stepSleep[name]
			if s.Kind == topics.KindRevert {
				d = revertSleep
			} else if name == "ship" && in.SlowShip {
				d = 4 * time.Second
			}
			time.Sleep(d)
			if s.Kind == topics.KindProcess {
				switch {
				case name == "charge" && in.RetryCharge && s.Attempt == 1:
					return in, worker.Retryable(errors.New("payment gateway timeout"))
				case name == "ship" && in.FailShip:
					return in, worker.NonRetryable(errors.New("cannot ship: no courier for the address"))
				case name == "charge":
					in.Amount = 0
				}
			}
			in.Steps = append(in.Steps, string(s.Kind)+":"+name)
			return in, nil
		}
	}
	startWorker := func(service string, eps ...string) {
		w, err := worker.New(service, worker.WithBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range eps {
			if err := worker.Register(w, worker.Endpoint[twOrder]{Name: ep, Process: handler(ep), Revert: handler(ep)}); err != nil {
				t.Fatal(err)
			}
		}
		runInBackground(t, "worker "+service, w.Run, w.Running())
	}
	startWorker(svcStock, "reserve", "ship")
	startWorker(svcPay, "charge")

	scope := eventstore.Scope{Region: orchestrator.DefaultRegion, Cluster: "default", Service: service}
	o, err := orchestrator.New(service, orchestrator.Domain[twOrder]{Name: domain, OnNext: orchestrator.Sequence[twOrder](
		orchestrator.Step{Service: svcStock, Endpoint: "reserve"},
		orchestrator.Step{Service: svcPay, Endpoint: "charge"},
		orchestrator.Step{Service: svcStock, Endpoint: "ship"},
	)}, orchestrator.WithBrokers(brokers...), orchestrator.WithStore(store),
		orchestrator.WithListener(tracewindow.Listener(idx, scope)),
		// Traced (spans are dropped): the saga page links the trace.
		orchestrator.WithTracerProvider(sdktrace.NewTracerProvider()))
	if err != nil {
		t.Fatal(err)
	}
	if o.Scope() != scope {
		t.Fatalf("scope %+v, orchestrator's %+v", scope, o.Scope())
	}
	runInBackground(t, "orchestrator", o.Run, o.Running())

	h, err := tracewindow.New(store, scope, tracewindow.WithIndex(idx), tracewindow.WithRefresh(500*time.Millisecond),
		tracewindow.WithTraceLink(traceLinkTemplate), tracewindow.WithReadToken(browserReadToken))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/trace/", http.StripPrefix("/trace", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &browserRig{t: t, store: store, idx: idx, o: o, scope: scope, srv: srv, base: srv.URL + "/trace/", artifact: t.ArtifactDir()}
}

// runInBackground runs run until the test ends, after ready.
func runInBackground(t *testing.T, what string, run func(context.Context) error, ready <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("%s: %v", what, err)
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("%s did not start", what)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}

// start starts a saga for o.
func (r *browserRig) start(o twOrder) string {
	r.t.Helper()
	id, err := r.o.Start(context.Background(), o)
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

// settle waits until every saga of ids is terminal, re-driving the parked
// ones (no retry node runs here), then flushes the index.
func (r *browserRig) settle(ids map[string]eventstore.State) {
	r.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		done := true
		for id, want := range ids {
			tx, err := r.store.LoadTransaction(ctx, r.scope, id)
			if err != nil {
				r.t.Fatal(err)
			}
			switch {
			case tx.State == eventstore.StateRetryPending:
				if err := r.o.Redrive(ctx, id); err != nil && !errors.Is(err, orchestrator.ErrNotRetryPending) {
					r.t.Fatal(err)
				}
				done = false
			case tx.State.Terminal() && tx.State != want:
				r.t.Fatalf("%s ended %s, want %s (%s)", id, tx.State, want, tx.Error)
			case !tx.State.Terminal():
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatal("the sagas did not end within 2 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.flush()
}

func (r *browserRig) flush() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.idx.Flush(ctx); err != nil {
		r.t.Fatal(err)
	}
}

// browser is a headless Chromium tab that records the page's errors.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string

	mu   sync.Mutex
	errs []string
	shot int
}

func newBrowser(t *testing.T, dir string) *browser {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 800))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	tctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelTab(); cancelAlloc() })
	b := &browser{t: t, ctx: tctx, dir: dir}
	if err := chromedp.Listen(ctx, b.onEvent); err != nil {
		t.Fatal(err)
	}
	b.do(chromedp.EmulateViewport(1280, 800))
	return b
}

// onEvent records uncaught exceptions, console.error calls and error log
// entries (failed loads, CSP violations).
func (b *browser) onEvent(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg = "exception: " + d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		msg = "console.error:"
		for _, a := range ev.Args {
			msg += " " + string(a.Value) + a.Description
		}
	case *log.EventEntryAdded:
		if ev.Entry.Level != log.EntryLevelError {
			return
		}
		msg = "log error: " + ev.Entry.Text + " " + ev.Entry.URL
	default:
		return
	}
	b.mu.Lock()
	b.errs = append(b.errs, msg)
	b.mu.Unlock()
}

// forgetErrors drops what the page reported so far, after the test checked
// that it was expected (what is asserted is named by why).
func (b *browser) forgetErrors(why string) {
	b.t.Helper()
	// The browser reports a failed load as a log entry, which may arrive
	// after the page has reacted to it: give it a moment.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b.mu.Lock()
		seen := slices.ContainsFunc(b.errs, func(e string) bool { return strings.Contains(e, "401") })
		b.mu.Unlock()
		if seen {
			break
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		if !strings.Contains(e, "401") {
			b.t.Fatalf("%s: the page reported more than the 401s: %s", why, strings.Join(b.errs, "\n"))
		}
	}
	b.errs = nil
}

// noErrors fails the test if the page reported a JavaScript error.
func (b *browser) noErrors(where string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) > 0 {
		b.t.Fatalf("%s: the page reported errors:\n%s", where, strings.Join(b.errs, "\n"))
	}
}

func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.mu.Lock()
		errs := strings.Join(b.errs, "\n")
		b.mu.Unlock()
		b.t.Fatalf("browser: %v\npage errors: %s", err, errs)
	}
}

func eval[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %.60s: %v", js, err)
	}
	return v
}

// poll waits until js is truthy.
func (b *browser) poll(what, js string, timeout time.Duration) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		html, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById('view') ? document.getElementById('view').innerText.slice(0, 2000) : ''`))
		b.t.Fatalf("waiting for %s: %v\nview: %s", what, err, html)
	}
}

// pollAcrossReload is poll for a page that is reloading: an evaluation the
// reload interrupts (its execution context destroyed) is tried again.
func (b *browser) pollAcrossReload(what, js string, timeout time.Duration) {
	b.t.Helper()
	var last error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		v, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](js))
		if err == nil && v {
			return
		}
		last = err
	}
	b.t.Fatalf("waiting for %s across the page's reload: last error %v", what, last)
}

// screenshot writes the whole page as a PNG named name.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	b.shot++
	p := filepath.Join(b.dir, fmt.Sprintf("%02d-%s.png", b.shot, name))
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", p)
}

// fitsWidth fails if the page scrolls sideways.
func (b *browser) fitsWidth(where string) {
	b.t.Helper()
	if over := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); over > 1 {
		b.t.Errorf("%s: the page is %dpx wider than the window", where, over)
	}
}

type uiLane struct {
	Kind     string `json:"kind"`
	Endpoint string `json:"endpoint"`
	Span     int    `json:"span"`
	Outcome  string `json:"outcome"`
	Dur      string `json:"dur"`
	Segs     []struct {
		Cat  string `json:"cat"`
		MS   int64  `json:"ms"`
		Text string `json:"text"`
	} `json:"segs"`
}

const lanesJS = `[...document.querySelectorAll('#timeline .tl-row')].map(r => ({
	kind: r.dataset.kind, endpoint: r.dataset.endpoint, span: +r.dataset.span, outcome: r.dataset.outcome,
	dur: r.querySelector('.tl-dur').textContent,
	segs: [...r.querySelectorAll('.tl-seg')].map(s => ({cat: s.dataset.category, ms: +s.dataset.durationMs, text: s.textContent}))
}))`

var durRE = regexp.MustCompile(`^\d+(\.\d+)? (ms|s)\b|^\d+m \d\ds\b`)

// traceLinkTemplate is the rig's WithTraceLink (a Jaeger trace page).
const traceLinkTemplate = "http://jaeger.invalid:16686/trace/{trace_id}"

// TestBrowserTraceWindow drives a real headless Chromium against the Trace
// Window of an orchestrator on real Kafka and Cassandra (listing through
// the Cassandra index): it opens the list, filters it to COMPENSATED, opens
// a saga and checks that the timeline shows its forward steps, then its
// compensations in reverse order, with durations; it looks at a retried
// saga and a saga in flight (the page refreshes itself until it ends), at
// 1280x800 and at phone width; it writes a screenshot of each page to the
// test's artifact directory (go test -artifacts keeps them) and fails on
// any JavaScript error.
func TestBrowserTraceWindow(t *testing.T) {
	chromiumPath(t)
	r := newBrowserRig(t)
	want := map[string]eventstore.State{}
	var compensated, retried []string
	for i := range 3 {
		want[r.start(twOrder{ID: fmt.Sprintf("ok-%d", i), Amount: 100 + i, Items: []string{"book", "lamp"}})] = eventstore.StateCompleted
	}
	for i := range 2 {
		id := r.start(twOrder{ID: fmt.Sprintf("fail-%d", i), Amount: 200 + i, Items: []string{"piano"}, FailShip: true})
		want[id] = eventstore.StateCompensated
		compensated = append(compensated, id)
	}
	id := r.start(twOrder{ID: "retry", Amount: 300, Items: []string{"tea"}, RetryCharge: true})
	want[id] = eventstore.StateCompleted
	retried = append(retried, id)
	r.settle(want)
	st := r.idx.Stats()
	t.Logf("index cost: %d sagas, %d transitions observed, %d rows written in %d batches (%.2f rows per saga), %d domain row(s), dropped %d, failed %d",
		len(want), st.Observed, st.Rows, st.Batches, float64(st.Rows)/float64(len(want)), st.Writes, st.Dropped, st.Failed)
	if st.Dropped > 0 || st.Failed > 0 || st.Rows > st.Observed {
		t.Fatalf("index writes: %+v", st)
	}

	b := newBrowser(t, r.artifact)

	// Reads need the token: the page shows no saga, asks for it, and with it
	// starts again (the token kept in the tab's session storage).
	b.do(chromedp.Navigate(r.base))
	b.poll("the token panel", `!document.getElementById('token-panel').hidden`, 30*time.Second)
	if n := eval[int](b, `document.querySelectorAll('#saga-table tbody tr').length`); n != 0 {
		t.Fatalf("without the read token the page lists %d sagas", n)
	}
	b.do(chromedp.SetValue(chromedp.CSS("#token-input"), browserReadToken), chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	// The page starts again with the token (a reload).
	b.pollAcrossReload("the saga list read with the token", `document.querySelectorAll('#saga-table tbody tr').length === 6`, 30*time.Second)
	b.forgetErrors("the refused reads") // the 401s are logged by the browser as failed loads

	// The list: every saga, newest first.
	b.poll("the saga list", `document.querySelectorAll('#saga-table tbody tr').length === 6`, 30*time.Second)
	b.poll("the health bar", `document.querySelectorAll('#health .chip').length >= 5`, 10*time.Second)
	rows := eval[[]string](b, `[...document.querySelectorAll('#saga-table tbody tr')].map(r => r.dataset.tx)`)
	if !slices.IsSortedFunc(rows, func(a, b string) int { return strings.Compare(b, a) }) {
		t.Fatalf("list not newest first: %v", rows)
	}
	b.fitsWidth("list at 1280x800")
	b.screenshot("list")
	b.noErrors("list")

	// Filter to COMPENSATED.
	b.do(chromedp.SetValue(chromedp.CSS("#f-state"), "COMPENSATED"), chromedp.Click(chromedp.CSS("#f-apply")))
	b.poll("the COMPENSATED list", `(() => { const r = [...document.querySelectorAll('#saga-table tbody tr')];
		return r.length === 2 && r.every(x => x.dataset.state === 'COMPENSATED'); })()`, 30*time.Second)
	got := eval[[]string](b, `[...document.querySelectorAll('#saga-table tbody tr')].map(r => r.dataset.tx)`)
	slices.Sort(got)
	slices.Sort(compensated)
	if !slices.Equal(got, compensated) {
		t.Fatalf("COMPENSATED list %v, want %v", got, compensated)
	}
	if h := eval[string](b, `location.hash`); !strings.Contains(h, "state=COMPENSATED") {
		t.Fatalf("the filter is not in the address: %q", h)
	}
	b.screenshot("list-compensated")
	b.noErrors("filtered list")

	// Open the first one.
	first := eval[string](b, `document.querySelector('#saga-table tbody tr').dataset.tx`)
	b.do(chromedp.Click(chromedp.CSS(`#saga-table tbody tr:first-child a.saga-link`)))
	b.poll("the saga's timeline", `document.querySelectorAll('#timeline .tl-row').length === 5`, 30*time.Second)
	if shown := eval[string](b, `document.getElementById('saga-id').textContent`); shown != first {
		t.Fatalf("opened %s, clicked %s", shown, first)
	}
	lanes := eval[[]uiLane](b, lanesJS)
	type kv struct{ kind, ep string }
	var order []kv
	for _, l := range lanes {
		order = append(order, kv{l.Kind, strings.SplitN(l.Endpoint, "/", 2)[1]})
	}
	wantOrder := []kv{{"process", "reserve"}, {"process", "charge"}, {"process", "ship"}, {"revert", "charge"}, {"revert", "reserve"}}
	if !slices.Equal(order, wantOrder) {
		t.Fatalf("timeline lanes %v, want forward steps then compensations in reverse %v", order, wantOrder)
	}
	for _, l := range lanes {
		if !durRE.MatchString(l.Dur) {
			t.Errorf("lane %s %s: duration %q", l.Kind, l.Endpoint, l.Dur)
		}
		if len(l.Segs) == 0 {
			t.Fatalf("lane %s %s has no bar", l.Kind, l.Endpoint)
		}
		seg := l.Segs[len(l.Segs)-1]
		min := stepSleep[strings.SplitN(l.Endpoint, "/", 2)[1]]
		wantCat := "forward"
		switch {
		case l.Kind == "revert":
			min, wantCat = revertSleep, "revert"
		case strings.HasSuffix(l.Endpoint, "/ship"):
			wantCat = "failed"
		}
		if seg.Cat != wantCat || seg.MS < min.Milliseconds() || !strings.Contains(seg.Text, " ms") && !strings.Contains(seg.Text, " s") {
			t.Errorf("lane %s %s: bar %+v, want %s of at least %v with its duration", l.Kind, l.Endpoint, seg, wantCat, min)
		}
	}
	trail := eval[[]string](b, `[...document.querySelectorAll('#trail li')].map(li => li.dataset.endpoint + ' ' + li.dataset.outcome)`)
	if len(trail) != 2 || !strings.HasSuffix(trail[0], "/charge ok") || !strings.HasSuffix(trail[1], "/reserve ok") {
		t.Fatalf("compensation trail %v", trail)
	}
	if e := eval[string](b, `document.getElementById('saga-error') ? document.getElementById('saga-error').textContent : ''`); !strings.Contains(e, "no courier") {
		t.Fatalf("error payload %q", e)
	}
	// The saga's trace: its id, and the link to the tracing UI.
	saga, err := r.o.Get(context.Background(), first)
	if err != nil || len(saga.TraceID) != 32 {
		t.Fatalf("saga %s: trace id %q, %v", first, saga.TraceID, err)
	}
	if shown := eval[string](b, `document.getElementById('saga-trace-id') ? document.getElementById('saga-trace-id').textContent : ''`); shown != saga.TraceID {
		t.Fatalf("trace id shown %q, want %q", shown, saga.TraceID)
	}
	if href := eval[string](b, `(document.getElementById('saga-trace-link') || {}).href || ''`); href != strings.ReplaceAll(traceLinkTemplate, "{trace_id}", saga.TraceID) {
		t.Fatalf("trace link %q, want the template with trace id %s", href, saga.TraceID)
	}
	b.fitsWidth("saga at 1280x800")
	b.screenshot("saga-compensated")

	// A bar opens its step with the entity before and after.
	b.do(chromedp.Click(chromedp.CSS(`#timeline .tl-row[data-kind="process"]:nth-of-type(3) .tl-seg`)))
	b.poll("the step's snapshots", `!!document.querySelector('details.step[open] pre.json')`, 10*time.Second)
	snap := eval[[]string](b, `[...document.querySelectorAll('details.step[open] pre.json')].map(p => p.textContent)`)
	if len(snap) < 2 || !strings.Contains(snap[0], `"amount": 200`) && !strings.Contains(snap[0], `"amount": 201`) || !strings.Contains(snap[0], `"steps"`) {
		t.Fatalf("entity snapshots %q", snap)
	}
	b.screenshot("saga-step-open")
	b.noErrors("saga page")

	// The same page at phone width.
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait))
	b.poll("the phone layout", `window.innerWidth <= 400`, 10*time.Second)
	b.fitsWidth("saga at phone width")
	b.screenshot("saga-phone")

	// The retried saga: its retry, the wait and the retry audit.
	b.do(chromedp.EmulateViewport(1280, 800))
	b.do(chromedp.Navigate(r.base + "#/saga/" + retried[0]))
	b.poll("the retried saga", `!!document.querySelector('#timeline .tl-seg[data-category="retry"]') && !!document.querySelector('#timeline .tl-seg[data-category="wait"]')`, 30*time.Second)
	if n := eval[int](b, `document.querySelectorAll('#retries tbody tr').length`); n != 2 {
		t.Fatalf("retry audit rows %d, want 2", n)
	}
	// It COMPLETED: the failed attempt's error is history, not its error.
	if e := eval[string](b, `(document.getElementById('saga-error') ? 'error: ' + document.getElementById('saga-error').textContent : '') + (document.getElementById('saga-last-error') || {}).textContent`); !strings.HasPrefix(e, "history: an earlier attempt failed") {
		t.Fatalf("the retried saga's error shown as %q, want it as history", e)
	}
	b.screenshot("saga-retried")
	b.noErrors("retried saga")

	// A saga in flight: the page shows the running step and refreshes
	// itself until the saga completes.
	slow := r.start(twOrder{ID: "slow", Amount: 9, Items: []string{"sofa"}, SlowShip: true})
	b.do(chromedp.Navigate(r.base + "#/saga/" + slow))
	b.poll("the running step", `!!document.querySelector('#timeline .tl-seg[data-category="running"]') && !!document.getElementById('live')`, 30*time.Second)
	b.screenshot("saga-in-flight")
	b.poll("the saga to complete on screen", `!!document.querySelector('#saga-head .state.COMPLETED') && !document.getElementById('live')`, 60*time.Second)
	b.screenshot("saga-completed-live")

	// The list at phone width, and a search by transaction id.
	r.flush()
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait))
	b.do(chromedp.Navigate(r.base + "#/"))
	b.poll("the list at phone width", `document.querySelectorAll('#saga-table tbody tr').length === 7`, 30*time.Second)
	b.fitsWidth("list at phone width")
	b.screenshot("list-phone")
	b.do(chromedp.EmulateViewport(1280, 800))
	b.do(chromedp.SetValue(chromedp.CSS("#search-tx"), compensated[1]), chromedp.Click(chromedp.CSS("#search button")))
	b.poll("the searched saga", fmt.Sprintf(`(document.getElementById('saga-id') || {}).textContent === %q`, compensated[1]), 30*time.Second)
	b.noErrors("end")
}

// TestBrowserAdminAudit drives the admin restore of a DISABLED saga from its
// page in headless Chromium, over the Cassandra store: after the action the
// page shows it in the saga's admin audit table (when, who, action, result)
// and as a marker on the timeline, and the API shows the same record.
func TestBrowserAdminAudit(t *testing.T) {
	chromiumPath(t)
	hosts, ks := testenv.CassandraKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, err := cassandra.New(ctx, cassandra.Config{ContactPoints: hosts, Keyspace: ks, Replication: cassandra.SimpleReplication(1), CreateSchema: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	now := func() time.Time { return time.Now().UTC() }
	f := &fixture{t: t, store: store, idx: tracewindow.NewMemoryIndex(0), now: now(),
		scope: eventstore.Scope{Region: "default", Cluster: "default", Service: testenv.UniqueName(t, "audit")}}
	// A saga that outlived its lifetime while its first step was retried.
	id := f.put("order", f.now.Add(-29*time.Hour), []step{{kind: "process", span: 0, endpoint: "stock/reserve", outcome: "retryable",
		attempt: 1, gap: time.Millisecond, dur: 30 * time.Millisecond, err: "stock service down"}}, eventstore.StateDisabled, nil)
	tx, err := store.LoadTransaction(ctx, f.scope, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Freeze(ctx, tx, "outlived the transaction lifetime"); err != nil {
		t.Fatal(err)
	}
	w, err := recovery.NewWriter(store, recovery.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, err := tracewindow.New(store, f.scope, tracewindow.WithIndex(f.idx), tracewindow.WithReadToken(browserReadToken),
		tracewindow.WithAdmin(tracewindow.Admin{Token: token, Restore: tracewindow.RecoveryRestore(store, w, f.scope, now)}))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/trace/", http.StripPrefix("/trace", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base := srv.URL + "/trace/"

	b := newBrowser(t, t.ArtifactDir())
	b.do(chromedp.Navigate(base + "#/saga/" + id))
	b.poll("the token panel", `!document.getElementById('token-panel').hidden`, 30*time.Second)
	b.do(chromedp.SetValue(chromedp.CSS("#token-input"), token), chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	b.pollAcrossReload("the DISABLED saga with its restore button",
		`!!document.querySelector('#saga-head .state.DISABLED') && !!document.querySelector('button[data-action="restore"]') && !!document.getElementById('audit')`, 30*time.Second)
	b.forgetErrors("the refused reads")
	if n := eval[int](b, `document.querySelectorAll('#audit tbody tr').length + document.querySelectorAll('#audit-lane').length`); n != 0 {
		t.Fatalf("the saga shows %d audit rows before any action", n)
	}

	// The admin restores it (the page asks to confirm: yes).
	if !eval[bool](b, `window.confirm = function () { return true; }; true`) {
		t.Fatal("could not answer the confirmation")
	}
	b.do(chromedp.Click(chromedp.CSS(`button[data-action="restore"]`)))
	b.poll("the restore's audit row", `(() => { const r = document.querySelectorAll('#audit tbody tr');
		return r.length === 1 && r[0].dataset.action === 'restore' && r[0].dataset.result === 'ok'; })()`, 30*time.Second)
	if actor := eval[string](b, `document.querySelector('#audit tbody tr').dataset.actor`); !strings.HasPrefix(actor, "admin-token from 127.0.0.1:") {
		t.Fatalf("audit row's actor %q, want the admin token and the browser's address", actor)
	}
	if cells := eval[[]string](b, `[...document.querySelectorAll('#audit tbody tr td')].map(td => td.textContent)`); len(cells) != 4 ||
		!regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$`).MatchString(cells[0]) || cells[2] != "restore" || cells[3] != "ok" {
		t.Fatalf("audit row %q, want when, who, restore, ok", cells)
	}
	if n := eval[int](b, `document.querySelectorAll('#audit-lane .tl-mark[data-action="restore"][data-result="ok"]').length`); n != 1 {
		t.Fatalf("%d restore markers on the timeline, want 1", n)
	}
	b.poll("the restored state", `!!document.querySelector('#saga-head .state.RETRY_PENDING')`, 10*time.Second)
	b.fitsWidth("saga with its audit trail")
	b.screenshot("saga-admin-audit")
	b.noErrors("after the restore")

	// The API shows the same record.
	code, _, body := get(t, srv.URL+"/trace", "/api/sagas/"+id, "Bearer "+browserReadToken)
	var d tracewindow.Detail
	if err := json.Unmarshal([]byte(body), &d); code != http.StatusOK || err != nil || len(d.Audit) != 1 ||
		d.Audit[0].Action != "restore" || d.Audit[0].Result != "ok" || !strings.HasPrefix(d.Audit[0].Actor, "admin-token from 127.0.0.1:") {
		t.Fatalf("GET the saga: %d %v %s", code, err, body)
	}
}
