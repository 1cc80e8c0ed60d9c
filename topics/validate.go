package topics

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits Decode enforces on the fields that become Cassandra key
// components (CQL text: valid UTF-8, a partition key under 64 KiB) or
// topic names, so that a record Cassandra or Kafka would refuse on every
// try is dead-lettered at decode instead of stalling its consumer.
const (
	// MaxIDBytes bounds TxID, Domain, Region, Cluster, Service and
	// Endpoint.
	MaxIDBytes = 1024
	// MaxIdempotencyKeyBytes bounds IdempotencyKey, which embeds the TxID
	// (see IdempotencyKey).
	MaxIdempotencyKeyBytes = MaxIDBytes + 64
	// MaxTopicNameLen is Kafka's limit on a topic name.
	MaxTopicNameLen = 249
)

// ValidTopic reports whether name is a legal Kafka topic name: 1 to 249
// characters of [a-zA-Z0-9._-], and neither "." nor "..".
func ValidTopic(name string) error {
	if name == "" || len(name) > MaxTopicNameLen || name == "." || name == ".." || !legalChars(name) {
		return fmt.Errorf("topics: %s is not a valid topic name: use 1-%d of [a-zA-Z0-9._-], not \".\" or \"..\"", quoteShort(name), MaxTopicNameLen)
	}
	return nil
}

// Validate checks what every envelope must name, as Decode does after
// parsing: a known Type and Kind, a non-empty TxID and Endpoint, an Outcome
// on a reply, and the key fields' rules: TxID, Domain, Region, Cluster,
// Service and Endpoint are valid UTF-8 without NUL bytes and at most
// MaxIDBytes long (IdempotencyKey: MaxIdempotencyKeyBytes); ReplyTo, if
// set, is a valid topic name (ValidTopic); Span >= 0; Attempt >= 1 (the
// orchestrator counts attempts from 1); Hints keys and values are valid
// UTF-8 (they are stored as CQL text). The error wraps ErrMalformed and
// names the field.
func (e *Envelope) Validate() error {
	switch {
	case e.Type != TypeCommand && e.Type != TypeReply:
		return fmt.Errorf("%w: type %q", ErrMalformed, e.Type)
	case e.TxID == "":
		return fmt.Errorf("%w: missing transaction id", ErrMalformed)
	case e.Kind != KindProcess && e.Kind != KindRevert:
		return fmt.Errorf("%w: kind %q", ErrMalformed, e.Kind)
	case e.Endpoint == "":
		return fmt.Errorf("%w: missing endpoint", ErrMalformed)
	case e.Type == TypeReply && e.Outcome != OutcomeOK && e.Outcome != OutcomeRetryable && e.Outcome != OutcomeNonRetryable:
		return fmt.Errorf("%w: outcome %q", ErrMalformed, e.Outcome)
	}
	for _, f := range [...]struct {
		name, v string
		max     int
	}{
		{"TxID", e.TxID, MaxIDBytes},
		{"Domain", e.Domain, MaxIDBytes},
		{"Region", e.Region, MaxIDBytes},
		{"Cluster", e.Cluster, MaxIDBytes},
		{"Service", e.Service, MaxIDBytes},
		{"Endpoint", e.Endpoint, MaxIDBytes},
		{"IdempotencyKey", e.IdempotencyKey, MaxIdempotencyKeyBytes},
	} {
		if err := checkID(f.v, f.max); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrMalformed, f.name, err)
		}
	}
	if e.ReplyTo != "" {
		if err := ValidTopic(e.ReplyTo); err != nil {
			return fmt.Errorf("%w: ReplyTo: %v", ErrMalformed, err)
		}
	}
	if e.Span < 0 {
		return fmt.Errorf("%w: Span: negative (%d)", ErrMalformed, e.Span)
	}
	if e.Attempt < 1 {
		return fmt.Errorf("%w: Attempt: %d, attempts count from 1", ErrMalformed, e.Attempt)
	}
	for k, v := range e.ResumeContext {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: ResumeContext: entry %s is not valid UTF-8", ErrMalformed, quoteShort(k))
		}
	}
	if p := e.Pause; p != nil {
		switch {
		case e.Type != TypeReply || e.Outcome != OutcomeOK:
			return fmt.Errorf("%w: Pause: only an ok reply can pause", ErrMalformed)
		case p.DeadlineMs < 0:
			return fmt.Errorf("%w: Pause: negative deadline", ErrMalformed)
		}
		if err := checkID(p.Event, MaxIDBytes); err != nil {
			return fmt.Errorf("%w: Pause.Event: %v", ErrMalformed, err)
		}
	}
	for k, v := range e.Hints {
		if !utf8.ValidString(k) {
			return fmt.Errorf("%w: Hints: key %s is not valid UTF-8", ErrMalformed, quoteShort(k))
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("%w: Hints: value of %s is not valid UTF-8", ErrMalformed, quoteShort(k))
		}
	}
	return nil
}

// checkID applies the rules of a key field to s (which may be empty).
func checkID(s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%d bytes, over the limit of %d", len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", quoteShort(s))
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s contains a NUL byte", quoteShort(s))
	}
	return nil
}

// quoteShort quotes s, cut to its first 64 bytes: error messages (and the
// dead-letter reasons made of them) stay short whatever the input.
func quoteShort(s string) string {
	if len(s) <= 64 {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:64], len(s))
}

// ValidResumeEntry checks one entry of a resume context: valid UTF-8 and
// no longer than MaxIDBytes (the key) or 64 KiB (the value).
func ValidResumeEntry(key, value string) error {
	if err := checkID(key, MaxIDBytes); err != nil || key == "" {
		return fmt.Errorf("%w: resume context key %s: invalid (empty, too long or not valid UTF-8)", ErrMalformed, quoteShort(key))
	}
	if len(value) > 64<<10 || !utf8.ValidString(value) {
		return fmt.Errorf("%w: resume context value of %s: over 64 KiB or not valid UTF-8", ErrMalformed, quoteShort(key))
	}
	return nil
}
