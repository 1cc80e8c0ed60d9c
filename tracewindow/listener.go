package tracewindow

import (
	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
)

// Listener returns an orchestrator listener that records every state
// change of the orchestrator's sagas in idx; scope must be the
// orchestrator's (region, cluster, service):
//
//	idx := tracewindow.NewMemoryIndex(0) // 0: DefaultMemoryEntries
//	o, err := orchestrator.New(service, domain,
//		orchestrator.WithListener(tracewindow.Listener(idx, scope)), ...)
//
// (Example runs it.) It costs the orchestrator one Index.Observe per
// transition, which never waits for I/O.
func Listener(idx Index, scope eventstore.Scope) func(orchestrator.Event) {
	return func(ev orchestrator.Event) {
		idx.Observe(scope, EntryOfEvent(ev))
	}
}

// EntryOfEvent is the Entry of the saga after the state change ev.
func EntryOfEvent(ev orchestrator.Event) Entry {
	return Entry{
		TxID: ev.TxID, Domain: ev.Domain, State: ev.To, Span: ev.Span, Kind: ev.Kind,
		Endpoint: ev.Endpoint, Error: clip(ev.Error, MaxEntryError), Definition: ev.Version, UpdatedAt: ev.At,
	}
}
