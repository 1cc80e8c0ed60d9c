package topics

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"
)

// Writers of dead letters (HeaderDeadLetterBy).
const (
	DeadLetterByOrchestrator = "orchestrator"
	DeadLetterByWorker       = "worker"
)

// DeadLetterCause is why a record is dead-lettered: who writes it
// (DeadLetterByOrchestrator or DeadLetterByWorker), the reason code
// ("undecodable", "given-up", ...) and the detail.
type DeadLetterCause struct {
	By, Code, Detail string
}

// Reason is the reason header: "<code>: <detail>" (the detail without a
// leading "<by>: ", which the by header says), or the code alone.
func (c DeadLetterCause) Reason() string {
	d := strings.TrimPrefix(c.Detail, c.By+": ")
	if d == "" {
		return c.Code
	}
	return c.Code + ": " + d
}

// DeadLetterHeaders are the headers of r's dead letter: r's own, then the
// reason, the code, the writer, and the source topic, partition and
// offset. Every dead letter of the orchestrator and of the workers carries
// them, in this format, so that sagactl dlt reads them all alike.
func DeadLetterHeaders(r *kgo.Record, c DeadLetterCause) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, len(r.Headers)+6)
	hs = append(hs, r.Headers...)
	return append(hs,
		kgo.RecordHeader{Key: HeaderDeadLetterReason, Value: []byte(c.Reason())},
		kgo.RecordHeader{Key: HeaderDeadLetterCode, Value: []byte(c.Code)},
		kgo.RecordHeader{Key: HeaderDeadLetterBy, Value: []byte(c.By)},
		kgo.RecordHeader{Key: HeaderDeadLetterTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderDeadLetterPartition, Value: []byte(strconv.FormatInt(int64(r.Partition), 10))},
		kgo.RecordHeader{Key: HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
	)
}

// DeadLetter builds the record that sends r to its dead-letter topic for
// cause c: the same key and value, with DeadLetterHeaders.
func DeadLetter(r *kgo.Record, c DeadLetterCause) *kgo.Record {
	return &kgo.Record{Topic: DeadLetterTopic(r.Topic), Key: r.Key, Value: r.Value, Headers: DeadLetterHeaders(r, c)}
}

// DeadLetterReason returns the reason header of a dead-lettered record.
func DeadLetterReason(r *kgo.Record) string { return header(r, HeaderDeadLetterReason) }

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// DeadLetterInfo is what a dead letter says of itself (ReadDeadLetter).
type DeadLetterInfo struct {
	Reason, Code, By string
	// Origin is the topic the record was read from (HeaderDeadLetterTopic),
	// OriginPartition and OriginOffset where (-1 when unknown).
	Origin          string
	OriginPartition int32
	OriginOffset    int64
	// TxID is the saga's transaction id: the envelope's tx field, else
	// the record key ("" when neither is one).
	TxID string
	// Headers are the record's headers other than the dead-letter ones.
	Headers []kgo.RecordHeader
}

// ReadDeadLetter reads the dead-letter headers of r and its saga id.
func ReadDeadLetter(r *kgo.Record) DeadLetterInfo {
	in := DeadLetterInfo{Reason: DeadLetterReason(r), Code: header(r, HeaderDeadLetterCode), By: header(r, HeaderDeadLetterBy),
		Origin: header(r, HeaderDeadLetterTopic), OriginPartition: -1, OriginOffset: -1}
	if p, err := strconv.ParseInt(header(r, HeaderDeadLetterPartition), 10, 32); err == nil {
		in.OriginPartition = int32(p)
	}
	if o, err := strconv.ParseInt(header(r, HeaderDeadLetterOffset), 10, 64); err == nil {
		in.OriginOffset = o
	}
	// The tx field alone: a dead letter is often an envelope Decode
	// refuses, which still names its saga.
	var env struct {
		TxID string `msgpack:"tx"`
	}
	if msgpack.Unmarshal(r.Value, &env) == nil && ValidName(env.TxID) == nil {
		in.TxID = env.TxID
	} else if len(r.Key) > 0 && ValidName(string(r.Key)) == nil {
		in.TxID = string(r.Key)
	}
	for _, h := range r.Headers {
		if !strings.HasPrefix(h.Key, headerDeadLetterPrefix) {
			in.Headers = append(in.Headers, h)
		}
	}
	return in
}

// ReplayRecord is the record that re-publishes the dead letter r (read
// from partition and offset of its dead-letter topic) to its origin topic:
// its key, value and original headers, plus HeaderDeadLetterReplayedFrom
// ("<dlt>/<partition>/<offset>"). It fails when r names no origin, or an
// origin that is not r's topic without its ".dlt" suffix.
func ReplayRecord(r *kgo.Record) (*kgo.Record, error) {
	in := ReadDeadLetter(r)
	if in.Origin == "" {
		return nil, fmt.Errorf("topics: %s/%d/%d has no %s header: not a StackSaga dead letter", r.Topic, r.Partition, r.Offset, HeaderDeadLetterTopic)
	}
	if DeadLetterTopic(in.Origin) != r.Topic {
		return nil, fmt.Errorf("topics: %s/%d/%d names origin %q, which is not this dead-letter topic's", r.Topic, r.Partition, r.Offset, in.Origin)
	}
	hs := append(in.Headers, kgo.RecordHeader{Key: HeaderDeadLetterReplayedFrom, Value: fmt.Appendf(nil, "%s/%d/%d", r.Topic, r.Partition, r.Offset)})
	return &kgo.Record{Topic: in.Origin, Key: r.Key, Value: r.Value, Headers: hs}, nil
}
