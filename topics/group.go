package topics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// GroupType is how a topic is consumed: with the classic consumer-group
// protocol or as a Kafka 4 share group (KIP-932). It is chosen per
// orchestrator domain (its callback topic) and per worker (its command
// topic); the seed calls it the groupType property, the YAML key is
// group-type.
type GroupType string

// Group types.
const (
	// GroupConsumer consumes with a classic consumer group: each partition
	// has one owner, records of one key (one saga) arrive in order, and
	// the parallelism of a topic is its partition count. It is the
	// default.
	GroupConsumer GroupType = "CONSUMER"
	// GroupShare consumes as a share group (KIP-932, Kafka 4.2+): the
	// broker hands records to any member, each record is acknowledged on
	// its own (accept, release for redelivery, reject), and any number of
	// instances share one partition. There is no order, not even per
	// saga, and redeliveries are the norm.
	GroupShare GroupType = "SHARE"
)

// ParseGroupType parses CONSUMER or SHARE, in any case; "" is
// GroupConsumer.
func ParseGroupType(s string) (GroupType, error) {
	g := GroupType(strings.ToUpper(strings.TrimSpace(s)))
	if g == "" {
		return GroupConsumer, nil
	}
	if !g.Valid() {
		return "", fmt.Errorf("topics: unknown group type %q (want %s or %s)", s, GroupConsumer, GroupShare)
	}
	return g, nil
}

// Valid reports whether g is GroupConsumer or GroupShare.
func (g GroupType) Valid() bool { return g == GroupConsumer || g == GroupShare }

// String returns the group type's configuration name.
func (g GroupType) String() string { return string(g) }

// Defaults and bounds of ShareSettings (the broker's defaults and the
// bounds of its default configuration).
const (
	// DefaultDeliveryLimit is how many times a record is delivered before
	// the broker archives it (group.share.delivery.count.limit).
	DefaultDeliveryLimit = 5
	// MinDeliveryLimit and MaxDeliveryLimit bound DeliveryLimit (the
	// broker's group.share.min/max.delivery.count.limit defaults).
	MinDeliveryLimit = 2
	MaxDeliveryLimit = 10
	// DefaultRecordLock is the broker's acquisition lock
	// (group.share.record.lock.duration.ms): how long a member holds a
	// record before the broker gives it to another.
	DefaultRecordLock = 30 * time.Second
	// MinRecordLock and MaxRecordLock bound RecordLock. The broker's own
	// lower bound (group.share.min.record.lock.duration.ms) is 15s by
	// default; scripts/services and docker-compose.yml lower it to 1s.
	MinRecordLock = time.Second
	MaxRecordLock = time.Hour
)

// ShareSettings are the group configs a share group is given when a
// worker or an orchestrator starts it (IncrementalAlterConfigs on the
// GROUP resource, Kafka 4.2+). The zero value means the defaults.
type ShareSettings struct {
	// DeliveryLimit is the group's share.delivery.count.limit: after that
	// many deliveries (every release and every acquisition-lock timeout
	// counts) the broker archives the record. The consume loop
	// dead-letters a record that fails on its last delivery instead of
	// releasing it, so a record that keeps failing ends in the dead-letter
	// topic, not silently archived. 0 means DefaultDeliveryLimit (5);
	// otherwise between MinDeliveryLimit and MaxDeliveryLimit.
	DeliveryLimit int
	// RecordLock is the group's share.record.lock.duration.ms, the
	// acquisition lock: a member that dies (kill -9) keeps its records
	// that long before they are redelivered. The workers and orchestrators
	// renew the locks of the records they hold, on brokers that can
	// (ProbeShareGroups' LockRenewal), so a step that runs longer keeps
	// its record; without renewal it is redelivered while it runs. 0
	// leaves the broker's setting (30s by default) alone; otherwise
	// between MinRecordLock and MaxRecordLock, and not below the broker's
	// group.share.min.record.lock.duration.ms.
	RecordLock time.Duration
}

// Limit returns the effective delivery limit.
func (s ShareSettings) Limit() int {
	if s.DeliveryLimit == 0 {
		return DefaultDeliveryLimit
	}
	return s.DeliveryLimit
}

// Validate reports each problem of s, keys relative to the settings
// (delivery-count-limit, record-lock-duration).
func (s ShareSettings) Validate() error {
	var errs []error
	if s.DeliveryLimit != 0 && (s.DeliveryLimit < MinDeliveryLimit || s.DeliveryLimit > MaxDeliveryLimit) {
		errs = append(errs, fmt.Errorf("delivery-count-limit: must be between %d and %d, got %d", MinDeliveryLimit, MaxDeliveryLimit, s.DeliveryLimit))
	}
	if s.RecordLock != 0 && (s.RecordLock < MinRecordLock || s.RecordLock > MaxRecordLock) {
		errs = append(errs, fmt.Errorf("record-lock-duration: must be between %v and %v, got %v", MinRecordLock, MaxRecordLock, s.RecordLock))
	}
	return errors.Join(errs...)
}

// ErrShareGroupsUnsupported means the brokers cannot serve a share group:
// they do not have the share.version feature finalized at level 1 or above
// (Kafka before 4.0, or a 4.0/4.1 cluster formatted without it), or they
// lack the share-group APIs. Share groups are production-ready from Kafka
// 4.2 on.
var ErrShareGroupsUnsupported = errors.New("topics: the Kafka brokers do not support share groups (need Kafka 4.2 or later with the share.version feature finalized)")

// ShareSupport is what a broker's share-group implementation offers
// beyond the basics CheckShareGroups requires.
type ShareSupport struct {
	// LockRenewal: the broker takes renew acknowledgements (KIP-1222,
	// ShareAcknowledge v2, Kafka 4.2 on) and the client can send them (its
	// kgo.MaxVersions, if it was given one, allows ShareAcknowledge v2), so
	// a consumer can keep the acquisition lock of a record it is still
	// processing.
	LockRenewal bool
	// NoLockRenewal says why LockRenewal is false, for a warning: the
	// brokers' ShareAcknowledge is older than v2, or the client's
	// kgo.MaxVersions caps it below v2 (or both). It is "" when
	// LockRenewal is true.
	NoLockRenewal string
}

// CheckShareGroups asks a broker (ApiVersions) whether share groups can
// work: the share.version feature finalized at level 1 or above and the
// ShareGroupHeartbeat, ShareFetch and ShareAcknowledge APIs. It returns an
// error wrapping ErrShareGroupsUnsupported when they cannot, naming what
// is missing, so that a SHARE group type fails at start instead of
// consuming nothing; and, when r is a client whose kgo.MaxVersions leaves
// out one of those APIs, an error naming them that does not wrap it (the
// client's configuration is at fault, not the brokers).
func CheckShareGroups(ctx context.Context, r kmsg.Requestor) error {
	_, err := ProbeShareGroups(ctx, r)
	return err
}

// ProbeShareGroups is CheckShareGroups that also reports what the broker
// supports beyond the basics (from the same ApiVersions answer), and, when
// r is a client with a kgo.MaxVersions (a *kgo.Client), what its cap
// leaves of it: a feature the client cannot encode is not supported, and a
// cap that leaves out one of the share-group APIs fails (naming them; the
// error does not wrap ErrShareGroupsUnsupported, since the brokers may
// well support them).
func ProbeShareGroups(ctx context.Context, r kmsg.Requestor) (ShareSupport, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "stacksaga"
	req.ClientSoftwareVersion = "1"
	resp, err := req.RequestWith(ctx, r)
	if err != nil {
		return ShareSupport{}, fmt.Errorf("topics: check share-group support: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return ShareSupport{}, fmt.Errorf("topics: check share-group support: %w", err)
	}
	var missing []string
	level := int16(0)
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "share.version" {
			level = f.MaxVersionLevel
		}
	}
	if level < 1 {
		missing = append(missing, fmt.Sprintf("feature share.version is at level %d", level))
	}
	maxVersion := make(map[int16]int16, len(resp.ApiKeys))
	for _, k := range resp.ApiKeys {
		maxVersion[k.ApiKey] = k.MaxVersion
	}
	ack := (&kmsg.ShareAcknowledgeRequest{}).Key()
	apis := [...]int16{(&kmsg.ShareGroupHeartbeatRequest{}).Key(), (&kmsg.ShareFetchRequest{}).Key(), ack}
	for _, k := range apis {
		if _, ok := maxVersion[k]; !ok {
			missing = append(missing, "no "+kmsg.NameForKey(k)+" API")
		}
	}
	if len(missing) > 0 {
		return ShareSupport{}, fmt.Errorf("%w: %s", ErrShareGroupsUnsupported, strings.Join(missing, ", "))
	}
	caps := clientVersions(r)
	var left []string
	for _, k := range apis {
		if _, ok := lookupCap(caps, k); !ok {
			left = append(left, kmsg.NameForKey(k))
		}
	}
	if len(left) > 0 {
		// A configuration error of the client, not the brokers' lack: not
		// ErrShareGroupsUnsupported.
		return ShareSupport{}, fmt.Errorf("topics: the client's kgo.MaxVersions leaves out %s, which a share group needs: allow them, or consume with a consumer group", strings.Join(left, ", "))
	}
	var noRenewal []string
	if v := maxVersion[ack]; v < shareAckRenewVersion {
		noRenewal = append(noRenewal, fmt.Sprintf("the brokers take ShareAcknowledge up to v%d, renewing needs v%d (Kafka 4.2)", v, shareAckRenewVersion))
	}
	if v, _ := lookupCap(caps, ack); v < shareAckRenewVersion {
		noRenewal = append(noRenewal, fmt.Sprintf("the client's kgo.MaxVersions caps ShareAcknowledge at v%d, renewing needs v%d", v, shareAckRenewVersion))
	}
	if len(noRenewal) > 0 {
		return ShareSupport{NoLockRenewal: strings.Join(noRenewal, "; ")}, nil
	}
	return ShareSupport{LockRenewal: true}, nil
}

// lookupCap is the highest version of key that caps lets a client send,
// and whether it may send key at all; nil caps allow every version.
func lookupCap(caps *kversion.Versions, key int16) (int16, bool) {
	if caps == nil {
		return math.MaxInt16, true
	}
	return caps.LookupMaxKeyVersion(key)
}

// clientVersions is the kgo.MaxVersions of r, if r is a client given one;
// nil otherwise (r may send every version it knows).
func clientVersions(r kmsg.Requestor) *kversion.Versions {
	cl, ok := r.(interface{ OptValue(any) any })
	if !ok {
		return nil
	}
	mv, _ := cl.OptValue(kgo.MaxVersions).(*kversion.Versions)
	return mv
}

// shareAckRenewVersion is the first ShareAcknowledge version with renew
// acknowledgements (IsRenewAck, KIP-1222).
const shareAckRenewVersion = 2

// ConfigureShareGroup sets the group configs of the share group: always
// share.auto.offset.reset=earliest (so that a new group also gets the
// records produced before it first joined: commands and replies sent
// before the first instance started), and share.delivery.count.limit and
// share.record.lock.duration.ms from s. It is idempotent; call it before
// the group's first member joins. A broker that knows no group configs
// (Kafka before 4.0) fails it.
func ConfigureShareGroup(ctx context.Context, r kmsg.Requestor, group string, s ShareSettings) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	set := func(name, value string) {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name = name
		c.Op = kmsg.IncrementalAlterConfigOpSet
		c.Value = kmsg.StringPtr(value)
		res.Configs = append(res.Configs, c)
	}
	set("share.auto.offset.reset", "earliest")
	set("share.delivery.count.limit", strconv.Itoa(s.Limit()))
	if s.RecordLock > 0 {
		set("share.record.lock.duration.ms", strconv.FormatInt(s.RecordLock.Milliseconds(), 10))
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, r)
	if err != nil {
		return fmt.Errorf("topics: configure share group %s: %w", group, err)
	}
	for _, rr := range resp.Resources {
		if err := kerr.ErrorForCode(rr.ErrorCode); err != nil {
			msg := ""
			if rr.ErrorMessage != nil {
				msg = ": " + *rr.ErrorMessage
			}
			return fmt.Errorf("topics: configure share group %s: %w%s", group, err, msg)
		}
	}
	return nil
}

// ShareDeliveryLimit reads the share group's effective
// share.delivery.count.limit (DescribeConfigs on the GROUP resource): its
// group config, or the brokers' group.share.delivery.count.limit when the
// group has none. A consume loop that cannot configure its group uses it,
// so that it dead-letters a record on the delivery the broker treats as the
// last, and not after the broker has archived it.
func ShareDeliveryLimit(ctx context.Context, r kmsg.Requestor, group string) (int, error) {
	const name = "share.delivery.count.limit"
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	res.ConfigNames = []string{name}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, r)
	if err != nil {
		return 0, fmt.Errorf("topics: read %s of share group %s: %w", name, group, err)
	}
	for _, rr := range resp.Resources {
		if err := kerr.ErrorForCode(rr.ErrorCode); err != nil {
			msg := ""
			if rr.ErrorMessage != nil {
				msg = ": " + *rr.ErrorMessage
			}
			return 0, fmt.Errorf("topics: read %s of share group %s: %w%s", name, group, err, msg)
		}
		for _, c := range rr.Configs {
			if c.Name != name || c.Value == nil {
				continue
			}
			n, err := strconv.Atoi(*c.Value)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("topics: share group %s has %s %q, not a positive number", group, name, *c.Value)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("topics: the brokers did not report %s of share group %s", name, group)
}
