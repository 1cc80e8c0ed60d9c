package main

// The audit records of the admin commands that change sagas (restore,
// resume): one per saga acted on, in the saga's audit trail in the store
// (eventstore.Auditor), which the Trace Window shows.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// auditRecorded is what the JSON's audit field says of a record written.
const auditRecorded = "recorded"

// auditWriteTimeout bounds one audit write, which runs even when the
// command's own time is up (the action ran and must be recorded).
const auditWriteTimeout = 10 * time.Second

// defaultActor names who runs sagactl: "sagactl:<os user>@<hostname>".
func defaultActor() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = fmt.Sprintf("uid-%d", os.Getuid())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return "sagactl:" + name + "@" + host
}

// audit appends the record of an action on txID to its saga's audit trail
// and returns what the JSON says of it: "recorded", or "not recorded: ..."
// after printing a warning line on stderr (the action's exit code stands).
func (c *cli) audit(ctx context.Context, txID, action, detail, result string, actionErr error) string {
	rec := eventstore.AuditRecord{TxID: txID, At: now(), Actor: c.actor, Action: action, Detail: detail, Result: result}
	if actionErr != nil {
		rec.Error = actionErr.Error()
	}
	a, ok := c.store.(eventstore.Auditor)
	err := errors.New("the event store keeps no audit trail")
	if ok {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
		err = a.AppendAudit(wctx, c.scope, rec.Clip())
		cancel()
	}
	if err == nil {
		return auditRecorded
	}
	if errors.Is(err, eventstore.ErrPermanent) {
		err = fmt.Errorf("%w (a keyspace from before the audit table: run sagactl schema apply)", err)
	}
	fmt.Fprintf(c.stderr, "sagactl: warning: %s %s: the audit record was not written: %s\n", action, txID, oneLine(err.Error(), 400))
	return "not recorded: " + err.Error()
}

// resumeDetail is the audit detail of a resume: its correlation key and
// the keys of its resume context, never their values.
func resumeDetail(key string, rc map[string]string) string {
	d := "correlation key " + key
	if len(rc) > 0 {
		d += "; context keys: " + strings.Join(slices.Sorted(maps.Keys(rc)), ", ")
	}
	return d
}

// jsonAudit is an audit record as show prints it.
type jsonAudit struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Detail string    `json:"detail,omitempty"`
	Result string    `json:"result"`
	Error  string    `json:"error,omitempty"`
}

// auditTrail reads txID's audit trail for show: the records, or why they
// could not be read.
func (c *cli) auditTrail(ctx context.Context, txID string) ([]jsonAudit, string) {
	a, ok := c.store.(eventstore.Auditor)
	if !ok {
		return nil, "the event store keeps no audit trail"
	}
	recs, err := a.AuditTrail(ctx, c.scope, txID, 0)
	if err != nil {
		return nil, err.Error()
	}
	out := []jsonAudit{}
	for _, r := range recs {
		out = append(out, jsonAudit{At: r.At, Actor: r.Actor, Action: r.Action, Detail: r.Detail, Result: r.Result, Error: r.Error})
	}
	return out, ""
}
