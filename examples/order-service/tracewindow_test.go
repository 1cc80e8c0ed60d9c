package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// testAdminToken enables the Trace Window's admin actions in the tests.
const testAdminToken = "order-service-test-token"

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testAdminToken) // the admin token reads too
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v\n%s", url, err, b)
		}
	}
	return resp.StatusCode
}

// The order-service serves its Trace Window at /trace-window/: the page,
// the list of its sagas filtered by state (fed by the orchestrator's
// listener), a compensated saga's reverts in reverse order, and admin
// actions only with the bearer token.
func TestTraceWindowMounted(t *testing.T) {
	brokers := kfakeBrokers(t)
	startWorkers(t, brokers)
	url, _ := serve(t, brokers, "", "")
	tw := url + traceWindowPrefix

	_, out := postOrder(t, url, `{"customer_id":"c-1","item":"book","quantity":1,"amount":1999}`)
	done := waitState(t, url, out["transaction_id"], eventstore.StateCompleted)
	_, out = postOrder(t, url, `{"customer_id":"c-2","item":"lamp","quantity":1,"amount":500,"fail_shipping":true}`)
	comp := waitState(t, url, out["transaction_id"], eventstore.StateCompensated)

	resp, err := http.Get(tw)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "<html") {
		t.Fatalf("GET %s: %d, want the page\n%.300s", tw, resp.StatusCode, page)
	}

	// Reads need a token (here the admin token, which reads too).
	if resp, err := http.Get(tw + "/api/sagas"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous read: %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// The listing is fed by the orchestrator's listener: wait for it to see
	// the terminal state (the listener runs after the state is stored).
	var list tracewindow.Page
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code := getJSON(t, tw+"/api/sagas?state=COMPENSATED", &list); code != http.StatusOK {
			t.Fatalf("list: %d", code)
		}
		if len(list.Entries) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(list.Entries) != 1 || list.Entries[0].TxID != comp.TransactionID || list.Entries[0].State != eventstore.StateCompensated {
		t.Fatalf("COMPENSATED sagas %+v, want only %s", list.Entries, comp.TransactionID)
	}
	if code := getJSON(t, tw+"/api/sagas?state=COMPLETED", &list); code != http.StatusOK || len(list.Entries) != 1 || list.Entries[0].TxID != done.TransactionID {
		t.Fatalf("COMPLETED sagas: %d %+v, want only %s", code, list.Entries, done.TransactionID)
	}

	var d tracewindow.Detail
	if code := getJSON(t, tw+"/api/sagas/"+comp.TransactionID, &d); code != http.StatusOK {
		t.Fatalf("detail: %d", code)
	}
	var reverts []string
	for _, s := range d.Compensation.Steps {
		reverts = append(reverts, s.Endpoint)
	}
	if d.Compensation.Result != "compensated" || len(reverts) != 2 || !strings.Contains(reverts[0], "payment") || !strings.Contains(reverts[1], "inventory") {
		t.Errorf("compensation %s, reverts %v: want compensated, payment then inventory", d.Compensation.Result, reverts)
	}
	if code := getJSON(t, tw+"/api/sagas/no-such-saga", nil); code != http.StatusNotFound {
		t.Errorf("unknown saga: %d, want 404", code)
	}

	// Admin actions: refused without the token, served with it (restore of
	// a terminal saga is refused by the recovery rules, not by the auth).
	action := tw + "/api/sagas/" + comp.TransactionID + "/" + tracewindow.ActionResend
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"wrong-token-of-some-length", http.StatusUnauthorized}} {
		req, _ := http.NewRequest(http.MethodPost, action, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("POST %s with token %q: %d, want %d", tracewindow.ActionResend, tc.token, resp.StatusCode, tc.want)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, action, strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound {
		t.Errorf("POST %s with the token: %d, want it past the auth check", tracewindow.ActionResend, resp.StatusCode)
	}
}

// Without a token the Trace Window reads anonymously only on loopback; a
// service listening wider refuses to start without one.
func TestTraceWindowReadAuth(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.5:8080": false, "orders.internal:8080": false} {
		if got := loopbackOnly(addr); got != want {
			t.Errorf("loopbackOnly(%q) = %v, want %v", addr, got, want)
		}
	}
	if _, err := (traceWindowConfig{}).readAuth(); err == nil || !strings.Contains(err.Error(), envTraceWindowReadToken) {
		t.Errorf("no token, not loopback: %v, want an error naming %s", err, envTraceWindowReadToken)
	}
	for _, c := range []traceWindowConfig{{anonymous: true}, {token: testAdminToken}, {readToken: "a-read-token-0123456789"}} {
		if _, err := c.readAuth(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
