package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/mdlint"
)

// TestDocCurlCommands checks every curl command of README.md and docs/*.md
// that calls the example order-service (localhost:8080) against the
// service's own API (newAPI's routes): its method and path are a route, its
// headers are ones the service reads, and its JSON body decodes, with
// unknown fields refused, into what that route reads (an order, a payment
// callback). A renamed route, header or JSON field fails here. What the
// calls then do runs in TestOrderAPI, TestAsyncPayment and
// TestOrderIdempotencyKeyAndLongPoll.
func TestDocCurlCommands(t *testing.T) {
	h, err := newAPI(nil, http.NotFoundHandler(), bytes.Repeat([]byte("s"), 32))
	if err != nil {
		t.Fatal(err)
	}
	mux, ok := h.(*http.ServeMux)
	if !ok {
		t.Fatalf("newAPI returned a %T, not the *http.ServeMux this test reads routes from", h)
	}
	bodies := map[string]func() any{
		"POST /orders":            func() any { return new(placeorder.Order) },
		"POST /payments/callback": func() any { return new(paymentCallback) },
	}
	headers := map[string]bool{headerIdempotencyKey: true, "StackSaga-Signature": true}
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	md, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range append(files, md...) {
		rel, _ := filepath.Rel(root, f)
		cmds, err := mdlint.Commands(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			if len(c.Args) == 0 || c.Args[0] != "curl" {
				continue
			}
			method, target, body := http.MethodGet, "", ""
			var hdrs []string
			for i := 1; i < len(c.Args); i++ {
				a := c.Args[i]
				switch {
				case strings.HasPrefix(a, "-X") && len(a) > 2:
					method = a[2:]
				case (a == "-X" || a == "-d" || a == "-H") && i+1 < len(c.Args):
					i++
					switch a {
					case "-X":
						method = c.Args[i]
					case "-d":
						body = c.Args[i]
					case "-H":
						hdrs = append(hdrs, c.Args[i])
					}
				case strings.HasPrefix(a, "localhost:8080") || strings.HasPrefix(a, "127.0.0.1:8080"):
					target = a
				}
			}
			if target == "" {
				continue
			}
			n++
			where := rel + ":" + itoa(c.Line)
			u, err := url.Parse("http://" + target)
			if err != nil {
				t.Errorf("%s: %q: %v", where, target, err)
				continue
			}
			req := httptest.NewRequest(method, u.String(), strings.NewReader(body))
			_, pattern := mux.Handler(req)
			if pattern == "" {
				t.Errorf("%s: curl %s %s: no route of the order-service's API", where, method, u.Path)
				continue
			}
			for _, hd := range hdrs {
				name, _, _ := strings.Cut(hd, ":")
				if !headers[http.CanonicalHeaderKey(name)] {
					t.Errorf("%s: curl sends header %q, which the order-service does not read", where, name)
				}
			}
			if body == "" {
				continue
			}
			into, ok := bodies[pattern]
			if !ok {
				t.Errorf("%s: curl %s %s sends a body to %q, which this test does not know how to check", where, method, u.Path, pattern)
				continue
			}
			dec := json.NewDecoder(strings.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(into()); err != nil {
				t.Errorf("%s: curl %s %s: body %s: %v", where, method, u.Path, body, err)
			}
		}
	}
	if n < 5 {
		t.Fatalf("only %d curl commands for the order-service in the docs: the extraction finds nothing", n)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
