package tracewindow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/testenv"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// debugLogger logs text lines, debug included, into b.
func debugLogger(b *testenv.LockedBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// trail reads a saga's audit trail through the API.
func (f *fixture) trail(id string) []tracewindow.AuditView {
	f.t.Helper()
	var d tracewindow.Detail
	if code := f.get("/api/sagas/"+id, &d); code != http.StatusOK {
		f.t.Fatalf("GET saga %s: %d", id, code)
	}
	return d.Audit
}

// stored reads a saga's audit trail from the store.
func (f *fixture) stored(id string) []eventstore.AuditRecord {
	f.t.Helper()
	recs, err := f.store.(eventstore.Auditor).AuditTrail(context.Background(), f.scope, id, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return recs
}

// Every admin action that passed authentication leaves one audit record
// (who, when, what, result) in the store, shown in GET /api/sagas/{txid};
// the action's answer says it was recorded. Refusals are recorded with
// their reason class; requests that fail authentication are not (they
// are logged).
func TestAdminActionsAudited(t *testing.T) {
	var logs testenv.LockedBuffer
	f := newFixture(t)
	h, err := tracewindow.New(f.store, f.scope, tracewindow.WithIndex(f.idx), tracewindow.WithClock(f.clock), f.adminOpts(t),
		tracewindow.WithAnonymousReads(), tracewindow.WithLogger(debugLogger(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	auth := map[string]string{"Authorization": "Bearer " + token}

	if got := f.trail(f.disabled); len(got) != 0 {
		t.Fatalf("audit trail before any action: %+v", got)
	}
	code, m := f.post("/api/sagas/"+f.disabled+"/restore", "application/json", "{}", auth)
	if code != http.StatusOK || m["audit"] != "recorded" {
		t.Fatalf("restore: %d %v, want 200 with audit recorded", code, m)
	}
	got := f.trail(f.disabled)
	if len(got) != 1 {
		t.Fatalf("audit trail after the restore: %+v, want one record", got)
	}
	r := got[0]
	if r.Action != "restore" || r.Result != "ok" || !r.At.Equal(f.now) || r.Error != "" || r.ErrorWithheld ||
		!strings.HasPrefix(r.Actor, "admin-token") || !strings.Contains(r.Actor, "127.0.0.1") {
		t.Fatalf("restore's record %+v, want restore ok at %v by the admin token from 127.0.0.1", r, f.now)
	}

	// A refusal on the saga's state (409) is recorded with its class and
	// the error the client got.
	code, m = f.post("/api/sagas/"+f.completed+"/restore", "application/json", "{}", auth)
	if code != http.StatusConflict || m["audit"] != "recorded" {
		t.Fatalf("restore of a completed saga: %d %v, want 409 with audit recorded", code, m)
	}
	code, _ = f.post("/api/sagas/"+f.completed+"/redrive", "application/json", "{}", auth)
	if code != http.StatusConflict {
		t.Fatalf("redrive of a completed saga: %d", code)
	}
	// So are bad requests, actions that are not enabled and unknown ones.
	if code, _ := f.post("/api/sagas/"+f.completed+"/restore", "text/plain", "{}", auth); code != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain restore: %d", code)
	}
	if code, _ := f.post("/api/sagas/"+f.completed+"/resend", "application/json", "{}", auth); code != http.StatusNotFound {
		t.Fatalf("resend (not enabled): %d", code)
	}
	if code, _ := f.post("/api/sagas/"+f.completed+"/explode", "application/json", "{}", auth); code != http.StatusNotFound {
		t.Fatalf("unknown action: %d", code)
	}
	got = f.trail(f.completed)
	want := []struct{ action, result, err string }{
		{"restore", "refused: wrong state", "is COMPLETED"},
		{"redrive", "refused: wrong state", "not retry-pending"},
		{"restore", "refused: bad request", "Content-Type: application/json"},
		{"resend", "refused: not enabled", "not enabled"},
		{"explode", "refused: unknown action", "unknown admin action"},
	}
	if len(got) != len(want) {
		t.Fatalf("audit trail of the completed saga: %+v, want %d records", got, len(want))
	}
	for i, w := range want {
		if got[i].Action != w.action || got[i].Result != w.result || !strings.Contains(got[i].Error, w.err) {
			t.Errorf("record %d: %+v, want %s %q with an error naming %q", i, got[i], w.action, w.result, w.err)
		}
	}

	// An unknown saga: 404, recorded under its id.
	unknown, _ := orchestrator.NewTxID(f.now, 1)
	if code, m := f.post("/api/sagas/"+unknown+"/restore", "application/json", "{}", auth); code != http.StatusNotFound || m["audit"] != "recorded" {
		t.Fatalf("restore of an unknown saga: %d %v", code, m)
	}
	if recs := f.stored(unknown); len(recs) != 1 || recs[0].Result != "refused: not found" {
		t.Fatalf("the unknown saga's records: %+v", recs)
	}

	// Failed authentication is logged, not recorded.
	before := len(f.stored(f.pending))
	for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong-token-wrong-token"}} {
		if code, _ := f.post("/api/sagas/"+f.pending+"/redrive", "application/json", "{}", hdr); code != http.StatusUnauthorized {
			t.Fatalf("redrive without the token: %d", code)
		}
	}
	if code, _ := f.post("/api/sagas/"+f.pending+"/redrive", "application/json", "{}", map[string]string{"Authorization": "Bearer " + token, "Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Fatalf("cross-origin redrive: %d", code)
	}
	if after := len(f.stored(f.pending)); after != before {
		t.Fatalf("requests that failed authentication left %d audit records", after-before)
	}
	if !strings.Contains(logs.String(), "wrong token") {
		t.Fatalf("the wrong token is not logged:\n%s", logs.String())
	}
	// The log names the actor and the result of what was recorded.
	if l := logs.String(); !strings.Contains(l, "result=ok") || !strings.Contains(l, `result="refused: wrong state"`) || !strings.Contains(l, "actor=") {
		t.Fatalf("the log does not name actors and results:\n%s", l)
	}
}

// A resume's record keeps the correlation key and the resume context's
// keys, never its values; a failed action's error is kept in the store but
// not shown by the API (it can name the store's hosts).
func TestAdminAuditDetailAndErrors(t *testing.T) {
	const secret = "psp-ref-4242-SECRET"
	f := newFixture(t, tracewindow.WithAdmin(tracewindow.Admin{Token: token,
		Resume: func(_ context.Context, txID, key string, _ json.RawMessage) error {
			if key == "later" {
				return fmt.Errorf("%w: resume %s: gocql: no hosts available in the pool: 10.1.2.3:9042", orchestrator.ErrRetryLater, txID)
			}
			return nil
		},
		Redrive: func(context.Context, string) error {
			return errors.New("kafka: broker 10.9.9.9:9093 unreachable (password=hunter2)")
		}}))
	auth := map[string]string{"Authorization": "Bearer " + token}
	key := eventstore.CorrelationKey(f.inflight, 1, "process")
	body := fmt.Sprintf(`{"correlation_key":%q,"context":{"status":"authorised","payment_ref":%q}}`, key, secret)
	if code, m := f.post("/api/sagas/"+f.inflight+"/resume", "application/json", body, auth); code != http.StatusOK || m["audit"] != "recorded" {
		t.Fatalf("resume: %d %v", code, m)
	}
	if code, _ := f.post("/api/sagas/"+f.inflight+"/resume", "application/json", `{"correlation_key":"later"}`, auth); code != http.StatusServiceUnavailable {
		t.Fatalf("resume later: %d", code)
	}
	if code, _ := f.post("/api/sagas/"+f.inflight+"/redrive", "application/json", `{}`, auth); code != http.StatusInternalServerError {
		t.Fatalf("failing redrive: %d", code)
	}
	res, err := http.Get(f.srv.URL + "/api/sagas/" + f.inflight)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, leak := range []string{secret, "authorised", "10.1.2.3", "10.9.9.9", "hunter2", "gocql"} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("the saga's API document shows %q: %s", leak, raw)
		}
	}
	got := f.trail(f.inflight)
	if len(got) != 3 {
		t.Fatalf("audit trail: %+v, want 3 records", got)
	}
	if r := got[0]; r.Action != "resume" || r.Result != "ok" || !strings.Contains(r.Detail, key) ||
		!strings.Contains(r.Detail, "payment_ref") || !strings.Contains(r.Detail, "status") {
		t.Errorf("resume's record %+v, want its correlation key and context keys", r)
	}
	if r := got[1]; r.Result != "failed: retry later" || r.Error != "" || !r.ErrorWithheld {
		t.Errorf("the resume that failed: %+v, want failed: retry later with the error withheld", r)
	}
	if r := got[2]; r.Action != "redrive" || r.Result != "failed" || r.Error != "" || !r.ErrorWithheld {
		t.Errorf("the failed redrive: %+v, want failed with the error withheld", r)
	}
	// The store keeps the errors, for those who read it (sagactl show).
	recs := f.stored(f.inflight)
	if len(recs) != 3 || !strings.Contains(recs[1].Error, "10.1.2.3") || !strings.Contains(recs[2].Error, "10.9.9.9") || strings.Contains(recs[0].Detail, secret) {
		t.Fatalf("stored records %+v, want the errors kept and no context value", recs)
	}
}

// WithActor names the person (here the identity header of an
// authenticating proxy, checked by the authorizer); an empty name falls
// back to the token and address.
func TestAdminAuditActor(t *testing.T) {
	f := newFixture(t)
	h, err := tracewindow.New(f.store, f.scope, tracewindow.WithIndex(f.idx), tracewindow.WithClock(f.clock), f.adminOpts(t),
		tracewindow.WithAuthorizer(func(*http.Request) error { return nil }),
		tracewindow.WithActor(func(r *http.Request) string { return r.Header.Get("X-Forwarded-User") }))
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	f.post("/api/sagas/"+f.pending+"/redrive", "application/json", "{}", map[string]string{"Authorization": "Bearer " + token, "X-Forwarded-User": "alice@example.com"})
	f.post("/api/sagas/"+f.pending+"/redrive", "application/json", "{}", map[string]string{"Authorization": "Bearer " + token})
	got := f.trail(f.pending)
	if len(got) != 2 || got[0].Actor != "alice@example.com" || !strings.HasPrefix(got[1].Actor, "admin-token") {
		t.Fatalf("actors %+v, want alice@example.com then the default", got)
	}
}

// auditFailStore refuses every audit record.
type auditFailStore struct{ *memory.Store }

func (auditFailStore) AppendAudit(context.Context, eventstore.Scope, eventstore.AuditRecord) error {
	return errors.New("cassandra: append audit: unconfigured table es_admin_audit")
}

func (auditFailStore) AuditTrail(context.Context, eventstore.Scope, string, int) ([]eventstore.AuditRecord, error) {
	return nil, errors.New("cassandra: audit trail: unconfigured table es_admin_audit")
}

// An audit record that cannot be written is logged at Error and the
// answer says so; the action itself ran. The saga page still loads and
// says the trail could not be read.
func TestAdminAuditWriteFails(t *testing.T) {
	var logs testenv.LockedBuffer
	f := newFixture(t)
	s := auditFailStore{f.store.(*memory.Store)}
	f.store = s
	h, err := tracewindow.New(s, f.scope, tracewindow.WithIndex(f.idx), tracewindow.WithClock(f.clock), f.adminOpts(t),
		tracewindow.WithAnonymousReads(), tracewindow.WithLogger(debugLogger(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	code, m := f.post("/api/sagas/"+f.disabled+"/restore", "application/json", "{}", map[string]string{"Authorization": "Bearer " + token})
	audit, _ := m["audit"].(string)
	if code != http.StatusOK || m["ok"] != true || !strings.HasPrefix(audit, "not recorded") || strings.Contains(audit, "es_admin_audit") {
		t.Fatalf("restore with a failing audit: %d %v, want 200 saying the audit was not recorded (generically)", code, m)
	}
	if tx, _ := f.store.LoadTransaction(context.Background(), f.scope, f.disabled); tx.State != eventstore.StateRetryPending {
		t.Fatalf("the restore did not run: %s", tx.State)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "es_admin_audit") || !strings.Contains(l, f.disabled) {
		t.Fatalf("the audit failure is not logged at Error with its cause:\n%s", l)
	}
	var d tracewindow.Detail
	if code := f.get("/api/sagas/"+f.disabled, &d); code != http.StatusOK || d.AuditUnavailable == "" || len(d.Audit) != 0 ||
		strings.Contains(d.AuditUnavailable, "es_admin_audit") {
		t.Fatalf("saga page over a failing audit trail: %d %+v", code, d)
	}
}

// plainStore hides the memory store's optional interfaces.
type plainStore struct{ eventstore.Store }

// Over a store without an audit trail, New refuses admin actions unless
// WithUnauditedAdmin says so (and then warns); their answers say the audit
// was not recorded.
func TestAdminWithoutAuditor(t *testing.T) {
	f := newFixture(t)
	s := plainStore{f.store}
	if _, err := tracewindow.New(s, f.scope, f.adminOpts(t), tracewindow.WithAnonymousReads()); !errors.Is(err, tracewindow.ErrNoAudit) {
		t.Fatalf("admin over a store without an audit trail: %v, want ErrNoAudit", err)
	}
	// Read-only, it needs none.
	if _, err := tracewindow.New(s, f.scope, tracewindow.WithAnonymousReads()); err != nil {
		t.Fatal(err)
	}
	var logs testenv.LockedBuffer
	h, err := tracewindow.New(s, f.scope, tracewindow.WithClock(f.clock), f.adminOpts(t), tracewindow.WithAnonymousReads(),
		tracewindow.WithUnauditedAdmin(), tracewindow.WithLogger(debugLogger(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "audit") {
		t.Fatalf("no warning at New:\n%s", l)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	code, m := f.post("/api/sagas/"+f.disabled+"/restore", "application/json", "{}", map[string]string{"Authorization": "Bearer " + token})
	if audit, _ := m["audit"].(string); code != http.StatusOK || !strings.HasPrefix(audit, "not recorded") {
		t.Fatalf("restore without an audit trail: %d %v", code, m)
	}
	var c tracewindow.ConfigDoc
	if f.get("/api/config", &c); c.Audit {
		t.Fatal("config says the store keeps an audit trail")
	}
	var d tracewindow.Detail
	if f.get("/api/sagas/"+f.disabled, &d); d.AuditUnavailable == "" {
		t.Fatalf("the saga page does not say there is no audit trail: %+v", d)
	}
}

// The audit trail follows the read rules: without the read token the
// saga's document (and so its trail) is refused.
func TestAuditTrailNeedsReadAuth(t *testing.T) {
	f := newFixture(t)
	h, err := tracewindow.New(f.store, f.scope, tracewindow.WithClock(f.clock), f.adminOpts(t), tracewindow.WithReadToken(readToken))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	f.srv = srv
	if code, _ := f.post("/api/sagas/"+f.disabled+"/restore", "application/json", "{}", map[string]string{"Authorization": "Bearer " + token}); code != http.StatusOK {
		t.Fatalf("restore: %d", code)
	}
	code, _, body := get(t, srv.URL, "/api/sagas/"+f.disabled, "")
	if code != http.StatusUnauthorized || strings.Contains(body, "admin-token") || strings.Contains(body, "audit") {
		t.Fatalf("anonymous GET: %d %s", code, body)
	}
	code, _, body = get(t, srv.URL, "/api/sagas/"+f.disabled, "Bearer "+readToken)
	var d tracewindow.Detail
	if err := json.Unmarshal([]byte(body), &d); code != http.StatusOK || err != nil || len(d.Audit) != 1 || d.Audit[0].Action != "restore" {
		t.Fatalf("GET with the read token: %d %s", code, body)
	}
	var c tracewindow.ConfigDoc
	_, _, body = get(t, srv.URL, "/api/config", "Bearer "+readToken)
	if err := json.Unmarshal([]byte(body), &c); err != nil || !c.Audit {
		t.Fatalf("config: %s", body)
	}
}
