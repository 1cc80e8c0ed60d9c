package topics

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotKafka means a broker address answered, but not in the Kafka
// protocol (another server's port: PostgreSQL, HTTP, a TLS listener
// dialled in plaintext).
var ErrNotKafka = errors.New("not a Kafka broker")

// notKafkaSigns are the franz-go messages of a reply whose first four
// bytes are no Kafka response size: the peer speaks another protocol.
var notKafkaSigns = []string{"invalid large response size", "invalid negative response size"}

// NameBrokerError turns a client error that shows the peer is not Kafka
// into one naming the address(es) dialled: "127.0.0.1:55432 does not speak
// the Kafka protocol", wrapping ErrNotKafka and err. Other errors are
// returned as they are.
func NameBrokerError(err error, brokers []string) error {
	if err == nil || errors.Is(err, ErrNotKafka) {
		return err
	}
	msg := err.Error()
	for _, s := range notKafkaSigns {
		if strings.Contains(msg, s) {
			who := strings.Join(brokers, ", ")
			if len(brokers) > 1 {
				who = "one of " + who
			}
			if who == "" {
				who = "the broker"
			}
			return fmt.Errorf("%s does not speak the Kafka protocol (%w; check the port of stacksaga.kafka.brokers): %w", who, ErrNotKafka, err)
		}
	}
	return err
}
