package topics_test

import (
	"errors"
	"testing"

	"github.com/stacksaga-go/stacksaga/topics"
)

// TestNameBrokerError: the franz-go messages of a peer that is not Kafka
// name the address dialled; other errors pass unchanged.
func TestNameBrokerError(t *testing.T) {
	large := errors.New("invalid large response size 1157627904 > limit 104857600: response exceeds BrokerMaxReadBytes")
	for _, tc := range []struct {
		err     error
		brokers []string
		want    string
	}{
		{large, []string{"127.0.0.1:55432"}, "127.0.0.1:55432 does not speak the Kafka protocol"},
		{errors.New("invalid negative response size -5"), []string{"127.0.0.1:1", "127.0.0.1:2"}, "one of 127.0.0.1:1, 127.0.0.1:2 does not speak the Kafka protocol"},
	} {
		got := topics.NameBrokerError(tc.err, tc.brokers)
		if !errors.Is(got, topics.ErrNotKafka) || !errors.Is(got, tc.err) || got.Error()[:len(tc.want)] != tc.want {
			t.Errorf("NameBrokerError(%v) = %v, want it to start %q", tc.err, got, tc.want)
		}
	}
	other := errors.New("dial tcp 127.0.0.1:1: connection refused")
	if got := topics.NameBrokerError(other, []string{"127.0.0.1:1"}); got != other {
		t.Errorf("another error changed: %v", got)
	}
}
