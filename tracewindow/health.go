package tracewindow

import (
	"context"
	"net/http"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
)

// Health is the body of GET /api/health: the live health of the scope's
// sagas.
type Health struct {
	GeneratedAt time.Time `json:"generated_at"`
	// From and To bound the creation time of the sagas counted (the health
	// window).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// InFlight counts the sagas in flight (not terminal, not DISABLED).
	InFlight int `json:"in_flight"`
	// ByState counts every saga of the window by state; InFlightByDomain
	// the sagas in flight by domain and state.
	ByState          map[eventstore.State]int            `json:"by_state"`
	InFlightByDomain map[string]map[eventstore.State]int `json:"in_flight_by_domain"`
	ByDomain         map[string]map[eventstore.State]int `json:"by_domain"`
	Oldest           *OldestInFlight                     `json:"oldest_in_flight"`
	RetryPending     int                                 `json:"retry_pending"`
	Disabled         int                                 `json:"disabled"`
	// CompensationFailed counts the COMPENSATION_FAILED sagas (a
	// compensation failed for good; frozen for an admin).
	CompensationFailed int `json:"compensation_failed"`
	// Terminated is CompensationFailed under its name from before
	// Orchestrator.Terminate existed.
	//
	// Deprecated: use CompensationFailed; TERMINATED sagas are counted in
	// ByState, not here.
	Terminated int `json:"terminated"`
	// RetryRegistered counts the sagas still RETRY_PENDING (their state
	// read from the store when the document is computed) that have a retry
	// registered in the recovery directory: recovery.ListRetryPending's
	// sagas, at most MaxHealthRetries (then RetryRegisteredTruncated). A
	// directory entry whose saga was re-driven since (an in-process retry
	// registers its durable fallback minutes ahead) is not counted, though
	// it stays until a retry node scans its window. Frozen counts the rows
	// of the frozen table.
	RetryRegistered          int  `json:"retry_registered"`
	RetryRegisteredTruncated bool `json:"retry_registered_truncated,omitempty"`
	Frozen                   int  `json:"frozen"`
	// Index reports what the index read: rows scanned, and whether the
	// count stopped early (then it covers the newest sagas only).
	Index *IndexStats `json:"index,omitempty"`
	// Errors lists the parts that could not be computed.
	Errors []string `json:"errors"`
}

// OldestInFlight is the oldest saga still in flight.
type OldestInFlight struct {
	Entry
	AgeMS int64 `json:"age_ms"`
}

// IndexStats is what a census read.
type IndexStats struct {
	Scanned   int  `json:"scanned"`
	Truncated bool `json:"truncated"`
}

// MaxHealthRetries bounds Health.RetryRegistered: the sagas it counts are
// loaded from the store each time the document is computed.
const MaxHealthRetries = 200

// apiHealth serves the health document, computed again when the cached
// one is healthTTL old or older, or when the handler learned a state
// change the index had not seen (staleHealth) since it was computed.
func (h *Handler) apiHealth(w http.ResponseWriter, r *http.Request) {
	h.healthMu.Lock()
	defer h.healthMu.Unlock()
	now := h.cfg.now()
	gen := h.healthGen.Load()
	if h.healthDoc == nil || h.healthDocGen != gen || now.Sub(h.healthAt) >= h.cfg.healthTTL || now.Before(h.healthAt) {
		h.healthDoc = h.health(r.Context(), now)
		h.healthAt, h.healthDocGen = now, gen
	}
	writeJSON(w, http.StatusOK, h.healthDoc)
}

// flusher is an Index that writes asynchronously (cassandraindex.Index):
// Flush waits until what was observed before the call is written.
type flusher interface {
	Flush(ctx context.Context) error
}

// learned records entries the handler read from the store that the index
// did not hold (a list's verify, an admin action): it writes them to the
// index, waits until an asynchronous index has written them (at most
// flushTimeout), and marks the cached health document stale, so that the
// next GET /api/health counts what the list has just shown.
func (h *Handler) learned(ctx context.Context, entries ...Entry) {
	if h.cfg.index == nil || len(entries) == 0 {
		return
	}
	for _, e := range entries {
		h.cfg.index.Observe(h.scope, e)
	}
	if f, ok := h.cfg.index.(flusher); ok {
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		err := f.Flush(fctx)
		cancel()
		if err != nil {
			h.cfg.logger.Warn("tracewindow: index flush after a state read from the store", "err", err)
		}
	}
	h.healthGen.Add(1)
}

// flushTimeout bounds how long a request waits for the index to write the
// states it learned.
const flushTimeout = 5 * time.Second

// health computes the health document at now.
func (h *Handler) health(ctx context.Context, now time.Time) *Health {
	doc := &Health{
		GeneratedAt: now, From: now.Add(-h.cfg.healthWindow), To: now,
		ByState: map[eventstore.State]int{}, InFlightByDomain: map[string]map[eventstore.State]int{},
		ByDomain: map[string]map[eventstore.State]int{}, Errors: []string{},
	}
	if h.cfg.index != nil {
		c, err := h.cfg.index.Census(ctx, h.scope, doc.From, doc.To)
		if err != nil {
			doc.Errors = append(doc.Errors, h.healthError("index: the census failed", err))
		} else {
			doc.Index = &IndexStats{Scanned: c.Scanned, Truncated: c.Truncated}
			for dom, counts := range c.ByDomain {
				doc.ByDomain[dom] = counts
				for st, n := range counts {
					doc.ByState[st] += n
					if InFlight(st) {
						doc.InFlight += n
						if doc.InFlightByDomain[dom] == nil {
							doc.InFlightByDomain[dom] = map[eventstore.State]int{}
						}
						doc.InFlightByDomain[dom][st] = n
					}
				}
			}
			if c.Oldest != nil {
				doc.Oldest = &OldestInFlight{Entry: *c.Oldest, AgeMS: ms(now.Sub(c.Oldest.CreatedAt))}
			}
			doc.RetryPending = doc.ByState[eventstore.StateRetryPending]
			doc.Disabled = doc.ByState[eventstore.StateDisabled]
			doc.CompensationFailed = doc.ByState[eventstore.StateCompensationFailed]
			doc.Terminated = doc.CompensationFailed
		}
	} else {
		doc.Errors = append(doc.Errors, "no index: in-flight counts need tracewindow.WithIndex")
	}
	// Count the sagas the directory names that are still RETRY_PENDING:
	// its entries outlive their sagas' re-drives by minutes.
	if rp, err := recovery.ListRetryPending(ctx, h.store, h.scope, h.cfg.rcfg, now, recovery.Page{Limit: MaxHealthRetries}); err != nil {
		doc.Errors = append(doc.Errors, h.healthError("retry directory: the listing failed", err))
	} else {
		doc.RetryRegistered, doc.RetryRegisteredTruncated = len(rp.Sagas), rp.Next != ""
	}
	if fl, err := recovery.ListFrozen(ctx, h.store, h.scope, recovery.FrozenAll, recovery.Page{Limit: 1}); err != nil {
		doc.Errors = append(doc.Errors, h.healthError("frozen table: the listing failed", err))
	} else {
		doc.Frozen = fl.Total
	}
	return doc
}

// healthError is the health document's error for a failed read: failure's
// text (the error itself goes to the log only).
func (h *Handler) healthError(what string, err error) string {
	text, _ := failure(h.cfg.logger, what, err)
	return text
}
