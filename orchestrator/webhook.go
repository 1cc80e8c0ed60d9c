package orchestrator

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
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
	// Status is "resumed" or "already_resumed" (200), "accepted" (202:
	// the resume came before its pause and is kept for it), or "error".
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// ResumeRetryAfter is the Retry-After (in whole seconds) of a 503 answer
// of ResumeHandler and WriteResumeResult.
const ResumeRetryAfter = 2 * time.Second

// ResumeHandler returns an http.Handler that resumes paused sagas of o,
// for a service to mount on its own mux for webhooks (say at
// POST /payments/callback). It takes a POST with a JSON ResumeRequest
// (at most MaxResumeBody bytes) and answers JSON as WriteResumeResult
// does: 200 resumed (or already resumed: a retried webhook is not an
// error), 202 accepted (the resume came before the step's pause and is
// kept for it), 400 malformed JSON, missing fields or an invalid context,
// 404 unknown transaction, 409 wrong or stale correlation key or saga not
// paused (ended, or its deadline won), 503 with Retry-After when the
// resume cannot be done now (the store or Kafka failed: send it again),
// 413 body too large, 405 not a POST. The key is compared in constant
// time. Put authentication in front of it as for any webhook.
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
			writeJSON(w, http.StatusBadRequest, ResumeResponse{Status: "error", Error: "malformed JSON: " + err.Error()})
			return
		}
		if req.TransactionID == "" || req.CorrelationKey == "" {
			writeJSON(w, http.StatusBadRequest, ResumeResponse{Status: "error", Error: "transaction_id and correlation_key are required"})
			return
		}
		res, err := o.Resume(r.Context(), req.TransactionID, req.CorrelationKey, req.Context)
		switch code := WriteResumeResult(w, res, err); code {
		case http.StatusServiceUnavailable:
			o.logger().Warn("orchestrator: resume webhook: not done now; the sender is told to retry", "tx", req.TransactionID, "err", err)
		case http.StatusInternalServerError:
			o.logger().Error("orchestrator: resume webhook failed", "tx", req.TransactionID, "err", err)
		}
	})
}

// WriteResumeResult writes the JSON answer (a ResumeResponse) to what
// Resume returned, for a service's own webhook handler over Resume, and
// returns its status: 200 "resumed" or "already_resumed", 202 "accepted"
// (Early), 400 an invalid resume context (topics.ErrMalformed,
// eventstore.ErrInvalid), 404 ErrNotFound, 409 ErrCorrelationKey or
// ErrNotPaused, 503 with a Retry-After of ResumeRetryAfter for
// ErrRetryLater, 500 anything else. Only a 503 (retry later) and a 500
// should be logged as failures: the others are the sender's.
func WriteResumeResult(w http.ResponseWriter, res ResumeResult, err error) int {
	code, resp := resumeAnswer(res, err)
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(ResumeRetryAfter/time.Second)))
	}
	writeJSON(w, code, resp)
	return code
}

func resumeAnswer(res ResumeResult, err error) (int, ResumeResponse) {
	fail := func(code int, msg string) (int, ResumeResponse) {
		return code, ResumeResponse{Status: "error", Error: msg}
	}
	switch {
	case err == nil && res.AlreadyResumed:
		return http.StatusOK, ResumeResponse{Status: "already_resumed"}
	case err == nil && res.Early:
		return http.StatusAccepted, ResumeResponse{Status: "accepted"}
	case err == nil:
		return http.StatusOK, ResumeResponse{Status: "resumed"}
	case errors.Is(err, ErrNotFound):
		return fail(http.StatusNotFound, "unknown transaction")
	case errors.Is(err, ErrCorrelationKey), errors.Is(err, ErrNotPaused):
		return fail(http.StatusConflict, err.Error())
	case errors.Is(err, topics.ErrMalformed), errors.Is(err, eventstore.ErrInvalid):
		return fail(http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrRetryLater):
		return fail(http.StatusServiceUnavailable, "resume not done now (store or Kafka unavailable): send it again")
	default:
		return fail(http.StatusInternalServerError, "resume failed")
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
