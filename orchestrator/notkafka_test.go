package orchestrator_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
)

// TestBrokerThatIsNotKafka: an address that answers but not in Kafka's
// protocol (the real PostgreSQL of the services) is named as such, and
// every Start of a burst racing the failed dial reports that, not "client
// closed".
func TestBrokerThatIsNotKafka(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	addr := u.Host
	o, err := orchestrator.New("order-service", testDomain(), orchestrator.WithBrokers(addr), orchestrator.WithStore(memory.New()), orchestrator.WithoutRecovery())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = o.Start(ctx, order{ID: "o-1"})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), addr+" does not speak the Kafka protocol") {
			t.Errorf("Start %d: %v, want %q", i, err, addr+" does not speak the Kafka protocol")
		}
	}
}

// TestStartAfterRunsDialFailure: Starts racing a Run whose dial fails (a
// closed loopback port) all report the dial error, not "client closed",
// and so does a Start after Run returned.
func TestStartAfterRunsDialFailure(t *testing.T) {
	o, err := orchestrator.New("order-service", testDomain(), orchestrator.WithBrokers(testenv.ClosedAddr(t)), orchestrator.WithStore(memory.New()), orchestrator.WithoutRecovery())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- o.Run(ctx) }()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = o.Start(ctx, order{ID: "o-1"})
		}()
	}
	wg.Wait()
	if err := <-runErr; err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Run: %v, want the dial error", err)
	}
	_, late := o.Start(ctx, order{ID: "o-2"})
	for i, err := range append(errs, late) {
		if err == nil || strings.Contains(err.Error(), "client closed") || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Start %d: %v, want the dial error", i, err)
		}
	}
}
