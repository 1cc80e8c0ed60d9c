package tracewindow_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// The cancel and terminate actions (issue 40): offered for sagas they apply
// to, they need a reason, pass the audited actor to the action in its
// context, answer 409 for an ended saga, and are audited with the reason.
func TestAdminCancelAndTerminate(t *testing.T) {
	type call struct{ action, tx, actor, reason string }
	var calls []call
	control := func(action string) func(ctx context.Context, txID, reason string) error {
		return func(ctx context.Context, txID, reason string) error {
			calls = append(calls, call{action, txID, orchestrator.ActorFrom(ctx), reason})
			if reason == "too late" {
				return fmt.Errorf("%w: %s %s: it is COMPLETED", orchestrator.ErrEnded, action, txID)
			}
			return nil
		}
	}
	f := newFixture(t)
	h, err := tracewindow.New(f.store, f.scope, tracewindow.WithIndex(f.idx), tracewindow.WithClock(f.clock),
		tracewindow.WithAdmin(tracewindow.Admin{Token: token, Cancel: control("cancel"), Terminate: control("terminate")}),
		tracewindow.WithAuthorizer(func(*http.Request) error { return nil }),
		tracewindow.WithActor(func(r *http.Request) string { return r.Header.Get("X-Forwarded-User") }))
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)

	var d tracewindow.Detail
	if code := f.get("/api/sagas/"+f.inflight, &d); code != http.StatusOK || !slices.Contains(d.Actions, "cancel") || !slices.Contains(d.Actions, "terminate") {
		t.Fatalf("in-flight saga: %d, actions %v", code, d.Actions)
	}
	if code := f.get("/api/sagas/"+f.completed, &d); code != http.StatusOK || slices.Contains(d.Actions, "cancel") || slices.Contains(d.Actions, "terminate") {
		t.Fatalf("completed saga: %d, actions %v", code, d.Actions)
	}
	hdr := map[string]string{"Authorization": "Bearer " + token, "X-Forwarded-User": "alice@example.com"}
	for _, c := range []struct {
		action, body string
		want         int
	}{
		{"cancel", `{}`, http.StatusBadRequest},
		{"cancel", `{"reason":"  "}`, http.StatusBadRequest},
		{"cancel", `{"reason":"customer asked"}`, http.StatusOK},
		{"terminate", `{"reason":"doing damage"}`, http.StatusOK},
		{"cancel", `{"reason":"too late"}`, http.StatusConflict},
	} {
		if code, m := f.post("/api/sagas/"+f.inflight+"/"+c.action, "application/json", c.body, hdr); code != c.want {
			t.Errorf("%s %s: %d %v, want %d", c.action, c.body, code, m, c.want)
		}
	}
	want := []call{
		{"cancel", f.inflight, "alice@example.com", "customer asked"},
		{"terminate", f.inflight, "alice@example.com", "doing damage"},
		{"cancel", f.inflight, "alice@example.com", "too late"},
	}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %+v, want %+v", calls, want)
	}
	recs := f.stored(f.inflight)
	var got []string
	for _, r := range recs {
		got = append(got, r.Action+"|"+r.Actor+"|"+r.Detail+"|"+r.Result)
	}
	wantRecs := []string{
		"cancel|alice@example.com||refused: bad request",
		"cancel|alice@example.com||refused: bad request",
		"cancel|alice@example.com|reason: customer asked|ok",
		"terminate|alice@example.com|reason: doing damage|ok",
		"cancel|alice@example.com|reason: too late|refused: wrong state",
	}
	if strings.Join(got, "\n") != strings.Join(wantRecs, "\n") {
		t.Errorf("audit records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantRecs, "\n"))
	}
}
