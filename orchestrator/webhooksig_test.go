package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

var (
	webhookSecret = []byte("0123456789abcdef-webhook-secret")
	otherSecret   = []byte("fedcba9876543210-another-secret")
)

// webhookClock is a settable clock.
type webhookClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *webhookClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *webhookClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// webhookNext records the bodies it is handed and answers status.
type webhookNext struct {
	mu     sync.Mutex
	bodies []string
	status int
}

func (n *webhookNext) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	n.mu.Lock()
	n.bodies = append(n.bodies, string(b))
	status := n.status
	n.mu.Unlock()
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"status":"resumed"}`))
}

func (n *webhookNext) calls() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.bodies...)
}

func newVerifier(t *testing.T, next http.Handler, opts ...orchestrator.WebhookOption) http.Handler {
	t.Helper()
	quiet := orchestrator.WithWebhookLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	h, err := orchestrator.VerifyWebhook(webhookSecret, next, append([]orchestrator.WebhookOption{quiet}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// callWebhook posts body to h with the signature header sig ("" none) and
// returns the status and the decoded answer.
func callWebhook(t *testing.T, h http.Handler, body, sig string) (int, orchestrator.ResumeResponse) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/payments/callback", strings.NewReader(body))
	if sig != "" {
		r.Header.Set(orchestrator.WebhookSignatureHeader, sig)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var out orchestrator.ResumeResponse
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	return w.Code, out
}

func TestVerifyWebhookAcceptsSigned(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clock := &webhookClock{t: now}
	next := &webhookNext{}
	h := newVerifier(t, next, orchestrator.WithWebhookClock(clock.now))
	body := `{"transaction_id":"tx","correlation_key":"tx:1:process","context":{"status":"authorised"}}`
	sig := orchestrator.SignWebhook(webhookSecret, []byte(body), now.Add(-time.Minute))
	if !strings.HasPrefix(sig, "t=") || !strings.Contains(sig, ",v1=") {
		t.Fatalf("signature %q, want t=…,v1=…", sig)
	}
	if code, out := callWebhook(t, h, body, sig); code != http.StatusOK || out.Status != "resumed" {
		t.Fatalf("signed callback: %d %+v, want 200 resumed", code, out)
	}
	if got := next.calls(); len(got) != 1 || got[0] != body {
		t.Fatalf("next got %q, want the body once", got)
	}
	// A timestamp just inside the tolerance, either way, passes too.
	for _, at := range []time.Time{now.Add(-orchestrator.DefaultWebhookTolerance), now.Add(orchestrator.DefaultWebhookTolerance)} {
		if code, out := callWebhook(t, h, body, orchestrator.SignWebhook(webhookSecret, []byte(body), at)); code != http.StatusOK {
			t.Errorf("signed at %v: %d %+v, want 200", at, code, out)
		}
	}
}

func TestVerifyWebhookRefuses(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clock := &webhookClock{t: now}
	next := &webhookNext{}
	h := newVerifier(t, next, orchestrator.WithWebhookClock(clock.now))
	body := `{"transaction_id":"tx","correlation_key":"tx:1:process","context":{"status":"authorised"}}`
	good := orchestrator.SignWebhook(webhookSecret, []byte(body), now)
	mac := good[strings.Index(good, "v1=")+3:]
	shifted := "t=" + strconv.FormatInt(now.Unix()+1, 10) + ",v1=" + mac
	for _, c := range []struct {
		name, body, sig string
		code            int
	}{
		{"unsigned", body, "", http.StatusUnauthorized},
		{"forged with another secret", body, orchestrator.SignWebhook(otherSecret, []byte(body), now), http.StatusUnauthorized},
		{"tampered body", strings.Replace(body, "authorised", "authorisedX", 1), good, http.StatusUnauthorized},
		{"stale", body, orchestrator.SignWebhook(webhookSecret, []byte(body), now.Add(-orchestrator.DefaultWebhookTolerance-time.Second)), http.StatusUnauthorized},
		{"future-dated", body, orchestrator.SignWebhook(webhookSecret, []byte(body), now.Add(orchestrator.DefaultWebhookTolerance+time.Second)), http.StatusUnauthorized},
		{"timestamp changed", body, shifted, http.StatusUnauthorized},
		{"no timestamp", body, "v1=" + mac, http.StatusUnauthorized},
		{"no v1", body, good[:strings.Index(good, ",")], http.StatusUnauthorized},
		{"v1 not hex", body, good[:strings.Index(good, ",")] + ",v1=zz", http.StatusUnauthorized},
		{"v1 truncated", body, good[:len(good)-2], http.StatusUnauthorized},
		{"negative timestamp", body, "t=-5,v1=" + mac, http.StatusUnauthorized},
		{"garbage", body, "sha256=" + mac, http.StatusUnauthorized},
		{"body too large", strings.Repeat("x", orchestrator.DefaultWebhookMaxBody+1), orchestrator.SignWebhook(webhookSecret, []byte(strings.Repeat("x", orchestrator.DefaultWebhookMaxBody+1)), now), http.StatusRequestEntityTooLarge},
	} {
		code, out := callWebhook(t, h, c.body, c.sig)
		if code != c.code || out.Status != "error" || out.Error == "" {
			t.Errorf("%s: %d %+v, want %d with an error", c.name, code, out, c.code)
		}
	}
	if got := next.calls(); len(got) != 0 {
		t.Fatalf("refused callbacks reached the handler: %q", got)
	}
}

func TestVerifyWebhookReplay(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clock := &webhookClock{t: now}
	next := &webhookNext{}
	h := newVerifier(t, next, orchestrator.WithWebhookClock(clock.now))
	body := `{"transaction_id":"tx","correlation_key":"tx:1:process","context":{"status":"authorised"}}`
	sig := orchestrator.SignWebhook(webhookSecret, []byte(body), now)
	if code, _ := callWebhook(t, h, body, sig); code != http.StatusOK {
		t.Fatalf("first: %d, want 200", code)
	}
	clock.set(now.Add(time.Minute))
	if code, out := callWebhook(t, h, body, sig); code != http.StatusConflict || out.Status != "error" {
		t.Fatalf("replay: %d %+v, want 409", code, out)
	}
	// The same signature with another secret's entry added is the same
	// message: still a replay.
	if code, _ := callWebhook(t, h, body, sig+",v1="+strings.Repeat("00", 32)); code != http.StatusConflict {
		t.Fatalf("replay with an extra v1: %d, want 409", code)
	}
	// At the very edge of the tolerance, still a replay.
	clock.set(now.Add(orchestrator.DefaultWebhookTolerance))
	if code, _ := callWebhook(t, h, body, sig); code != http.StatusConflict {
		t.Fatalf("replay at the edge of the tolerance: %d, want 409", code)
	}
	// Past the tolerance, the replay is stale.
	clock.set(now.Add(orchestrator.DefaultWebhookTolerance + time.Second))
	if code, _ := callWebhook(t, h, body, sig); code != http.StatusUnauthorized {
		t.Fatalf("late replay: %d, want 401", code)
	}
	// The sender signs its retry afresh: accepted (the resume itself is
	// idempotent).
	if code, _ := callWebhook(t, h, body, orchestrator.SignWebhook(webhookSecret, []byte(body), clock.now())); code != http.StatusOK {
		t.Fatalf("re-signed retry: %d, want 200", code)
	}
	if got := len(next.calls()); got != 2 {
		t.Fatalf("handler called %d times, want 2", got)
	}

	// A callback the handler did not accept (5xx, 4xx) is forgotten: the
	// sender may retry it as signed.
	next.status = http.StatusInternalServerError
	clock.set(clock.now().Add(time.Second))
	sig2 := orchestrator.SignWebhook(webhookSecret, []byte(body), clock.now())
	if code, _ := callWebhook(t, h, body, sig2); code != http.StatusInternalServerError {
		t.Fatalf("failing handler: %d, want its 500", code)
	}
	next.status = http.StatusOK
	if code, _ := callWebhook(t, h, body, sig2); code != http.StatusOK {
		t.Fatalf("retry after a 500: %d, want 200", code)
	}
	if code, _ := callWebhook(t, h, body, sig2); code != http.StatusConflict {
		t.Fatalf("replay after the accepted retry: %d, want 409", code)
	}
}

func TestVerifyWebhookReplayCacheBounded(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clock := &webhookClock{t: now}
	next := &webhookNext{}
	h := newVerifier(t, next, orchestrator.WithWebhookClock(clock.now), orchestrator.WithWebhookReplayCache(2), orchestrator.WithWebhookTolerance(time.Minute))
	send := func(body string) int {
		code, _ := callWebhook(t, h, body, orchestrator.SignWebhook(webhookSecret, []byte(body), clock.now()))
		return code
	}
	if send(`{"n":1}`) != http.StatusOK || send(`{"n":2}`) != http.StatusOK {
		t.Fatal("first two callbacks refused")
	}
	// Full of unexpired signatures: fail closed.
	if code := send(`{"n":3}`); code != http.StatusServiceUnavailable {
		t.Fatalf("third callback with a full cache: %d, want 503", code)
	}
	// Once they expire (after the tolerance), they are evicted.
	clock.set(now.Add(time.Minute + time.Second))
	if code := send(`{"n":3}`); code != http.StatusOK {
		t.Fatalf("third callback after expiry: %d, want 200", code)
	}
}

func TestVerifyWebhookSecretRotation(t *testing.T) {
	next := &webhookNext{}
	h := newVerifier(t, next, orchestrator.WithWebhookSecret(otherSecret))
	for i, s := range [][]byte{webhookSecret, otherSecret} {
		body := `{"n":` + string(rune('0'+i)) + `}`
		if code, out := callWebhook(t, h, body, orchestrator.SignWebhook(s, []byte(body), time.Now())); code != http.StatusOK {
			t.Errorf("secret %d: %d %+v, want 200", i, code, out)
		}
	}
	body := `{"n":9}`
	if code, _ := callWebhook(t, h, body, orchestrator.SignWebhook([]byte("a third secret, unknown here"), []byte(body), time.Now())); code != http.StatusUnauthorized {
		t.Errorf("unknown secret: %d, want 401", code)
	}
}

func TestVerifyWebhookConfig(t *testing.T) {
	next := &webhookNext{}
	for name, c := range map[string]struct {
		secret []byte
		opts   []orchestrator.WebhookOption
	}{
		"no secret":           {nil, nil},
		"short secret":        {[]byte("short"), nil},
		"short second secret": {webhookSecret, []orchestrator.WebhookOption{orchestrator.WithWebhookSecret([]byte("x"))}},
	} {
		if _, err := orchestrator.VerifyWebhook(c.secret, next, c.opts...); !errors.Is(err, orchestrator.ErrWebhookSecret) {
			t.Errorf("%s: %v, want ErrWebhookSecret", name, err)
		}
	}
	for name, opt := range map[string]orchestrator.WebhookOption{
		"tolerance":    orchestrator.WithWebhookTolerance(0),
		"max body":     orchestrator.WithWebhookMaxBody(0),
		"replay cache": orchestrator.WithWebhookReplayCache(-1),
	} {
		if _, err := orchestrator.VerifyWebhook(webhookSecret, next, opt); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := orchestrator.VerifyWebhook(webhookSecret, nil); err == nil {
		t.Error("nil handler: no error")
	}
}

// TestVerifyWebhookLogsNoSecret: refusals are logged with a reason, never
// with the secret or a signature.
func TestVerifyWebhookLogsNoSecret(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	h := newVerifier(t, &webhookNext{}, orchestrator.WithWebhookLogger(logger))
	body := `{"n":1}`
	good := orchestrator.SignWebhook(webhookSecret, []byte(body), time.Now())
	callWebhook(t, h, body, "")
	callWebhook(t, h, `{"n":2}`, good)
	callWebhook(t, h, body, orchestrator.SignWebhook(webhookSecret, []byte(body), time.Now().Add(-time.Hour)))
	log := buf.String()
	if strings.Count(log, "webhook refused") != 3 {
		t.Fatalf("log %q, want three refusals", log)
	}
	if strings.Contains(log, string(webhookSecret)) || strings.Contains(log, good[strings.Index(good, "v1=")+3:]) {
		t.Fatalf("log carries the secret or a signature: %q", log)
	}
}

// TestVerifyWebhookWrapsResumeHandler: in front of the resume webhook,
// an unsigned or forged resume of a paused saga is refused and changes
// nothing; a signed one reaches the handler intact and resumes the saga;
// its replay is refused.
func TestVerifyWebhookWrapsResumeHandler(t *testing.T) {
	r := newRig(t, "memory")
	r.pauseCharge.Store(true)
	r.startWorker(r.svcStock)
	r.startWorker(r.svcPay)
	o, _ := r.startOrchestrator()
	ids := startConcurrently(t, o, 1)
	id := ids[0]
	waitState(t, o, id, eventstore.StatePaused)
	h := newVerifier(t, o.ResumeHandler())
	key := topics.IdempotencyKey(id, 1, topics.KindProcess)
	body := `{"transaction_id":"` + id + `","correlation_key":"` + key + `","context":{"auth":"ok"}}`
	if code, _ := callWebhook(t, h, body, ""); code != http.StatusUnauthorized {
		t.Fatalf("unsigned resume: %d, want 401", code)
	}
	if code, _ := callWebhook(t, h, body, orchestrator.SignWebhook(otherSecret, []byte(body), time.Now())); code != http.StatusUnauthorized {
		t.Fatalf("forged resume: %d, want 401", code)
	}
	if s, _ := r.store.LoadTransaction(context.Background(), o.Scope(), id); s.State != eventstore.StatePaused {
		t.Fatalf("refused resumes changed the saga: %s", s.State)
	}
	sig := orchestrator.SignWebhook(webhookSecret, []byte(body), time.Now())
	if code, out := callWebhook(t, h, body, sig); code != http.StatusOK || out.Status != "resumed" {
		t.Fatalf("signed resume: %d %+v, want 200 resumed", code, out)
	}
	if code, _ := callWebhook(t, h, body, sig); code != http.StatusConflict {
		t.Fatalf("replayed resume: %d, want 409", code)
	}
	expectAll(t, waitTerminal(t, o, ids, time.Minute), eventstore.StateCompleted)
}
