package tracewindow_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// checkout is the entity of the example's domain.
type checkout struct{ OrderID string }

// Example is the package documentation's wiring, run: the index fed by
// the orchestrator's listener, the Handler mounted under /trace/ with a
// read token (a Trace Window without read authentication is refused:
// ErrNoReadAuth). A service on Cassandra uses cassandraindex.New and
// cassandra.New instead of the in-memory index and store.
func Example() {
	store := memory.New()
	idx := tracewindow.NewMemoryIndex(0)
	scope := eventstore.Scope{Region: "default", Cluster: "default", Service: "order-service"}
	domain := orchestrator.Domain[checkout]{Name: "checkout", OnNext: orchestrator.Sequence[checkout](
		orchestrator.Step{Service: "payment-service", Endpoint: "charge"})}
	o, err := orchestrator.New("order-service", domain, orchestrator.WithBrokers("127.0.0.1:9092"), orchestrator.WithStore(store),
		orchestrator.WithListener(tracewindow.Listener(idx, scope)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Close() // (o.Run(ctx) would consume the replies; not needed to serve the window)
	tw, err := tracewindow.New(store, scope, tracewindow.WithIndex(idx), tracewindow.WithReadToken("read-token-of-16+bytes"))
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/trace/", http.StripPrefix("/trace", tw))

	for _, token := range []string{"", "read-token-of-16+bytes"} {
		req := httptest.NewRequest(http.MethodGet, "http://localhost:8080/trace/api/config", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		var doc tracewindow.ConfigDoc
		_ = json.Unmarshal(rec.Body.Bytes(), &doc)
		fmt.Println(rec.Code, doc.Scope.Service, doc.Index)
	}
	// Output:
	// 401  false
	// 200 order-service true
}
