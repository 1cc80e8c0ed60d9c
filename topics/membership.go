package topics

import (
	"errors"
	"fmt"
	"time"
)

// Consumer-group membership: how fast the partitions of a process that
// died move (see docs/operations.md, "What happens when a process dies").
//
// A member that stops heartbeating is removed from its consumer group once
// its session timeout has passed, and only then are its partitions given
// to another member, or back to it when it restarts: a killed process
// stalls its partitions for the session timeout. A static member (one with
// an instance id, KIP-345) restarted with the same id takes its partitions
// back at once, without waiting for the session of its previous life and
// without a rebalance.
const (
	// DefaultSessionTimeout is the session timeout of the workers' and the
	// orchestrators' consumer groups unless set (WithSessionTimeout,
	// session-timeout): how long the partitions of a killed process wait
	// before another member (or a restart without an instance id) gets
	// them. Kafka's and kgo's default is 45s. Measured on a loaded
	// two-core box (docs/operations.md), the longest gap between two
	// heartbeats (every 3s) was 3.2s, so 10s moves a dead member's
	// partitions four times sooner without removing live members that
	// stall: one would have to miss three heartbeats in a row.
	DefaultSessionTimeout = 10 * time.Second
	// MinSessionTimeout and MaxSessionTimeout bound a session timeout set
	// by hand. The brokers bound it too (group.min.session.timeout.ms, 6s
	// by default, lowered to 1s by scripts/services and
	// docker-compose.yml; group.max.session.timeout.ms, 30 minutes): one
	// they refuse stops Run with an error naming both.
	MinSessionTimeout = time.Second
	MaxSessionTimeout = 30 * time.Minute
	// MaxInstanceIDLen is the longest instance id Kafka accepts.
	MaxInstanceIDLen = 249
	// DefaultHeartbeatInterval is how often a member heartbeats (kgo's
	// default), or a third of its session timeout if that is shorter.
	DefaultHeartbeatInterval = 3 * time.Second
)

// ErrInstanceFenced is wrapped by the error Run returns (worker and
// orchestrator) when another process joined the consumer group with the
// same instance id: Kafka gave it this member's partitions
// (FENCED_INSTANCE_ID). Two live processes must never share an instance
// id; the fenced one stops instead of taking the partitions back, which
// would fence the other in turn, for ever.
var ErrInstanceFenced = errors.New("topics: another process joined the consumer group with this instance id (FENCED_INSTANCE_ID): two live processes must not share an instance id")

// ErrSessionTimeoutRefused is wrapped by the error Run returns when the
// group coordinator refuses the session timeout (INVALID_SESSION_TIMEOUT):
// it is outside the brokers' group.min.session.timeout.ms and
// group.max.session.timeout.ms.
var ErrSessionTimeoutRefused = errors.New("topics: the brokers refuse the session timeout (outside group.min.session.timeout.ms and group.max.session.timeout.ms)")

// ValidInstanceID reports whether id can be a consumer group's instance id
// (Kafka's group.instance.id rules: 1 to MaxInstanceIDLen of
// [a-zA-Z0-9._-], not "." or "..").
func ValidInstanceID(id string) error {
	if id == "" || id == "." || id == ".." || len(id) > MaxInstanceIDLen || !legalChars(id) {
		return fmt.Errorf("%q is not a valid instance id: use 1-%d of [a-zA-Z0-9._-], not \".\" or \"..\"", id, MaxInstanceIDLen)
	}
	return nil
}

// Membership is how a worker or an orchestrator is a member of its
// consumer group (the classic protocol; share groups have neither
// setting). The zero value is a dynamic member with DefaultSessionTimeout.
type Membership struct {
	// InstanceID makes the member static (kgo.InstanceID, Kafka's
	// group.instance.id): a process restarted with the same id gets its
	// partitions back as soon as it joins, instead of after the session
	// timeout of its previous life. It must be unique among the live
	// members of the group and stable across restarts of one process (a
	// StatefulSet's pod name, a host's name plus a slot number); "" means
	// a dynamic member.
	InstanceID string
	// SessionTimeout is how long the group waits for a member that stopped
	// heartbeating before it gives its partitions away. 0 means
	// DefaultSessionTimeout; otherwise between MinSessionTimeout and
	// MaxSessionTimeout, and within the brokers' bounds.
	SessionTimeout time.Duration
}

// Timeout returns the effective session timeout.
func (m Membership) Timeout() time.Duration {
	if m.SessionTimeout == 0 {
		return DefaultSessionTimeout
	}
	return m.SessionTimeout
}

// HeartbeatInterval returns the heartbeat interval that goes with the
// session timeout: DefaultHeartbeatInterval, or a third of the session
// timeout if that is shorter.
func (m Membership) HeartbeatInterval() time.Duration {
	return min(DefaultHeartbeatInterval, m.Timeout()/3)
}

// Validate reports each problem of m, keys relative to the settings
// (instance-id, session-timeout).
func (m Membership) Validate() error {
	var errs []error
	if m.InstanceID != "" {
		if err := ValidInstanceID(m.InstanceID); err != nil {
			errs = append(errs, fmt.Errorf("instance-id: %w", err))
		}
	}
	if m.SessionTimeout != 0 && (m.SessionTimeout < MinSessionTimeout || m.SessionTimeout > MaxSessionTimeout) {
		errs = append(errs, fmt.Errorf("session-timeout: must be between %v and %v, got %v", MinSessionTimeout, MaxSessionTimeout, m.SessionTimeout))
	}
	return errors.Join(errs...)
}
