package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/tracewindow/cassandraindex"
)

// envTraceWindowToken enables the Trace Window's admin actions behind this
// bearer token (the same variable as `sagactl trace-window --admin`).
const envTraceWindowToken = "STACKSAGA_TRACE_WINDOW_TOKEN"

// envTraceWindowReadToken is the bearer token the Trace Window's reads need
// (the admin token reads too).
const envTraceWindowReadToken = "STACKSAGA_TRACE_WINDOW_READ_TOKEN"

// traceWindowPrefix is where the service mounts its Trace Window.
const traceWindowPrefix = "/trace-window"

// traceWindowConfig is how the service's Trace Window is set up.
type traceWindowConfig struct {
	// link is the trace link template (tracewindow.WithTraceLink; empty:
	// no link).
	link string
	// token, when set, enables the admin actions behind it; it reads too.
	token string
	// readToken, when set, is the token reads need.
	readToken string
	// anonymous serves reads without a token when neither token is set:
	// main sets it only for a loopback listen address.
	anonymous bool
}

// readAuth is the Trace Window option that authenticates reads, or an error
// naming the variables to set.
func (c traceWindowConfig) readAuth() (tracewindow.Option, error) {
	switch {
	case c.readToken != "":
		return tracewindow.WithReadToken(c.readToken), nil
	case c.token != "":
		return tracewindow.WithReadToken(c.token), nil
	case c.anonymous:
		return tracewindow.WithAnonymousReads(), nil
	}
	return nil, fmt.Errorf("trace window: reads need %s (or %s): this service listens beyond loopback", envTraceWindowReadToken, envTraceWindowToken)
}

// orderScope is the scope the order-service's orchestrator writes its sagas
// under (the default region and cluster): the listing index is fed with it
// before the orchestrator exists, and newTraceWindow checks it.
var orderScope = eventstore.Scope{Region: orchestrator.DefaultRegion, Cluster: "default", Service: placeorder.OrderService}

// newListingIndex returns the Trace Window's listing index: in memory with
// the in-memory store (it lives and dies with the process, like the sagas),
// in Cassandra next to the event store otherwise (its tables written off
// the saga's critical path, in batches).
func newListingIndex(ctx context.Context, ccfg *cassandra.Config) (tracewindow.Index, func(), error) {
	if ccfg == nil {
		return tracewindow.NewMemoryIndex(100_000), func() {}, nil
	}
	idx, err := cassandraindex.New(ctx, *ccfg)
	if err != nil {
		return nil, nil, fmt.Errorf("trace window listing index: %w", err)
	}
	return idx, func() { _ = idx.Close() }, nil
}

// newTraceWindow returns the Trace Window of o's sagas, listed through idx
// (fed with the sagas of scope).
func newTraceWindow(o *orchestrator.Orchestrator[placeorder.Order], idx tracewindow.Index, scope eventstore.Scope, c traceWindowConfig) (*tracewindow.Handler, error) {
	if o.Scope() != scope {
		return nil, fmt.Errorf("trace window: orchestrator scope %+v, the index is fed %+v", o.Scope(), scope)
	}
	auth, err := c.readAuth()
	if err != nil {
		return nil, err
	}
	opts := []tracewindow.Option{tracewindow.WithIndex(idx), auth}
	if c.link != "" {
		opts = append(opts, tracewindow.WithTraceLink(c.link))
	}
	if c.token != "" {
		opts = append(opts, tracewindow.WithAdmin(tracewindow.Admin{
			Token:   c.token,
			Restore: tracewindow.RecoveryRestore(o.Store(), o.RecoveryWriter(), o.Scope(), func() time.Time { return time.Now().UTC() }),
			Redrive: o.Redrive,
			Resend:  o.Restore,
			Resume: func(ctx context.Context, txID, key string, raw json.RawMessage) error {
				var rc map[string]string
				if len(raw) > 0 {
					if err := json.Unmarshal(raw, &rc); err != nil {
						return fmt.Errorf("the resume context must be a JSON object of strings: %w", err)
					}
				}
				_, err := o.Resume(ctx, txID, key, rc)
				return err
			},
		}))
	}
	return tracewindow.New(o.Store(), o.Scope(), opts...)
}

// mountTraceWindow serves tw under traceWindowPrefix on mux.
func mountTraceWindow(mux *http.ServeMux, tw http.Handler) {
	if tw == nil {
		return
	}
	mux.Handle(traceWindowPrefix+"/", http.StripPrefix(traceWindowPrefix, tw))
	mux.Handle(traceWindowPrefix, http.RedirectHandler(traceWindowPrefix+"/", http.StatusMovedPermanently))
}
