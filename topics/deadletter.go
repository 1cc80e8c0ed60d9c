package topics

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DeadLetter builds the record that sends r to its dead-letter topic with
// reason: the same key, value and headers, plus headers naming the reason,
// the source topic and the source offset.
func DeadLetter(r *kgo.Record, reason string) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(r.Headers)+3)
	hs = append(hs, r.Headers...)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderDeadLetterReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderDeadLetterTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
	)
	return &kgo.Record{Topic: DeadLetterTopic(r.Topic), Key: r.Key, Value: r.Value, Headers: hs}
}

// DeadLetterReason returns the reason header of a dead-lettered record.
func DeadLetterReason(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == HeaderDeadLetterReason {
			return string(h.Value)
		}
	}
	return ""
}
