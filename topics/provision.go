package topics

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stacksaga-go/stacksaga/internal/wait"
)

// Defaults of Provision.
const (
	// DefaultPartitions is the partition count of a created topic.
	DefaultPartitions int32 = 8
	// DefaultReplicationFactor (-1) lets the broker choose its default
	// replication factor; it is the only value an in-process kfake broker
	// accepts.
	DefaultReplicationFactor int16 = -1
)

// ErrNotReady means Ensure created the topics but they did not get a leader
// for every partition before its context ended.
var ErrNotReady = errors.New("topics: topics not ready")

// Provision says how Ensure creates missing topics. The zero value uses the
// defaults.
type Provision struct {
	// Partitions of each created topic (default DefaultPartitions, 8).
	// Records are keyed by transaction id, so partitions bound the
	// parallelism of one consumer group.
	Partitions int32
	// ReplicationFactor of each created topic (default
	// DefaultReplicationFactor, -1: the broker's default.replication.factor).
	ReplicationFactor int16
	// Configs are topic configs set on creation (default none), e.g.
	// "retention.ms". They are not applied to topics that already exist.
	Configs map[string]string
}

func (p Provision) withDefaults() Provision {
	if p.Partitions <= 0 {
		p.Partitions = DefaultPartitions
	}
	if p.ReplicationFactor == 0 {
		p.ReplicationFactor = DefaultReplicationFactor
	}
	return p
}

// WorkerTopics lists the topics a worker of service consumes and writes
// besides the callback topics: its command topic and that topic's
// dead-letter topic.
func WorkerTopics(service string) []string {
	c := CommandTopic(service)
	return []string{c, DeadLetterTopic(c)}
}

// OrchestratorTopics lists the topics the orchestrator of domain consumes
// and writes besides the workers' command topics: the domain's callback
// topic and that topic's dead-letter topic.
func OrchestratorTopics(domain string) []string {
	c := CallbackTopic(domain)
	return []string{c, DeadLetterTopic(c)}
}

// Ensure creates the topics in names that do not exist yet, as cfg says,
// and waits until every partition of every named topic has a leader. A topic
// that already exists is left as it is (its partition count and configs are
// not changed), so Ensure is idempotent and safe to call from every instance
// at start. If ctx ends after the topics were created but before they are
// ready, the error wraps both ErrNotReady and ctx's error.
func Ensure(ctx context.Context, adm *kadm.Client, names []string, cfg Provision) error {
	if len(names) == 0 {
		return nil
	}
	cfg = cfg.withDefaults()
	names = dedup(names)
	for _, n := range names {
		if n == "" || len(n) > 249 || !legalChars(n) || n == "." || n == ".." {
			return fmt.Errorf("topics: %q is not a legal topic name", n)
		}
	}
	var configs map[string]*string
	if len(cfg.Configs) > 0 {
		configs = make(map[string]*string, len(cfg.Configs))
		for k, v := range cfg.Configs {
			configs[k] = kadm.StringPtr(v)
		}
	}
	resps, err := adm.CreateTopics(ctx, cfg.Partitions, cfg.ReplicationFactor, configs, names...)
	if err != nil {
		return fmt.Errorf("topics: create %v: %w", names, err)
	}
	var errs []error
	for _, n := range names {
		r, ok := resps[n]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("topics: create %s: no response", n))
		case r.Err == nil, errors.Is(r.Err, kerr.TopicAlreadyExists):
		default:
			msg := ""
			if r.ErrMessage != "" {
				msg = " (" + r.ErrMessage + ")"
			}
			errs = append(errs, fmt.Errorf("topics: create %s: %w%s", n, r.Err, msg))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return waitReady(ctx, adm, names)
}

// waitReady polls metadata until every partition of names has a leader:
// a broker may answer metadata for a just-created topic before its leaders
// are elected.
func waitReady(ctx context.Context, adm *kadm.Client, names []string) error {
	backoff := 10 * time.Millisecond
	var last error
	for {
		td, err := adm.ListTopics(ctx, names...)
		if err == nil {
			last = ready(td, names)
			if last == nil {
				return nil
			}
		} else {
			last = err
		}
		if !wait.Sleep(ctx, backoff) {
			return fmt.Errorf("%w: %v: %w", ErrNotReady, last, ctx.Err())
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func ready(td kadm.TopicDetails, names []string) error {
	for _, n := range names {
		d, ok := td[n]
		switch {
		case !ok:
			return fmt.Errorf("%s missing from metadata", n)
		case d.Err != nil:
			return fmt.Errorf("%s: %w", n, d.Err)
		case len(d.Partitions) == 0:
			return fmt.Errorf("%s has no partitions yet", n)
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return fmt.Errorf("%s/%d has no leader yet", n, p.Partition)
			}
		}
	}
	return nil
}

func dedup(names []string) []string {
	out := append([]string(nil), names...)
	sort.Strings(out)
	j := 0
	for i, n := range out {
		if i == 0 || n != out[j-1] {
			out[j] = n
			j++
		}
	}
	return out[:j]
}
