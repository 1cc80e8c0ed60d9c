package tracewindow_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

const readToken = "read-token-0123456789abcdef"

// get sends GET base+path with the Authorization header auth (none if "")
// and returns the status, the WWW-Authenticate header and the body.
func get(t *testing.T, base, path, auth string, hdr ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("WWW-Authenticate"), string(b)
}

// With a read token, every API read needs it (or the admin token); the
// page's own files do not.
func TestReadTokenRequired(t *testing.T) {
	f := newFixture(t)
	h, err := tracewindow.New(f.store, f.scope, tracewindow.WithIndex(f.idx), tracewindow.WithClock(f.clock),
		tracewindow.WithReadToken(readToken), f.adminOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, path := range []string{"/api/config", "/api/sagas", "/api/health", "/api/domains", "/api/sagas/" + f.completed, "/api/search?tx=" + f.completed} {
		code, www, body := get(t, srv.URL, path, "")
		if code != http.StatusUnauthorized || !strings.HasPrefix(www, "Bearer") {
			t.Errorf("anonymous GET %s: %d (WWW-Authenticate %q), want 401 with a Bearer challenge", path, code, www)
		}
		if strings.Contains(body, f.completed) || strings.Contains(body, "order") {
			t.Errorf("anonymous GET %s: the refusal shows saga data: %s", path, body)
		}
		if code, _, _ := get(t, srv.URL, path, "Bearer wrong-token-0123456789abcdef"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
		}
		if code, _, body := get(t, srv.URL, path, "Bearer "+readToken); code != http.StatusOK {
			t.Errorf("GET %s with the read token: %d %s", path, code, body)
		}
		if code, _, body := get(t, srv.URL, path, "Bearer "+token); code != http.StatusOK {
			t.Errorf("GET %s with the admin token: %d %s", path, code, body)
		}
	}
	for _, path := range []string{"/", "/assets/app.js", "/assets/app.css"} {
		if code, _, _ := get(t, srv.URL, path, ""); code != http.StatusOK {
			t.Errorf("GET %s (no saga data) without a token: %d, want 200", path, code)
		}
	}
	// The read token does not authorise admin actions.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/sagas/"+f.disabled+"/restore", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+readToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("restore with the read token: %d, want 401", res.StatusCode)
	}
}

// The authorizer hook sees every API request first; what it refuses gets a
// 403 whose body says nothing of why.
func TestAuthorizerHook(t *testing.T) {
	f := newFixture(t)
	var seen []string
	h, err := tracewindow.New(f.store, f.scope, tracewindow.WithIndex(f.idx), tracewindow.WithClock(f.clock),
		tracewindow.WithAuthorizer(func(r *http.Request) error {
			seen = append(seen, r.URL.Path)
			if r.Header.Get("X-Forwarded-User") != "alice" {
				return errors.New("no proxy identity for 10.9.8.7: internal detail")
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	code, _, body := get(t, srv.URL, "/api/sagas/"+f.completed, "")
	if code != http.StatusForbidden || strings.Contains(body, "internal detail") || strings.Contains(body, "10.9.8.7") {
		t.Fatalf("refused by the hook: %d %s, want 403 with a generic body", code, body)
	}
	if code, _, body := get(t, srv.URL, "/api/sagas/"+f.completed, "", "X-Forwarded-User", "alice"); code != http.StatusOK {
		t.Fatalf("allowed by the hook: %d %s", code, body)
	}
	if len(seen) != 2 {
		t.Fatalf("the hook saw %q, want both requests", seen)
	}
}

// failingStore fails every read with an error that names internals.
type failingStore struct{ eventstore.Store }

func (failingStore) LoadTransaction(context.Context, eventstore.Scope, string) (eventstore.Transaction, error) {
	return eventstore.Transaction{}, errors.New("gocql: no hosts available in the pool: 10.1.2.3:9042 (password=hunter2)")
}

// A store error is logged, and the client gets a generic 503.
func TestStoreErrorsCarryNoInternals(t *testing.T) {
	s := memory.New()
	defer s.Close()
	scope := eventstore.Scope{Region: "r", Cluster: "c", Service: "s"}
	h, err := tracewindow.New(failingStore{s}, scope, tracewindow.WithAnonymousReads())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	code, _, body := get(t, srv.URL, "/api/sagas/01a22bf0-8258-8001-b874-19ca7520035d", "")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("failing store: %d %s, want 503", code, body)
	}
	var doc struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || doc.Error == "" {
		t.Fatalf("body %q: %v", body, err)
	}
	for _, leak := range []string{"10.1.2.3", "gocql", "hunter2", "pool"} {
		if strings.Contains(body, leak) {
			t.Errorf("the 503 body tells the client %q: %s", leak, body)
		}
	}
}
