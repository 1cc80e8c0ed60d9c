package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// auditRec is a full audit record of txID at at.
func auditRec(txID string, at time.Time, action, result string) eventstore.AuditRecord {
	return eventstore.AuditRecord{TxID: txID, At: at, Actor: "admin-token (127.0.0.1:54321)", Action: action,
		Detail: "correlation key " + txID + ":2:process", Result: result, Error: ""}
}

// checkTrail compares a trail with want, in order.
func checkTrail(t *testing.T, what string, got, want []eventstore.AuditRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d:\n got %+v\nwant %+v", what, len(got), len(want), got, want)
	}
	for i := range want {
		if !sameAudit(got[i], want[i]) {
			t.Fatalf("%s: record %d\n got %+v\nwant %+v (UTC)", what, i, got[i], want[i])
		}
	}
}

// testAuditTrail checks the optional eventstore.Auditor: records round-trip
// (times in UTC at millisecond precision), come back ordered by time
// whatever order they were appended in, two of the same time are both
// kept, limit returns the latest, and sagas and scopes do not mix.
func testAuditTrail(t *testing.T, e *env) {
	a, ok := optional[eventstore.Auditor](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	const tx = "tx-audit"
	got, err := a.AuditTrail(ctx, e.scope, tx, 0)
	must(t, err, "AuditTrail of a saga without records")
	if got != nil {
		t.Fatalf("AuditTrail of a saga without records: %+v, want nil", got)
	}

	local := time.FixedZone("UTC+5:30", 5*3600+1800)
	r1 := auditRec(tx, base.Add(time.Second+123456*time.Nanosecond).In(local), "restore", eventstore.AuditOK)
	r2 := auditRec(tx, base.Add(2*time.Second), "resume", "refused: wrong correlation key")
	r2.Error = "orchestrator: wrong correlation key for " + tx
	r3 := auditRec(tx, base.Add(3*time.Second), "redrive", "failed")
	r3.Error = "cassandra: no hosts available"
	r3.Detail = ""
	tie := r2
	tie.Actor, tie.Result, tie.Error = "sagactl:ops@host-1", eventstore.AuditOK, ""
	// Appended out of time order, the tie last.
	for _, r := range []eventstore.AuditRecord{r3, r1, r2, tie} {
		must(t, a.AppendAudit(ctx, e.scope, r), "AppendAudit "+r.Action)
	}
	// Another saga of the scope and the same saga in another scope.
	must(t, a.AppendAudit(ctx, e.scope, auditRec("tx-audit-other", base, "restore", "ok")), "AppendAudit of another saga")
	other := e.scope
	other.Cluster += "-other"
	must(t, a.AppendAudit(ctx, other, auditRec(tx, base, "resend", "ok")), "AppendAudit in another scope")

	got, err = a.AuditTrail(ctx, e.scope, tx, 0)
	must(t, err, "AuditTrail")
	// The two records of r2's time may come in either order.
	if len(got) == 4 && got[1].Actor == tie.Actor {
		got[1], got[2] = got[2], got[1]
	}
	checkTrail(t, "AuditTrail", got, []eventstore.AuditRecord{r1, r2, tie, r3})

	// limit: the latest records, oldest first.
	got, err = a.AuditTrail(ctx, e.scope, tx, 1)
	must(t, err, "AuditTrail limit 1")
	checkTrail(t, "AuditTrail limit 1", got, []eventstore.AuditRecord{r3})
	got, err = a.AuditTrail(ctx, e.scope, tx, 3)
	must(t, err, "AuditTrail limit 3")
	if len(got) != 3 || !sameAudit(got[2], r3) || !got[0].At.Equal(eventstore.StoredTime(r2.At)) || !got[1].At.Equal(got[0].At) {
		t.Fatalf("AuditTrail limit 3: %+v, want the two records of %v then r3", got, r2.At)
	}
	got, err = a.AuditTrail(ctx, e.scope, tx, 100)
	must(t, err, "AuditTrail limit 100")
	if len(got) != 4 {
		t.Fatalf("AuditTrail limit 100: %d records, want 4", len(got))
	}

	got, err = a.AuditTrail(ctx, other, tx, 0)
	must(t, err, "AuditTrail in the other scope")
	checkTrail(t, "AuditTrail in the other scope", got, []eventstore.AuditRecord{auditRec(tx, base, "resend", "ok")})
	got, err = a.AuditTrail(ctx, e.scope, "tx-audit-other", 0)
	must(t, err, "AuditTrail of the other saga")
	checkTrail(t, "AuditTrail of the other saga", got, []eventstore.AuditRecord{auditRec("tx-audit-other", base, "restore", "ok")})

	// The same record appended twice is kept twice: records are never
	// overwritten.
	must(t, a.AppendAudit(ctx, e.scope, r3), "AppendAudit r3 again")
	got, err = a.AuditTrail(ctx, e.scope, tx, 2)
	must(t, err, "AuditTrail after a repeated record")
	checkTrail(t, "AuditTrail after a repeated record", got, []eventstore.AuditRecord{r3, r3})
}

// sameAudit reports whether got is want as stored: At in UTC at
// millisecond precision, the rest equal.
func sameAudit(got, want eventstore.AuditRecord) bool {
	at, wantAt := got.At, eventstore.StoredTime(want.At)
	got.At, want.At = time.Time{}, time.Time{}
	return got == want && at.Equal(wantAt) && at.Location() == time.UTC
}

// testAuditDefaults: a record without At gets the store's clock; text at
// its bounds (multi-byte characters included) round-trips whole.
func testAuditDefaults(t *testing.T, e *env) {
	a, ok := optional[eventstore.Auditor](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	const tx = "tx-audit-now"
	before := e.f.Now().Add(-time.Minute)
	must(t, a.AppendAudit(ctx, e.scope, eventstore.AuditRecord{TxID: tx, Actor: "a", Action: "restore", Result: "ok"}), "AppendAudit without At")
	after := e.f.Now().Add(time.Minute)
	got, err := a.AuditTrail(ctx, e.scope, tx, 0)
	must(t, err, "AuditTrail")
	if len(got) != 1 || got[0].At.Before(before) || got[0].At.After(after) || !got[0].At.Equal(eventstore.StoredTime(got[0].At)) || got[0].At.Location() != time.UTC {
		t.Fatalf("a record appended without At: %+v, want At set by the store's clock (between %v and %v, UTC ms)", got, before, after)
	}

	full := eventstore.AuditRecord{TxID: tx, At: base.AddDate(-20, 0, 0), // before the first record
		Actor:  strings.Repeat("é", eventstore.MaxAuditActorBytes/2),
		Action: strings.Repeat("a", eventstore.MaxAuditActionBytes),
		Detail: strings.Repeat("€", eventstore.MaxAuditDetailBytes/3) + strings.Repeat("d", eventstore.MaxAuditDetailBytes%3),
		Result: "refused: " + strings.Repeat("r", eventstore.MaxAuditResultBytes-len("refused: ")),
		Error:  strings.Repeat("\u2028x\n", eventstore.MaxAuditErrorBytes/5),
	}
	must(t, eventstore.ValidateAudit(e.scope, full), "ValidateAudit of a record at its bounds")
	must(t, a.AppendAudit(ctx, e.scope, full), "AppendAudit at the bounds")
	got, err = a.AuditTrail(ctx, e.scope, tx, 0)
	must(t, err, "AuditTrail")
	if len(got) != 2 || !sameAudit(got[0], full) {
		t.Fatalf("a record at its bounds does not round-trip: %d records, first %+v", len(got), got[0])
	}
}

// testAuditValidation: what cannot be stored fails with ErrInvalid and
// writes nothing; Clip makes an over-long or invalid record storable.
func testAuditValidation(t *testing.T, e *env) {
	a, ok := optional[eventstore.Auditor](t, e)
	if !ok {
		return
	}
	ctx := t.Context()
	const tx = "tx-audit-bad"
	good := auditRec(tx, base, "restore", "ok")
	bad := map[string]func(r *eventstore.AuditRecord, s *eventstore.Scope){
		"empty region":  func(_ *eventstore.AuditRecord, s *eventstore.Scope) { s.Region = "" },
		"empty service": func(_ *eventstore.AuditRecord, s *eventstore.Scope) { s.Service = "" },
		"empty tx id":   func(r *eventstore.AuditRecord, _ *eventstore.Scope) { r.TxID = "" },
		"empty action":  func(r *eventstore.AuditRecord, _ *eventstore.Scope) { r.Action = "" },
		"empty actor":   func(r *eventstore.AuditRecord, _ *eventstore.Scope) { r.Actor = "" },
		"empty result":  func(r *eventstore.AuditRecord, _ *eventstore.Scope) { r.Result = "" },
		"long actor": func(r *eventstore.AuditRecord, _ *eventstore.Scope) {
			r.Actor = strings.Repeat("x", eventstore.MaxAuditActorBytes+1)
		},
		"long action": func(r *eventstore.AuditRecord, _ *eventstore.Scope) {
			r.Action = strings.Repeat("x", eventstore.MaxAuditActionBytes+1)
		},
		"long detail": func(r *eventstore.AuditRecord, _ *eventstore.Scope) {
			r.Detail = strings.Repeat("x", eventstore.MaxAuditDetailBytes+1)
		},
		"long result": func(r *eventstore.AuditRecord, _ *eventstore.Scope) {
			r.Result = strings.Repeat("x", eventstore.MaxAuditResultBytes+1)
		},
		"long error": func(r *eventstore.AuditRecord, _ *eventstore.Scope) {
			r.Error = strings.Repeat("x", eventstore.MaxAuditErrorBytes+1)
		},
		"actor not UTF-8":  func(r *eventstore.AuditRecord, _ *eventstore.Scope) { r.Actor = "alice\xff" },
		"error not UTF-8":  func(r *eventstore.AuditRecord, _ *eventstore.Scope) { r.Error = "\xc3(" },
		"action not UTF-8": func(r *eventstore.AuditRecord, _ *eventstore.Scope) { r.Action = "re\x80store" },
		"detail not UTF-8": func(r *eventstore.AuditRecord, _ *eventstore.Scope) { r.Detail = "\xed\xa0\x80" },
		"long multibyte text": func(r *eventstore.AuditRecord, _ *eventstore.Scope) {
			r.Detail = strings.Repeat("€", eventstore.MaxAuditDetailBytes/3+1)
		},
	}
	for name, spoil := range bad {
		r, s := good, e.scope
		spoil(&r, &s)
		err := a.AppendAudit(ctx, s, r)
		mustIs(t, err, eventstore.ErrInvalid, "AppendAudit with "+name)
		mustIs(t, eventstore.ValidateAudit(s, r), eventstore.ErrInvalid, "ValidateAudit with "+name)
		if r.TxID != "" && s.Validate() == nil {
			c := r.Clip()
			if c.Actor != "" && c.Action != "" && c.Result != "" {
				must(t, eventstore.ValidateAudit(s, c), "ValidateAudit of the clipped record with "+name)
				must(t, a.AppendAudit(ctx, e.scope, c), "AppendAudit of the clipped record with "+name)
			}
		}
	}
	_, err := a.AuditTrail(ctx, e.scope, "", 0)
	mustIs(t, err, eventstore.ErrInvalid, "AuditTrail of an empty tx id")
	_, err = a.AuditTrail(ctx, eventstore.Scope{}, tx, 0)
	mustIs(t, err, eventstore.ErrInvalid, "AuditTrail of an empty scope")
	got, err := a.AuditTrail(ctx, e.scope, tx, 0)
	must(t, err, "AuditTrail")
	// Only the clipped records were written: one per fixable case.
	var names []string
	for _, r := range got {
		if err := eventstore.ValidateAudit(e.scope, r); err != nil {
			t.Fatalf("a stored record does not validate: %v (%+v)", err, r)
		}
		names = append(names, r.Action)
	}
	if want := 10; len(got) != want {
		t.Fatalf("%d records after the refused appends and the clipped ones, want %d: %v", len(got), want, names)
	}
	if i := slices.IndexFunc(got, func(r eventstore.AuditRecord) bool { return strings.HasSuffix(r.Error, "…") }); i < 0 {
		t.Fatalf("no clipped error ending in …: %+v", got)
	}
}

// testAuditClosed: a closed store and a canceled context fail the audit
// calls as they fail the others.
func testAuditClosed(t *testing.T, e *env) {
	a, ok := optional[eventstore.Auditor](t, e)
	if !ok {
		return
	}
	rec := auditRec("tx-audit-closed", base, "restore", "ok")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	mustIs(t, a.AppendAudit(ctx, e.scope, rec), context.Canceled, "AppendAudit with a canceled context")
	_, err := a.AuditTrail(ctx, e.scope, rec.TxID, 0)
	mustIs(t, err, context.Canceled, "AuditTrail with a canceled context")
	must(t, e.store.Close(), "Close")
	mustIs(t, a.AppendAudit(t.Context(), e.scope, rec), eventstore.ErrClosed, "AppendAudit after Close")
	_, err = a.AuditTrail(t.Context(), e.scope, rec.TxID, 0)
	mustIs(t, err, eventstore.ErrClosed, "AuditTrail after Close")
}
