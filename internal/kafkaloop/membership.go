package kafkaloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stacksaga-go/stacksaga/topics"
)

// MembershipOpts returns the kgo group options of m: its session timeout,
// the heartbeat interval that goes with it, and its instance id if it has
// one. Options given after these (a user's kgo.SessionTimeout) win.
func MembershipOpts(m topics.Membership) []kgo.Opt {
	opts := []kgo.Opt{kgo.SessionTimeout(m.Timeout()), kgo.HeartbeatInterval(m.HeartbeatInterval())}
	if m.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(m.InstanceID))
	}
	return opts
}

// groupError returns the error Run stops with for err, a fetch error, or
// nil if the loop goes on: a group management error that retrying cannot
// fix. FENCED_INSTANCE_ID means another process joined with this client's
// instance id; going on would rejoin and fence that process in turn, for
// ever (its rejoin would fence this one back). INVALID_SESSION_TIMEOUT is
// a configuration the brokers refuse at every join.
func groupError(cl *kgo.Client, err error) error {
	var gs *kgo.ErrGroupSession
	if !errors.As(err, &gs) {
		return nil
	}
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	switch {
	case errors.Is(err, kerr.FencedInstanceID):
		id, _ := cl.OptValue(kgo.InstanceID).(string)
		return fmt.Errorf("%w: group %s, instance id %q: %w", topics.ErrInstanceFenced, group, id, err)
	case errors.Is(err, kerr.InvalidSessionTimeout):
		d, _ := cl.OptValue(kgo.SessionTimeout).(time.Duration)
		return fmt.Errorf("%w: group %s, session timeout %v: %w", topics.ErrSessionTimeoutRefused, group, d, err)
	}
	return nil
}

// leaveTimeout bounds CloseMember's leave.
const leaveTimeout = 10 * time.Second

// CloseMember closes cl, a consumer-group client that Run is done with.
// A static member (one with a kgo.InstanceID) leaves the group first:
// kgo's Close does not, so that a restart with the same id gets its
// partitions back without a rebalance, but a process that stops on
// purpose may not come back, and its partitions would then wait for its
// session timeout. Leaving costs a rebalance at the stop and one at the
// restart, as a dynamic member's would; a process that dies without
// closing (kill -9, a crash) keeps its partitions reserved for its restart
// under the same id. The leave names the member id too, so that a process
// whose id was taken over (fenced) cannot make the new owner leave. A
// leave that fails is logged; the member then expires with its session.
func CloseMember(cl *kgo.Client, logger *slog.Logger) {
	defer cl.Close()
	id, _ := cl.OptValue(kgo.InstanceID).(string)
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	if id == "" || group == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	// Stops the group management (for a static member kgo sends nothing),
	// so that no heartbeat or rejoin follows the leave.
	if err := cl.LeaveGroupContext(ctx); err != nil {
		logger.Warn("kafkaloop: a static member could not stop its group management; it did not leave the group, its partitions wait for its session timeout or its restart", "group", group, "instance_id", id, "err", err)
		return
	}
	member, _ := cl.GroupMetadata()
	if member == "" {
		return // never joined
	}
	if err := LeaveGroup(ctx, cl, group, member, id); err != nil {
		logger.Warn("kafkaloop: a static member could not leave its group; its partitions wait for its session timeout or its restart", "group", group, "instance_id", id, "err", err)
	}
}

// LeaveGroup makes the static member instanceID, whose member id is
// member, leave group now (a LeaveGroup request, Kafka 2.4+). A member
// already gone, or fenced by a newer process with its id, is not an error.
func LeaveGroup(ctx context.Context, r kmsg.Requestor, group, member, instanceID string) error {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID, m.InstanceID = member, kmsg.StringPtr(instanceID)
	m.Reason = kmsg.StringPtr("stacksaga: the process is stopping")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, r)
	if err != nil {
		return fmt.Errorf("leave group %s: %w", group, err)
	}
	errs := []error{kerr.ErrorForCode(resp.ErrorCode)}
	for _, rm := range resp.Members {
		errs = append(errs, kerr.ErrorForCode(rm.ErrorCode))
	}
	for _, e := range errs {
		if e != nil && !errors.Is(e, kerr.UnknownMemberID) && !errors.Is(e, kerr.FencedInstanceID) {
			return fmt.Errorf("leave group %s: %w", group, e)
		}
	}
	return nil
}
