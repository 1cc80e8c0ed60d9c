package orchestrator

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/stacksaga-go/stacksaga/topics"
)

// MaxResumeBody bounds the body ResumeHandler reads.
const MaxResumeBody = 64 << 10

// ResumeRequest is the JSON body of ResumeHandler.
type ResumeRequest struct {
	TransactionID  string            `json:"transaction_id"`
	CorrelationKey string            `json:"correlation_key"`
	Context        map[string]string `json:"context,omitempty"`
}

// ResumeResponse is ResumeHandler's JSON answer.
type ResumeResponse struct {
	// Status is "resumed" or "already_resumed" (200), or "error".
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// ResumeHandler returns an http.Handler that resumes paused sagas of o,
// for a service to mount on its own mux for webhooks (say at
// POST /payments/callback). It takes a POST with a JSON ResumeRequest
// (at most MaxResumeBody bytes) and answers JSON: 200 resumed (or already
// resumed: a retried webhook is not an error), 404 unknown transaction, 409
// wrong or stale correlation key or saga not paused, 413 body too large,
// 405 not a POST, 422 malformed JSON or missing fields, 500 anything else.
// The key is compared in constant time. Put authentication in front of it
// as for any webhook.
func (o *Orchestrator[T]) ResumeHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, ResumeResponse{Status: "error", Error: "POST only"})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxResumeBody))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			writeJSON(w, http.StatusRequestEntityTooLarge, ResumeResponse{Status: "error", Error: "body over 64 KiB"})
			return
		case err != nil:
			writeJSON(w, http.StatusBadRequest, ResumeResponse{Status: "error", Error: "cannot read the body"})
			return
		}
		var req ResumeRequest
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, ResumeResponse{Status: "error", Error: "malformed JSON: " + err.Error()})
			return
		}
		if req.TransactionID == "" || req.CorrelationKey == "" {
			writeJSON(w, http.StatusUnprocessableEntity, ResumeResponse{Status: "error", Error: "transaction_id and correlation_key are required"})
			return
		}
		res, err := o.Resume(r.Context(), req.TransactionID, req.CorrelationKey, req.Context)
		switch {
		case err == nil && res.AlreadyResumed:
			writeJSON(w, http.StatusOK, ResumeResponse{Status: "already_resumed"})
		case err == nil:
			writeJSON(w, http.StatusOK, ResumeResponse{Status: "resumed"})
		case errors.Is(err, ErrNotFound):
			writeJSON(w, http.StatusNotFound, ResumeResponse{Status: "error", Error: "unknown transaction"})
		case errors.Is(err, ErrCorrelationKey), errors.Is(err, ErrNotPaused):
			writeJSON(w, http.StatusConflict, ResumeResponse{Status: "error", Error: err.Error()})
		case errors.Is(err, topics.ErrMalformed):
			writeJSON(w, http.StatusUnprocessableEntity, ResumeResponse{Status: "error", Error: err.Error()})
		default:
			o.logger().Error("orchestrator: resume webhook failed", "tx", req.TransactionID, "err", err)
			writeJSON(w, http.StatusInternalServerError, ResumeResponse{Status: "error", Error: "resume failed"})
		}
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
