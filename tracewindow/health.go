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
	Terminated       int                                 `json:"terminated"`
	// RetryRegistered counts the sagas with a retry registered in the
	// recovery directory (recovery.ListRetryPending's candidates); Frozen
	// the rows of the frozen table.
	RetryRegistered int `json:"retry_registered"`
	Frozen          int `json:"frozen"`
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

func (h *Handler) apiHealth(w http.ResponseWriter, r *http.Request) {
	h.healthMu.Lock()
	defer h.healthMu.Unlock()
	now := h.cfg.now()
	if h.healthDoc == nil || now.Sub(h.healthAt) >= h.cfg.healthTTL || now.Before(h.healthAt) {
		h.healthDoc = h.health(r.Context(), now)
		h.healthAt = now
	}
	writeJSON(w, http.StatusOK, h.healthDoc)
}

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
			doc.Errors = append(doc.Errors, "index: "+err.Error())
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
			doc.Terminated = doc.ByState[eventstore.StateCompensationFailed]
		}
	} else {
		doc.Errors = append(doc.Errors, "no index: in-flight counts need tracewindow.WithIndex")
	}
	if rp, err := recovery.ListRetryPending(ctx, h.store, h.scope, h.cfg.rcfg, now, recovery.Page{Limit: 1}); err != nil {
		doc.Errors = append(doc.Errors, "retry directory: "+err.Error())
	} else {
		doc.RetryRegistered = rp.Candidates
	}
	if fl, err := recovery.ListFrozen(ctx, h.store, h.scope, recovery.FrozenAll, recovery.Page{Limit: 1}); err != nil {
		doc.Errors = append(doc.Errors, "frozen table: "+err.Error())
	} else {
		doc.Frozen = fl.Total
	}
	return doc
}
