package topics_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/topics"
)

func sampleEnvelope() *topics.Envelope {
	// An array, not a map: tests re-encode envelopes through map[string]any,
	// and map order is random.
	payload, _ := msgpack.Marshal([]any{"o-1", 4200})
	return &topics.Envelope{
		Type:           topics.TypeCommand,
		Region:         "eu-west-1",
		Cluster:        "c1",
		Service:        "order-service",
		Domain:         "order",
		TxID:           "tx-0001",
		Span:           2,
		Kind:           topics.KindRevert,
		Endpoint:       "charge",
		IdempotencyKey: topics.IdempotencyKey("tx-0001", 2, topics.KindRevert),
		Attempt:        3,
		ReplyTo:        topics.CallbackTopic("order"),
		Payload:        payload,
		Hints:          map[string]string{"refund-id": "r-9"},
		Trace:          map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		SentAt:         time.UnixMilli(1_700_000_000_123).UTC(),
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, typ := range []topics.Type{topics.TypeCommand, topics.TypeReply} {
		in := sampleEnvelope()
		in.Type = typ
		if typ == topics.TypeReply {
			in.ReplyTo = ""
			in.Outcome = topics.OutcomeNonRetryable
			in.Error = "card declined"
		}
		b, err := topics.Encode(in)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		out, err := topics.Decode(b)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if out.Version != topics.EnvelopeVersion {
			t.Errorf("version = %d, want %d", out.Version, topics.EnvelopeVersion)
		}
		if !out.SentAt.Equal(in.SentAt) || out.SentAt.Location() != time.UTC {
			t.Errorf("SentAt = %v, want %v in UTC", out.SentAt, in.SentAt)
		}
		if !reflect.DeepEqual(out, in) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v", typ, out, in)
		}
		var p []any
		if err := msgpack.Unmarshal(out.Payload, &p); err != nil || len(p) != 2 || p[0] != "o-1" {
			t.Errorf("payload = %v, %v", p, err)
		}
	}
}

func TestEnvelopeZeroTimeAndSubMillisecond(t *testing.T) {
	in := sampleEnvelope()
	in.SentAt = time.Time{}
	b, err := topics.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := topics.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !out.SentAt.IsZero() || out.SentMs != 0 {
		t.Errorf("zero SentAt decoded as %v (%d)", out.SentAt, out.SentMs)
	}

	in.SentAt = time.Date(2030, 1, 2, 3, 4, 5, 678_901_234, time.FixedZone("x", 3600))
	b, _ = topics.Encode(in)
	out, _ = topics.Decode(b)
	if want := in.SentAt.Truncate(time.Millisecond).UTC(); !out.SentAt.Equal(want) {
		t.Errorf("SentAt = %v, want %v (millisecond precision)", out.SentAt, want)
	}
}

func TestEnvelopeIsMapEncoded(t *testing.T) {
	b, err := topics.Encode(sampleEnvelope())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatalf("envelope is not a msgpack map: %v", err)
	}
	for _, k := range []string{"v", "type", "domain", "tx", "span", "kind", "endpoint", "ikey", "attempt", "payload", "sent_ms"} {
		if _, ok := m[k]; !ok {
			t.Errorf("wire map lacks key %q: %v", k, m)
		}
	}
}

// A newer writer may add fields; older readers must ignore them.
func TestEnvelopeIgnoresUnknownFields(t *testing.T) {
	b, err := topics.Encode(sampleEnvelope())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["future_field"] = map[string]any{"nested": []int{1, 2, 3}}
	m["zz_flag"] = true
	b2, err := msgpack.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := topics.Decode(b2)
	if err != nil {
		t.Fatalf("Decode with unknown fields: %v", err)
	}
	want := sampleEnvelope()
	want.Version = topics.EnvelopeVersion
	want.SentMs = want.SentAt.UnixMilli()
	if !reflect.DeepEqual(out, want) {
		t.Errorf("got %+v\nwant %+v", out, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	mutate := func(f func(m map[string]any)) []byte {
		b, err := topics.Encode(sampleEnvelope())
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := msgpack.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		out, err := msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	reply := func(m map[string]any) { m["type"] = string(topics.TypeReply) }
	cases := []struct {
		name string
		b    []byte
		want error
		msg  string
	}{
		{"empty", nil, topics.ErrMalformed, ""},
		{"garbage", []byte("definitely not msgpack \xc1\xc1"), topics.ErrMalformed, ""},
		{"not a map", func() []byte { b, _ := msgpack.Marshal([]int{1, 2}); return b }(), topics.ErrMalformed, ""},
		{"truncated", func() []byte { b, _ := topics.Encode(sampleEnvelope()); return b[:len(b)/2] }(), topics.ErrMalformed, ""},
		{"wrong field type", mutate(func(m map[string]any) { m["span"] = "two" }), topics.ErrMalformed, ""},
		{"no version", mutate(func(m map[string]any) { delete(m, "v") }), topics.ErrMalformed, "version"},
		{"newer version", mutate(func(m map[string]any) { m["v"] = topics.EnvelopeVersion + 1 }), topics.ErrUnsupportedVersion, ""},
		{"bad type", mutate(func(m map[string]any) { m["type"] = "event" }), topics.ErrMalformed, "type"},
		{"no tx", mutate(func(m map[string]any) { delete(m, "tx") }), topics.ErrMalformed, "transaction"},
		{"bad kind", mutate(func(m map[string]any) { m["kind"] = "undo" }), topics.ErrMalformed, "kind"},
		{"no endpoint", mutate(func(m map[string]any) { m["endpoint"] = "" }), topics.ErrMalformed, "endpoint"},
		{"reply without outcome", mutate(reply), topics.ErrMalformed, "outcome"},
		{"reply bad outcome", mutate(func(m map[string]any) { reply(m); m["outcome"] = "maybe" }), topics.ErrMalformed, "outcome"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := topics.Decode(c.b)
			if !errors.Is(err, c.want) {
				t.Fatalf("Decode = %+v, %v; want error %v", e, err, c.want)
			}
			if e != nil {
				t.Errorf("Decode returned an envelope with its error: %+v", e)
			}
			if !strings.HasPrefix(err.Error(), "topics: ") || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q: want the topics: prefix and %q", err, c.msg)
			}
		})
	}
	// A reply with a valid outcome decodes.
	ok := mutate(func(m map[string]any) { reply(m); m["outcome"] = string(topics.OutcomeOK) })
	if _, err := topics.Decode(ok); err != nil {
		t.Errorf("valid reply: %v", err)
	}
}

func TestIdempotencyKeyStable(t *testing.T) {
	a := topics.IdempotencyKey("tx", 1, topics.KindProcess)
	if a != topics.IdempotencyKey("tx", 1, topics.KindProcess) {
		t.Fatal("not stable")
	}
	for _, other := range []string{
		topics.IdempotencyKey("tx", 1, topics.KindRevert),
		topics.IdempotencyKey("tx", 2, topics.KindProcess),
		topics.IdempotencyKey("ty", 1, topics.KindProcess),
	} {
		if other == a {
			t.Errorf("key %q collides across transaction/span/kind", a)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	e := sampleEnvelope()
	b.ReportAllocs()
	var n int
	for b.Loop() {
		out, err := topics.Encode(e)
		if err != nil {
			b.Fatal(err)
		}
		n = len(out)
	}
	b.SetBytes(int64(n))
}

func BenchmarkDecode(b *testing.B) {
	raw, err := topics.Encode(sampleEnvelope())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := topics.Decode(raw); err != nil {
			b.Fatal(err)
		}
	}
}
