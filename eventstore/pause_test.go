package eventstore_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
)

// The correlation key is the step's idempotency key, and parses back.
func TestCorrelationKey(t *testing.T) {
	for _, c := range []struct {
		span int
		kind topics.Kind
	}{{0, topics.KindProcess}, {1, topics.KindRevert}, {17, topics.KindProcess}} {
		key := eventstore.CorrelationKey("tx-1", c.span, string(c.kind))
		if want := topics.IdempotencyKey("tx-1", c.span, c.kind); key != want {
			t.Errorf("CorrelationKey %q, topics.IdempotencyKey %q", key, want)
		}
		span, kind, ok := eventstore.ParseCorrelationKey("tx-1", key)
		if !ok || span != c.span || kind != string(c.kind) {
			t.Errorf("ParseCorrelationKey(%q) = %d %q %v", key, span, kind, ok)
		}
	}
	for _, bad := range []string{"", "tx-1", "tx-1:", "tx-1:1", "tx-1:1:other", "tx-2:1:process", "tx-1:-1:process",
		"tx-1:+1:process", "tx-1:01:process", "tx-1:x:process", "tx-10:1:process"} {
		if _, _, ok := eventstore.ParseCorrelationKey("tx-1", bad); ok {
			t.Errorf("ParseCorrelationKey accepted %q", bad)
		}
	}
}

// The claim's key is the one stored since pauses exist (a claim written by
// an older orchestrator is still found).
func TestResumeClaim(t *testing.T) {
	scope := eventstore.Scope{Region: "r", Cluster: "c", Service: "s"}
	k := eventstore.ResumeClaimKey(scope, "tx-1", 2, "revert", 3)
	if want := (eventstore.MarkerKey{Scope: scope, TxID: "tx-1", Span: 2, Kind: "resume:revert", Site: "attempt:3"}); k != want {
		t.Fatalf("ResumeClaimKey %+v, want %+v", k, want)
	}
	rc := map[string]string{"auth": "ok", "amount": "1999"}
	m, err := eventstore.ResumeClaim(scope, "tx-1", 2, "revert", 3, eventstore.ClaimResume, rc)
	if err != nil {
		t.Fatal(err)
	}
	if m.MarkerKey != k || m.State != eventstore.MarkerCommitted || m.Owner != eventstore.ClaimResume {
		t.Errorf("claim %+v", m)
	}
	if !m.IsResumeOf(2, "revert") || m.IsResumeOf(2, "process") || m.IsResumeOf(1, "revert") {
		t.Error("IsResumeOf does not match the claim's span and kind only")
	}
	if d, _ := eventstore.ResumeClaim(scope, "tx-1", 2, "revert", 3, eventstore.ClaimDeadline, nil); d.IsResumeOf(2, "revert") {
		t.Error("a deadline claim counts as a resume")
	}
	got, err := eventstore.DecodeResumeContext(m.Reply)
	if err != nil || !maps.Equal(got, rc) {
		t.Errorf("decoded %v %v, want %v", got, err, rc)
	}
	if got, err := eventstore.DecodeResumeContext(nil); got != nil || err != nil {
		t.Errorf("empty context: %v %v", got, err)
	}
	if _, err := eventstore.DecodeResumeContext([]byte{0xc1}); err == nil {
		t.Error("garbage decoded")
	}
	if _, err := eventstore.ResumeClaim(scope, "tx-1", 2, "revert", 3, eventstore.ClaimResume, map[string]string{"": "x"}); !errors.Is(err, eventstore.ErrInvalid) {
		t.Errorf("empty key: %v", err)
	}
}

// ValidResumeContext agrees with the check of a command's resume context.
func TestValidResumeContextAgreesWithTopics(t *testing.T) {
	for _, e := range []struct{ k, v string }{
		{"auth", "ok"}, {"", "x"}, {"a\x00b", "x"}, {string([]byte{0xff}), "x"}, {"k", string([]byte{0xff})},
		{strings.Repeat("k", eventstore.MaxResumeKeyBytes), ""}, {strings.Repeat("k", eventstore.MaxResumeKeyBytes+1), ""},
		{"k", strings.Repeat("v", eventstore.MaxResumeValueBytes)}, {"k", strings.Repeat("v", eventstore.MaxResumeValueBytes+1)},
	} {
		ours := eventstore.ValidResumeContext(map[string]string{e.k: e.v})
		theirs := topics.ValidResumeEntry(e.k, e.v)
		if (ours == nil) != (theirs == nil) {
			t.Errorf("entry %.20q=%.20q: eventstore %v, topics %v", e.k, e.v, ours, theirs)
		}
		if ours != nil && !errors.Is(ours, eventstore.ErrInvalid) {
			t.Errorf("%v does not wrap ErrInvalid", ours)
		}
	}
}
