package topics_test

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/topics"
)

// TestDeadLetterHeadersOfEveryWriter: the orchestrator's and the workers'
// dead letters carry the same headers in the same format, ReadDeadLetter
// reads them back with the saga id, and ReplayRecord rebuilds the origin
// record (its own headers, not the dead-letter ones).
func TestDeadLetterHeadersOfEveryWriter(t *testing.T) {
	env := &topics.Envelope{Version: topics.EnvelopeVersion, TxID: "01a248d8-0000-8001-8000-000000000001"}
	value, err := topics.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		src    *kgo.Record
		cause  topics.DeadLetterCause
		reason string
		txID   string
	}{
		{"orchestrator", &kgo.Record{Topic: topics.CallbackTopic("checkout"), Partition: 2, Offset: 41, Value: []byte{0xc1}, Key: []byte("tx-1")},
			topics.DeadLetterCause{By: topics.DeadLetterByOrchestrator, Code: "undecodable", Detail: "orchestrator: malformed envelope"}, "undecodable: malformed envelope", "tx-1"},
		{"worker", &kgo.Record{Topic: topics.CommandTopic("payment-service"), Partition: 0, Offset: 7, Value: value, Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-x")}}},
			topics.DeadLetterCause{By: topics.DeadLetterByWorker, Code: "unknown-endpoint", Detail: "no endpoint charge"}, "unknown-endpoint: no endpoint charge", env.TxID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := topics.DeadLetter(tc.src, tc.cause)
			d.Partition, d.Offset = 0, 3
			in := topics.ReadDeadLetter(d)
			if in.Reason != tc.reason || in.Code != tc.cause.Code || in.By != tc.cause.By || in.Origin != tc.src.Topic ||
				in.OriginPartition != tc.src.Partition || in.OriginOffset != tc.src.Offset || in.TxID != tc.txID {
				t.Errorf("read %+v", in)
			}
			r, err := topics.ReplayRecord(d)
			if err != nil {
				t.Fatal(err)
			}
			if r.Topic != tc.src.Topic || string(r.Value) != string(tc.src.Value) || len(r.Headers) != len(tc.src.Headers)+1 {
				t.Errorf("replay %+v", r)
			}
			for _, h := range r.Headers {
				if strings.HasPrefix(h.Key, "stacksaga-dlt-") && h.Key != topics.HeaderDeadLetterReplayedFrom {
					t.Errorf("replay keeps dead-letter header %s", h.Key)
				}
			}
			if last := r.Headers[len(r.Headers)-1]; last.Key != topics.HeaderDeadLetterReplayedFrom || string(last.Value) != d.Topic+"/0/3" {
				t.Errorf("replayed-from %s=%s", last.Key, last.Value)
			}
		})
	}
	if _, err := topics.ReplayRecord(&kgo.Record{Topic: "x.dlt"}); err == nil {
		t.Error("a record without dead-letter headers replays")
	}
}
