package topics

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestPermanentProduceError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("dial tcp: connection refused"), false},
		{kerr.UnknownTopicOrPartition, true},
		{fmt.Errorf("produce: %w", kerr.MessageTooLarge), true},
		{kerr.TopicAuthorizationFailed, true},
		{kgo.ErrRecordTimeout, false},
		// franz-go wraps the last retried error in a record timeout: a
		// passing metadata gap, not a missing topic.
		{fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.UnknownTopicOrPartition), false},
		{kerr.NotLeaderForPartition, false},
	} {
		if got := PermanentProduceError(c.err); got != c.want {
			t.Errorf("PermanentProduceError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
