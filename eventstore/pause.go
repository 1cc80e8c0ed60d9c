package eventstore

// The store-level vocabulary of pausable sagas, shared by the orchestrator
// (which pauses, resumes and re-invokes) and the admin side (recovery's
// RequestResume, sagactl resume), which asks for a resume through the store
// alone: both write and read the same claim.

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// Owners of a pause's claim (Marker.Owner of ResumeClaimKey): who continues
// the pause. Exactly one claim of a pause applies, so a resume and the
// pause's deadline never both continue it.
const (
	// ClaimResume: a resume continues the pause with the resume context
	// held in the claim's Reply. A retry node that finds this claim on a
	// saga still PAUSED at the claimed attempt continues it (this is how
	// a resume requested through the store alone takes effect).
	ClaimResume = "resume"
	// ClaimDeadline: the pause's deadline passed and the paused step is
	// invoked again; a later resume is refused.
	ClaimDeadline = "deadline"
)

// ResumeClaimTTL is how long a pause's claim is kept: long enough for a
// late duplicate resume (a webhook retried by its sender) to be recognised
// as such.
const ResumeClaimTTL = 7 * 24 * time.Hour

// resumeClaimPrefix starts the Kind of a claim's marker key.
const resumeClaimPrefix = "resume:"

// ResumeClaimKey is the execution marker that decides who continues the
// pause of txID at span, kind ("process" or "revert") and attempt: a resume
// or the deadline (see ClaimResume, ClaimDeadline). It lives in the saga's
// marker partition, so it goes with the saga's other markers.
func ResumeClaimKey(scope Scope, txID string, span int, kind string, attempt int) MarkerKey {
	return MarkerKey{Scope: scope, TxID: txID, Span: span, Kind: resumeClaimPrefix + kind, Site: "attempt:" + strconv.Itoa(attempt)}
}

// IsResumeOf reports whether m is a claim taken by a resume (ClaimResume)
// of a pause at span and kind, whatever its attempt: the sign that a
// resume with the correlation key of that span and kind went through.
func (m Marker) IsResumeOf(span int, kind string) bool {
	return m.Span == span && m.Kind == resumeClaimPrefix+kind && m.Owner == ClaimResume
}

// earlyResumePrefix starts the Kind of an early resume's marker key.
const earlyResumePrefix = "resume-early:"

// EarlyResumeKey is the execution marker that keeps a resume that arrived
// before its pause: a resume with the correlation key of txID's span and
// kind ("process" or "revert") while that step was still in flight (the
// worker hands the key to the outside system before it replies, so a fast
// webhook can come first). The pause of that span and kind consumes it
// when it is applied: it claims itself for a resume with the kept resume
// context (ResumeClaim), as if the resume had come after it. It lives in
// the saga's marker partition and goes with it.
func EarlyResumeKey(scope Scope, txID string, span int, kind string) MarkerKey {
	return MarkerKey{Scope: scope, TxID: txID, Span: span, Kind: earlyResumePrefix + kind, Site: "early"}
}

// EarlyResume returns the early resume of txID's span and kind carrying
// the resume context rc (msgpack-encoded in Reply), checked with
// ValidResumeContext. Write it with InsertMarker and a lease of
// ResumeClaimTTL: the first early resume is kept, a repeated one finds it.
func EarlyResume(scope Scope, txID string, span int, kind string, rc map[string]string) (Marker, error) {
	if err := ValidResumeContext(rc); err != nil {
		return Marker{}, err
	}
	b, err := EncodeResumeContext(rc)
	if err != nil {
		return Marker{}, err
	}
	return Marker{MarkerKey: EarlyResumeKey(scope, txID, span, kind), State: MarkerCommitted, Owner: ClaimResume, Reply: b}, nil
}

// ResumeClaim returns the claim of the pause of txID at span, kind and
// attempt for owner, carrying the resume context rc (msgpack-encoded in
// Reply). Write it with InsertMarker and a lease of ResumeClaimTTL: only
// the first claim applies. rc is checked with ValidResumeContext.
func ResumeClaim(scope Scope, txID string, span int, kind string, attempt int, owner string, rc map[string]string) (Marker, error) {
	if err := ValidResumeContext(rc); err != nil {
		return Marker{}, err
	}
	b, err := EncodeResumeContext(rc)
	if err != nil {
		return Marker{}, err
	}
	return Marker{MarkerKey: ResumeClaimKey(scope, txID, span, kind, attempt), State: MarkerCommitted, Owner: owner, Reply: b}, nil
}

// EncodeResumeContext encodes a resume context as it is stored: in a
// claim's Reply and in the ResumeContext of the "resumed" tryout (a
// msgpack map of strings).
func EncodeResumeContext(rc map[string]string) ([]byte, error) {
	b, err := msgpack.Marshal(rc)
	if err != nil {
		return nil, fmt.Errorf("eventstore: encode resume context: %w", err)
	}
	return b, nil
}

// DecodeResumeContext decodes what EncodeResumeContext made (nil for an
// empty b).
func DecodeResumeContext(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var rc map[string]string
	if err := msgpack.Unmarshal(b, &rc); err != nil {
		return nil, fmt.Errorf("eventstore: decode resume context: %w", err)
	}
	return rc, nil
}

// Limits of a resume context's entries (the same as topics.ValidResumeEntry,
// which checks a command's).
const (
	MaxResumeKeyBytes   = 1024
	MaxResumeValueBytes = 64 << 10
)

// ValidResumeContext checks every entry of rc: a non-empty key of at most
// MaxResumeKeyBytes without NUL bytes, a value of at most
// MaxResumeValueBytes, both valid UTF-8. The error wraps ErrInvalid.
func ValidResumeContext(rc map[string]string) error {
	for k, v := range rc {
		switch {
		case k == "" || len(k) > MaxResumeKeyBytes || !utf8.ValidString(k) || strings.IndexByte(k, 0) >= 0:
			return fmt.Errorf("%w: resume context key %.64q: empty, over %d bytes, not valid UTF-8 or holding a NUL byte", ErrInvalid, k, MaxResumeKeyBytes)
		case len(v) > MaxResumeValueBytes || !utf8.ValidString(v):
			return fmt.Errorf("%w: resume context value of %.64q: over 64 KiB or not valid UTF-8", ErrInvalid, k)
		}
	}
	return nil
}

// CorrelationKey is the key a resume of txID paused at span and kind must
// give: the idempotency key of that step (equal to topics.IdempotencyKey,
// which workers see as worker.Step.IdempotencyKey).
func CorrelationKey(txID string, span int, kind string) string {
	return txID + ":" + strconv.Itoa(span) + ":" + kind
}

// ParseCorrelationKey splits a correlation key of txID into its span and
// kind; ok is false when key is not one of txID's keys.
func ParseCorrelationKey(txID, key string) (span int, kind string, ok bool) {
	rest, ok := strings.CutPrefix(key, txID+":")
	if !ok {
		return 0, "", false
	}
	spanStr, kind, ok := strings.Cut(rest, ":")
	if !ok || (kind != "process" && kind != "revert") {
		return 0, "", false
	}
	span, err := strconv.Atoi(spanStr)
	if err != nil || span < 0 || strconv.Itoa(span) != spanStr {
		return 0, "", false
	}
	return span, kind, true
}
