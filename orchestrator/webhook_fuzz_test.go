package orchestrator_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/orchestrator"
)

var fuzzWebhookSecret = []byte("fuzz-webhook-secret-0123456789")

// fuzzNow is the verifier's clock: signed requests are stamped with it.
var fuzzNow = time.Date(2031, 5, 6, 12, 0, 0, 0, time.UTC)

var fuzzWebhook = sync.OnceValues(func() (http.Handler, error) {
	// An orchestrator that is never run: its store is empty, so every
	// resume that gets through is for an unknown saga.
	o, err := orchestrator.New("fuzz-orders", orchestrator.Domain[order]{Name: "fuzz-dom",
		OnNext: orchestrator.Sequence[order](orchestrator.Step{Service: "s", Endpoint: "e"})},
		orchestrator.WithBrokers("127.0.0.1:1") /* never dialled: the orchestrator is not run */, orchestrator.WithStore(memory.New()),
		orchestrator.WithoutRecovery(), orchestrator.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	return orchestrator.VerifyWebhook(fuzzWebhookSecret, o.ResumeHandler(),
		orchestrator.WithWebhookClock(func() time.Time { return fuzzNow }),
		orchestrator.WithWebhookLogger(slog.New(slog.DiscardHandler)))
})

// FuzzWebhookRequest sends the signed resume webhook arbitrary bodies and
// signature headers, and the same bodies properly signed: nothing crashes it,
// nothing is answered 500, an unsigned or wrongly signed request never reaches
// the resume (always 401, or 413 for an oversize body), and a signed one is
// answered as the resume handler answers bad input or an unknown saga.
func FuzzWebhookRequest(f *testing.F) {
	f.Add([]byte(`{"transaction_id":"01a22bf0-8258-8001-b874-19ca7520035d","correlation_key":"k","context":{"status":"authorised"}}`), "", true)
	f.Add([]byte(`{"transaction_id":"","correlation_key":""}`), "t=1,v1=00", false)
	f.Add([]byte(`{"transaction_id":1}`), "t=1941192000,v1=zz", true)
	f.Add([]byte(`{`), "v1=,t=", false)
	f.Add(bytes.Repeat([]byte("a"), 70_000), "", true)
	f.Fuzz(func(t *testing.T, body []byte, header string, sign bool) {
		h, err := fuzzWebhook()
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/payments/callback", bytes.NewReader(body))
		if sign {
			header = orchestrator.SignWebhook(fuzzWebhookSecret, body, fuzzNow)
		}
		if header != "" {
			req.Header.Set(orchestrator.WebhookSignatureHeader, header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		code := rec.Code
		if code >= 500 && code != http.StatusServiceUnavailable {
			t.Fatalf("status %d: %s", code, rec.Body)
		}
		valid := header == orchestrator.SignWebhook(fuzzWebhookSecret, body, fuzzNow)
		switch {
		case !valid && code != http.StatusUnauthorized && code != http.StatusRequestEntityTooLarge:
			t.Fatalf("a request not signed with the secret got %d: %s", code, rec.Body)
		case valid && (code == http.StatusOK || code == http.StatusAccepted):
			t.Fatalf("a resume of a saga that does not exist got %d: %s", code, rec.Body)
		}
	})
}
