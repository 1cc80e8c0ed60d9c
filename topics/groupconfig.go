package topics

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// ErrInvalidGroupConfig is wrapped by every error of LoadGroupConfig.
var ErrInvalidGroupConfig = errors.New("topics: invalid group configuration")

// GroupEntry is the listener configuration of one orchestrator domain or
// one worker service: its group type, its share-group settings and, for a
// consumer group, its members' session timeout.
type GroupEntry struct {
	Type  GroupType
	Share ShareSettings
	// SessionTimeout (key session-timeout) is the consumer group's
	// session timeout (Membership.SessionTimeout; 0: the default), for
	// orchestrator.WithSessionTimeout and worker.WithSessionTimeout. A
	// share group has none: its records held by a dead member come back
	// after record-lock-duration.
	SessionTimeout time.Duration
}

// GroupConfig is the listener configuration (the seed's groupType property,
// per event manager and per endpoint), the YAML keys
//
//	stacksaga.kafka.orchestrator.domains.<domain>.group-type   CONSUMER | SHARE
//	stacksaga.kafka.worker.services.<service>.group-type       CONSUMER | SHARE
//
// each entry with delivery-count-limit and record-lock-duration for a
// share group, or session-timeout for a consumer group; the entry
// "default" applies to names without their own. Pass the resolved entry to
// orchestrator.WithGroupType/WithShareSettings/WithSessionTimeout and
// worker.WithGroupType/WithShareSettings/WithSessionTimeout. The instance
// id of a static member is not here: it belongs to one process, not to
// the configuration its replicas share (see Membership.InstanceID).
type GroupConfig struct {
	Domains  map[string]GroupEntry
	Services map[string]GroupEntry
}

// Domain returns the entry of an orchestrator domain.
func (c GroupConfig) Domain(name string) GroupEntry { return resolve(c.Domains, name) }

// Service returns the entry of a worker service.
func (c GroupConfig) Service(name string) GroupEntry { return resolve(c.Services, name) }

func resolve(m map[string]GroupEntry, name string) GroupEntry {
	e, ok := m[name]
	if !ok {
		e = m["default"]
	}
	if e.Type == "" {
		e.Type = GroupConsumer
	}
	return e
}

type groupEntryDoc struct {
	GroupType          string `yaml:"group-type"`
	DeliveryCountLimit string `yaml:"delivery-count-limit"`
	RecordLockDuration string `yaml:"record-lock-duration"`
	SessionTimeout     string `yaml:"session-timeout"`
}

// groupDoc is the part of the YAML document LoadGroupConfig reads.
type groupDoc struct {
	Stacksaga struct {
		Kafka struct {
			Orchestrator struct {
				Domains map[string]groupEntryDoc `yaml:"domains"`
			} `yaml:"orchestrator"`
			Worker struct {
				Services map[string]groupEntryDoc `yaml:"services"`
			} `yaml:"worker"`
		} `yaml:"kafka"`
	} `yaml:"stacksaga"`
}

// LoadGroupConfig reads the listener configuration from a YAML document;
// every invalid value is reported with its full key, wrapping
// ErrInvalidGroupConfig.
func LoadGroupConfig(data []byte) (GroupConfig, error) {
	var doc groupDoc
	if err := yamlconfig.Decode(data, &doc); err != nil {
		return GroupConfig{}, errors.Join(ErrInvalidGroupConfig, err)
	}
	p := yamlconfig.Problems{Prefix: "stacksaga.kafka."}
	conv := func(prefix string, in map[string]groupEntryDoc) map[string]GroupEntry {
		out := make(map[string]GroupEntry, len(in))
		for name, d := range in {
			key := prefix + name + "."
			var e GroupEntry
			if d.GroupType != "" {
				g, err := ParseGroupType(d.GroupType)
				if err != nil {
					p.Add(key+"group-type", "unknown group type %q (want %s or %s)", d.GroupType, GroupConsumer, GroupShare)
				}
				e.Type = g
			}
			if s := strings.TrimSpace(d.DeliveryCountLimit); s != "" {
				n, err := strconv.Atoi(s)
				if err != nil {
					p.Add(key+"delivery-count-limit", "not a number: %q", s)
				}
				e.Share.DeliveryLimit = n
			}
			if s := strings.TrimSpace(d.RecordLockDuration); s != "" {
				dur, err := yamlconfig.ParseDuration(s)
				if err != nil {
					p.Add(key+"record-lock-duration", "%v", err)
				}
				e.Share.RecordLock = dur
			}
			if s := strings.TrimSpace(d.SessionTimeout); s != "" {
				dur, err := yamlconfig.ParseDuration(s)
				switch {
				case err != nil:
					p.Add(key+"session-timeout", "%v", err)
				case e.Type == GroupShare:
					p.Add(key+"session-timeout", "a share group has no session timeout (its records held by a dead member come back after record-lock-duration)")
				default:
					e.SessionTimeout = dur
					if err := (Membership{SessionTimeout: dur}).Validate(); err != nil {
						_, msg, _ := strings.Cut(err.Error(), ": ")
						p.Add(key+"session-timeout", "%s", msg)
					}
				}
			}
			if err := e.Share.Validate(); err != nil {
				for _, line := range strings.Split(err.Error(), "\n") {
					k, msg, _ := strings.Cut(line, ": ")
					p.Add(key+k, "%s", msg)
				}
			}
			out[name] = e
		}
		return out
	}
	c := GroupConfig{
		Domains:  conv("orchestrator.domains.", doc.Stacksaga.Kafka.Orchestrator.Domains),
		Services: conv("worker.services.", doc.Stacksaga.Kafka.Worker.Services),
	}
	if err := p.Err(ErrInvalidGroupConfig); err != nil {
		return GroupConfig{}, err
	}
	return c, nil
}
