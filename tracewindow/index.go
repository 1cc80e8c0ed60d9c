package tracewindow

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Index lists the sagas of a scope without scanning the event store: the
// store keys every saga by its transaction id alone, so "the recent sagas
// of a domain" needs a second structure, fed by the orchestrator's state
// changes (Listener) and read by the Trace Window. Two implementations
// come with the module: MemoryIndex (for the in-memory store and tests) and
// cassandraindex.Index (its own table, partitioned by scope, domain and
// hour of creation, clustered by transaction id descending).
//
// Transaction ids made by orchestrator.NewTxID start with their creation
// time in unix milliseconds, hex-encoded, so they sort as text in creation
// order: "newest first" is "transaction id descending", a time range is a
// range of ids (see IDPrefix), and a paging cursor is an id (or an id
// prefix).
type Index interface {
	// Recent lists the sagas of q.Scope and q.Domain created in
	// [q.From, q.To] (whose state is one of q.States, if any), newest
	// first, starting below q.After; see Query and Page.
	Recent(ctx context.Context, q Query) (Page, error)
	// Domains lists the domains the index has seen in scope, sorted.
	Domains(ctx context.Context, scope eventstore.Scope) ([]string, error)
	// Census counts the sagas of scope created in [from, to] by domain and
	// state, and finds the oldest one in flight. It may stop early on a
	// large index and say so (Census.Truncated).
	Census(ctx context.Context, scope eventstore.Scope, from, to time.Time) (Census, error)
	// Observe records e (a saga's state after a transition). It runs on
	// the orchestrator's reply path: it does not block for I/O, but for a
	// bounded write of a saga's end where the index writes ends through
	// (cassandraindex: before the orchestrator deletes the saga's watchdog,
	// so that Repair can find every saga the index lost). A write
	// older than the one the index holds for the saga (by UpdatedAt) does
	// not replace it.
	Observe(scope eventstore.Scope, e Entry)
}

// Entry is what an index keeps of one saga: enough for a list row.
type Entry struct {
	TxID   string           `json:"tx_id"`
	Domain string           `json:"domain"`
	State  eventstore.State `json:"state"`
	// Span, Kind and Endpoint name the step of the last transition.
	Span     int    `json:"span"`
	Kind     string `json:"kind,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	// Error is the last error, cut to MaxEntryError bytes.
	Error string `json:"error,omitempty"`
	// Definition is the version of the domain's definition the saga
	// started with (orchestrator.Saga.Version; 0: not known, e.g. an
	// entry written before versions).
	Definition int       `json:"definition_version,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// MaxEntryError bounds Entry.Error (the whole error is in the saga row).
const MaxEntryError = 256

// Query selects sagas for Index.Recent.
type Query struct {
	Scope  eventstore.Scope
	Domain string
	// From and To bound the creation time (inclusive, millisecond
	// precision).
	From, To time.Time
	// States keeps only sagas in one of these states (empty: any).
	States []eventstore.State
	// After is the cursor: only sagas whose id sorts below it are listed
	// ("" starts at To). Pass the previous Page.Next.
	After string
	// Limit bounds the page (1..MaxLimit).
	Limit int
}

// MaxLimit bounds Query.Limit.
const MaxLimit = 500

// MaxRange bounds To − From of a Query.
const MaxRange = 31 * 24 * time.Hour

// Page is one page of Index.Recent.
type Page struct {
	// Entries are newest first.
	Entries []Entry `json:"sagas"`
	// Next is the cursor of the next page (Query.After); "" when the range
	// is exhausted. A page can hold fewer than Limit entries and still have
	// a Next: an index may stop after a bounded amount of reading.
	Next string `json:"next,omitempty"`
	// Scanned counts the index rows read.
	Scanned int `json:"scanned"`
}

// Census is what Index.Census counts.
type Census struct {
	// ByDomain maps a domain to its saga counts by state.
	ByDomain map[string]map[eventstore.State]int
	// Oldest is the oldest saga in flight (nil: none).
	Oldest *Entry
	// Scanned counts the rows read; Truncated says the count stopped early
	// (a bound on rows read) and covers only the newest sagas.
	Scanned   int
	Truncated bool
}

// InFlight reports whether a saga in state s still has work ahead of it
// without an operator: every state but the terminal ones and DISABLED.
func InFlight(s eventstore.State) bool {
	return !s.Terminal() && s != eventstore.StateDisabled
}

// ErrInvalidQuery is wrapped by Validate's errors.
var ErrInvalidQuery = errors.New("tracewindow: invalid query")

// Validate checks q (scope, domain, range, cursor, limit).
func (q Query) Validate() error {
	if err := q.Scope.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidQuery, err)
	}
	switch {
	case q.Domain == "":
		return fmt.Errorf("%w: empty domain", ErrInvalidQuery)
	case q.From.IsZero() || q.To.IsZero():
		return fmt.Errorf("%w: from and to are required", ErrInvalidQuery)
	case q.From.After(q.To):
		return fmt.Errorf("%w: from %s is after to %s", ErrInvalidQuery, q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	case q.To.Sub(q.From) > MaxRange:
		return fmt.Errorf("%w: the range %s..%s is longer than %v", ErrInvalidQuery, q.From.Format(time.RFC3339), q.To.Format(time.RFC3339), MaxRange)
	case q.Limit < 1 || q.Limit > MaxLimit:
		return fmt.Errorf("%w: limit %d: want 1..%d", ErrInvalidQuery, q.Limit, MaxLimit)
	case q.After != "" && !ValidCursor(q.After):
		return fmt.Errorf("%w: cursor %.64q is not a transaction id or id prefix", ErrInvalidQuery, q.After)
	}
	for _, s := range q.States {
		if !KnownState(s) {
			return fmt.Errorf("%w: unknown state %.32q", ErrInvalidQuery, string(s))
		}
	}
	return nil
}

// States lists every saga state in lifecycle order.
var States = []eventstore.State{
	eventstore.StateStarted, eventstore.StateInProgress, eventstore.StatePaused,
	eventstore.StateRetryPending, eventstore.StateFailed, eventstore.StateCancelling, eventstore.StateCompensating,
	eventstore.StateCompleted, eventstore.StateCompensated, eventstore.StateCompensationFailed,
	eventstore.StateTerminated, eventstore.StateDisabled,
}

// KnownState reports whether s is one of States.
func KnownState(s eventstore.State) bool {
	for _, k := range States {
		if k == s {
			return true
		}
	}
	return false
}

var cursorRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}(-[0-9a-f-]{0,23})?$`)

// ValidCursor reports whether c can be a Query.After: a transaction id made
// by orchestrator.NewTxID, or a prefix of one at least as long as IDPrefix.
func ValidCursor(c string) bool { return cursorRE.MatchString(c) }

// IDPrefix returns the first 13 characters shared by every transaction id
// made by orchestrator.NewTxID at t ("hhhhhhhh-hhhh": unix milliseconds,
// hex). Ids made at t or later sort at or above it; ids made before t sort
// below it.
func IDPrefix(t time.Time) string {
	ms := uint64(t.UnixMilli())
	return fmt.Sprintf("%08x-%04x", (ms>>16)&0xffffffff, ms&0xffff)
}

// IDTime returns the creation time encoded in a transaction id made by
// orchestrator.NewTxID (or in a cursor), and false for other strings.
func IDTime(id string) (time.Time, bool) {
	if len(id) < 13 || id[8] != '-' || !cursorRE.MatchString(id) {
		return time.Time{}, false
	}
	hi, err1 := strconv.ParseUint(id[:8], 16, 32)
	lo, err2 := strconv.ParseUint(id[9:13], 16, 16)
	if err1 != nil || err2 != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(hi<<16 | lo)).UTC(), true
}

// clip cuts s to at most n bytes at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// EntryOf is the Entry of a saga row.
func EntryOf(tx *eventstore.Transaction) Entry {
	created := tx.CreatedAt
	if t, ok := IDTime(tx.TxID); ok {
		created = t
	}
	return Entry{
		TxID: tx.TxID, Domain: tx.Domain, State: tx.State, Span: tx.Span, Kind: tx.Kind,
		Endpoint: tx.Endpoint, Error: clip(tx.Error, MaxEntryError), Definition: max(tx.Definition, 1),
		CreatedAt: created, UpdatedAt: eventstore.StoredTime(tx.UpdatedAt),
	}
}

// Normalize prepares e for storing: CreatedAt from the id, times in UTC,
// the error cut. It reports false when e cannot be indexed (its id carries
// no creation time, or a key part is empty).
func Normalize(e Entry) (Entry, bool) {
	t, ok := IDTime(e.TxID)
	if !ok || e.Domain == "" || e.State == "" {
		return e, false
	}
	e.CreatedAt = t
	e.UpdatedAt = e.UpdatedAt.UTC()
	e.Error = clip(e.Error, MaxEntryError)
	return e, true
}
