// Package topics names the Kafka topics of StackSaga, defines the versioned
// msgpack wire envelope that carries saga commands and replies, and
// provisions topics with kadm.
package topics

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// EnvelopeVersion is the wire version written by this build. Readers accept
// any version up to it and ignore unknown fields.
const EnvelopeVersion = 1

// Kind tells whether a command runs the forward action of a step or its
// compensation.
type Kind string

const (
	// KindProcess runs the step's forward action.
	KindProcess Kind = "process"
	// KindRevert runs the step's compensation.
	KindRevert Kind = "revert"
)

// Outcome is the result of a command, carried by a reply.
type Outcome string

const (
	// OutcomeOK means the handler succeeded; the reply's payload is the
	// updated domain entity.
	OutcomeOK Outcome = "ok"
	// OutcomeRetryable means a transient failure: the saga is parked and
	// re-driven later with the same idempotency key.
	OutcomeRetryable Outcome = "retryable"
	// OutcomeNonRetryable means a business failure: forward steps start
	// compensation, a failing compensation terminates the saga.
	OutcomeNonRetryable Outcome = "non_retryable"
)

// Type tells a command from a reply.
type Type string

const (
	// TypeCommand is sent by the orchestrator to a worker's command topic.
	TypeCommand Type = "command"
	// TypeReply is sent by a worker to the domain's callback topic.
	TypeReply Type = "reply"
)

// Envelope is the one wire message of StackSaga: a command when Type is
// TypeCommand, a reply when it is TypeReply. It is msgpack-encoded as a map,
// so fields can be added without breaking older readers.
type Envelope struct {
	Version int  `msgpack:"v"`
	Type    Type `msgpack:"type"`

	// Region, Cluster and Service identify the orchestrating service that
	// owns the saga (the partition-key prefix of its event-store rows).
	Region  string `msgpack:"region,omitempty"`
	Cluster string `msgpack:"cluster,omitempty"`
	Service string `msgpack:"service,omitempty"`

	Domain   string `msgpack:"domain"`
	TxID     string `msgpack:"tx"`
	Span     int    `msgpack:"span"`
	Kind     Kind   `msgpack:"kind"`
	Endpoint string `msgpack:"endpoint"`
	// IdempotencyKey is stable for one transaction, span and kind across
	// retries and redeliveries; see IdempotencyKey.
	IdempotencyKey string `msgpack:"ikey"`
	// Attempt counts re-drives of the same span and kind, from 1.
	Attempt int `msgpack:"attempt"`
	// ReplyTo is the callback topic a worker replies to.
	ReplyTo string `msgpack:"reply_to,omitempty"`
	// ActionDone, on a revert command, says that the orchestrator holds the
	// ok reply of the action being compensated: the action ran, even if the
	// worker's execution marker for it was lost. A compensation without it
	// may be a null compensation (its action may never have run).
	//
	// On a non-retryable reply to a process command it says that the step
	// ran and its effect is in place although its result cannot be
	// reported (the ok reply was too large to produce, or the recorded
	// reply is unreadable): the orchestrator compensates that step too.
	ActionDone bool `msgpack:"action_done,omitempty"`

	// Payload is the serialised domain entity (msgpack).
	Payload msgpack.RawMessage `msgpack:"payload,omitempty"`
	// Hints is the revert hint store of the saga: values put by one
	// compensation are visible to the later ones.
	Hints map[string]string `msgpack:"hints,omitempty"`
	// Trace carries trace-context headers (W3C traceparent and friends).
	Trace map[string]string `msgpack:"trace,omitempty"`
	// SentAt is the time the message was produced, as UTC unix milliseconds
	// on the wire.
	SentAt time.Time `msgpack:"-"`
	SentMs int64     `msgpack:"sent_ms"`

	// ResumeContext, on a command, is what the Resume that continued a
	// paused saga was given (a webhook's payload), handed to the resumed
	// step's handler.
	ResumeContext map[string]string `msgpack:"resume,omitempty"`

	// Reply fields.
	Outcome Outcome `msgpack:"outcome,omitempty"`
	Error   string  `msgpack:"error,omitempty"`
	// Pause, on an ok reply, asks the orchestrator to pause the saga after
	// this step (a forward step: before the next one; a compensation:
	// before the next compensation) until it is resumed or its deadline
	// passes.
	Pause *Pause `msgpack:"pause,omitempty"`
}

// Pause is a step's request to pause its saga.
type Pause struct {
	// Event names what the saga waits for ("PAYMENT_AUTHORISED").
	Event string `msgpack:"event"`
	// DeadlineMs is how long to wait, in milliseconds, before the paused
	// step is invoked again; 0 waits for ever.
	DeadlineMs int64 `msgpack:"deadline_ms,omitempty"`
}

// Errors returned by Decode.
var (
	// ErrMalformed means the bytes are not a StackSaga envelope.
	ErrMalformed = errors.New("topics: malformed envelope")
	// ErrUnsupportedVersion means the envelope was written by a newer build.
	ErrUnsupportedVersion = errors.New("topics: unsupported envelope version")
)

// IdempotencyKey returns the key that is stable for one transaction, span and
// kind across every retry and redelivery. It doubles as the correlation key
// of a paused span.
func IdempotencyKey(txID string, span int, kind Kind) string {
	return fmt.Sprintf("%s:%d:%s", txID, span, kind)
}

// Encode serialises e. It sets the version and the wire time. The error is
// always nil; it is kept so that encoders may fail in later versions.
func Encode(e *Envelope) ([]byte, error) {
	e.Version = EnvelopeVersion
	if e.SentAt.IsZero() {
		e.SentMs = 0
	} else {
		e.SentMs = e.SentAt.UTC().UnixMilli()
	}
	return appendEnvelope(make([]byte, 0, envelopeSize(e)), e), nil
}

// Decode parses b and checks it with Validate: what every envelope must
// name, and that every field that becomes a Cassandra key or a topic name
// can be stored (a record that fails here would fail the same way on every
// try, so callers dead-letter it). Invalid UTF-8 in Error is replaced with
// U+FFFD. The returned error wraps ErrMalformed or ErrUnsupportedVersion
// and names the offending field.
func Decode(b []byte) (*Envelope, error) {
	var e Envelope
	if !decodeEnvelope(b, &e) {
		// Formats the fast path leaves alone (and malformed bytes): the
		// reflection decoder accepts or rejects them.
		e = Envelope{}
		if err := msgpack.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	if e.Version < 1 {
		return nil, fmt.Errorf("%w: missing version", ErrMalformed)
	}
	if e.Version > EnvelopeVersion {
		return nil, fmt.Errorf("%w: %d > %d", ErrUnsupportedVersion, e.Version, EnvelopeVersion)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	// The error message is stored as CQL text: a handler's message with
	// invalid UTF-8 must not make a valid reply unstorable.
	e.Error = strings.ToValidUTF8(e.Error, "\uFFFD")
	if e.SentMs != 0 {
		e.SentAt = time.UnixMilli(e.SentMs).UTC()
	}
	return &e, nil
}
