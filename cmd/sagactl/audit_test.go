package main

import (
	"context"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// auditOf reads a saga's audit trail from the rig's store.
func (r *adminRig) auditOf(id string) []eventstore.AuditRecord {
	r.t.Helper()
	recs, err := r.store.AuditTrail(r.t.Context(), r.scope, id, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return recs
}

// TestAdminAudit: restore and resume record every saga they act on in its
// audit trail (actor sagactl:<user>@<host> or --actor, the action, the
// result, for resume the correlation key and the context's keys but not
// its values), refusals included; show prints the trail. A record that
// cannot be written is a warning on stderr and in the JSON, and the
// action's exit code stands.
func TestAdminAudit(t *testing.T) {
	r := newAdminRig(t)
	ctx := t.Context()
	at := eventstore.StoredTime(r.started.Add(time.Minute))
	old := now
	now = func() time.Time { return at }
	t.Cleanup(func() { now = old })

	disabled := r.saga(30*time.Hour, eventstore.StateDisabled, nil)
	r.freeze(disabled, "outlived its transaction lifetime")
	completed := r.saga(time.Hour, eventstore.StateCompleted, func(tx *eventstore.Transaction) { tx.Error = "" })
	paused := r.saga(2*time.Hour, eventstore.StatePaused, func(tx *eventstore.Transaction) {
		tx.Attempt, tx.Error, tx.PauseEvent = 1, "", "PAYMENT_AUTHORISATION"
	})
	if _, err := r.writer.RegisterRestore(ctx, r.scope, paused.TxID, paused.Domain); err != nil {
		t.Fatal(err)
	}
	key := eventstore.CorrelationKey(paused.TxID, paused.Span, paused.Kind)

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"restore", disabled.TxID, "--actor", " "},
			{"restore", disabled.TxID, "--actor", strings.Repeat("x", eventstore.MaxAuditActorBytes+1)},
			{"show", disabled.TxID, "--actor", "alice"}, // show changes nothing: no actor
			{"list", "frozen", "--actor", "alice"},
		} {
			if code, _, errOut := r.run(args...); code != exitUsage {
				t.Errorf("sagactl %q: exit %d, want 2 (%s)", args, code, errOut)
			}
		}
		if recs := r.auditOf(disabled.TxID); len(recs) != 0 {
			t.Fatalf("usage errors left audit records: %+v", recs)
		}
	})

	t.Run("restore", func(t *testing.T) {
		var doc struct {
			Audit string `json:"audit"`
			To    string `json:"to"`
		}
		r.jsonOf(&doc, "restore", disabled.TxID)
		if doc.Audit != "recorded" || doc.To != "RETRY_PENDING" {
			t.Fatalf("restore: %+v", doc)
		}
		recs := r.auditOf(disabled.TxID)
		if len(recs) != 1 {
			t.Fatalf("records %+v, want one", recs)
		}
		want := defaultActor()
		if rec := recs[0]; rec.Actor != want || !strings.HasPrefix(rec.Actor, "sagactl:") || !strings.Contains(rec.Actor, "@") ||
			rec.Action != "restore" || rec.Result != "ok" || !rec.At.Equal(at) || rec.Error != "" {
			t.Fatalf("restore's record %+v, want restore ok at %v by %s", rec, at, want)
		}
		// Refused: the record says why, with the actor given.
		code, _, errOut := r.run("restore", completed.TxID, "--actor", "alice (ticket OPS-42)")
		if code != exitNotRestorable {
			t.Fatalf("restore of a completed saga: exit %d: %s", code, errOut)
		}
		recs = r.auditOf(completed.TxID)
		if len(recs) != 1 || recs[0].Actor != "alice (ticket OPS-42)" || recs[0].Result != "refused: wrong state" || !strings.Contains(recs[0].Error, "COMPLETED") {
			t.Fatalf("refused restore's records %+v", recs)
		}
		if code, _, _ := r.run("restore", aTxID); code != exitNotFound {
			t.Fatalf("restore of an unknown saga: exit %d", code)
		}
		if recs := r.auditOf(aTxID); len(recs) != 1 || recs[0].Result != "refused: not found" {
			t.Fatalf("unknown saga's records %+v", recs)
		}
	})

	t.Run("resume", func(t *testing.T) {
		const secret = "psp-ref-4242-SECRET"
		if code, _, _ := r.run("resume", paused.TxID, "nonsense"); code != exitNotPaused {
			t.Fatalf("resume with a wrong key: exit %d", code)
		}
		var doc struct {
			Status string `json:"status"`
			Audit  string `json:"audit"`
		}
		r.jsonOf(&doc, "resume", paused.TxID, key, "status=authorised", "payment_ref="+secret, "--actor", "bob")
		if doc.Status != "requested" || doc.Audit != "recorded" {
			t.Fatalf("resume: %+v", doc)
		}
		recs := r.auditOf(paused.TxID)
		if len(recs) != 2 {
			t.Fatalf("records %+v, want two", recs)
		}
		if rec := recs[0]; rec.Result != "refused: wrong correlation key" || !strings.Contains(rec.Detail, "correlation key nonsense") {
			t.Errorf("refused resume's record %+v", rec)
		}
		if rec := recs[1]; rec.Actor != "bob" || rec.Action != "resume" || rec.Result != "ok" ||
			rec.Detail != "correlation key "+key+"; context keys: payment_ref, status" {
			t.Errorf("resume's record %+v", rec)
		}
		for _, rec := range recs {
			if strings.Contains(rec.Detail+rec.Error, secret) || strings.Contains(rec.Detail, "authorised") {
				t.Errorf("a record keeps a resume context value: %+v", rec)
			}
		}
	})

	t.Run("show", func(t *testing.T) {
		var doc struct {
			Audit []struct {
				At     time.Time `json:"at"`
				Actor  string    `json:"actor"`
				Action string    `json:"action"`
				Result string    `json:"result"`
				Error  string    `json:"error"`
			} `json:"audit"`
			AuditError string `json:"audit_error"`
		}
		r.jsonOf(&doc, "show", completed.TxID)
		if len(doc.Audit) != 1 || doc.Audit[0].Actor != "alice (ticket OPS-42)" || doc.Audit[0].Result != "refused: wrong state" ||
			!strings.Contains(doc.Audit[0].Error, "COMPLETED") || doc.AuditError != "" {
			t.Fatalf("show --json audit: %+v", doc)
		}
		out := r.ok("show", paused.TxID)
		i := strings.Index(out, "\nadmin audit (2 records)\n")
		if i < 0 {
			t.Fatalf("show lacks the audit section:\n%s", out)
		}
		lines := strings.Split(strings.TrimSpace(out[i:]), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[1], "WHEN") || !strings.Contains(lines[2], "refused: wrong correlation key") ||
			!strings.Contains(lines[3], "bob") || !strings.Contains(lines[3], "resume") || !strings.Contains(lines[3], fmtTime(at)) {
			t.Fatalf("audit section:\n%s", out[i:])
		}
	})

	// A keyspace without the audit table (one not upgraded since): the
	// restore runs, the missing record is a warning, show says the trail
	// is not available.
	t.Run("audit table missing", func(t *testing.T) {
		cl := gocql.NewCluster(strings.Split(r.hosts, ",")...)
		cl.Timeout = time.Minute
		cl.Logger = gocql.NewLogger(gocql.LogLevelNone)
		s, err := cl.CreateSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := s.Query("DROP TABLE " + r.ks + ".es_admin_audit").ExecContext(dctx); err != nil {
			t.Fatal(err)
		}
		if err := s.AwaitSchemaAgreement(dctx); err != nil {
			t.Fatal(err)
		}
		again := r.saga(31*time.Hour, eventstore.StateDisabled, nil)
		r.freeze(again, "outlived its transaction lifetime")
		code, out, errOut := r.run("restore", again.TxID, "--json")
		if code != exitOK {
			t.Fatalf("restore without the audit table: exit %d: %s", code, errOut)
		}
		var doc struct {
			Audit string `json:"audit"`
			To    string `json:"to"`
		}
		decodeOne(t, out, &doc)
		if doc.To != "RETRY_PENDING" || !strings.HasPrefix(doc.Audit, "not recorded: ") || !strings.Contains(doc.Audit, "sagactl schema apply") {
			t.Fatalf("restore without the audit table: %+v", doc)
		}
		if !strings.HasPrefix(errOut, "sagactl: warning: restore "+again.TxID+": the audit record was not written: ") || strings.Count(errOut, "\n") != 1 {
			t.Fatalf("stderr %q, want one warning line", errOut)
		}
		if got := r.load(again.TxID); got.State != eventstore.StateRetryPending {
			t.Fatalf("the restore did not run: %s", got.State)
		}
		if out := r.ok("show", again.TxID); !strings.Contains(out, "\nadmin audit: not available: ") {
			t.Fatalf("show without the audit table:\n%s", out)
		}
	})
}
