package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
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
	ctx, cancel := context.WithCancel(context.Background())
	o, closeStore, err := newOrchestrator(ctx, brokers, cassandraHosts, keyspace, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	<-o.Running()
	srv := httptest.NewServer(newAPI(o))
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
	return srv.URL, stop
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
