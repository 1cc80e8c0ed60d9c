package tracewindow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// The resume action's answers separate bad input (400: no key, a context
// that is not an object of strings, an invalid one), refusals (409: the
// saga is not paused, the key is wrong) and a resume that cannot be done
// now (503 with Retry-After); none is a 500 (issue 35.4).
func TestAdminResumeAnswers(t *testing.T) {
	var calls []string
	f := newFixture(t, tracewindow.WithAdmin(tracewindow.Admin{Token: token,
		Resume: func(_ context.Context, txID, key string, _ json.RawMessage) error {
			calls = append(calls, key)
			switch key {
			case "not-paused":
				return fmt.Errorf("%w: %s is COMPLETED", orchestrator.ErrNotPaused, txID)
			case "wrong":
				return &orchestrator.CorrelationError{TxID: txID}
			case "later":
				return fmt.Errorf("%w: resume %s: %w", orchestrator.ErrRetryLater, txID, context.DeadlineExceeded)
			case "invalid":
				return fmt.Errorf("orchestrator: resume %s: %w: resume context key \"\"", txID, eventstore.ErrInvalid)
			}
			return nil
		}}))
	auth := map[string]string{"Authorization": "Bearer " + token}
	resume := "/api/sagas/" + f.inflight + "/resume"
	for _, c := range []struct {
		name, body string
		want       int
	}{
		{"no key", `{}`, http.StatusBadRequest},
		{"context not an object", `{"correlation_key":"ok","context":"authorised"}`, http.StatusBadRequest},
		{"context of numbers", `{"correlation_key":"ok","context":{"n":1}}`, http.StatusBadRequest},
		{"invalid context", `{"correlation_key":"invalid","context":{"":"x"}}`, http.StatusBadRequest},
		{"not paused", `{"correlation_key":"not-paused"}`, http.StatusConflict},
		{"wrong key", `{"correlation_key":"wrong"}`, http.StatusConflict},
		{"store unavailable", `{"correlation_key":"later"}`, http.StatusServiceUnavailable},
		{"resumed", `{"correlation_key":"ok","context":{"status":"authorised"}}`, http.StatusOK},
		{"null context", `{"correlation_key":"ok","context":null}`, http.StatusOK},
	} {
		req, err := http.NewRequest(http.MethodPost, f.srv.URL+resume, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range auth {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.NewDecoder(res.Body).Decode(&m)
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("%s: %d %v, want %d", c.name, res.StatusCode, m, c.want)
		}
		if ra := res.Header.Get("Retry-After"); (c.want == http.StatusServiceUnavailable) != (ra != "") {
			t.Errorf("%s: Retry-After %q", c.name, ra)
		}
	}
	if got := strings.Join(calls, ","); got != "invalid,not-paused,wrong,later,ok,ok" {
		t.Errorf("Resume called with %s; bad input must not reach it", got)
	}
}
