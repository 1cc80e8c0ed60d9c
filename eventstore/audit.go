package eventstore

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// AuditRecord is one admin action on a saga: who did what to it, when, and
// with what result. Admin tools append one per action they ran or refused
// after authenticating its caller (the Trace Window's admin actions,
// sagactl restore and resume); the saga engine itself writes none, so the
// hot path never touches the audit trail.
type AuditRecord struct {
	// TxID is the saga acted on (required).
	TxID string
	// At is when the action ran, kept in UTC at millisecond precision as
	// every time of the store. Zero: the store's clock when appended.
	At time.Time
	// Actor names who acted (required): the admin token and the caller's
	// address, a person named by an authenticating proxy,
	// "sagactl:<user>@<host>". At most MaxAuditActorBytes.
	Actor string
	// Action names what was asked: "restore", "redrive", "resend",
	// "resume" (required). At most MaxAuditActionBytes.
	Action string
	// Detail holds the action's arguments worth keeping: a resume's
	// correlation key and the keys of its resume context (never their
	// values, which may be payment data). At most MaxAuditDetailBytes.
	Detail string
	// Result is AuditOK, or AuditRefused or AuditFailed optionally
	// followed by ": " and a reason class ("refused: wrong state",
	// "failed: retry later") (required). At most MaxAuditResultBytes.
	Result string
	// Error is the refused or failed action's error text. It may name
	// internals (a store's hosts): tools show it to those who may read
	// them. At most MaxAuditErrorBytes.
	Error string
}

// Audit result classes: AuditRecord.Result is one of them, the last two
// optionally followed by ": " and a reason class.
const (
	// AuditOK: the action was done.
	AuditOK = "ok"
	// AuditRefused: the action was refused before it changed anything (a
	// saga in the wrong state, unknown, a bad request).
	AuditRefused = "refused"
	// AuditFailed: the action failed at run time (the store or Kafka did
	// not answer); part of it may have been done.
	AuditFailed = "failed"
)

// Bounds of AuditRecord's text fields, in bytes.
const (
	MaxAuditActorBytes  = 256
	MaxAuditActionBytes = 64
	MaxAuditDetailBytes = 1024
	MaxAuditResultBytes = 128
	MaxAuditErrorBytes  = 2048
)

// Auditor is an optional part of a Store: the admin audit trail of each
// saga, kept in the saga's partition key (region, cluster, service,
// transaction id) next to its rows. Both stores of this module implement
// it (the Cassandra store in es_admin_audit, kept without a TTL, as the
// saga rows are); the Trace Window refuses admin actions over a store
// without it unless told otherwise (tracewindow.WithUnauditedAdmin). The
// conformance suite checks it on stores that have it.
type Auditor interface {
	// AppendAudit adds rec to the audit trail of rec.TxID's saga in scope.
	// A record is never overwritten: two records of the same time are both
	// kept. The saga need not exist (an action refused because the saga is
	// unknown is recorded too). An invalid scope or record (ValidateAudit)
	// fails with ErrInvalid; a closed store with ErrClosed.
	AppendAudit(ctx context.Context, scope Scope, rec AuditRecord) error
	// AuditTrail returns the latest limit records of txID's saga (limit <=
	// 0: all of them), ordered by At, oldest first; records of the same
	// At come in an order the store chooses. An empty trail is nil, not an
	// error. Arguments and a closed store fail as with LoadTransaction.
	AuditTrail(ctx context.Context, scope Scope, txID string, limit int) ([]AuditRecord, error)
}

// ValidateAudit checks an AppendAudit: the saga's key (ValidateKey), a
// non-empty Actor, Action and Result, every text field valid UTF-8 and
// within its bound (MaxAuditActorBytes...). Clip makes a record's text
// fit.
func ValidateAudit(scope Scope, rec AuditRecord) error {
	if err := ValidateKey(scope, rec.TxID); err != nil {
		return err
	}
	for _, f := range rec.fields() {
		switch {
		case f.required && *f.v == "":
			return fmt.Errorf("%w: empty audit %s", ErrInvalid, f.name)
		case len(*f.v) > f.max:
			return fmt.Errorf("%w: audit %s of %d bytes (at most %d)", ErrInvalid, f.name, len(*f.v), f.max)
		case !utf8.ValidString(*f.v):
			return fmt.Errorf("%w: audit %s is not valid UTF-8", ErrInvalid, f.name)
		}
	}
	return nil
}

type auditField struct {
	name     string
	v        *string
	max      int
	required bool
}

func (r *AuditRecord) fields() []auditField {
	return []auditField{
		{"actor", &r.Actor, MaxAuditActorBytes, true},
		{"action", &r.Action, MaxAuditActionBytes, true},
		{"detail", &r.Detail, MaxAuditDetailBytes, false},
		{"result", &r.Result, MaxAuditResultBytes, true},
		{"error", &r.Error, MaxAuditErrorBytes, false},
	}
}

// Clip returns r with each text field made valid UTF-8 (invalid bytes
// become U+FFFD) and cut to its bound at a character boundary, ending in
// "…" when cut: what an admin tool appends, so that a long error does not
// cost the record.
func (r AuditRecord) Clip() AuditRecord {
	for _, f := range r.fields() {
		*f.v = clipText(*f.v, f.max)
	}
	return r
}

// clipText makes s valid UTF-8 of at most max bytes.
func clipText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
