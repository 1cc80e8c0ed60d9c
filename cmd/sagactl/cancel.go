package main

// sagactl cancel and terminate (issue 40): the request goes to the
// orchestrator that owns the saga's replies, through the domain's callback
// topic (orchestrator.RequestControl).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/orchestrator"
)

// envKafkaBrokers holds the brokers of cancel and terminate when --brokers
// is not given.
// (kafkaflags.DeprecatedEnvBrokers is read too, with a note: envBrokers).
const envKafkaBrokers = kafkaflags.EnvBrokers

// jsonControl is the JSON of cancel and terminate.
type jsonControl struct {
	TxID   string `json:"tx_id"`
	Action string `json:"action"`
	Status string `json:"status"` // "requested"
	Domain string `json:"domain"`
	State  string `json:"state"` // when the request was made
	Actor  string `json:"actor"`
	Reason string `json:"reason"`
	Audit  string `json:"audit"`
}

// control runs `sagactl cancel|terminate TXID`.
// kafkaOpts are the client's TLS and SASL options (internal/kafkaflags).
func (c *cli) control(ctx context.Context, action, txID, reason string, brokers []string, kafkaOpts []kgo.Opt) int {
	detail := "reason: " + reason
	tx, err := c.store.LoadTransaction(ctx, c.scope, txID)
	if errors.Is(err, eventstore.ErrNotFound) {
		c.audit(ctx, txID, action, detail, eventstore.AuditRefused+": not found", err)
		return c.failf(exitNotFound, "%s %s: no such saga in %s", action, txID, c.scopeString())
	}
	if err != nil {
		return c.failf(exitFailure, "%s %s: %v", action, txID, err)
	}
	for i := range brokers {
		brokers[i] = strings.TrimSpace(brokers[i])
	}
	prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0)}, kafkaOpts...)...)
	if err != nil {
		return c.failf(exitUsage, "%s: --brokers: %v", action, err)
	}
	defer prod.Close()
	err = orchestrator.RequestControl(ctx, prod, c.store, orchestrator.ControlRequest{Scope: c.scope, Domain: tx.Domain, TxID: txID,
		Action: action, Actor: c.actor, Reason: reason, At: now()})
	switch {
	case err == nil:
	case errors.Is(err, orchestrator.ErrEnded), errors.Is(err, orchestrator.ErrNotCancellable):
		c.audit(ctx, txID, action, detail, eventstore.AuditRefused+": wrong state", err)
		return c.failf(exitNotRestorable, "%s %s: %v", action, txID, err)
	case errors.Is(err, eventstore.ErrNotFound):
		c.audit(ctx, txID, action, detail, eventstore.AuditRefused+": not found", err)
		return c.failf(exitNotFound, "%s %s: no such saga in %s", action, txID, c.scopeString())
	case errors.Is(err, eventstore.ErrInvalid):
		c.audit(ctx, txID, action, detail, eventstore.AuditRefused+": bad request", err)
		return c.failf(exitUsage, "%s %s: %v", action, txID, err)
	default:
		c.audit(ctx, txID, action, detail, eventstore.AuditFailed, err)
		return c.failf(exitFailure, "%s %s: %v", action, txID, err)
	}
	out := jsonControl{TxID: txID, Action: action, Status: "requested", Domain: tx.Domain, State: string(tx.State), Actor: c.actor, Reason: reason}
	out.Audit = c.audit(ctx, txID, action, detail, eventstore.AuditOK, nil)
	if c.json {
		return c.printJSON(out)
	}
	fmt.Fprintf(c.stdout, "%s requested for %s (%s, %s when asked) by %s: %s\n", action, txID, tx.Domain, tx.State, c.actor, reason)
	if action == orchestrator.ControlCancel {
		fmt.Fprintln(c.stdout, "  the orchestrator owning its replies stops it going forward and compensates its completed steps; it ends COMPENSATED")
	} else {
		fmt.Fprintln(c.stdout, "  the orchestrator owning its replies stops it at once, compensating nothing; it ends TERMINATED")
	}
	fmt.Fprintf(c.stdout, "  see it with: sagactl show %s\n", txID)
	return exitOK
}

// envBrokers returns the brokers the environment names
// (kafkaflags.EnvBrokers, else the deprecated kafkaflags.DeprecatedEnvBrokers
// with a note on stderr), comma-separated; "" when neither is set.
func envBrokers(stderr io.Writer) string {
	b, deprecated, _ := kafkaflags.EnvBrokersOf(os.LookupEnv)
	if deprecated {
		fmt.Fprintf(stderr, "sagactl: note: %s\n", kafkaflags.DeprecationNote)
	}
	return strings.Join(b, ",")
}
