package tracewindow

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/topics"
)

//go:embed web
var webFS embed.FS

// List defaults and bounds of the JSON API.
const (
	// DefaultListLimit is the page size of a list request without ?limit=.
	DefaultListLimit = 50
	// MaxListLimit is the largest ?limit= a list request may ask for, and
	// what GET /api/config reports as max_limit. It is the API's own
	// bound, below the largest page an Index serves (MaxLimit, 500), so that
	// one request of the page stays small.
	MaxListLimit = 200
	// DefaultListRange is the creation-time range a list covers when the
	// request names none: the last 24 hours.
	DefaultListRange = 24 * time.Hour
	// MinTokenLen is the shortest admin token New accepts.
	MinTokenLen = 16
)

// verifyParallelism bounds the state reads one list runs at once.
const verifyParallelism = 16

// Admin enables the mutating actions of the Trace Window. Each action is
// offered only when its function is set; every call needs the bearer
// Token (Authorization: Bearer <Token>) and a JSON POST.
//
// Every call that passes authentication (the authorizer, the token, the
// origin check) and names a valid transaction id leaves one record in the
// saga's audit trail in the store (eventstore.Auditor), whatever its
// outcome: who (WithActor; by default "admin-token from <address>"), when,
// the action, its detail (a resume's correlation key and the keys of its
// context, never their values), the result ("ok"; "refused: " and a class:
// bad request, not found, not enabled, unknown action, wrong state, wrong
// correlation key; "failed", or "failed: retry later") and the error. The
// saga's page shows the trail (GET /api/sagas/{txid}, "audit"). The answer
// of the action says "audit": "recorded", or "not recorded: ..." when the
// record could not be written (the action itself ran or was refused as the
// answer says; the cause is logged at Error). Calls refused by the
// authorizer or for a wrong token leave no record: they are logged.
type Admin struct {
	// Token is the bearer token the actions require (at least MinTokenLen
	// bytes).
	Token string
	// Restore hands a DISABLED, COMPENSATION_FAILED or RETRY_PENDING saga
	// back to the retry nodes: RecoveryRestore makes it from
	// recovery.Restore.
	Restore func(ctx context.Context, txID string) error
	// Redrive sends the step of a RETRY_PENDING saga again now
	// (orchestrator.Orchestrator.Redrive).
	Redrive func(ctx context.Context, txID string) error
	// Resend re-sends the command a saga in flight waits for
	// (orchestrator.Orchestrator.Restore).
	Resend func(ctx context.Context, txID string) error
	// Resume resumes a PAUSED saga with the span's correlation key and a
	// resume context (JSON: an object of strings, or absent; the Trace
	// Window refuses anything else with 400). The answer follows its
	// error: 409 for orchestrator.ErrNotPaused or ErrCorrelationKey (and
	// recovery's), 400 for eventstore.ErrInvalid or topics.ErrMalformed,
	// 503 with Retry-After for orchestrator.ErrRetryLater.
	Resume func(ctx context.Context, txID, correlationKey string, resumeContext json.RawMessage) error
	// Cancel cancels a saga that has not ended (orchestrator.Orchestrator.
	// Cancel; ControlAction makes one from a Kafka producer), and
	// Terminate stops one at once without compensating
	// (orchestrator.Orchestrator.Terminate). Both take a JSON body
	// {"reason": "..."} (required) and are called with a context naming
	// the caller (orchestrator.WithActor, the actor of the audit record),
	// which the saga's history records with the reason. 409 answers
	// orchestrator.ErrEnded and ErrNotCancellable.
	Cancel    func(ctx context.Context, txID, reason string) error
	Terminate func(ctx context.Context, txID, reason string) error
}

// Admin action names (the last path segment of the POST).
const (
	ActionRestore = "restore"
	ActionRedrive = "redrive"
	ActionResend  = "resend"
	ActionResume  = "resume"
	// ActionCancel and ActionTerminate: see Admin.Cancel and Terminate.
	ActionCancel    = "cancel"
	ActionTerminate = "terminate"
)

func (a *Admin) actions() []string {
	if a == nil {
		return nil
	}
	var out []string
	if a.Restore != nil {
		out = append(out, ActionRestore)
	}
	if a.Redrive != nil {
		out = append(out, ActionRedrive)
	}
	if a.Resend != nil {
		out = append(out, ActionResend)
	}
	if a.Resume != nil {
		out = append(out, ActionResume)
	}
	if a.Cancel != nil {
		out = append(out, ActionCancel)
	}
	if a.Terminate != nil {
		out = append(out, ActionTerminate)
	}
	return out
}

// ControlAction returns an Admin.Cancel (action orchestrator.ControlCancel)
// or Admin.Terminate (orchestrator.ControlTerminate) that sends the request
// with prod to the saga's owner (orchestrator.RequestControl), for the
// saga's domain as its row names it, on behalf of the actor of its context.
func ControlAction(prod *kgo.Client, s eventstore.Store, scope eventstore.Scope, action string, now func() time.Time) func(ctx context.Context, txID, reason string) error {
	return func(ctx context.Context, txID, reason string) error {
		tx, err := s.LoadTransaction(ctx, scope, txID)
		if err != nil {
			return err
		}
		return orchestrator.RequestControl(ctx, prod, s, orchestrator.ControlRequest{Scope: scope, Domain: tx.Domain, TxID: txID,
			Action: action, Actor: orchestrator.ActorFrom(ctx), Reason: reason, At: now()})
	}
}

// RecoveryRestore returns an Admin.Restore that runs recovery.Restore with
// w (give it the retry nodes' recovery configuration) at now().
func RecoveryRestore(s eventstore.Store, w *recovery.Writer, scope eventstore.Scope, now func() time.Time) func(ctx context.Context, txID string) error {
	return func(ctx context.Context, txID string) error {
		_, err := recovery.Restore(ctx, s, w, scope, txID, now())
		return err
	}
}

// Option configures New.
type Option func(*config)

type config struct {
	index        Index
	logger       *slog.Logger
	now          func() time.Time
	rcfg         recovery.Config
	admin        *Admin
	healthWindow time.Duration
	healthTTL    time.Duration
	refresh      time.Duration
	traceLink    string
	readToken    string
	authorize    func(*http.Request) error
	anonymous    bool
	actor        func(*http.Request) string
	unaudited    bool
	allowedHosts []string // besides IP literals and localhost (WithAllowedHosts)
}

// WithIndex sets the listing index (see Index). Without one, the Trace
// Window finds sagas by transaction id only.
func WithIndex(idx Index) Option { return func(c *config) { c.index = idx } }

// WithLogger sets the logger (admin actions are logged at Info). Default
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithClock sets the clock. Default time.Now in UTC.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithRecovery sets the recovery configuration the health counts use (the
// retry windows and look-back the retry nodes scan). Default
// recovery.DefaultConfig().
func WithRecovery(cfg recovery.Config) Option { return func(c *config) { c.rcfg = cfg } }

// WithAdmin enables the admin actions of a (see Admin).
func WithAdmin(a Admin) Option { return func(c *config) { c.admin = &a } }

// WithReadToken requires every API request (reads included) to carry
// Authorization: Bearer <token>; the admin token (WithAdmin) reads too. The
// token must be at least MinTokenLen bytes. The page asks for it when a
// read is refused. The page's own files (HTML, script, style) hold no saga
// data and are served without it.
func WithReadToken(token string) Option { return func(c *config) { c.readToken = token } }

// WithAuthorizer calls authorize on every API request before anything else
// (reads and admin actions): a non-nil error refuses it with 403 and a
// generic body, the error going to the log. It is the place for an OIDC
// session check, a client certificate (r.TLS) or the identity header of an
// authenticating proxy in front. With WithReadToken as well, a request needs
// both. The admin actions' audit records name the admin token and the
// caller's address unless WithActor names the person: give it the identity
// the authorizer checked (the proxy's header, the certificate's subject).
func WithAuthorizer(authorize func(r *http.Request) error) Option {
	return func(c *config) { c.authorize = authorize }
}

// WithActor names who runs an admin action in its audit record (see
// Admin): actor is called once per action that passed authentication, and
// what it returns is recorded (cut to eventstore.MaxAuditActorBytes). An
// empty name, or no WithActor, records "admin-token from <remote
// address>": every holder of the token is the same actor then, and behind
// a proxy the address is the proxy's. Use it with WithAuthorizer to record
// the person an OIDC session, a client certificate (r.TLS) or an
// authenticating proxy's identity header names; a header only the proxy
// can set, never one a client can forge.
func WithActor(actor func(r *http.Request) string) Option {
	return func(c *config) { c.actor = actor }
}

// WithUnauditedAdmin lets WithAdmin's actions run over a store that keeps
// no audit trail (one without eventstore.Auditor, such as a wrapper that
// hides it): New logs a warning, and each action's answer says its audit
// was not recorded. Without it New refuses such a store with ErrNoAudit.
// Both stores of this module keep the trail.
func WithUnauditedAdmin() Option { return func(c *config) { c.unaudited = true } }

// WithAnonymousReads serves every saga's data (payloads: customer data,
// amounts, references) to anyone who can reach the handler, without
// credentials. Use it only on loopback or behind a proxy that
// authenticates; New logs a warning. Without it, New requires
// WithReadToken or WithAuthorizer.
func WithAnonymousReads() Option { return func(c *config) { c.anonymous = true } }

// ErrNoAudit is returned by New when WithAdmin enables actions over a
// store that keeps no audit trail (it does not implement
// eventstore.Auditor) and WithUnauditedAdmin was not given.
var ErrNoAudit = errors.New("tracewindow: admin actions need an event store that keeps an audit trail (eventstore.Auditor; the memory and Cassandra stores do), or WithUnauditedAdmin")

// ErrNoReadAuth is returned by New when no read authentication is
// configured (WithReadToken, WithAuthorizer) and anonymous reads were not
// asked for explicitly (WithAnonymousReads).
var ErrNoReadAuth = errors.New("tracewindow: reads need WithReadToken or WithAuthorizer (or WithAnonymousReads to serve every saga's data to anyone who can reach the handler)")

// WithHealthWindow sets how far back the health counts look at saga
// creation times. Default: the transaction lifetime of the recovery
// configuration (24h), beyond which a saga in flight is disabled anyway.
func WithHealthWindow(d time.Duration) Option { return func(c *config) { c.healthWindow = d } }

// WithHealthCache sets how long one health computation is served to every
// caller before it is computed again. Default 5s.
func WithHealthCache(d time.Duration) Option { return func(c *config) { c.healthTTL = d } }

// WithRefresh sets how often the page polls a saga in flight. Default 2s.
func WithRefresh(d time.Duration) Option { return func(c *config) { c.refresh = d } }

// WithTraceLink sets a link template to the user's tracing UI, shown on the
// saga page: "{trace_id}" is replaced by the saga's trace id (see
// orchestrator.WithTracerProvider) and "{tx_id}" by the transaction id,
// e.g. "http://localhost:16686/trace/{trace_id}" for Jaeger. A template with
// {trace_id} shows no link for a saga that was not traced. Only http and
// https links are shown.
func WithTraceLink(template string) Option { return func(c *config) { c.traceLink = template } }

// TraceURL fills a WithTraceLink template for the saga txID whose trace is
// traceID: "" when the template is empty, needs a trace id the saga has not,
// or is not an http(s) link.
func TraceURL(template, txID, traceID string) string {
	if template == "" || (traceID == "" && strings.Contains(template, "{trace_id}")) {
		return ""
	}
	u := strings.NewReplacer("{trace_id}", url.PathEscape(traceID), "{tx_id}", url.PathEscape(txID)).Replace(template)
	if l := strings.ToLower(u); !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://") {
		return ""
	}
	return u
}

// Handler is the Trace Window: a JSON API and a web page over one scope's
// event store. Mount it under a prefix with http.StripPrefix:
//
//	mux.Handle("/trace/", http.StripPrefix("/trace", tw))
type Handler struct {
	store   eventstore.Store
	auditor eventstore.Auditor // nil: the store keeps no audit trail
	scope   eventstore.Scope
	cfg     config
	cop     *http.CrossOriginProtection
	token   [32]byte // sha256 of the admin token
	read    [32]byte // sha256 of the read token

	healthMu     sync.Mutex
	healthAt     time.Time
	healthDoc    *Health
	healthDocGen uint64        // healthGen when healthDoc was computed
	healthGen    atomic.Uint64 // bumped by learned: the index moved on
}

// New returns the Trace Window of scope's sagas in store.
func New(store eventstore.Store, scope eventstore.Scope, opts ...Option) (*Handler, error) {
	cfg := config{
		logger: slog.Default(), now: func() time.Time { return time.Now().UTC() },
		rcfg: recovery.DefaultConfig(), healthTTL: 5 * time.Second, refresh: 2 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if store == nil {
		return nil, errors.New("tracewindow: nil store")
	}
	if err := scope.Validate(); err != nil {
		return nil, fmt.Errorf("tracewindow: %w", err)
	}
	if cfg.healthWindow <= 0 {
		cfg.healthWindow = cfg.rcfg.TransactionLifetime
		if cfg.healthWindow <= 0 {
			cfg.healthWindow = recovery.DefaultTransactionLifetime
		}
	}
	h := &Handler{store: store, scope: scope, cfg: cfg, cop: http.NewCrossOriginProtection()}
	h.auditor, _ = store.(eventstore.Auditor)
	switch {
	case cfg.readToken != "":
		if len(cfg.readToken) < MinTokenLen {
			return nil, fmt.Errorf("tracewindow: the read token must be at least %d bytes", MinTokenLen)
		}
		h.read = sha256.Sum256([]byte(cfg.readToken))
	case cfg.authorize != nil:
	case cfg.anonymous:
		cfg.logger.Warn("tracewindow: reads are anonymous: anyone who can reach this handler reads every saga's data; " +
			"keep it on loopback or behind an authenticating proxy, or set WithReadToken or WithAuthorizer")
	default:
		return nil, ErrNoReadAuth
	}
	if a := cfg.admin; a != nil {
		if len(a.actions()) == 0 {
			return nil, errors.New("tracewindow: WithAdmin enables no action (set Restore, Redrive, Resend or Resume)")
		}
		if len(a.Token) < MinTokenLen {
			return nil, fmt.Errorf("tracewindow: the admin token must be at least %d bytes", MinTokenLen)
		}
		h.token = sha256.Sum256([]byte(a.Token))
		if h.auditor == nil {
			if !cfg.unaudited {
				return nil, ErrNoAudit
			}
			cfg.logger.Warn("tracewindow: admin actions are enabled over an event store that keeps no audit trail (it does not implement eventstore.Auditor): " +
				"they leave no record of who did what, only log lines")
		}
	}
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	if !h.checkHost(w, r) {
		return
	}
	p := r.URL.Path
	switch {
	case p == "":
		// Mounted with StripPrefix and asked for the prefix without its
		// slash: the page's relative links need it.
		u := r.URL.EscapedPath()
		if r.RequestURI != "" {
			u, _, _ = strings.Cut(r.RequestURI, "?")
		}
		http.Redirect(w, r, u+"/", http.StatusMovedPermanently)
	case strings.HasPrefix(p, "/api/"):
		hd.Set("Cache-Control", "no-store")
		h.serveAPI(w, r, strings.TrimPrefix(p, "/api/"))
	case p == "/" || p == "/index.html":
		h.serveFile(w, r, "web/index.html", "text/html; charset=utf-8")
	case p == "/assets/app.js":
		h.serveFile(w, r, "web/app.js", "text/javascript; charset=utf-8")
	case p == "/assets/app.css":
		h.serveFile(w, r, "web/app.css", "text/css; charset=utf-8")
	default:
		http.NotFound(w, r)
	}
}

func (h *Handler) serveFile(w http.ResponseWriter, r *http.Request, name, ctype string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	b, err := webFS.ReadFile(name)
	if err != nil {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", ctype)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b)
	}
}

// apiError is the body of every error response: {"error": "..."}; a
// failure's (writeFailure) adds its error id, an admin action's whether it
// was audited.
type apiError struct {
	Error   string `json:"error"`
	ErrorID string `json:"error_id,omitempty"`
	Audit   string `json:"audit,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, apiError{Error: fmt.Sprintf(format, args...)})
}

// serveAPI routes /api/<rest>.
func (h *Handler) serveAPI(w http.ResponseWriter, r *http.Request, rest string) {
	if !h.authorized(w, r) {
		return
	}
	parts := strings.Split(rest, "/")
	get := func(f func(http.ResponseWriter, *http.Request)) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed: use GET", r.Method)
			return
		}
		f(w, r)
	}
	switch {
	case rest == "config":
		get(h.apiConfig)
	case rest == "domains":
		get(h.apiDomains)
	case rest == "health":
		get(h.apiHealth)
	case rest == "search":
		get(h.apiSearch)
	case rest == "sagas":
		get(h.apiList)
	case len(parts) == 2 && parts[0] == "sagas" && parts[1] != "":
		get(func(w http.ResponseWriter, r *http.Request) { h.apiSaga(w, r, parts[1]) })
	case len(parts) == 3 && parts[0] == "sagas" && parts[1] != "" && parts[2] != "":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed: admin actions are POSTs", r.Method)
			return
		}
		h.apiAction(w, r, parts[1], parts[2])
	default:
		writeError(w, http.StatusNotFound, "no such API route: /api/%s", rest)
	}
}

// authorized runs the authorizer and checks the read token of an API
// request; it answers a refused one itself (401 or 403, generic bodies; the
// reason goes to the log).
func (h *Handler) authorized(w http.ResponseWriter, r *http.Request) bool {
	if f := h.cfg.authorize; f != nil {
		if err := f(r); err != nil {
			h.cfg.logger.Warn("tracewindow: request refused by the authorizer", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			writeError(w, http.StatusForbidden, "forbidden")
			return false
		}
	}
	if h.cfg.readToken == "" {
		return true
	}
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="stacksaga-trace-window"`)
		writeError(w, http.StatusUnauthorized, "authentication required: Authorization: Bearer <token>")
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	okRead := subtle.ConstantTimeCompare(sum[:], h.read[:]) == 1
	okAdmin := h.cfg.admin != nil && subtle.ConstantTimeCompare(sum[:], h.token[:]) == 1
	if !okRead && !okAdmin {
		w.Header().Set("WWW-Authenticate", `Bearer realm="stacksaga-trace-window", error="invalid_token"`)
		h.cfg.logger.Warn("tracewindow: request refused: wrong token", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		writeError(w, http.StatusUnauthorized, "wrong token")
		return false
	}
	return true
}

// ConfigDoc is the body of GET /api/config.
type ConfigDoc struct {
	Scope ScopeView `json:"scope"`
	// Index says sagas can be listed (an Index is configured).
	Index bool `json:"index"`
	// Admin lists the enabled admin actions (empty: read-only).
	Admin        []string           `json:"admin_actions"`
	States       []eventstore.State `json:"states"`
	RefreshMS    int64              `json:"refresh_ms"`
	HealthWindow int64              `json:"health_window_ms"`
	// HealthCacheMS is how long one health document is served before it
	// is computed again (WithHealthCache): the most its counts can lag the
	// index. A state change a list or an admin action read from the store
	// ends the cached document at once.
	HealthCacheMS int64  `json:"health_cache_ms"`
	DefaultRange  int64  `json:"default_range_ms"`
	MaxRange      int64  `json:"max_range_ms"`
	MaxLimit      int    `json:"max_limit"`
	TraceLink     string `json:"trace_link,omitempty"`
	// Audit says the store keeps the admin actions' audit trail.
	Audit bool `json:"audit"`
}

func (h *Handler) apiConfig(w http.ResponseWriter, _ *http.Request) {
	acts := h.cfg.admin.actions()
	if acts == nil {
		acts = []string{}
	}
	writeJSON(w, http.StatusOK, ConfigDoc{
		Scope: ScopeView{Region: h.scope.Region, Cluster: h.scope.Cluster, Service: h.scope.Service}, Index: h.cfg.index != nil, Admin: acts, States: States,
		RefreshMS: h.cfg.refresh.Milliseconds(), HealthWindow: h.cfg.healthWindow.Milliseconds(), HealthCacheMS: h.cfg.healthTTL.Milliseconds(),
		DefaultRange: DefaultListRange.Milliseconds(), MaxRange: MaxRange.Milliseconds(), MaxLimit: MaxListLimit,
		TraceLink: h.cfg.traceLink, Audit: h.auditor != nil,
	})
}

// ScopeView is a scope as the API shows it.
type ScopeView struct {
	Region  string `json:"region"`
	Cluster string `json:"cluster"`
	Service string `json:"service"`
}

// noIndex answers a listing request when no index is configured.
func noIndex(w http.ResponseWriter) {
	writeError(w, http.StatusNotImplemented, "listing is not available: this Trace Window has no index (find sagas by transaction id, or configure tracewindow.WithIndex)")
}

func (h *Handler) apiDomains(w http.ResponseWriter, r *http.Request) {
	if h.cfg.index == nil {
		noIndex(w)
		return
	}
	ds, err := h.cfg.index.Domains(r.Context(), h.scope)
	if err != nil {
		h.storeError(w, "list domains", err)
		return
	}
	if ds == nil {
		ds = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"domains": ds})
}

// storeError answers a failed read: 503 through writeFailure (the store's
// error names hosts and driver internals: it goes to the log only).
func (h *Handler) storeError(w http.ResponseWriter, what string, err error) {
	writeFailure(w, h.cfg.logger, http.StatusServiceUnavailable, what+" failed: the event store did not answer; try again", err, "")
}

// ListRow is one saga of a list.
type ListRow struct {
	Entry
	// DurationMS is UpdatedAt − CreatedAt for a terminal saga, else its
	// age.
	DurationMS int64 `json:"duration_ms"`
}

// ListDoc is the body of GET /api/sagas.
type ListDoc struct {
	Sagas   []ListRow `json:"sagas"`
	Next    string    `json:"next,omitempty"`
	Scanned int       `json:"scanned"`
	Query   ListQuery `json:"query"`
}

// ListQuery echoes the list's parameters after defaults.
type ListQuery struct {
	Domain string             `json:"domain,omitempty"`
	States []eventstore.State `json:"states,omitempty"`
	From   time.Time          `json:"from"`
	To     time.Time          `json:"to"`
	After  string             `json:"after,omitempty"`
	Limit  int                `json:"limit"`
}

// inFlightAlias is the state filter value that means every state in
// flight: every state that has not ended (Unended), DISABLED included.
const inFlightAlias = "in_flight"

// parseList reads the list parameters; its error is the 400 message.
func (h *Handler) parseList(r *http.Request) (Query, error) {
	v := r.URL.Query()
	now := h.cfg.now()
	q := Query{Scope: h.scope, Domain: strings.TrimSpace(v.Get("domain")), Limit: DefaultListLimit, After: strings.TrimSpace(v.Get("after"))}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxListLimit {
			return q, fmt.Errorf("limit %.32q: want an integer 1..%d", s, MaxListLimit)
		}
		q.Limit = n
	}
	var err error
	if q.To, err = parseTime("to", v.Get("to"), now); err != nil {
		return q, err
	}
	if q.From, err = parseTime("from", v.Get("from"), q.To.Add(-DefaultListRange)); err != nil {
		return q, err
	}
	if q.From.After(q.To) {
		return q, fmt.Errorf("from %s is after to %s", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	if q.To.Sub(q.From) > MaxRange {
		return q, fmt.Errorf("the range from %s to %s is longer than %d days", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339), int(MaxRange/(24*time.Hour)))
	}
	if q.After != "" && !ValidCursor(q.After) {
		return q, fmt.Errorf("after %.64q: not a cursor (a transaction id from a previous page's next)", q.After)
	}
	for _, raw := range v["state"] {
		for _, s := range strings.Split(raw, ",") {
			s = strings.TrimSpace(s)
			switch {
			case s == "":
			case strings.EqualFold(s, inFlightAlias):
				for _, st := range UnendedStates() {
					if !slices.Contains(q.States, st) {
						q.States = append(q.States, st)
					}
				}
			case KnownState(eventstore.State(strings.ToUpper(s))):
				if st := eventstore.State(strings.ToUpper(s)); !slices.Contains(q.States, st) {
					q.States = append(q.States, st)
				}
			default:
				return q, fmt.Errorf("state %.32q: want one of %s or %s", s, joinStates(States), inFlightAlias)
			}
		}
	}
	if q.Domain != "" && !validName(q.Domain) {
		return q, fmt.Errorf("domain %.64q: not a domain name", q.Domain)
	}
	return q, nil
}

func joinStates(ss []eventstore.State) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

// validName accepts the names topics.ValidName accepts, loosely: printable,
// no spaces, at most 249 bytes.
func validName(s string) bool {
	if len(s) > 249 {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// parseTime reads an RFC 3339 time or unix milliseconds; "" is def.
func parseTime(name, s string, def time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return def.UTC(), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > 1<<47 {
			return time.Time{}, fmt.Errorf("%s %.32q: unix milliseconds out of range", name, s)
		}
		return time.UnixMilli(n).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %.40q: want RFC 3339 (2006-01-02T15:04:05Z) or unix milliseconds", name, s)
	}
	if t.Year() < 1970 {
		return time.Time{}, fmt.Errorf("%s %.40q: before 1970", name, s)
	}
	return t.UTC(), nil
}

func (h *Handler) apiList(w http.ResponseWriter, r *http.Request) {
	if h.cfg.index == nil {
		noIndex(w)
		return
	}
	q, err := h.parseList(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	page, moved, err := List(r.Context(), h.store, h.cfg.index, q)
	// Write the states read from the store back, so that the health
	// counts (read from the index) agree with what this list shows.
	h.learned(r.Context(), moved...)
	if err != nil {
		h.storeError(w, "list sagas", err)
		return
	}
	entries := page.Entries
	now := h.cfg.now()
	doc := ListDoc{Sagas: make([]ListRow, 0, len(entries)), Next: page.Next, Scanned: page.Scanned,
		Query: ListQuery{Domain: q.Domain, States: q.States, From: q.From, To: q.To, After: q.After, Limit: q.Limit}}
	for _, e := range entries {
		end := now
		if e.State.Terminal() {
			end = e.UpdatedAt
		}
		doc.Sagas = append(doc.Sagas, ListRow{Entry: e, DurationMS: ms(end.Sub(e.CreatedAt))})
	}
	writeJSON(w, http.StatusOK, doc)
}

// validTxID checks a transaction id from a request.
func validTxID(id string) error {
	switch {
	case id == "":
		return errors.New("empty transaction id")
	case len(id) > 128:
		return errors.New("transaction id longer than 128 bytes")
	}
	for _, r := range id {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '/' {
			return fmt.Errorf("transaction id %.64q: unexpected character %q", id, r)
		}
	}
	return nil
}

func (h *Handler) apiSearch(w http.ResponseWriter, r *http.Request) {
	id := strings.ToLower(strings.TrimSpace(r.URL.Query().Get("tx")))
	if err := validTxID(id); err != nil {
		writeError(w, http.StatusBadRequest, "search: %v (give ?tx=<transaction id>)", err)
		return
	}
	tx, err := h.store.LoadTransaction(r.Context(), h.scope, id)
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "no saga %s in %s/%s/%s", id, h.scope.Region, h.scope.Cluster, h.scope.Service)
		return
	case errors.Is(err, eventstore.ErrInvalid):
		writeError(w, http.StatusBadRequest, "search: %v", err)
		return
	case err != nil:
		h.storeError(w, "search", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"saga": EntryOf(&tx)})
}

func (h *Handler) apiSaga(w http.ResponseWriter, r *http.Request, id string) {
	if err := validTxID(id); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx := r.Context()
	tx, err := h.store.LoadTransaction(ctx, h.scope, id)
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "no saga %s in %s/%s/%s", id, h.scope.Region, h.scope.Cluster, h.scope.Service)
		return
	case errors.Is(err, eventstore.ErrInvalid):
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	case err != nil:
		h.storeError(w, "read saga", err)
		return
	}
	tryouts, err := h.store.Tryouts(ctx, h.scope, id)
	if err != nil {
		h.storeError(w, "read history", err)
		return
	}
	var frozen *eventstore.FrozenTransaction
	if tx.State == eventstore.StateDisabled || tx.State == eventstore.StateCompensationFailed || tx.State == eventstore.StateRetryPending {
		f, err := h.store.GetFrozen(ctx, h.scope, id)
		switch {
		case err == nil:
			frozen = &f
		case !errors.Is(err, eventstore.ErrNotFound):
			h.storeError(w, "read frozen copy", err)
			return
		}
	}
	d := buildDetail(&tx, tryouts, frozen, h.cfg.rcfg, h.cfg.now())
	d.Saga.TraceURL = TraceURL(h.cfg.traceLink, tx.TxID, tx.TraceID)
	d.Actions = h.actionsFor(&tx)
	h.auditTrail(ctx, &d)
	writeJSON(w, http.StatusOK, d)
}

// actionsFor lists the enabled admin actions that apply to tx now.
func (h *Handler) actionsFor(tx *eventstore.Transaction) []string {
	out := []string{}
	for _, a := range h.cfg.admin.actions() {
		ok := false
		switch a {
		case ActionRestore:
			ok = tx.State == eventstore.StateDisabled || tx.State == eventstore.StateRetryPending ||
				(tx.State == eventstore.StateCompensationFailed && tx.Kind == kindRevert)
		case ActionRedrive:
			ok = tx.State == eventstore.StateRetryPending
		case ActionResend:
			ok = awaitsReply(tx.State)
		case ActionResume:
			ok = tx.State == eventstore.StatePaused
		case ActionCancel:
			ok = InFlight(tx.State)
		case ActionTerminate:
			ok = !tx.State.Terminal()
		}
		if ok {
			out = append(out, a)
		}
	}
	return out
}

// maxActionBody bounds an admin POST's body.
const maxActionBody = 64 << 10

// reasonBody is the body of the cancel and terminate actions.
type reasonBody struct {
	Reason string `json:"reason"`
}

// resumeBody is the body of the resume action.
type resumeBody struct {
	CorrelationKey string          `json:"correlation_key"`
	Context        json.RawMessage `json:"context"`
}

// apiAction runs an admin action. It needs admin enabled, a same-origin
// (or non-browser) request, the bearer token and a JSON body: a
// cross-site form cannot send the Authorization header nor a JSON content
// type, and the page keeps the token out of cookies. Once the caller is
// authenticated and the transaction id valid, the action is audited
// whatever its outcome (see Admin).
func (h *Handler) apiAction(w http.ResponseWriter, r *http.Request, id, action string) {
	a := h.cfg.admin
	if a == nil {
		writeError(w, http.StatusForbidden, "admin actions are disabled on this Trace Window (read-only)")
		return
	}
	if err := h.cop.Check(r); err != nil {
		writeError(w, http.StatusForbidden, "cross-origin request refused: %v", err)
		return
	}
	auth := r.Header.Get("Authorization")
	scheme, tok, _ := strings.Cut(auth, " ")
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="stacksaga-trace-window"`)
		writeError(w, http.StatusUnauthorized, "admin actions need Authorization: Bearer <token>")
		return
	}
	if sum := sha256.Sum256([]byte(strings.TrimSpace(tok))); subtle.ConstantTimeCompare(sum[:], h.token[:]) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="stacksaga-trace-window", error="invalid_token"`)
		h.cfg.logger.Warn("tracewindow: admin action refused: wrong token", "action", action, "tx", id, "remote", r.RemoteAddr)
		writeError(w, http.StatusUnauthorized, "wrong admin token")
		return
	}
	if err := validTxID(id); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	rec := eventstore.AuditRecord{TxID: id, At: h.cfg.now(), Actor: h.actor(r), Action: action}
	// A cancel or terminate records its actor in the saga's history too.
	r = r.WithContext(orchestrator.WithActor(r.Context(), rec.Actor))
	out := h.runAction(r, a, id, action)
	rec.Detail, rec.Result = out.detail, out.result
	if out.code != http.StatusOK {
		rec.Error = out.msg
		if out.err != nil {
			rec.Error = out.err.Error()
		}
	}
	log := h.cfg.logger.With("action", action, "tx", id, "remote", r.RemoteAddr, "actor", rec.Actor, "result", rec.Result)
	switch {
	case out.code == http.StatusOK:
		log.Info("tracewindow: admin action done")
	case out.code >= http.StatusInternalServerError:
		// Logged with its error id by writeFailure below.
	default:
		log.Info("tracewindow: admin action refused", "err", rec.Error)
	}
	audit := h.audit(r.Context(), rec, log)
	if out.code != http.StatusOK {
		if out.code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(int(orchestrator.ResumeRetryAfter/time.Second)))
		}
		if out.code >= http.StatusInternalServerError {
			writeFailure(w, log, out.code, out.msg, out.err, audit)
			return
		}
		writeJSON(w, out.code, apiError{Error: out.msg, Audit: audit})
		return
	}
	doc := map[string]any{"ok": true, "action": action, "tx_id": id, "audit": audit}
	if tx, err := h.store.LoadTransaction(r.Context(), h.scope, id); err == nil {
		e := EntryOf(&tx)
		h.learned(r.Context(), e)
		doc["saga"] = e
	}
	writeJSON(w, http.StatusOK, doc)
}

// Audit results of the admin actions (eventstore.AuditRecord.Result).
const (
	resultOK             = eventstore.AuditOK
	resultBadRequest     = eventstore.AuditRefused + ": bad request"
	resultNotFound       = eventstore.AuditRefused + ": not found"
	resultNotEnabled     = eventstore.AuditRefused + ": not enabled"
	resultUnknownAction  = eventstore.AuditRefused + ": unknown action"
	resultWrongState     = eventstore.AuditRefused + ": wrong state"
	resultCorrelationKey = eventstore.AuditRefused + ": wrong correlation key"
	resultRetryLater     = eventstore.AuditFailed + ": retry later"
	resultFailed         = eventstore.AuditFailed
)

// actionOutcome is what an admin action came to: its answer (code, msg)
// and its audit (result, detail, err).
type actionOutcome struct {
	code   int
	msg    string // the error answered; "" when ok (a 5xx's: writeFailure's text)
	result string
	detail string
	err    error // the action's error, recorded whole (msg otherwise)
}

func refused(code int, result, format string, args ...any) actionOutcome {
	return actionOutcome{code: code, result: result, msg: fmt.Sprintf(format, args...)}
}

// runAction checks the request's body and runs the action.
func (h *Handler) runAction(r *http.Request, a *Admin, id, action string) actionOutcome {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return refused(http.StatusUnsupportedMediaType, resultBadRequest, "admin actions take Content-Type: application/json (form posts are refused)")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxActionBody+1))
	if err != nil {
		return refused(http.StatusBadRequest, resultBadRequest, "read body: %v", err)
	}
	if len(body) > maxActionBody {
		return refused(http.StatusRequestEntityTooLarge, resultBadRequest, "body over %d bytes", maxActionBody)
	}
	if len(strings.TrimSpace(string(body))) > 0 && !json.Valid(body) {
		return refused(http.StatusBadRequest, resultBadRequest, "body is not JSON")
	}
	ctx := r.Context()
	var detail string
	switch action {
	case ActionRestore:
		err = call(ctx, a.Restore, id)
	case ActionRedrive:
		err = call(ctx, a.Redrive, id)
	case ActionResend:
		err = call(ctx, a.Resend, id)
	case ActionResume:
		if a.Resume == nil {
			err = errNotEnabled
			break
		}
		var rb resumeBody
		if len(body) > 0 {
			if jerr := json.Unmarshal(body, &rb); jerr != nil {
				return refused(http.StatusBadRequest, resultBadRequest, "resume body: %v", jerr)
			}
		}
		if rb.CorrelationKey == "" {
			return refused(http.StatusBadRequest, resultBadRequest, `resume needs {"correlation_key": "...", "context": {...}}`)
		}
		var rc map[string]string
		if len(rb.Context) > 0 {
			if jerr := json.Unmarshal(rb.Context, &rc); jerr != nil {
				out := refused(http.StatusBadRequest, resultBadRequest, "the resume context must be a JSON object of strings: %v", jerr)
				out.detail = resumeDetail(rb.CorrelationKey, nil)
				return out
			}
		}
		detail = resumeDetail(rb.CorrelationKey, rc)
		err = a.Resume(ctx, id, rb.CorrelationKey, rb.Context)
	case ActionCancel, ActionTerminate:
		f := a.Cancel
		if action == ActionTerminate {
			f = a.Terminate
		}
		if f == nil {
			err = errNotEnabled
			break
		}
		var rb reasonBody
		if len(body) > 0 {
			if jerr := json.Unmarshal(body, &rb); jerr != nil {
				return refused(http.StatusBadRequest, resultBadRequest, "%s body: %v", action, jerr)
			}
		}
		if strings.TrimSpace(rb.Reason) == "" {
			return refused(http.StatusBadRequest, resultBadRequest, `%s needs {"reason": "..."}`, action)
		}
		detail = "reason: " + rb.Reason
		err = f(ctx, id, rb.Reason)
	default:
		return refused(http.StatusNotFound, resultUnknownAction, "unknown admin action %.32q: want one of %s", action,
			strings.Join([]string{ActionRestore, ActionRedrive, ActionResend, ActionResume, ActionCancel, ActionTerminate}, ", "))
	}
	out := actionOutcome{code: http.StatusOK, result: resultOK, detail: detail, err: err}
	switch {
	case err == nil:
	case errors.Is(err, errNotEnabled):
		out.code, out.result, out.err = http.StatusNotFound, resultNotEnabled, nil
		out.msg = fmt.Sprintf("admin action %s is not enabled on this Trace Window", action)
	case errors.Is(err, eventstore.ErrNotFound):
		out.code, out.result = http.StatusNotFound, resultNotFound
		out.msg = fmt.Sprintf("no saga %s", id)
	case errors.Is(err, orchestrator.ErrCorrelationKey), errors.Is(err, recovery.ErrCorrelationKey):
		out.code, out.result, out.msg = http.StatusConflict, resultCorrelationKey, err.Error()
	case errors.Is(err, recovery.ErrNotRestorable), errors.Is(err, orchestrator.ErrNotRetryPending), errors.Is(err, orchestrator.ErrNotInFlight),
		errors.Is(err, orchestrator.ErrNotPaused), errors.Is(err, recovery.ErrNotPaused),
		errors.Is(err, orchestrator.ErrEnded), errors.Is(err, orchestrator.ErrNotCancellable):
		out.code, out.result, out.msg = http.StatusConflict, resultWrongState, err.Error()
	case errors.Is(err, eventstore.ErrInvalid), errors.Is(err, topics.ErrMalformed):
		out.code, out.result, out.msg = http.StatusBadRequest, resultBadRequest, err.Error()
	case errors.Is(err, orchestrator.ErrRetryLater):
		out.code, out.result = http.StatusServiceUnavailable, resultRetryLater
		out.msg = fmt.Sprintf("%s %s: not done now (the event store or Kafka did not answer), retry later", action, id)
	default:
		out.code, out.result = http.StatusInternalServerError, resultFailed
		out.msg = fmt.Sprintf("%s %s failed", action, id)
	}
	return out
}

// resumeDetail is the audit detail of a resume: its correlation key and
// the keys of its resume context, never their values.
func resumeDetail(key string, rc map[string]string) string {
	d := "correlation key " + key
	if len(rc) > 0 {
		d += "; context keys: " + strings.Join(slices.Sorted(maps.Keys(rc)), ", ")
	}
	return d
}

// actor names the caller of an admin action (WithActor, or the token and
// the caller's address).
func (h *Handler) actor(r *http.Request) string {
	if f := h.cfg.actor; f != nil {
		if a := strings.TrimSpace(f(r)); a != "" {
			return a
		}
	}
	return "admin-token from " + r.RemoteAddr
}

// Answers of an admin action about its audit record ("audit").
const (
	auditRecorded     = "recorded"
	auditNoTrail      = "not recorded: this event store keeps no audit trail"
	auditNotWritten   = "not recorded: the audit record could not be written (the event store refused it or did not answer; the cause is in the server's log)"
	auditWriteTimeout = 10 * time.Second
)

// audit appends rec (clipped to the store's bounds) to the saga's audit
// trail and returns what the answer says of it. It writes even when the
// client has gone (the action ran); a failure is logged at Error.
func (h *Handler) audit(ctx context.Context, rec eventstore.AuditRecord, log *slog.Logger) string {
	if h.auditor == nil {
		return auditNoTrail
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	defer cancel()
	if err := h.auditor.AppendAudit(ctx, h.scope, rec.Clip()); err != nil {
		log.Error("tracewindow: the admin action's audit record was not written", "err", err, "at", rec.At, "detail", rec.Detail, "action_err", rec.Error)
		return auditNotWritten
	}
	return auditRecorded
}

// MaxAuditShown is how many audit records the saga page shows: the latest.
const MaxAuditShown = 100

// auditTrail adds the saga's audit trail to d; a store that keeps none, or
// a read that fails (logged), leaves d.AuditUnavailable saying so.
func (h *Handler) auditTrail(ctx context.Context, d *Detail) {
	if h.auditor == nil {
		d.AuditUnavailable = "this event store keeps no audit trail"
		return
	}
	recs, err := h.auditor.AuditTrail(ctx, h.scope, d.Saga.TxID, MaxAuditShown+1)
	if err != nil {
		d.AuditUnavailable, _ = failure(h.cfg.logger.With("tx", d.Saga.TxID), "the audit trail could not be read: the event store did not answer", err)
		return
	}
	if len(recs) > MaxAuditShown {
		recs, d.AuditMore = recs[len(recs)-MaxAuditShown:], true
	}
	for _, rec := range recs {
		d.Audit = append(d.Audit, viewAudit(rec))
	}
}

var errNotEnabled = errors.New("tracewindow: action not enabled")

func call(ctx context.Context, f func(context.Context, string) error, id string) error {
	if f == nil {
		return errNotEnabled
	}
	return f(ctx, id)
}
