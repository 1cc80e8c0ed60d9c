package topics_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/topics"
)

// Every field that becomes a Cassandra key component or a topic name is
// checked at decode, so that a record Cassandra or Kafka refuses on every
// try is dead-lettered instead of stalling its consumer. Each case fails
// Decode with ErrMalformed and an error naming the field.
func TestDecodeRejectsUnstorableFields(t *testing.T) {
	long := strings.Repeat("x", topics.MaxIDBytes+1)
	cases := []struct {
		name  string
		f     func(e *topics.Envelope)
		field string
	}{
		{"tx not UTF-8", func(e *topics.Envelope) { e.TxID = "tx-\xff\xfe" }, "TxID"},
		{"tx with NUL", func(e *topics.Envelope) { e.TxID = "tx\x00" }, "TxID"},
		{"tx too long", func(e *topics.Envelope) { e.TxID = long }, "TxID"},
		{"tx over 64 KiB", func(e *topics.Envelope) { e.TxID = strings.Repeat("t", 70_000) }, "TxID"},
		{"domain not UTF-8", func(e *topics.Envelope) { e.Domain = "\xc3\x28" }, "Domain"},
		{"domain too long", func(e *topics.Envelope) { e.Domain = long }, "Domain"},
		{"region with NUL", func(e *topics.Envelope) { e.Region = "eu\x00" }, "Region"},
		{"region too long", func(e *topics.Envelope) { e.Region = long }, "Region"},
		{"cluster not UTF-8", func(e *topics.Envelope) { e.Cluster = "\x80" }, "Cluster"},
		{"service too long", func(e *topics.Envelope) { e.Service = long }, "Service"},
		{"service not UTF-8", func(e *topics.Envelope) { e.Service = "svc\xff" }, "Service"},
		{"endpoint not UTF-8", func(e *topics.Envelope) { e.Endpoint = "charge\xff" }, "Endpoint"},
		{"endpoint too long", func(e *topics.Envelope) { e.Endpoint = long }, "Endpoint"},
		{"idempotency key with NUL", func(e *topics.Envelope) { e.IdempotencyKey = "k\x00" }, "IdempotencyKey"},
		{"idempotency key too long", func(e *topics.Envelope) {
			e.IdempotencyKey = strings.Repeat("k", topics.MaxIdempotencyKeyBytes+1)
		}, "IdempotencyKey"},
		{"reply-to illegal character", func(e *topics.Envelope) { e.ReplyTo = "orders/callback" }, "ReplyTo"},
		{"reply-to not UTF-8", func(e *topics.Envelope) { e.ReplyTo = "cb\xff" }, "ReplyTo"},
		{"reply-to too long", func(e *topics.Envelope) { e.ReplyTo = strings.Repeat("c", topics.MaxTopicNameLen+1) }, "ReplyTo"},
		{"reply-to dot", func(e *topics.Envelope) { e.ReplyTo = "." }, "ReplyTo"},
		{"reply-to dot dot", func(e *topics.Envelope) { e.ReplyTo = ".." }, "ReplyTo"},
		{"negative span", func(e *topics.Envelope) { e.Span = -1 }, "Span"},
		{"attempt 0", func(e *topics.Envelope) { e.Attempt = 0 }, "Attempt"},
		{"negative attempt", func(e *topics.Envelope) { e.Attempt = -2 }, "Attempt"},
		{"reply attempt 0", func(e *topics.Envelope) {
			e.Type, e.Outcome, e.ReplyTo, e.Attempt = topics.TypeReply, topics.OutcomeOK, "", 0
		}, "Attempt"},
		{"hint key not UTF-8", func(e *topics.Envelope) { e.Hints = map[string]string{"k\xff": "v"} }, "Hints"},
		{"hint value not UTF-8", func(e *topics.Envelope) { e.Hints = map[string]string{"k": "v\xff"} }, "Hints"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := sampleEnvelope()
			c.f(in)
			b, err := topics.Encode(in)
			if err != nil {
				t.Fatal(err)
			}
			e, err := topics.Decode(b)
			if !errors.Is(err, topics.ErrMalformed) {
				t.Fatalf("Decode = %+v, %v; want ErrMalformed", e, err)
			}
			if e != nil {
				t.Errorf("Decode returned an envelope with its error")
			}
			if !strings.Contains(err.Error(), c.field+":") {
				t.Errorf("error %q does not name the field %s", err, c.field)
			}
			if len(err.Error()) > 400 {
				t.Errorf("error of %d bytes: keep dead-letter reasons short", len(err.Error()))
			}
			if !errors.Is(in.Validate(), topics.ErrMalformed) {
				t.Errorf("Validate accepts what Decode refuses")
			}
		})
	}
}

// The limits are inclusive, empty optional fields are fine, and any valid
// UTF-8 (not only ASCII) is accepted in ids and hints.
func TestDecodeAcceptsFieldsAtTheLimits(t *testing.T) {
	in := sampleEnvelope()
	in.TxID = strings.Repeat("t", topics.MaxIDBytes)
	in.Domain = strings.Repeat("é", topics.MaxIDBytes/2) // 2 bytes each
	in.Region, in.Cluster, in.Service = "", "", ""
	in.Endpoint = "charge#query"
	in.IdempotencyKey = topics.IdempotencyKey(in.TxID, 1<<62, topics.KindRevert)
	in.ReplyTo = strings.Repeat("c", topics.MaxTopicNameLen)
	in.Span, in.Attempt = 0, 1
	in.Hints = map[string]string{"größe": "日本語", "": ""}
	b, err := topics.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topics.Decode(b); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	in.ReplyTo = "" // replies name no callback topic
	b, _ = topics.Encode(in)
	if _, err := topics.Decode(b); err != nil {
		t.Fatalf("Decode without ReplyTo: %v", err)
	}
}

// An error message with invalid UTF-8 does not make a reply undecodable
// (nor, once stored as CQL text, unstorable): it is repaired.
func TestDecodeRepairsErrorMessage(t *testing.T) {
	in := sampleEnvelope()
	in.Type, in.ReplyTo, in.Outcome = topics.TypeReply, "", topics.OutcomeNonRetryable
	in.Error = "card \xff declined"
	b, _ := topics.Encode(in)
	out, err := topics.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Error != "card \uFFFD declined" {
		t.Errorf("Error = %q", out.Error)
	}
}

func TestValidTopic(t *testing.T) {
	for _, ok := range []string{"a", "stacksaga.order.callback", "A-b_c.9", strings.Repeat("x", 249), "..."} {
		if err := topics.ValidTopic(ok); err != nil {
			t.Errorf("ValidTopic(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a b", "a/b", "ü", strings.Repeat("x", 250)} {
		if err := topics.ValidTopic(bad); err == nil {
			t.Errorf("ValidTopic(%q) = nil", bad)
		}
	}
	if err := topics.ValidTopic(strings.Repeat("x", 5000)); len(err.Error()) > 300 {
		t.Errorf("error of %d bytes for a long name", len(err.Error()))
	}
}
