package ringcoordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// ProtocolVersion is the version of the coordinator's messages. Every
// message carries it; a message of another version is refused with
// ErrUnsupportedVersion, by the receiving node and, over the wire, by the
// peer (whose refusal the requester sees as a PeerError matching
// ErrUnsupportedVersion).
const ProtocolVersion = 1

// Errors the roles report (also across the wire, see PeerError).
var (
	// ErrUnsupportedVersion: a message of another protocol version.
	ErrUnsupportedVersion = errors.New("ringcoordinator: unsupported protocol version")
	// ErrForeignCluster: a node of another region or virtual cluster.
	ErrForeignCluster = errors.New("ringcoordinator: node of another region or cluster refused")
	// ErrNoSlave: the master has no slave registered to hand out.
	ErrNoSlave = errors.New("ringcoordinator: no slave registered with the master")
	// ErrBadMessage: a message that cannot be decoded or makes no sense.
	ErrBadMessage = errors.New("ringcoordinator: bad message")
	// ErrRegistrationRefused: a slave's registration the master refuses
	// (its id is live on another connection, its connection registered a
	// slave already, or the master has its maximum of slaves).
	ErrRegistrationRefused = errors.New("ringcoordinator: registration refused")
)

// PeerError is an error reported by the other end of a request (its
// message as sent over the wire). errors.Is matches it against the
// package's errors by their text, so a version refusal by a remote node
// matches ErrUnsupportedVersion.
type PeerError struct{ Message string }

// Error returns the peer's message.
func (e *PeerError) Error() string { return "peer: " + e.Message }

// Is matches the package's sentinel errors by their message.
func (e *PeerError) Is(target error) bool {
	for _, s := range []error{ErrUnsupportedVersion, ErrForeignCluster, ErrNoSlave, ErrBadMessage, ErrRegistrationRefused} {
		if target == s && strings.Contains(e.Message, s.Error()) {
			return true
		}
	}
	return false
}

// Message types.
const (
	msgRegister  = "register"  // slave -> master, request-stream
	msgSlice     = "slice"     // master -> slave, stream item
	msgAssign    = "assign"    // connector -> master, request-response
	msgSlaveAddr = "slave"     // master -> connector, response
	msgSubscribe = "subscribe" // connector -> slave, request-stream
	msgRange     = "range"     // slave -> connector, stream item
	msgStatus    = "status"    // anyone -> master or slave, request-response
	msgNodes     = "nodes"     // slave -> master, request-response (and its answer)
	msgAssigned  = "assignment"
	// first item of a stream: the registration or subscription is accepted
	msgRegistered = "registered" // master -> slave
	msgSubscribed = "subscribed" // slave -> connector
)

// envelope is every message on the wire.
type envelope struct {
	V    int             `json:"v"`
	Type string          `json:"type"`
	Body json.RawMessage `json:"body,omitempty"`
}

// scopeMsg names the region and virtual cluster of the sender.
type scopeMsg struct {
	Region  string `json:"region"`
	Cluster string `json:"cluster"`
}

// registerMsg registers a slave with the master.
type registerMsg struct {
	scopeMsg
	SlaveID string `json:"slave_id"`
	Addr    string `json:"addr"`  // where orchestrators reach the slave
	Nodes   int    `json:"nodes"` // orchestrators streaming from it now
}

// nodesMsg tells the master how many orchestrators stream from a slave
// now (sent by the slave whenever the number changes).
type nodesMsg struct {
	scopeMsg
	SlaveID string `json:"slave_id"`
	Nodes   int    `json:"nodes"`
}

// rangeMsg is a range valid for one minute: a slave's slice (msgSlice,
// from the master) or an orchestrator's sub-range (msgRange, from a slave).
type rangeMsg struct {
	scopeMsg
	From           string `json:"from"`             // the master's or slave's id
	ValidForMinute int64  `json:"valid_for_minute"` // unix ms, start of the minute
	ValidUntil     int64  `json:"valid_until"`      // unix ms, end of the minute (exclusive)
	Min            int64  `json:"min,string"`
	Max            int64  `json:"max,string"`
	Index          int    `json:"index"` // 0-based position among Of parts
	Of             int    `json:"of"`
}

// assignMsg asks the master for a slave.
type assignMsg struct {
	scopeMsg
	NodeID string `json:"node_id"`
}

// slaveAddrMsg answers assignMsg.
type slaveAddrMsg struct {
	SlaveID string `json:"slave_id"`
	Addr    string `json:"addr"`
}

// acceptedMsg is the first item of a slave's or connector's stream.
type acceptedMsg struct {
	ID string `json:"id"` // the master's or slave's id
}

// subscribeMsg opens an orchestrator's stream from a slave.
type subscribeMsg struct {
	scopeMsg
	NodeID string `json:"node_id"`
	// Holds are the minutes (unix ms) the node holds a range of already,
	// from an earlier stream: its new slave must not split them again.
	Holds []int64 `json:"holds"`
}

// maxHolds bounds the held minutes a slave takes from a subscription (a
// node holds the current minute and perhaps the next).
const maxHolds = 4

// encode returns the envelope of a message of type typ.
func encode(typ string, body any) []byte {
	var raw json.RawMessage
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil { // only our own types are encoded
			panic(fmt.Sprintf("ringcoordinator: encode %s: %v", typ, err))
		}
		raw = b
	}
	b, err := json.Marshal(envelope{V: ProtocolVersion, Type: typ, Body: raw})
	if err != nil {
		panic(fmt.Sprintf("ringcoordinator: encode %s: %v", typ, err))
	}
	return b
}

// decode parses an envelope of type want (any type if want is "") into
// body (skipped if nil) and returns its type. A version other than
// ProtocolVersion is refused first, whatever the rest.
func decode(data []byte, want string, body any) (string, error) {
	if len(data) > MaxMessageSize {
		return "", fmt.Errorf("%w: %d bytes, more than %d", ErrBadMessage, len(data), MaxMessageSize)
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	if env.V != ProtocolVersion {
		return "", fmt.Errorf("%w: the peer speaks version %d, this node speaks version %d", ErrUnsupportedVersion, env.V, ProtocolVersion)
	}
	if want != "" && env.Type != want {
		return "", fmt.Errorf("%w: got a %q message, want %q", ErrBadMessage, env.Type, want)
	}
	if body != nil {
		if len(env.Body) == 0 {
			return "", fmt.Errorf("%w: %q message without a body", ErrBadMessage, env.Type)
		}
		if err := json.Unmarshal(env.Body, body); err != nil {
			return "", fmt.Errorf("%w: %q message: %w", ErrBadMessage, env.Type, err)
		}
	}
	return env.Type, nil
}

// checkScope refuses a peer of another region or cluster.
func checkScope(own, peer scopeMsg, what string) error {
	if own != peer {
		return fmt.Errorf("%w: %s of region %q cluster %q, this node serves region %q cluster %q",
			ErrForeignCluster, what, peer.Region, peer.Cluster, own.Region, own.Cluster)
	}
	return nil
}

// tokenRange returns the message's range.
func (m rangeMsg) tokenRange() eventstore.TokenRange {
	return eventstore.TokenRange{Min: m.Min, Max: m.Max}
}

// validate checks a received range message against the receiver's cycle
// and clock: a non-empty range, a part index within its count, valid for
// exactly one cycle starting on a cycle boundary, for a minute no later
// than the one after next (the next one published, with a cycle of clock
// skew), and no more tokens than its share of the ring (2^64 / Of, rounded
// up: a slave's slice is at most that, so its parts are too). A range
// valid for years would otherwise be held and handed out, hiding every
// range after it.
func (m rangeMsg) validate(now time.Time, cycle time.Duration) error {
	minute := fromMS(m.ValidForMinute)
	switch {
	case m.Min > m.Max:
		return fmt.Errorf("%w: empty range [%d, %d]", ErrBadMessage, m.Min, m.Max)
	case m.Of < 1 || m.Index < 0 || m.Index >= m.Of:
		return fmt.Errorf("%w: part %d of %d", ErrBadMessage, m.Index, m.Of)
	case m.ValidUntil-m.ValidForMinute != cycle.Milliseconds():
		return fmt.Errorf("%w: range valid for %v (from %v), this node's cycle is %v", ErrBadMessage,
			time.Duration(m.ValidUntil-m.ValidForMinute)*time.Millisecond, minute, cycle)
	case !cycleStart(minute, cycle).Equal(minute):
		return fmt.Errorf("%w: range valid from %v, not the start of a %v cycle", ErrBadMessage, minute, cycle)
	case minute.After(cycleStart(now, cycle).Add(2 * cycle)):
		return fmt.Errorf("%w: range for the minute of %v, more than a cycle after the next one (now %v)", ErrBadMessage, minute, now)
	case m.Of > 1 && Span(m.tokenRange()) >= ceilFraction(^uint64(0), 1, uint64(m.Of)):
		return fmt.Errorf("%w: range [%d, %d] is larger than part %d of %d of the ring", ErrBadMessage, m.Min, m.Max, m.Index+1, m.Of)
	}
	return nil
}

// validateSlice checks a master's slice: validate, and exactly part Index
// of Of of the ring, as the master splits it.
func (m rangeMsg) validateSlice(now time.Time, cycle time.Duration) error {
	if err := m.validate(now, cycle); err != nil {
		return err
	}
	if want := partOf(FullRing, m.Index, m.Of); m.tokenRange() != want {
		return fmt.Errorf("%w: slice [%d, %d] is not part %d of %d of the ring %v", ErrBadMessage, m.Min, m.Max, m.Index+1, m.Of, rangeOf(want))
	}
	return nil
}

// ms and fromMS convert a time to unix milliseconds and back.
func ms(t time.Time) int64     { return t.UnixMilli() }
func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func peerErr(msg string) error    { return &PeerError{Message: msg} }
func scopeOf(o *options) scopeMsg { return scopeMsg{Region: o.region, Cluster: o.cluster} }
