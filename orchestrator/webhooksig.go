package orchestrator

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WebhookSignatureHeader is the header VerifyWebhook checks and
// SignWebhook's value goes in: "t=<unix seconds>,v1=<hex HMAC-SHA256 of
// "<t>.<body>">" (several v1 entries allowed, one per signing secret).
const WebhookSignatureHeader = "StackSaga-Signature"

// Defaults of VerifyWebhook.
const (
	// DefaultWebhookTolerance is how far a signature's timestamp may be
	// from the verifier's clock, either way.
	DefaultWebhookTolerance = 5 * time.Minute
	// DefaultWebhookMaxBody bounds the body VerifyWebhook reads.
	DefaultWebhookMaxBody = 1 << 20
	// DefaultWebhookReplayCache bounds the accepted signatures remembered
	// against replays.
	DefaultWebhookReplayCache = 100_000
	// MinWebhookSecret is the shortest secret VerifyWebhook takes.
	MinWebhookSecret = 16
)

// ErrWebhookSecret is VerifyWebhook's error for a missing or short secret.
var ErrWebhookSecret = errors.New("orchestrator: webhook secret missing or shorter than 16 bytes")

// WebhookOption configures VerifyWebhook.
type WebhookOption interface{ applyWebhook(*webhookConfig) }

type webhookOptFunc func(*webhookConfig)

func (f webhookOptFunc) applyWebhook(c *webhookConfig) { f(c) }

type webhookConfig struct {
	secrets   [][]byte
	tolerance time.Duration
	maxBody   int64
	cacheSize int
	now       func() time.Time
	logger    *slog.Logger
}

// WithWebhookSecret adds a secret VerifyWebhook also accepts, for rotation:
// accept the old and the new while senders move over, then drop the old.
func WithWebhookSecret(secret []byte) WebhookOption {
	return webhookOptFunc(func(c *webhookConfig) { c.secrets = append(c.secrets, secret) })
}

// WithWebhookTolerance sets how far a signature's timestamp may be from
// the clock, in the past or the future (default DefaultWebhookTolerance).
// Accepted signatures are remembered that long against replays.
func WithWebhookTolerance(d time.Duration) WebhookOption {
	return webhookOptFunc(func(c *webhookConfig) { c.tolerance = d })
}

// WithWebhookMaxBody bounds the body read (default DefaultWebhookMaxBody);
// a longer one is answered 413.
func WithWebhookMaxBody(n int64) WebhookOption {
	return webhookOptFunc(func(c *webhookConfig) { c.maxBody = n })
}

// WithWebhookReplayCache bounds how many accepted signatures are
// remembered (default DefaultWebhookReplayCache). When it is full of
// unexpired ones, further callbacks are answered 503 until some expire:
// the guard fails closed.
func WithWebhookReplayCache(n int) WebhookOption {
	return webhookOptFunc(func(c *webhookConfig) { c.cacheSize = n })
}

// WithWebhookClock sets the verifier's clock (tests).
func WithWebhookClock(now func() time.Time) WebhookOption {
	return webhookOptFunc(func(c *webhookConfig) { c.now = now })
}

// WithWebhookLogger sets where refusals are logged (default
// slog.Default()). Secrets and signatures are never logged.
func WithWebhookLogger(l *slog.Logger) WebhookOption {
	return webhookOptFunc(func(c *webhookConfig) { c.logger = l })
}

// SignWebhook returns the WebhookSignatureHeader value signing body with
// secret at time t: "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">".
// Senders (and tests) set it on the request; sign each delivery, retries
// included, afresh.
func SignWebhook(secret, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(webhookMAC(secret, ts, body))
}

func webhookMAC(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// VerifyWebhook returns next behind a signature check, for the resume
// webhook (ResumeHandler) or a service's own handler over Resume. A
// correlation key identifies a paused step but authorises nothing: it is
// derived from the transaction id, so anyone who has seen that can compute
// it; the signature is what proves the callback comes from the party
// holding secret.
//
// Each request must carry WebhookSignatureHeader, "t=<unix seconds>,v1=<hex
// HMAC-SHA256 with secret of "<t>.<body>">" (SignWebhook makes it; more
// than one v1 is allowed). The body (at most DefaultWebhookMaxBody) is read
// whole, checked, and handed to next unchanged. Refusals answer JSON
// ResumeResponse errors and never reach next: 401 a missing or malformed
// header, a signature matching no secret (compared in constant time) or a
// timestamp further than the tolerance (DefaultWebhookTolerance) from the
// clock, past or future; 409 a replay, the same timestamp and body as a
// callback already accepted within the tolerance; 413 a body over the
// bound; 503 the replay cache full.
//
// A callback counts as accepted when next answers 2xx; otherwise it is
// forgotten, so that the sender may retry it as it was signed. The replay
// guard lives in this process's memory: behind several instances, a
// replay within the tolerance may reach another instance, which is
// harmless for a resume (a second resume of the same step is
// "already_resumed" and changes nothing) but not for a handler that is not
// idempotent.
//
// It fails with ErrWebhookSecret if any secret (secret, or one of
// WithWebhookSecret) is shorter than MinWebhookSecret bytes.
func VerifyWebhook(secret []byte, next http.Handler, opts ...WebhookOption) (http.Handler, error) {
	c := webhookConfig{
		secrets:   [][]byte{secret},
		tolerance: DefaultWebhookTolerance,
		maxBody:   DefaultWebhookMaxBody,
		cacheSize: DefaultWebhookReplayCache,
		now:       time.Now,
	}
	for _, o := range opts {
		o.applyWebhook(&c)
	}
	for _, s := range c.secrets {
		if len(s) < MinWebhookSecret {
			return nil, ErrWebhookSecret
		}
	}
	switch {
	case next == nil:
		return nil, errors.New("orchestrator: VerifyWebhook: nil handler")
	case c.tolerance <= 0:
		return nil, fmt.Errorf("orchestrator: VerifyWebhook: tolerance %v, want > 0", c.tolerance)
	case c.maxBody <= 0:
		return nil, fmt.Errorf("orchestrator: VerifyWebhook: max body %d, want > 0", c.maxBody)
	case c.cacheSize <= 0:
		return nil, fmt.Errorf("orchestrator: VerifyWebhook: replay cache %d, want > 0", c.cacheSize)
	case c.now == nil:
		c.now = time.Now
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	secrets := make([][]byte, len(c.secrets))
	for i, s := range c.secrets {
		secrets[i] = bytes.Clone(s)
	}
	c.secrets = secrets
	return &webhookVerifier{cfg: c, next: next, seen: map[[sha256.Size]byte]time.Time{}}, nil
}

type webhookVerifier struct {
	cfg  webhookConfig
	next http.Handler

	mu        sync.Mutex
	seen      map[[sha256.Size]byte]time.Time // digest of "<t>.<body>" → forget after
	lastSweep time.Time
}

func (v *webhookVerifier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	refuse := func(code int, public, reason string) {
		v.cfg.logger.Warn("orchestrator: webhook refused", "path", r.URL.Path, "remote", r.RemoteAddr, "status", code, "reason", reason)
		writeJSON(w, code, ResumeResponse{Status: "error", Error: public})
	}
	header := r.Header.Get(WebhookSignatureHeader)
	if header == "" {
		refuse(http.StatusUnauthorized, "missing "+WebhookSignatureHeader+" header", "no signature")
		return
	}
	ts, sigs, ok := parseWebhookSignature(header)
	if !ok {
		refuse(http.StatusUnauthorized, "malformed "+WebhookSignatureHeader+" header", "malformed signature header")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, v.cfg.maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		refuse(http.StatusRequestEntityTooLarge, "body too large", "body over "+strconv.FormatInt(v.cfg.maxBody, 10)+" bytes")
		return
	case err != nil:
		refuse(http.StatusBadRequest, "cannot read the body", "reading the body: "+err.Error())
		return
	}
	if !v.matches(ts, sigs, body) {
		refuse(http.StatusUnauthorized, "invalid signature", "signature matches no secret")
		return
	}
	// The timestamp is checked only once the signature holds, so that the
	// answer to an unsigned probe tells nothing about the clock.
	sec, _ := strconv.ParseInt(ts, 10, 64)
	now := v.cfg.now()
	signed := time.Unix(sec, 0)
	if d := now.Sub(signed); d > v.cfg.tolerance || d < -v.cfg.tolerance {
		refuse(http.StatusUnauthorized, "signature timestamp outside the tolerance", "timestamp "+signed.UTC().Format(time.RFC3339)+" off by "+d.String())
		return
	}
	digest := sha256.Sum256(append([]byte(ts+"."), body...))
	switch v.remember(digest, signed.Add(v.cfg.tolerance), now) {
	case rememberReplay:
		refuse(http.StatusConflict, "replayed callback", "replay of an accepted signature")
		return
	case rememberFull:
		w.Header().Set("Retry-After", strconv.Itoa(int(v.cfg.tolerance/time.Second)+1))
		refuse(http.StatusServiceUnavailable, "too many recent callbacks", "replay cache full")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	rec := &statusRecorder{ResponseWriter: w}
	v.next.ServeHTTP(rec, r)
	if rec.status != 0 && (rec.status < 200 || rec.status > 299) {
		v.forget(digest)
	}
}

func (v *webhookVerifier) matches(ts string, sigs [][]byte, body []byte) bool {
	ok := false
	for _, s := range v.cfg.secrets {
		want := webhookMAC(s, ts, body)
		for _, got := range sigs {
			if hmac.Equal(want, got) {
				ok = true
			}
		}
	}
	return ok
}

const (
	rememberNew = iota
	rememberReplay
	rememberFull
)

// remember records digest as accepted until expires, or reports it a
// replay, or the cache full.
func (v *webhookVerifier) remember(digest [sha256.Size]byte, expires, now time.Time) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	// A signature is acceptable up to and including signed+tolerance, so
	// it is a replay up to and including that instant too.
	if until, ok := v.seen[digest]; ok && !now.After(until) {
		return rememberReplay
	}
	if len(v.seen) >= v.cfg.cacheSize || now.Sub(v.lastSweep) > v.cfg.tolerance {
		for d, until := range v.seen {
			if now.After(until) {
				delete(v.seen, d)
			}
		}
		v.lastSweep = now
	}
	if len(v.seen) >= v.cfg.cacheSize {
		return rememberFull
	}
	v.seen[digest] = expires
	return rememberNew
}

func (v *webhookVerifier) forget(digest [sha256.Size]byte) {
	v.mu.Lock()
	delete(v.seen, digest)
	v.mu.Unlock()
}

// parseWebhookSignature splits "t=<unix seconds>,v1=<hex>[,v1=<hex>…]";
// unknown keys (a later scheme's) are ignored.
func parseWebhookSignature(h string) (ts string, sigs [][]byte, ok bool) {
	for _, part := range strings.Split(h, ",") {
		k, val, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found {
			return "", nil, false
		}
		switch k {
		case "t":
			if ts != "" || val == "" || len(val) > 12 {
				return "", nil, false
			}
			for _, c := range val {
				if c < '0' || c > '9' {
					return "", nil, false
				}
			}
			ts = val
		case "v1":
			b, err := hex.DecodeString(val)
			if err != nil || len(b) != sha256.Size {
				return "", nil, false
			}
			if len(sigs) < 8 {
				sigs = append(sigs, b)
			}
		}
	}
	return ts, sigs, ts != "" && len(sigs) > 0
}

// statusRecorder remembers the status next wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
