package main

// The resume command: sagactl resume TXID CORRELATION_KEY [key=value ...].

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
)

// resumeContext parses key=value arguments into a resume context (nil for
// none): a key is not empty and given once; the value may hold "=".
func resumeContext(args []string) (map[string]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	rc := make(map[string]string, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("resume context %q: want key=value", a)
		case k == "":
			return nil, fmt.Errorf("resume context %q: empty key", a)
		}
		if _, dup := rc[k]; dup {
			return nil, fmt.Errorf("resume context: key %q given twice", k)
		}
		rc[k] = v
	}
	if err := eventstore.ValidResumeContext(rc); err != nil {
		return nil, err
	}
	return rc, nil
}

type jsonResume struct {
	TxID string `json:"tx_id"`
	// Status is "requested" (this call claimed the pause) or
	// "already_resumed".
	Status         string            `json:"status"`
	State          string            `json:"state"`
	CorrelationKey string            `json:"correlation_key"`
	Span           int               `json:"span"`
	Kind           string            `json:"kind"`
	Endpoint       string            `json:"endpoint"`
	Attempt        int               `json:"attempt"`
	PauseEvent     string            `json:"pause_event,omitempty"`
	PausedUntil    time.Time         `json:"paused_until,omitzero"`
	Context        map[string]string `json:"context,omitempty"`
	// Retry is the retry registered (nil when the saga no longer waits);
	// a retry node continues the saga on its first pass after RetryDue.
	Retry    *jsonPath `json:"retry,omitempty"`
	RetryDue time.Time `json:"retry_due,omitzero"`
	// WindowSeconds is the retry nodes' window interval.
	WindowSeconds float64 `json:"window_seconds"`
	// Audit says whether the resume's audit record was written:
	// "recorded", or "not recorded: <why>".
	Audit string `json:"audit"`
}

// resume runs `sagactl resume TXID KEY [k=v ...]`.
func (c *cli) resume(ctx context.Context, txID, key string, rc map[string]string) int {
	w, err := c.writer()
	if err != nil {
		return c.failf(exitFailure, "resume %s: %v", txID, err)
	}
	res, err := recovery.RequestResume(ctx, c.store, w, c.scope, txID, key, rc, now())
	detail := resumeDetail(key, rc)
	switch {
	case err == nil:
	case errors.Is(err, recovery.ErrCorrelationKey):
		c.audit(ctx, txID, "resume", detail, eventstore.AuditRefused+": wrong correlation key", err)
		return c.failf(exitNotPaused, "resume %s: %v", txID, err)
	case errors.Is(err, recovery.ErrNotPaused):
		c.audit(ctx, txID, "resume", detail, eventstore.AuditRefused+": wrong state", err)
		return c.failf(exitNotPaused, "resume %s: %v", txID, err)
	case errors.Is(err, eventstore.ErrNotFound) && res.State == "":
		c.audit(ctx, txID, "resume", detail, eventstore.AuditRefused+": not found", err)
		return c.failf(exitNotFound, "resume %s: no such saga in %s", txID, c.scopeString())
	case errors.Is(err, eventstore.ErrInvalid):
		c.audit(ctx, txID, "resume", detail, eventstore.AuditRefused+": bad request", err)
		return c.failf(exitUsage, "resume %s: %v", txID, err)
	default:
		c.audit(ctx, txID, "resume", detail, eventstore.AuditFailed, err)
		return c.failf(exitFailure, "resume %s: %v", txID, err)
	}
	out := jsonResume{TxID: txID, Status: "requested", State: string(res.State), CorrelationKey: key,
		Span: res.Span, Kind: res.Kind, Endpoint: res.Endpoint, Attempt: res.Attempt,
		PauseEvent: res.Event, PausedUntil: res.PausedUntil, Context: rc, WindowSeconds: w.Windows().Interval().Seconds()}
	out.Audit = c.audit(ctx, txID, "resume", detail, eventstore.AuditOK, nil)
	if res.AlreadyResumed {
		out.Status = "already_resumed"
	}
	if res.Registered {
		p := c.jsonPath(res.Retry)
		out.Retry, out.RetryDue = &p, res.RetryDue
	}
	if c.json {
		return c.printJSON(out)
	}
	o := c.stdout
	interval := w.Windows().Interval()
	if res.AlreadyResumed {
		fmt.Fprintf(o, "already resumed %s with key %s: nothing new claimed (the resume context given now is not used)\n", txID, key)
		if !res.Registered {
			fmt.Fprintf(o, "  the saga has moved on: it is %s\n", res.State)
			return exitOK
		}
		fmt.Fprintf(o, "  the saga is still PAUSED at span %d %s %s, waiting for a retry node to continue it\n", res.Span, res.Kind, res.Endpoint)
	} else {
		fmt.Fprintf(o, "resume requested for %s: PAUSED at span %d %s %s (attempt %d), waiting for %s\n",
			txID, res.Span, res.Kind, res.Endpoint, res.Attempt, orDash(res.Event))
		fmt.Fprintf(o, "  the pause is claimed for this resume: its deadline (%s) can no longer invoke the step again\n", deadlineText(res.PausedUntil))
		fmt.Fprintf(o, "  resume context: %s\n", contextText(rc))
	}
	fmt.Fprintf(o, "  retry registered: %s, due %s\n", out.Retry, fmtTime(res.RetryDue))
	fmt.Fprintf(o, "  a retry node continues the saga on its first pass after that (within about two %v windows, if retry nodes run): the next step receives the resume context\n", interval)
	return exitOK
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func deadlineText(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return fmtTime(t)
}

// contextText formats a resume context as sorted key=value pairs.
func contextText(rc map[string]string) string {
	if len(rc) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(rc)) {
		parts = append(parts, k+"="+oneLine(rc[k], 80))
	}
	return strings.Join(parts, " ")
}
