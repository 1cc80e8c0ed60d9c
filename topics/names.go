package topics

import "fmt"

// Prefix starts every topic StackSaga creates.
const Prefix = "stacksaga"

// legalChars reports whether s is made only of [a-zA-Z0-9._-], the
// characters Kafka allows in a topic name. Every envelope checks its topic
// names with it, so it is a loop rather than a regular expression.
func legalChars(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// CommandTopic is the one command topic of a worker service.
func CommandTopic(service string) string { return Prefix + "." + service + ".command" }

// WorkerGroup is the default consumer group of a worker service's
// command topic (a share group's adds ".share").
func WorkerGroup(service string) string { return Prefix + "." + service + ".worker" }

// CallbackTopic is the one callback topic of a saga domain, that every worker
// replies to.
func CallbackTopic(domain string) string { return Prefix + "." + domain + ".callback" }

// DeadLetterTopic is where records of topic that cannot be processed go, with
// the reason in a header.
func DeadLetterTopic(topic string) string { return topic + ".dlt" }

// ValidName reports whether s can be part of a topic name (service or domain).
func ValidName(s string) error {
	if s == "" || len(s) > 200 || !legalChars(s) {
		return fmt.Errorf("topics: %q is not a valid name: use 1-200 of [a-zA-Z0-9._-]", s)
	}
	return nil
}

// Header names set on dead-lettered records (DeadLetterHeaders), all
// starting "stacksaga-dlt-".
const (
	HeaderDeadLetterReason    = "stacksaga-dlt-reason"
	HeaderDeadLetterCode      = "stacksaga-dlt-code"
	HeaderDeadLetterBy        = "stacksaga-dlt-by"
	HeaderDeadLetterTopic     = "stacksaga-dlt-topic"
	HeaderDeadLetterPartition = "stacksaga-dlt-partition"
	HeaderDeadLetterOffset    = "stacksaga-dlt-offset"
	// HeaderDeadLetterReplayedFrom marks a record sagactl dlt replay
	// re-published: "<dlt topic>/<partition>/<offset>".
	HeaderDeadLetterReplayedFrom = "stacksaga-dlt-replayed-from"

	headerDeadLetterPrefix = "stacksaga-dlt-"
)
