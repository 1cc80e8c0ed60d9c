package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// The order-service built from a configuration file applies it whole
// (orchestrator.WithConfig): with region eu (code 7) and cluster shop in
// the file, its sagas are written to the Cassandra store the file names,
// under eu/shop/order-service (where sagactl --config looks), and its Trace
// Window lists them there. Real Cassandra; the brokers given as --kafka
// override the file's.
func TestOrderServiceFromConfigFile(t *testing.T) {
	hosts, keyspace := testenv.CassandraKeyspace(t)
	brokers := kfakeBrokers(t)
	startWorkers(t, brokers)
	path := filepath.Join(t.TempDir(), "stacksaga.yaml")
	doc := fmt.Sprintf(`stacksaga:
  instance:
    region: eu
    region-code: 7
    cluster: shop
    service: order-service
  kafka:
    brokers: ["127.0.0.1:1"]
  cassandra:
    contact-points: [%q]
    keyspace: %s
    replication: { class: SimpleStrategy, replication-factor: 1 }
    create-schema: true
`, strings.Join(hosts, ","), keyspace)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := newOrchestratorFromFile(ctx, path, strings.Join(brokers, ","), nil, traceWindowConfig{token: testAdminToken})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.close()
	want := eventstore.Scope{Region: "eu", Cluster: "shop", Service: placeorder.OrderService}
	if got := svc.o.Scope(); got != want {
		t.Fatalf("scope %+v, want the file's %+v", got, want)
	}
	done := make(chan error, 1)
	go func() { done <- svc.o.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-svc.o.Running()
	api, err := newAPI(svc.o, svc.traceWindow, testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	code, out := postOrder(t, srv.URL, `{"customer_id":"c-1","item":"book","quantity":1,"amount":1999}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST: %d %v", code, out)
	}
	id := out["transaction_id"]
	waitState(t, srv.URL, id, eventstore.StateCompleted)
	tx, err := svc.o.Store().LoadTransaction(ctx, want, id)
	if err != nil || tx.State != eventstore.StateCompleted {
		t.Fatalf("the saga in %+v of the file's store: %+v, %v", want, tx, err)
	}
	if _, err := svc.o.Store().LoadTransaction(ctx, orderScope, id); err == nil {
		t.Fatalf("the saga is in the default scope %+v as well", orderScope)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/trace-window/api/sagas/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the Trace Window of the file's scope: %d for the saga", res.StatusCode)
	}
}
