package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/worker"
)

// startWorkers runs the three example workers on brokers until the test ends.
func startWorkers(t *testing.T, brokers []string) {
	t.Helper()
	regs := map[string]func(*worker.Worker, placeorder.Observer) error{
		placeorder.InventoryService: placeorder.RegisterInventory,
		placeorder.PaymentService:   placeorder.RegisterPayment,
		placeorder.ShippingService:  placeorder.RegisterShipping,
	}
	for svc, reg := range regs {
		w, err := worker.New(svc, worker.WithBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		if err := reg(w, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
}

// serve runs an order-service (orchestrator + HTTP API) and returns its URL
// and a stop function.
func serve(t *testing.T, brokers []string, cassandraHosts, keyspace string) (string, func()) {
	t.Helper()
	url, _, stop := serveWith(t, brokers, cassandraHosts, keyspace)
	return url, stop
}

// serveWith is serve with extra orchestrator options; it returns the
// orchestrator too.
func serveWith(t *testing.T, brokers []string, cassandraHosts, keyspace string, extra ...orchestrator.Option) (string, *orchestrator.Orchestrator[placeorder.Order], func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := newOrchestrator(ctx, brokers, cassandraHosts, keyspace, nil, traceWindowConfig{token: testAdminToken}, extra...)
	if err != nil {
		t.Fatal(err)
	}
	o, closeStore := svc.o, svc.close
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	<-o.Running()
	api, err := newAPI(o, svc.traceWindow, testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		srv.Close()
		cancel()
		<-done
		closeStore()
	}
	t.Cleanup(stop)
	return srv.URL, o, stop
}

func postOrder(t *testing.T, url, body string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Post(url+"/orders", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func getOrder(t *testing.T, url, id string) (int, orderView) {
	t.Helper()
	resp, err := http.Get(url + "/orders/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v orderView
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	_ = json.Unmarshal(buf.Bytes(), &v)
	return resp.StatusCode, v
}

func waitState(t *testing.T, url, id string, want eventstore.State) orderView {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, v := getOrder(t, url, id)
		if code == http.StatusOK && v.State == want {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s: status %d state %s, want %s", id, code, v.State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func kfakeBrokers(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func TestOrderAPI(t *testing.T) {
	brokers := kfakeBrokers(t)
	startWorkers(t, brokers)
	url, _ := serve(t, brokers, "", "")

	code, out := postOrder(t, url, `{"customer_id":"c-1","item":"book","quantity":2,"amount":1999}`)
	if code != http.StatusAccepted || out["transaction_id"] == "" {
		t.Fatalf("POST: %d %v", code, out)
	}
	v := waitState(t, url, out["transaction_id"], eventstore.StateCompleted)
	if len(v.History) != 3 || v.Order.TrackingID == "" || v.Order.PaymentID == "" {
		t.Errorf("completed order: %+v", v)
	}

	code, out = postOrder(t, url, `{"customer_id":"c-2","item":"lamp","quantity":1,"amount":500,"fail_shipping":true}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST: %d %v", code, out)
	}
	v = waitState(t, url, out["transaction_id"], eventstore.StateCompensated)
	if !v.Order.Refunded || !v.Order.Released {
		t.Errorf("compensated order not refunded and released: %+v", v.Order)
	}
	if len(v.History) != 5 {
		t.Errorf("history has %d steps, want 5 (3 forward, 2 compensations): %+v", len(v.History), v.History)
	}

	if code, _ := postOrder(t, url, `{"item":""}`); code != http.StatusBadRequest {
		t.Errorf("invalid order: %d, want 400", code)
	}
	if code, _ := postOrder(t, url, `not json`); code != http.StatusBadRequest {
		t.Errorf("malformed body: %d, want 400", code)
	}
	if code, _ := getOrder(t, url, "no-such-id"); code != http.StatusNotFound {
		t.Errorf("unknown id: %d, want 404", code)
	}
}

// TestHistorySurvivesRestartOnCassandra runs an order through an
// order-service on real Cassandra, restarts the service, and reads the
// order's history back from Cassandra.
func TestHistorySurvivesRestartOnCassandra(t *testing.T) {
	hosts, keyspace := testenv.CassandraKeyspace(t)
	brokers := kfakeBrokers(t)
	startWorkers(t, brokers)
	url, stop := serve(t, brokers, strings.Join(hosts, ","), keyspace)
	code, out := postOrder(t, url, `{"customer_id":"c-1","item":"book","quantity":1,"amount":1999}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST: %d %v", code, out)
	}
	id := out["transaction_id"]
	before := waitState(t, url, id, eventstore.StateCompleted)
	stop()

	url2, _ := serve(t, brokers, strings.Join(hosts, ","), keyspace)
	code, after := getOrder(t, url2, id)
	if code != http.StatusOK || after.State != eventstore.StateCompleted {
		t.Fatalf("after restart: %d %+v", code, after)
	}
	if len(after.History) != 3 || len(after.History) != len(before.History) {
		t.Fatalf("history after restart %+v, before %+v", after.History, before.History)
	}
	for i := range after.History {
		if after.History[i].Endpoint != before.History[i].Endpoint || after.History[i].Outcome != "ok" {
			t.Errorf("step %d: %+v vs %+v", i, after.History[i], before.History[i])
		}
	}
}

// post sends body to url+path and returns the status and the decoded JSON
// object.
func post(t *testing.T, url, path, body string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Errorf("POST %s: body is not a JSON object: %v", path, err)
	}
	return resp.StatusCode, out
}

// testWebhookSecret signs the tests' payment callbacks.
var testWebhookSecret = []byte("order-service-test-webhook-secret")

// postSigned is post with the body signed with secret at time at, as the
// payment gateway signs its callbacks.
func postSigned(t *testing.T, url, path, body string, secret []byte, at time.Time) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(orchestrator.WebhookSignatureHeader, orchestrator.SignWebhook(secret, []byte(body), at))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Errorf("POST %s: body is not a JSON object: %v", path, err)
	}
	return resp.StatusCode, out
}

// callback posts body to /payments/callback signed now with the test
// secret.
func callback(t *testing.T, url, body string) (int, map[string]string) {
	t.Helper()
	return postSigned(t, url, "/payments/callback", body, testWebhookSecret, time.Now())
}

// TestAsyncPayment drives the pausable path end to end: an order with
// async_payment pauses after its payment step until the gateway's
// callback, which ships it (authorised) or compensates it (declined);
// the callback's errors change nothing.
func TestAsyncPayment(t *testing.T) {
	brokers := kfakeBrokers(t)
	startWorkers(t, brokers)
	url, _ := serve(t, brokers, "", "")
	order := `{"customer_id":"c-1","item":"book","quantity":1,"amount":1999,"async_payment":true}`

	code, out := postOrder(t, url, order)
	if code != http.StatusAccepted {
		t.Fatalf("POST: %d %v", code, out)
	}
	id := out["transaction_id"]
	v := waitState(t, url, id, eventstore.StatePaused)
	ref := v.Order.PaymentRef
	if ref != id+":1:process" || v.PauseEvent != placeorder.PaymentAuthorisation || v.PausedUntil == nil ||
		time.Until(*v.PausedUntil) < 14*time.Minute || v.Order.PaymentID == "" || v.Order.TrackingID != "" {
		t.Fatalf("paused order: %+v (until %v)", v, v.PausedUntil)
	}

	for _, c := range []struct {
		body string
		code int
	}{
		{`{not json`, http.StatusBadRequest},
		{`{"transaction_id":"` + id + `","payment_ref":"` + ref + `"}`, http.StatusBadRequest},
		{`{"transaction_id":"` + id + `","payment_ref":"` + ref + `","status":"authorised","extra":1}`, http.StatusBadRequest},
		{`{"transaction_id":"no-such-order","payment_ref":"no-such-order:1:process","status":"authorised"}`, http.StatusNotFound},
		{`{"transaction_id":"` + id + `","payment_ref":"` + id + `:0:process","status":"authorised"}`, http.StatusConflict},
		{`{"transaction_id":"` + id + `","payment_ref":"forged","status":"authorised"}`, http.StatusConflict},
		{`{"transaction_id":"` + id + `","payment_ref":"` + ref + `","status":"` + strings.Repeat("x", 70<<10) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		if code, out := callback(t, url, c.body); code != c.code || out["status"] != "error" || out["error"] == "" {
			t.Errorf("callback %.70s…: %d %v, want %d with an error", c.body, code, out, c.code)
		}
	}
	if _, v := getOrder(t, url, id); v.State != eventstore.StatePaused {
		t.Fatalf("refused callbacks changed the order: %s", v.State)
	}

	authorised := `{"transaction_id":"` + id + `","payment_ref":"` + ref + `","status":"authorised"}`
	if code, out := callback(t, url, authorised); code != http.StatusOK || out["status"] != "resumed" {
		t.Fatalf("callback: %d %v", code, out)
	}
	// The gateway retries its callback, signed afresh: not an error.
	if code, out := postSigned(t, url, "/payments/callback", authorised, testWebhookSecret, time.Now().Add(time.Second)); code != http.StatusOK || out["status"] != "already_resumed" {
		t.Fatalf("second callback: %d %v", code, out)
	}
	v = waitState(t, url, id, eventstore.StateCompleted)
	if v.Order.TrackingID == "" || v.Order.PaymentRef != ref || v.PauseEvent != "" || len(v.History) != 4 || v.History[2].Outcome != "resumed" || v.History[2].Resume["status"] != "authorised" {
		t.Errorf("completed order: %+v", v)
	}

	// Declined: the order is compensated (refunded, released).
	_, out = postOrder(t, url, order)
	declined := out["transaction_id"]
	v = waitState(t, url, declined, eventstore.StatePaused)
	if code, out := callback(t, url, `{"transaction_id":"`+declined+`","payment_ref":"`+v.Order.PaymentRef+`","status":"declined"}`); code != http.StatusOK || out["status"] != "resumed" {
		t.Fatalf("declined callback: %d %v", code, out)
	}
	v = waitState(t, url, declined, eventstore.StateCompensated)
	if !v.Order.Refunded || !v.Order.Released || v.Order.TrackingID != "" || !strings.Contains(v.Error, `not authorised: gateway status "declined"`) {
		t.Errorf("declined order: %+v", v)
	}

	// The generic resume webhook works too.
	_, out = postOrder(t, url, order)
	generic := out["transaction_id"]
	v = waitState(t, url, generic, eventstore.StatePaused)
	if code, out := postSigned(t, url, "/sagas/resume", `{"transaction_id":"`+generic+`","correlation_key":"`+v.Order.PaymentRef+`","context":{"status":"authorised"}}`, testWebhookSecret, time.Now()); code != http.StatusOK || out["status"] != "resumed" {
		t.Fatalf("resume webhook: %d %v", code, out)
	}
	waitState(t, url, generic, eventstore.StateCompleted)
}

// fakeClock is the orchestrator's clock in TestAsyncPaymentDeadline.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestAsyncPaymentDeadline: no callback by the deadline; the retry node
// invokes the payment step again against the order as it was before it
// (no payment reference), the step fails, the order is compensated.
func TestAsyncPaymentDeadline(t *testing.T) {
	brokers := kfakeBrokers(t)
	startWorkers(t, brokers)
	clock := &fakeClock{t: time.Now().UTC()}
	url, o, _ := serveWith(t, brokers, "", "", orchestrator.WithClock(clock.now), orchestrator.WithRecovery(recovery.DefaultConfig()))
	_, out := postOrder(t, url, `{"customer_id":"c-1","item":"book","quantity":1,"amount":1999,"async_payment":true}`)
	id := out["transaction_id"]
	v := waitState(t, url, id, eventstore.StatePaused)
	ref := v.Order.PaymentRef

	clock.advance(placeorder.PaymentAuthorisationTimeout)
	for deadline := time.Now().Add(time.Minute); ; {
		// Time passes only while no step is in flight, so that no
		// watchdog re-sends a step that is merely slow on a loaded machine.
		for o.Stats().Awaiting() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		clock.advance(time.Minute)
		if _, err := o.RecoveryEngine().Scan(context.Background()); err != nil {
			t.Logf("scan: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
		if _, v = getOrder(t, url, id); v.State == eventstore.StateCompensated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s after its deadline, want COMPENSATED", v.State)
		}
	}
	if !v.Order.Released || v.Order.Refunded || v.Order.PaymentRef != "" || v.Order.PaymentID != "" || !strings.Contains(v.Error, "no verdict within 15m0s") {
		t.Errorf("order after its deadline: %+v", v)
	}
	var attempts []int
	for _, h := range v.History {
		if h.Span == 1 && h.Kind == "process" {
			attempts = append(attempts, h.Attempt)
		}
	}
	if len(attempts) < 2 || attempts[len(attempts)-1] != 2 {
		t.Errorf("payment attempts %v in %+v, want the paused one and a second", attempts, v.History)
	}
	// The late callback is refused: the deadline won.
	if code, out := callback(t, url, `{"transaction_id":"`+id+`","payment_ref":"`+ref+`","status":"authorised"}`); code != http.StatusConflict {
		t.Errorf("late callback: %d %v, want 409", code, out)
	}
}

// TestAsyncPaymentSurvivesRestartOnCassandra pauses an order on real
// Cassandra, restarts the service, and resumes the order on the new
// instance: a paused saga lives in the store only.
func TestAsyncPaymentSurvivesRestartOnCassandra(t *testing.T) {
	hosts, keyspace := testenv.CassandraKeyspace(t)
	brokers := kfakeBrokers(t)
	startWorkers(t, brokers)
	url, stop := serve(t, brokers, strings.Join(hosts, ","), keyspace)
	_, out := postOrder(t, url, `{"customer_id":"c-1","item":"book","quantity":1,"amount":1999,"async_payment":true}`)
	id := out["transaction_id"]
	ref := waitState(t, url, id, eventstore.StatePaused).Order.PaymentRef
	stop()

	url2, _ := serve(t, brokers, strings.Join(hosts, ","), keyspace)
	if code, out := callback(t, url2, `{"transaction_id":"`+id+`","payment_ref":"`+ref+`","status":"authorised"}`); code != http.StatusOK || out["status"] != "resumed" {
		t.Fatalf("callback after restart: %d %v", code, out)
	}
	if v := waitState(t, url2, id, eventstore.StateCompleted); v.Order.TrackingID == "" {
		t.Errorf("order after the resume: %+v", v)
	}
}

// TestPaymentCallbackSignature (issue 36.3): the payment reference is
// derived from the transaction id POST /orders returns, so a customer can
// compute it; the callback is taken only signed with the gateway's secret.
// An unsigned, forged, tampered, stale, future-dated or replayed callback
// is refused and leaves the order paused; a signed one ships it.
func TestPaymentCallbackSignature(t *testing.T) {
	brokers := kfakeBrokers(t)
	startWorkers(t, brokers)
	url, _ := serve(t, brokers, "", "")
	_, out := postOrder(t, url, `{"customer_id":"c-1","item":"book","quantity":1,"amount":1999,"async_payment":true}`)
	id := out["transaction_id"]
	v := waitState(t, url, id, eventstore.StatePaused)
	ref := v.Order.PaymentRef
	// What a customer can build from the transaction id alone.
	forged := `{"transaction_id":"` + id + `","payment_ref":"` + id + `:1:process","status":"authorised"}`
	if code, out := post(t, url, "/payments/callback", forged); code != http.StatusUnauthorized || out["status"] != "error" {
		t.Errorf("unsigned callback: %d %v, want 401", code, out)
	}
	if code, out := post(t, url, "/sagas/resume", `{"transaction_id":"`+id+`","correlation_key":"`+ref+`","context":{"status":"authorised"}}`); code != http.StatusUnauthorized {
		t.Errorf("unsigned generic resume: %d %v, want 401", code, out)
	}
	now := time.Now()
	wrongSecret := []byte("not-the-gateway-secret-at-all")
	if code, out := postSigned(t, url, "/payments/callback", forged, wrongSecret, now); code != http.StatusUnauthorized {
		t.Errorf("callback signed with another secret: %d %v, want 401", code, out)
	}
	// A genuine "declined" signature on a body rewritten to "authorised".
	declined := strings.Replace(forged, "authorised", "declined", 1)
	req, _ := http.NewRequest(http.MethodPost, url+"/payments/callback", strings.NewReader(forged))
	req.Header.Set(orchestrator.WebhookSignatureHeader, orchestrator.SignWebhook(testWebhookSecret, []byte(declined), now))
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("tampered callback: %d, want 401", resp.StatusCode)
		}
	}
	if code, out := postSigned(t, url, "/payments/callback", forged, testWebhookSecret, now.Add(-10*time.Minute)); code != http.StatusUnauthorized {
		t.Errorf("stale callback: %d %v, want 401", code, out)
	}
	if code, out := postSigned(t, url, "/payments/callback", forged, testWebhookSecret, now.Add(10*time.Minute)); code != http.StatusUnauthorized {
		t.Errorf("future-dated callback: %d %v, want 401", code, out)
	}
	if _, v := getOrder(t, url, id); v.State != eventstore.StatePaused || v.Order.TrackingID != "" {
		t.Fatalf("refused callbacks changed the order: %s %+v", v.State, v.Order)
	}

	signed := orchestrator.SignWebhook(testWebhookSecret, []byte(forged), now)
	send := func() (int, map[string]string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/payments/callback", strings.NewReader(forged))
		req.Header.Set(orchestrator.WebhookSignatureHeader, signed)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, out := send(); code != http.StatusOK || out["status"] != "resumed" {
		t.Fatalf("signed callback: %d %v, want 200 resumed", code, out)
	}
	if code, out := send(); code != http.StatusConflict || out["status"] != "error" {
		t.Errorf("replayed callback: %d %v, want 409", code, out)
	}
	if v := waitState(t, url, id, eventstore.StateCompleted); v.Order.TrackingID == "" || v.History[2].Resume["status"] != "authorised" {
		t.Errorf("order after the signed callback: %+v", v)
	}
}

// TestWebhooksDisabledWithoutSecret: started with no webhook secret, the
// example answers its resume webhooks 503 and resumes nothing.
func TestWebhooksDisabledWithoutSecret(t *testing.T) {
	svc, err := newOrchestrator(context.Background(), kfakeBrokers(t), "", "", nil, traceWindowConfig{token: testAdminToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.close)
	api, err := newAPI(svc.o, svc.traceWindow, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	body := `{"transaction_id":"tx","payment_ref":"tx:1:process","status":"authorised"}`
	for _, path := range []string{"/payments/callback", "/sagas/resume"} {
		if code, out := postSigned(t, srv.URL, path, body, testWebhookSecret, time.Now()); code != http.StatusServiceUnavailable || !strings.Contains(out["error"], envWebhookSecret) {
			t.Errorf("%s without a secret: %d %v, want 503 naming $%s", path, code, out, envWebhookSecret)
		}
	}
	if _, err := newAPI(svc.o, svc.traceWindow, []byte("short")); !errors.Is(err, orchestrator.ErrWebhookSecret) {
		t.Errorf("short secret: %v, want ErrWebhookSecret", err)
	}
}

func TestWebhookSecretFromEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte("a-secret-from-a-file-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env     map[string]string
		want    string
		wantErr bool
	}{
		{env: map[string]string{}},
		{env: map[string]string{envWebhookSecret: "a-secret-from-the-env-0123"}, want: "a-secret-from-the-env-0123"},
		{env: map[string]string{envWebhookSecretFile: file}, want: "a-secret-from-a-file-0123"},
		{env: map[string]string{envWebhookSecret: "short"}, wantErr: true},
		{env: map[string]string{envWebhookSecretFile: short}, wantErr: true},
		{env: map[string]string{envWebhookSecretFile: filepath.Join(dir, "missing")}, wantErr: true},
		{env: map[string]string{envWebhookSecret: "a-secret-from-the-env-0123", envWebhookSecretFile: file}, wantErr: true},
	} {
		got, err := webhookSecretFromEnv(func(k string) string { return c.env[k] })
		if (err != nil) != c.wantErr || string(got) != c.want {
			t.Errorf("%v: %q, %v; want %q (error %v)", c.env, got, err, c.want, c.wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "a-secret") {
			t.Errorf("%v: the error names the secret: %v", c.env, err)
		}
	}
}

// postKeyed posts an order with an Idempotency-Key header; it returns the
// status, the body and the Idempotent-Replayed header.
func postKeyed(t *testing.T, url, key, body string) (int, map[string]string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, resp.Header.Get("Idempotent-Replayed")
}

// POST /orders with an Idempotency-Key starts one order per key: a repeat
// (a client retrying) gets 200 with the first order's id and
// Idempotent-Replayed, on this instance or on another one sharing the
// store. GET /orders/{id}?wait= answers once the order has ended, or with
// its state when the wait is over.
func TestOrderIdempotencyKeyAndLongPoll(t *testing.T) {
	hosts, keyspace := testenv.CassandraKeyspace(t)
	brokers := kfakeBrokers(t)
	startWorkers(t, brokers)
	url, _ := serve(t, brokers, strings.Join(hosts, ","), keyspace)
	url2, _ := serve(t, brokers, strings.Join(hosts, ","), keyspace)
	first := `{"customer_id":"c-1","item":"book","quantity":1,"amount":1999}`
	code, out, replayed := postKeyed(t, url, "checkout-7f3a", first)
	if code != http.StatusAccepted || out["transaction_id"] == "" || replayed != "" {
		t.Fatalf("first POST: %d %v %q", code, out, replayed)
	}
	id := out["transaction_id"]
	for _, u := range []string{url, url2} {
		code, out, replayed := postKeyed(t, u, "checkout-7f3a", `{"customer_id":"c-1","item":"lamp","quantity":9,"amount":5}`)
		if code != http.StatusOK || out["transaction_id"] != id || replayed != "true" {
			t.Fatalf("repeated POST: %d %v %q; want 200, %s, replayed", code, out, replayed, id)
		}
	}
	v := getOrderWait(t, url2, id, "30s")
	if v.State != eventstore.StateCompleted || v.Order.Item != "book" || len(v.History) != 3 {
		t.Fatalf("long poll: %+v; want the first order, completed", v)
	}
	if code, out, _ := postKeyed(t, url, "has space", first); code != http.StatusBadRequest || !strings.Contains(out["error"], "Idempotency-Key") {
		t.Errorf("invalid key: %d %v", code, out)
	}

	// A paused order: the long poll answers when the wait is over.
	code, out, _ = postKeyed(t, url, "checkout-paused", `{"customer_id":"c-2","item":"book","quantity":1,"amount":1999,"async_payment":true}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST: %d %v", code, out)
	}
	paused := out["transaction_id"]
	waitState(t, url, paused, eventstore.StatePaused)
	began := time.Now()
	if v := getOrderWait(t, url, paused, "300ms"); v.State != eventstore.StatePaused {
		t.Fatalf("long poll of a paused order: %+v", v)
	}
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Errorf("the long poll answered after %v, before its 300ms", took)
	}
	for q, want := range map[string]int{"bogus": http.StatusBadRequest, "-1s": http.StatusBadRequest} {
		resp, err := http.Get(url + "/orders/" + paused + "?wait=" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("wait=%s: %d, want %d", q, resp.StatusCode, want)
		}
	}
	resp, err := http.Get(url + "/orders/no-such-order?wait=10s")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("long poll of an unknown order: %d, want 404", resp.StatusCode)
	}
}

// getOrderWait is GET /orders/{id}?wait=wait, which must answer 200.
func getOrderWait(t *testing.T, url, id, wait string) orderView {
	t.Helper()
	resp, err := http.Get(url + "/orders/" + id + "?wait=" + wait)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v orderView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET ?wait=%s: %d, %v", wait, resp.StatusCode, err)
	}
	return v
}
