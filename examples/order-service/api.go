package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/orchestrator"
)

// orderView is the GET /orders/{id} response.
type orderView struct {
	TransactionID string           `json:"transaction_id"`
	State         eventstore.State `json:"state"`
	Order         placeorder.Order `json:"order"`
	Error         string           `json:"error,omitempty"`
	History       []stepView       `json:"history"`
}

type stepView struct {
	Span     int       `json:"span"`
	Kind     string    `json:"kind"`
	Endpoint string    `json:"endpoint"`
	Attempt  int       `json:"attempt"`
	Outcome  string    `json:"outcome"`
	Error    string    `json:"error,omitempty"`
	Finished time.Time `json:"finished"`
}

func newAPI(o *orchestrator.Orchestrator[placeorder.Order]) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var in placeorder.Order
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid order: " + err.Error()})
			return
		}
		if in.Item == "" || in.Quantity <= 0 || in.Amount <= 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "item, quantity > 0 and amount > 0 are required"})
			return
		}
		id, err := o.Start(r.Context(), in)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"transaction_id": id})
	})
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		s, err := o.Get(r.Context(), id)
		if errors.Is(err, orchestrator.ErrNotFound) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no order saga " + id})
			return
		}
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		h, err := o.History(r.Context(), id)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		v := orderView{TransactionID: s.TxID, State: s.State, Order: s.Entity, Error: s.Error, History: []stepView{}}
		for _, t := range h {
			v.History = append(v.History, stepView{Span: t.Span, Kind: t.Kind, Endpoint: t.Endpoint, Attempt: t.Attempt, Outcome: t.Outcome, Error: t.Error, Finished: t.FinishedAt})
		}
		writeJSON(w, http.StatusOK, v)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
