package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// scrape GETs url and parses it with Prometheus' own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Ask for the text format: the parser under test is the text one.
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("scrape %s: %s, Content-Type %q", url, res.Status, res.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// series is one sample of a scraped family: its labels and value (a
// counter's or gauge's value, a histogram's count).
type series struct {
	labels map[string]string
	value  float64
}

func samples(fams map[string]*dto.MetricFamily, name string) []series {
	f := fams[name]
	if f == nil {
		return nil
	}
	var out []series
	for _, m := range f.GetMetric() {
		s := series{labels: map[string]string{}}
		for _, l := range m.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		switch {
		case m.Counter != nil:
			s.value = m.GetCounter().GetValue()
		case m.Gauge != nil:
			s.value = m.GetGauge().GetValue()
		case m.Histogram != nil:
			s.value = float64(m.GetHistogram().GetSampleCount())
		default:
			s.value = m.GetUntyped().GetValue()
		}
		out = append(out, s)
	}
	return out
}

// sum adds the samples of name whose labels include match.
func sum(fams map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	var total float64
next:
	for _, s := range samples(fams, name) {
		for k, v := range match {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
	}
	return total
}

func familyNames(fams map[string]*dto.MetricFamily) string {
	var names []string
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// runWithMetrics runs the demo with --telemetry and --metrics-addr, scrapes
// /metrics once the sagas are done (before shutdown) and returns the
// summary and the scrape.
func runWithMetrics(t *testing.T, args ...string) (result, map[string]*dto.MetricFamily) {
	t.Helper()
	opts, err := parse(append(args, "--quiet", "--metrics-addr", "127.0.0.1:0"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !opts.telemetry {
		t.Fatal("--metrics-addr did not turn --telemetry on")
	}
	var fams map[string]*dto.MetricFamily
	opts.afterRun = func(_ result, url string) {
		if url == "" {
			t.Error("no metrics URL")
			return
		}
		fams = scrape(t, url)
	}
	tel, err := newDemoTelemetry(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tel.close(); err != nil {
			t.Errorf("close telemetry: %v", err)
		}
	}()
	var stderr bytes.Buffer
	res, err := demo(t.Context(), opts, tel, &stderr)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, stderr.String())
	}
	if fams == nil {
		t.Fatal("afterRun did not scrape")
	}
	t.Logf("summary: %s", res.summary())
	return res, fams
}

// checkDemoMetrics compares the scraped counters with the demo's summary
// after a run with failures and duplicates.
func checkDemoMetrics(t *testing.T, res result, fams map[string]*dto.MetricFamily, domain string) {
	t.Helper()
	eq := func(what string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v (families: %s)", what, got, want, familyNames(fams))
		}
	}
	d := map[string]string{"stacksaga_domain": domain}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for a, b := range d {
			m[a] = b
		}
		return m
	}
	eq("stacksaga_saga_started_total", sum(fams, "stacksaga_saga_started_total", d), float64(res.sagas))
	eq("finished COMPLETED", sum(fams, "stacksaga_saga_finished_total", with("stacksaga_saga_state", "COMPLETED")), float64(res.completed))
	eq("finished COMPENSATED", sum(fams, "stacksaga_saga_finished_total", with("stacksaga_saga_state", "COMPENSATED")), float64(res.compensated))
	eq("finished COMPENSATION_FAILED", sum(fams, "stacksaga_saga_finished_total", with("stacksaga_saga_state", "COMPENSATION_FAILED")), float64(res.compensationFailed))
	eq("stacksaga_saga_in_flight", sum(fams, "stacksaga_saga_in_flight", d), float64(res.stuck))
	// No Start failed (the demo stops at the first that does), and the
	// family is there to alert on.
	if fams["stacksaga_saga_start_failed_total"] == nil {
		t.Errorf("no stacksaga_saga_start_failed_total (families: %s)", familyNames(fams))
	}
	eq("stacksaga_saga_start_failed_total", sum(fams, "stacksaga_saga_start_failed_total", d), 0)
	// Every step result applied is one observation of the step latency:
	// 3 forward steps per saga, 2 compensations more for those that
	// compensate (the shipping step, the last, fails).
	steps := float64(3*res.sagas + 2*res.compensated)
	eq("stacksaga_step_duration_seconds count", sum(fams, "stacksaga_step_duration_seconds", d), steps)
	eq("replies applied", sum(fams, "stacksaga_reply_received_total", with("stacksaga_reply_result", "applied")), steps)
	eq("replies stale", sum(fams, "stacksaga_reply_received_total", with("stacksaga_reply_result", "stale")), float64(res.staleRepl))
	eq("stacksaga_guard_duplicates_skipped_total", sum(fams, "stacksaga_guard_duplicates_skipped_total", nil), float64(res.duplicatesSkipped))
	// The guards ran each step once: the handler latency counts every
	// execution, and failures by outcome.
	eq("stacksaga_handler_duration_seconds count", sum(fams, "stacksaga_handler_duration_seconds", nil), steps)
	eq("stacksaga_guard_executions_total", sum(fams, "stacksaga_guard_executions_total", nil), steps)
	eq("non_retryable handler runs", sum(fams, "stacksaga_handler_duration_seconds", map[string]string{"stacksaga_step_outcome": "non_retryable"}), float64(res.compensated))
	eq("failed steps (orchestrator)", sum(fams, "stacksaga_step_duration_seconds", with("stacksaga_step_outcome", "non_retryable")), float64(res.compensated))
	eq("stacksaga_dead_lettered_total", sum(fams, "stacksaga_dead_lettered_total", nil), 0)
	eq("stacksaga_command_published_total", sum(fams, "stacksaga_command_published_total", d), steps)
	// Each command and each reply went through Kafka at least once
	// (the relay adds its copies).
	if got := sum(fams, "messaging_client_sent_messages_total", nil); got < 2*steps {
		t.Errorf("messaging_client_sent_messages_total = %v, want at least %v", got, 2*steps)
	}
	if got := sum(fams, "messaging_client_consumed_messages_total", nil); got < 2*steps {
		t.Errorf("messaging_client_consumed_messages_total = %v, want at least %v", got, 2*steps)
	}
	if got := sum(fams, "messaging_client_operation_duration_seconds", map[string]string{"messaging_operation_name": "send"}); got == 0 {
		t.Error("no produce request timed")
	}
	if fams["stacksaga_kafka_io_bytes_total"] == nil {
		t.Errorf("no Kafka byte counts; families: %s", familyNames(fams))
	}
	// Traces: one span per saga start and per reply applied on the
	// orchestrator, one per delivery on the workers (duplicates included).
	if min := int64(res.sagas) + 2*int64(steps); res.spans < min {
		t.Errorf("spans=%d, want at least %d", res.spans, min)
	}
}

// The demo's metrics, scraped over HTTP and parsed with Prometheus' text
// parser, equal its summary after a run with failures and duplicates, on the
// embedded broker and store.
func TestDemoMetricsEmbedded(t *testing.T) {
	res, fams := runWithMetrics(t, "--sagas", "300", "--fail-rate", "0.1", "--duplicates", "2", "--mode", "strict", "--concurrency", "64")
	checkCounts(t, []int{res.sagas, res.completed, res.compensated, res.compensationFailed, res.stuck}, 300, 30)
	if res.duplicatesSkipped == 0 || res.staleRepl == 0 {
		t.Fatalf("duplicates_skipped=%d stale_replies=%d: the duplicates did not arrive", res.duplicatesSkipped, res.staleRepl)
	}
	checkDemoMetrics(t, res, fams, placeorder.Domain)
	checkDashboard(t, fams)
}

// The same on real Kafka and Cassandra, where the store's round trips are
// counted too.
func TestDemoMetricsRealServices(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	hosts, keyspace := testenv.CassandraKeyspace(t)
	suffix := testenv.UniqueName(t, "otel")
	res, fams := runWithMetrics(t, "--sagas", "150", "--fail-rate", "0.1", "--duplicates", "2", "--mode", "strict",
		"--kafka", brokers[0], "--cassandra", hosts[0], "--keyspace", keyspace, "--suffix", suffix)
	checkCounts(t, []int{res.sagas, res.completed, res.compensated, res.compensationFailed, res.stuck}, 150, 15)
	checkDemoMetrics(t, res, fams, placeorder.DefaultNames().WithSuffix(suffix).Domain)
	// The store's round trips during the run are part of the total the
	// counter reports since the store was made.
	during := res.stmtsPerSaga * float64(res.sagas)
	total := sum(fams, "stacksaga_cassandra_round_trips_total", nil)
	if total < during-1 || total == 0 {
		t.Errorf("stacksaga_cassandra_round_trips_total = %v, want at least the run's %v", total, during)
	}
	if got := sum(fams, "stacksaga_cassandra_round_trips_total", map[string]string{"stacksaga_cassandra_request_kind": "lwt"}); got == 0 {
		t.Error("no LWT counted under STRICT")
	}
	if got := sum(fams, "db_client_operation_duration_seconds", map[string]string{"db_system_name": "cassandra", "db_collection_name": "es_transaction"}); got == 0 {
		t.Errorf("no es_transaction request timed; families: %s", familyNames(fams))
	}
	checkDashboard(t, fams)
}

// With every consumer in a share group (KIP-932) on real Kafka the Kafka
// client metrics count the messages too: share fetches report no batches,
// so the clients count the messages they consume record by record
// (telemetry.ShareKafkaMetrics).
func TestDemoMetricsShareGroups(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	suffix := testenv.UniqueName(t, "otelshare")
	res, fams := runWithMetrics(t, "--sagas", "100", "--fail-rate", "0.1", "--mode", "strict", "--group-type", "share",
		"--kafka", brokers[0], "--suffix", suffix)
	checkCounts(t, []int{res.sagas, res.completed, res.compensated, res.compensationFailed, res.stuck}, 100, 10)
	// Each command and each reply went through Kafka at least once.
	steps := float64(3*res.sagas + 2*res.compensated)
	for _, name := range []string{"messaging_client_consumed_messages_total", "messaging_client_sent_messages_total"} {
		if got := sum(fams, name, nil); got < 2*steps {
			t.Errorf("%s = %v, want at least %v", name, got, 2*steps)
		}
	}
	if got := sum(fams, "stacksaga_saga_started_total", map[string]string{"stacksaga_domain": placeorder.DefaultNames().WithSuffix(suffix).Domain}); got != float64(res.sagas) {
		t.Errorf("stacksaga_saga_started_total = %v, want %d", got, res.sagas)
	}
}

// checkDashboard: every metric the Grafana dashboard of the compose file's
// observability profile (deploy/grafana/dashboards/stacksaga.json) queries
// is one the framework exports under that name, and every label it groups
// by is on that metric, as scraped from a real run (fams); a metric that
// the run did not produce (it counts rare events) must be documented in
// docs/observability.md.
func checkDashboard(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "dashboards", "stacksaga.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	metricRe := regexp.MustCompile(`\b((?:stacksaga|messaging|db)_[a-z_]+?)(_bucket)?\[`)
	byRe := regexp.MustCompile(`by \(([^)]*)\)`)
	found := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			ms := metricRe.FindAllStringSubmatch(tg.Expr, -1)
			if len(ms) == 0 {
				// a gauge without a range: the name before the closing paren
				if m := regexp.MustCompile(`\) \((stacksaga_[a-z_]+)\)$`).FindStringSubmatch(tg.Expr); m != nil {
					ms = [][]string{{"", m[1], ""}}
				}
			}
			if len(ms) == 0 {
				t.Errorf("panel %q: no metric in %q", p.Title, tg.Expr)
			}
			for _, m := range ms {
				name := m[1]
				f := fams[name]
				if f == nil {
					if !strings.Contains(string(doc), "`"+name+"`") {
						t.Errorf("panel %q queries %s, which the run did not export and docs/observability.md does not list", p.Title, name)
					}
					continue
				}
				found++
				labels := map[string]bool{"le": true}
				for _, s := range f.GetMetric() {
					for _, l := range s.GetLabel() {
						labels[l.GetName()] = true
					}
				}
				for _, by := range byRe.FindAllStringSubmatch(tg.Expr, -1) {
					for _, l := range strings.Split(by[1], ",") {
						if l = strings.TrimSpace(l); !labels[l] {
							t.Errorf("panel %q groups %s by %s, a label it does not have", p.Title, name, l)
						}
					}
				}
			}
		}
	}
	if found < 10 {
		t.Errorf("only %d of the dashboard's queries name a metric the run exported", found)
	}
}
