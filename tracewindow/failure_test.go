package tracewindow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// The errors a failing Cassandra store and Kafka broker return: each names
// what a browser must never see.
var (
	errStoreDown  = errors.New("gocql: no hosts available in the pool: cassandra-7.internal 10.1.2.3:9042 keyspace shop_prod table stacksaga_tx (password=hunter2)")
	errBrokerDown = errors.New("kgo: unable to dial kafka-3.internal:9092 (sasl user=app password=hunter2)")
	// internals are the words of those errors no answer may carry.
	internals = []string{"cassandra-7", "10.1.2.3", "9042", "shop_prod", "stacksaga_tx", "hunter2", "gocql", "kgo", "kafka-3", "9092", "sasl", "password"}
)

// leakyStore fails its reads with errStoreDown while failing is set; it
// keeps the audit trail of the store it wraps.
type leakyStore struct {
	eventstore.Store
	failing *atomic.Bool
}

func (s leakyStore) err() error {
	if s.failing.Load() {
		return errStoreDown
	}
	return nil
}

func (s leakyStore) LoadTransaction(ctx context.Context, scope eventstore.Scope, id string) (eventstore.Transaction, error) {
	if err := s.err(); err != nil {
		return eventstore.Transaction{}, err
	}
	return s.Store.LoadTransaction(ctx, scope, id)
}

func (s leakyStore) Tryouts(ctx context.Context, scope eventstore.Scope, id string) ([]eventstore.Tryout, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.Store.Tryouts(ctx, scope, id)
}

func (s leakyStore) ListFrozenAfter(ctx context.Context, scope eventstore.Scope, after string, limit int) ([]eventstore.FrozenTransaction, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.Store.ListFrozenAfter(ctx, scope, after, limit)
}

func (s leakyStore) AppendAudit(ctx context.Context, scope eventstore.Scope, rec eventstore.AuditRecord) error {
	return s.Store.(eventstore.Auditor).AppendAudit(ctx, scope, rec)
}

func (s leakyStore) AuditTrail(ctx context.Context, scope eventstore.Scope, id string, limit int) ([]eventstore.AuditRecord, error) {
	return s.Store.(eventstore.Auditor).AuditTrail(ctx, scope, id, limit)
}

// leakyIndex fails its reads with errStoreDown while failing is set.
type leakyIndex struct {
	*tracewindow.MemoryIndex
	failing *atomic.Bool
}

func (x leakyIndex) Recent(ctx context.Context, q tracewindow.Query) (tracewindow.Page, error) {
	if x.failing.Load() {
		return tracewindow.Page{}, errStoreDown
	}
	return x.MemoryIndex.Recent(ctx, q)
}

func (x leakyIndex) Domains(ctx context.Context, scope eventstore.Scope) ([]string, error) {
	if x.failing.Load() {
		return nil, errStoreDown
	}
	return x.MemoryIndex.Domains(ctx, scope)
}

func (x leakyIndex) Census(ctx context.Context, scope eventstore.Scope, from, to time.Time) (tracewindow.Census, error) {
	if x.failing.Load() {
		return tracewindow.Census{}, errStoreDown
	}
	return x.MemoryIndex.Census(ctx, scope, from, to)
}

// syncBuffer is a log sink the handler's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var errorIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// Every route, with a failing store and broker, answers a short stable
// message and an error id (never a host, port, keyspace, table or
// credential) and logs the detail under that id; an admin action's audit
// record, which the saga page shows, carries the answer, not the detail.
func TestFailuresAnswerNoInternals(t *testing.T) {
	f := newFixture(t)
	var failing atomic.Bool
	retryLater := fmt.Errorf("%w: publish the command: %w", orchestrator.ErrRetryLater, errBrokerDown)
	var actionErr atomic.Pointer[error]
	fail := func(context.Context, string) error { return *actionErr.Load() }
	logs := &syncBuffer{}
	h, err := tracewindow.New(leakyStore{f.store, &failing}, f.scope,
		tracewindow.WithIndex(leakyIndex{f.idx, &failing}), tracewindow.WithClock(f.clock), tracewindow.WithHealthCache(0),
		tracewindow.WithAnonymousReads(), tracewindow.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))),
		tracewindow.WithAdmin(tracewindow.Admin{Token: token, Restore: fail, Redrive: fail, Resend: fail,
			Resume:    func(context.Context, string, string, json.RawMessage) error { return *actionErr.Load() },
			Cancel:    func(context.Context, string, string) error { return *actionErr.Load() },
			Terminate: func(context.Context, string, string) error { return *actionErr.Load() },
		}))
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	type route struct {
		name, path, body string
		err              error // the admin action's error (nil: a read with a failing store)
		code             int
	}
	var routes []route
	for _, e := range []struct {
		err  error
		code int
	}{{errBrokerDown, 500}, {fmt.Errorf("load: %w", errStoreDown), 500}, {retryLater, 503}} {
		for _, a := range []struct{ action, body string }{
			{tracewindow.ActionRestore, "{}"}, {tracewindow.ActionRedrive, "{}"}, {tracewindow.ActionResend, "{}"},
			{tracewindow.ActionResume, `{"correlation_key":"k1"}`}, {tracewindow.ActionCancel, `{"reason":"r"}`},
			{tracewindow.ActionTerminate, `{"reason":"r"}`},
		} {
			routes = append(routes, route{a.action + " " + e.err.Error()[:8], "/api/sagas/" + f.pending + "/" + a.action, a.body, e.err, e.code})
		}
	}
	for _, p := range []string{"/api/domains", "/api/sagas", "/api/sagas/" + f.pending, "/api/search?tx=" + f.pending} {
		routes = append(routes, route{name: p, path: p, code: 503})
	}
	routes = append(routes, route{name: "/api/health", path: "/api/health", code: 200})
	for _, rt := range routes {
		failing.Store(rt.err == nil)
		var code int
		var m map[string]any
		if rt.err != nil {
			actionErr.Store(&rt.err)
			code, m = f.post(rt.path, "application/json", rt.body, map[string]string{"Authorization": "Bearer " + token})
		} else {
			code = f.get(rt.path, &m)
		}
		raw, _ := json.Marshal(m)
		body := string(raw)
		if code != rt.code {
			t.Errorf("%s: %d %s, want %d", rt.name, code, body, rt.code)
		}
		ids := errorIDs(m)
		scrubbed := strings.ToLower(body)
		for _, id := range ids { // a random hex id may hold "9092"
			if len(id) == 16 && strings.Trim(id, "0123456789abcdef") == "" {
				scrubbed = strings.ReplaceAll(scrubbed, id, "<id>")
			}
		}
		for _, leak := range internals {
			if strings.Contains(scrubbed, leak) {
				t.Errorf("%s: the answer tells the client %q: %s", rt.name, leak, body)
			}
		}
		if len(ids) == 0 {
			t.Errorf("%s: no error id in %s", rt.name, body)
		}
		for _, id := range ids {
			if !errorIDPattern.MatchString(id) {
				t.Errorf("%s: error id %q is not 16 hex digits", rt.name, id)
			} else if !logged(logs.String(), id) {
				t.Errorf("%s: error id %s is not logged with the detail; log:\n%s", rt.name, id, logs.String())
			}
		}
	}
	// The failed actions' audit records, shown on the saga page.
	failing.Store(false)
	var d map[string]any
	if code := f.get("/api/sagas/"+f.pending, &d); code != 200 {
		t.Fatalf("saga page: %d %v", code, d)
	}
	raw, _ := json.Marshal(d["audit"])
	if n := strings.Count(string(raw), `"error_withheld":true`); n != 18 {
		t.Errorf("the audit trail withholds %d failures' errors, want the 18 actions': %s", n, raw)
	}
	for _, leak := range internals {
		if strings.Contains(strings.ToLower(string(raw)), leak) {
			t.Errorf("the saga page's audit trail tells the client %q: %s", leak, raw)
		}
	}
}

// errorIDs returns the error ids an answer carries: its "error_id", and
// those of the health document's errors.
func errorIDs(m map[string]any) []string {
	var ids []string
	if id, ok := m["error_id"].(string); ok {
		ids = append(ids, id)
	}
	if errs, ok := m["errors"].([]any); ok {
		for _, e := range errs {
			s, _ := e.(string)
			if _, id, ok := strings.Cut(s, "error id "); ok {
				id, _, _ = strings.Cut(id, ";")
				ids = append(ids, id)
			} else {
				ids = append(ids, s)
			}
		}
	}
	return ids
}

// logged reports whether a log line carries id and the failure's detail.
func logged(logs, id string) bool {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"error_id":"`+id+`"`) && strings.Contains(line, "hunter2") {
			return true
		}
	}
	return false
}
