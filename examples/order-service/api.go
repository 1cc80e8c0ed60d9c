package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
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
	// PauseEvent and PausedUntil describe a PAUSED order: what it waits
	// for, until when (absent: no deadline).
	PauseEvent  string     `json:"pause_event,omitempty"`
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	History     []stepView `json:"history"`
}

// paymentCallback is the payment gateway's POST /payments/callback body:
// the order's saga, the payment reference the payment step gave the
// gateway (Order.PaymentRef: the saga's correlation key) and the verdict.
type paymentCallback struct {
	TransactionID string `json:"transaction_id"`
	PaymentRef    string `json:"payment_ref"`
	// Status is "authorised" (the order ships) or anything else, say
	// "declined" (the order is compensated).
	Status string `json:"status"`
}

type stepView struct {
	Span     int    `json:"span"`
	Kind     string `json:"kind"`
	Endpoint string `json:"endpoint"`
	Attempt  int    `json:"attempt"`
	Outcome  string `json:"outcome"`
	Error    string `json:"error,omitempty"`
	// Resume is the context of a resume (outcome "resumed").
	Resume   map[string]string `json:"resume,omitempty"`
	Finished time.Time         `json:"finished"`
}

// newAPI is the service's HTTP API. Its two resume webhooks (the
// gateway's POST /payments/callback and the generic POST /sagas/resume)
// take only callbacks signed with webhookSecret
// (orchestrator.VerifyWebhook): the payment reference is derived from the
// transaction id POST /orders returns, so it identifies the paused order
// but authorises nothing. With no secret they answer 503: an example
// without a secret must not ship orders on anyone's word. It fails if the
// secret is too short.
func newAPI(o *orchestrator.Orchestrator[placeorder.Order], traceWindow http.Handler, webhookSecret []byte) (http.Handler, error) {
	mux := http.NewServeMux()
	mountTraceWindow(mux, traceWindow)
	// The generic resume webhook: {"transaction_id", "correlation_key",
	// "context"} (orchestrator.ResumeRequest).
	resume := o.ResumeHandler()
	callback := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paymentCallbackHandler(o, w, r)
	}))
	if webhookSecret == nil {
		resume, callback = webhooksDisabled, webhooksDisabled
	} else {
		var err error
		if resume, err = orchestrator.VerifyWebhook(webhookSecret, resume); err != nil {
			return nil, fmt.Errorf("webhook secret ($%s or $%s): %w", envWebhookSecret, envWebhookSecretFile, err)
		}
		if callback, err = orchestrator.VerifyWebhook(webhookSecret, callback); err != nil {
			return nil, fmt.Errorf("webhook secret ($%s or $%s): %w", envWebhookSecret, envWebhookSecretFile, err)
		}
	}
	mux.Handle("POST /sagas/resume", resume)
	mux.Handle("POST /payments/callback", callback)
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
		// A client that may retry the request (a timeout, a lost answer)
		// sends the same Idempotency-Key each time: the order's saga is
		// started once, and every retry gets its id.
		var opts []orchestrator.StartOption
		if key := r.Header.Get(headerIdempotencyKey); key != "" {
			if err := orchestrator.ValidBusinessKey(key); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": headerIdempotencyKey + ": " + err.Error()})
				return
			}
			opts = append(opts, orchestrator.WithBusinessKey(key))
		}
		id, err := o.Start(r.Context(), in, opts...)
		var exists *orchestrator.ExistsError
		if errors.As(err, &exists) {
			w.Header().Set(headerReplayed, "true")
			writeJSON(w, http.StatusOK, map[string]string{"transaction_id": exists.TxID})
			return
		}
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"transaction_id": id})
	})
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if q := r.URL.Query().Get("wait"); q != "" {
			// A long poll: answer once the order's saga has ended, or with
			// its state at the end of the wait.
			d, err := time.ParseDuration(q)
			if err != nil || d <= 0 {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "wait: want a positive duration such as 10s"})
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), min(d, maxOrderWait))
			_, err = o.Wait(ctx, id)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, orchestrator.ErrNotFound) {
				if r.Context().Err() != nil {
					return // the client left, or the service is stopping
				}
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
				return
			}
		}
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
		v := orderView{TransactionID: s.TxID, State: s.State, Order: s.Entity, Error: s.Error, PauseEvent: s.PauseEvent, History: []stepView{}}
		if !s.PausedUntil.IsZero() {
			v.PausedUntil = &s.PausedUntil
		}
		for _, t := range h {
			rc, _ := eventstore.DecodeResumeContext(t.ResumeContext)
			v.History = append(v.History, stepView{Span: t.Span, Kind: t.Kind, Endpoint: t.Endpoint, Attempt: t.Attempt, Outcome: t.Outcome, Error: t.Error, Resume: rc, Finished: t.FinishedAt})
		}
		writeJSON(w, http.StatusOK, v)
	})
	return mux, nil
}

// The idempotency headers of POST /orders: the client's key, and the
// answer's mark of a request that repeated an earlier one (200, the earlier
// order's transaction id).
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"
)

// maxOrderWait bounds the long poll of GET /orders/{id}?wait=.
const maxOrderWait = time.Minute

// webhooksDisabled answers the resume webhooks of a service started with
// no webhook secret.
var webhooksDisabled = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusServiceUnavailable, orchestrator.ResumeResponse{Status: "error", Error: "webhooks disabled: the service has no $" + envWebhookSecret})
})

// Where the webhook secret comes from: the variable itself, or a file
// holding it (a trailing newline is dropped), not both.
const (
	envWebhookSecret     = "STACKSAGA_WEBHOOK_SECRET"
	envWebhookSecretFile = "STACKSAGA_WEBHOOK_SECRET_FILE"
)

// webhookSecretFromEnv reads the webhook secret from $STACKSAGA_WEBHOOK_SECRET
// or the file $STACKSAGA_WEBHOOK_SECRET_FILE names; nil if neither is set.
func webhookSecretFromEnv(getenv func(string) string) ([]byte, error) {
	v, file := getenv(envWebhookSecret), getenv(envWebhookSecretFile)
	switch {
	case v != "" && file != "":
		return nil, fmt.Errorf("set $%s or $%s, not both", envWebhookSecret, envWebhookSecretFile)
	case v != "":
		if len(v) < orchestrator.MinWebhookSecret {
			return nil, fmt.Errorf("$%s: %w", envWebhookSecret, orchestrator.ErrWebhookSecret)
		}
		return []byte(v), nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", envWebhookSecretFile, err)
		}
		b = bytes.TrimRight(b, "\r\n")
		if len(b) < orchestrator.MinWebhookSecret {
			return nil, fmt.Errorf("$%s (%s): %w", envWebhookSecretFile, file, orchestrator.ErrWebhookSecret)
		}
		return b, nil
	}
	return nil, nil
}

// paymentCallbackHandler resumes the order saga paused for its payment
// authorisation with the gateway's verdict as the resume context
// ({"status": …}), which the saga's OnNext reads. It answers as
// orchestrator.ResumeHandler does (orchestrator.WriteResumeResult): 200
// {"status":"resumed"} (or "already_resumed": the gateway retried its
// callback), 202 "accepted" (the callback came before the payment step's
// pause: kept for it), 404 unknown order, 409 wrong payment reference or
// order not waiting for a payment, 503 with Retry-After (retry later),
// 413 body over 64 KiB, 400 malformed JSON or missing fields.
func paymentCallbackHandler(o *orchestrator.Orchestrator[placeorder.Order], w http.ResponseWriter, r *http.Request) {
	fail := func(code int, msg string) {
		writeJSON(w, code, orchestrator.ResumeResponse{Status: "error", Error: msg})
	}
	var cb paymentCallback
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, orchestrator.MaxResumeBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cb); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			fail(http.StatusRequestEntityTooLarge, "body over 64 KiB")
			return
		}
		fail(http.StatusBadRequest, "malformed JSON: "+err.Error())
		return
	}
	if cb.TransactionID == "" || cb.PaymentRef == "" || cb.Status == "" {
		fail(http.StatusBadRequest, "transaction_id, payment_ref and status are required")
		return
	}
	res, err := o.Resume(r.Context(), cb.TransactionID, cb.PaymentRef, map[string]string{placeorder.StatusKey: cb.Status})
	orchestrator.WriteResumeResult(w, res, err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
