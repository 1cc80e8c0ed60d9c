package tracewindow_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// A request whose Host header names a host the Trace Window does not serve
// is refused before anything is read (DNS rebinding: a page on a name the
// attacker rebinds to 127.0.0.1 would otherwise read every saga with
// anonymous reads on loopback). IP literals, localhost and the names given
// with WithAllowedHosts are served.
func TestHostHeaderChecked(t *testing.T) {
	s := memory.New()
	defer s.Close()
	scope := eventstore.Scope{Region: "r", Cluster: "c", Service: "s"}
	h, err := tracewindow.New(s, scope, tracewindow.WithAnonymousReads(), tracewindow.WithAllowedHosts("Orders.Internal", " shop.example. "))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:" + port, true},
		{"127.0.0.1", true},
		{"localhost:" + port, true},
		{"LOCALHOST", true},
		{"localhost.", true},
		{"tw.localhost:" + port, true},
		{"[::1]:" + port, true},
		{"[::1]", true},
		{"192.0.2.10:" + port, true}, // an address, not a name: no rebinding through it
		{"orders.internal:" + port, true},
		{"ORDERS.internal", true},
		{"shop.example", true},
		{"attacker.example:" + port, false},
		{"attacker.example", false},
		{"127.0.0.1.nip.io:" + port, false},
		{"localhost.attacker.example", false},
		{"orders.internal.attacker.example", false},
		{"evil-localhost", false},
	} {
		for _, path := range []string{"/api/sagas", "/api/config", "/", "/assets/app.js"} {
			req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.host
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			refused := res.StatusCode == http.StatusMisdirectedRequest
			if refused == tc.ok {
				t.Errorf("Host %q GET %s: %d %s (want served: %v)", tc.host, path, res.StatusCode, b, tc.ok)
			}
			if refused && !strings.Contains(string(b), "host not allowed") {
				t.Errorf("Host %q GET %s: refusal %q does not say why", tc.host, path, b)
			}
		}
	}
}
