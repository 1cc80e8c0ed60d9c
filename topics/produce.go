package topics

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PermanentProduceError reports whether a produce failed for a reason that
// retrying will not fix: the topic is missing (the client has already
// retried its metadata, see kgo.UnknownTopicRetries), invalid or not
// writable, or the record is too large or invalid.
//
// A delivery timeout (kgo.ErrRecordTimeout) is transient even when the last
// error it wraps is one of these: a passing metadata gap (a topic being
// created, a leader moving) must not be judged permanent.
func PermanentProduceError(err error) bool {
	if err == nil || errors.Is(err, kgo.ErrRecordTimeout) {
		return false
	}
	for _, p := range []*kerr.Error{
		kerr.UnknownTopicOrPartition,
		kerr.MessageTooLarge,
		kerr.RecordListTooLarge,
		kerr.InvalidTopicException,
		kerr.TopicAuthorizationFailed,
		kerr.InvalidRecord,
	} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// TooLarge reports whether a produce failed because the record is too large
// for the producer or the broker.
func TooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// ProduceDeadLetter sends r to its dead-letter topic for cause c (see
// DeadLetter) and waits until it is durable. The dead-letter headers make
// the record larger than r: if the result is too large to produce, r is
// dead-lettered without its value, the reason saying how many bytes were
// dropped and why, so that a record near the size limit can never stall its
// consumer. It returns the reason the dead letter was written with.
func ProduceDeadLetter(ctx context.Context, cl *kgo.Client, r *kgo.Record, c DeadLetterCause) (string, error) {
	err := cl.ProduceSync(ctx, DeadLetter(r, c)).FirstErr()
	if err != nil && TooLarge(err) {
		stripped := *r
		stripped.Value = nil
		c.Detail = fmt.Sprintf("%s; value of %d bytes dropped: %v", c.Detail, len(r.Value), err)
		err = cl.ProduceSync(ctx, DeadLetter(&stripped, c)).FirstErr()
	}
	if err != nil {
		return c.Reason(), fmt.Errorf("topics: produce dead letter to %s: %w", DeadLetterTopic(r.Topic), err)
	}
	return c.Reason(), nil
}
