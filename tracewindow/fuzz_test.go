package tracewindow_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

const fuzzToken = "fuzz-token-0123456789abcdef0123456789"

var fuzzHandler = sync.OnceValues(func() (http.Handler, error) {
	scope := eventstore.Scope{Region: "default", Cluster: "default", Service: "order-service"}
	store := memory.New() // lives as long as the test process
	idx := tracewindow.NewMemoryIndex(0)
	ok := func(context.Context, string) error { return nil }
	return tracewindow.New(store, scope, tracewindow.WithIndex(idx), tracewindow.WithReadToken(fuzzToken+"-read"), tracewindow.WithAdmin(tracewindow.Admin{
		Token: fuzzToken, Restore: ok, Redrive: ok, Resend: ok,
		Resume: func(context.Context, string, string, json.RawMessage) error { return nil },
	}))
})

// FuzzTraceWindowRequest sends the Trace Window arbitrary requests (method,
// path, query, body, with and without the admin token): none may crash it or
// be answered 5xx (the store here never fails), and every API answer is JSON.
func FuzzTraceWindowRequest(f *testing.F) {
	f.Add("GET", "/api/sagas", "domain=order&state=COMPLETED&limit=50&from=2031-05-06T00:00:00Z", "", false)
	f.Add("GET", "/api/sagas", "limit=-1&cursor=%ff%fe", "", false)
	f.Add("GET", "/api/search", "q=01a22bf0-8258", "", false)
	f.Add("GET", "/api/health", "window=1h", "", false)
	f.Add("GET", "/api/sagas/01a22bf0-8258-8001-b874-19ca7520035d", "", "", false)
	f.Add("POST", "/api/sagas/tx-1/resume", "", `{"correlation_key":"k","resume_context":{"paid":true}}`, true)
	f.Add("POST", "/api/sagas/tx-1/resume", "", `{"correlation_key":`, true)
	f.Add("POST", "/api/sagas/tx-1/restore", "", `{}`, false)
	f.Add("POST", "/api/sagas/%00/redrive", "", strings.Repeat("[", 5000), true)
	f.Add("GET", "/api/config", "", "", false)
	f.Fuzz(func(t *testing.T, method, path, query, body string, withToken bool) {
		h, err := fuzzHandler()
		if err != nil {
			t.Fatal(err)
		}
		if method == "" || strings.ContainsAny(method, " \t\r\n()<>@,;:\\\"/[]?={}") || !strings.HasPrefix(path, "/") {
			return // not an HTTP request line the server would parse
		}
		u := &url.URL{Path: path, RawQuery: url.PathEscape(query)}
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", strings.NewReader(body))
		req.Method, req.URL, req.RequestURI = method, u, ""
		req.Header.Set("Content-Type", "application/json")
		if withToken {
			req.Header.Set("Authorization", "Bearer "+fuzzToken)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		if rec.Code >= 500 {
			t.Fatalf("%s %s?%s: status %d: %s", method, path, query, rec.Code, rec.Body.String())
		}
		if strings.HasPrefix(path, "/api/") && rec.Code != http.StatusNoContent {
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("%s %s: Content-Type %q, want JSON", method, path, ct)
			}
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%s %s: body is not JSON: %q", method, path, rec.Body.String())
			}
		}
	})
}
