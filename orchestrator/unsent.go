package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/topics"
)

// OutcomeUnsent is the history outcome of a step attempt whose command
// could not be published (the saga was parked in RETRY_PENDING): one row
// per failed publish, that is the first one and one per re-drive, each
// with its reason, so that a long outage shows every attempt without
// writing more rows than the re-drives' backoff allows.
const OutcomeUnsent = "unsent"

// groupProbeTimeout bounds the look-up of the worker's consumer group
// that a failed publish's reason makes.
const groupProbeTimeout = 5 * time.Second

// unsentReason is the reason of a command to service that could not be
// published: err (which names the topic), and, when the worker's consumer
// group has never had a member, that no consumer has ever joined it.
func (o *Orchestrator[T]) unsentReason(ctx context.Context, service string, err error) string {
	reason := err.Error()
	if service == "" || !o.groupNeverJoined(ctx, service) {
		return reason
	}
	return reason + "; no consumer has ever joined group " + topics.WorkerGroup(service) + " (is " + service + " deployed, and its topic " + topics.CommandTopic(service) + " created?)"
}

// groupNeverJoined reports whether neither the consumer group nor the
// share group of the worker service exists on the brokers (false when
// that cannot be read).
func (o *Orchestrator[T]) groupNeverJoined(ctx context.Context, service string) bool {
	ctx, cancel := context.WithTimeout(ctx, groupProbeTimeout)
	defer cancel()
	g := topics.WorkerGroup(service)
	gs, err := kadm.NewClient(o.prod).DescribeGroups(ctx, g, g+".share")
	if err != nil {
		return false
	}
	for _, d := range gs {
		switch {
		case errors.Is(d.Err, kerr.GroupIDNotFound):
		case d.Err != nil || (d.State != "Dead" && d.State != ""):
			return false
		}
	}
	return true
}

// unsentTryout is the history row of tx's attempt whose command could not
// be published, for reason.
func unsentTryout(tx *eventstore.Transaction, reason string, now time.Time) *eventstore.Tryout {
	return &eventstore.Tryout{TxID: tx.TxID, Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, Attempt: tx.Attempt,
		Outcome: OutcomeUnsent, Error: reason, Before: tx.Payload, StartedAt: tx.UpdatedAt, FinishedAt: now}
}
