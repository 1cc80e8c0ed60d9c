package tracewindow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
)

// Step kinds as stored (topics.KindProcess and topics.KindRevert).
const (
	kindProcess = "process"
	kindRevert  = "revert"
)

// Tryout outcomes as stored.
const (
	outcomeOK           = "ok"
	outcomeRetryable    = "retryable"
	outcomeNonRetryable = "non_retryable"
	outcomePaused       = "paused"
)

// Segment categories of the timeline: what a bar's colour and label say.
const (
	// CatForward is a forward step attempt that succeeded.
	CatForward = "forward"
	// CatRevert is a compensation attempt that succeeded.
	CatRevert = "revert"
	// CatRetry is an attempt that failed retryably (another one follows).
	CatRetry = "retry"
	// CatFailed is an attempt that failed for good (non-retryable).
	CatFailed = "failed"
	// CatWait is the time a step waited between a retryable failure and
	// its next attempt (RETRY_PENDING).
	CatWait = "wait"
	// CatPause is a paused step.
	CatPause = "pause"
	// CatRunning is the attempt in flight now (its command is out).
	CatRunning = "running"
)

// SagaView is the saga row as the API shows it.
type SagaView struct {
	TxID     string           `json:"tx_id"`
	Domain   string           `json:"domain"`
	State    eventstore.State `json:"state"`
	Terminal bool             `json:"terminal"`
	InFlight bool             `json:"in_flight"`
	Version  int64            `json:"version"`
	// Definition is the version of the domain's definition the saga
	// started with and is driven by (1 for a saga written before
	// versions).
	Definition int `json:"definition_version"`
	// Span, Kind, Endpoint and Attempt are the current (or last) step.
	Span     int    `json:"span"`
	Kind     string `json:"kind,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Attempt  int    `json:"attempt"`
	// Error is the saga's error when it explains its state (ErrorIsState);
	// LastError is an earlier attempt's error the saga went on from
	// (history: the tryout that failed holds it). One of the two is set.
	Error     string `json:"error,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// TraceID is the W3C trace id of the saga's trace, when the
	// orchestrator traced it (eventstore.Transaction.TraceID).
	TraceID string `json:"trace_id,omitempty"`
	// TraceURL is the link to the saga's trace in the tracing UI, from the
	// WithTraceLink template (empty without a template, and when the
	// template needs a trace id the saga has not).
	TraceURL      string            `json:"trace_url,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	LifetimeStart *time.Time        `json:"lifetime_start,omitempty"`
	PausedUntil   *time.Time        `json:"paused_until,omitempty"`
	Completed     []CompletedView   `json:"completed"`
	Hints         map[string]string `json:"hints,omitempty"`
	// Entity is the domain entity now, as JSON (see EntityJSON).
	Entity json.RawMessage `json:"entity"`
	// Watchdog is the saga's restore watchdog in the recovery directory.
	Watchdog *PathView `json:"restore_watchdog,omitempty"`
	// Frozen is the saga's copy in the frozen table, if any.
	Frozen *FrozenView `json:"frozen,omitempty"`
}

// CompletedView is a forward step that succeeded.
type CompletedView struct {
	Span        int    `json:"span"`
	Endpoint    string `json:"endpoint"`
	Compensable bool   `json:"compensable"`
}

// PathView locates a recovery-directory row. Day and Minute are the
// directory's keys (with second window intervals Day is a synthetic date);
// WindowStart and WindowEnd are the window's real time (WindowOf).
type PathView struct {
	Day         string     `json:"day"`
	Minute      int        `json:"minute_of_day"`
	Instance    string     `json:"instance"`
	Bucket      int        `json:"bucket"`
	WindowStart *time.Time `json:"window_start,omitempty"`
	WindowEnd   *time.Time `json:"window_end,omitempty"`
}

// viewPath builds the PathView of p, its window computed with cfg.
func viewPath(cfg recovery.Config, p eventstore.RecoveryPath) *PathView {
	v := &PathView{Day: p.Day.Format(time.DateOnly), Minute: p.MinuteOfDay, Instance: p.InstanceID, Bucket: p.Bucket}
	if w, ok := WindowOf(cfg, p); ok {
		v.WindowStart, v.WindowEnd = timePtr(w.Start.UTC()), timePtr(w.End.UTC())
	}
	return v
}

// FrozenView is the frozen copy of a saga.
type FrozenView struct {
	Reason   string           `json:"reason"`
	FrozenAt time.Time        `json:"frozen_at"`
	State    eventstore.State `json:"state"`
}

// Detail is one saga with everything the saga page shows.
type Detail struct {
	Saga         SagaView     `json:"saga"`
	Timings      Timings      `json:"timings"`
	Timeline     Timeline     `json:"timeline"`
	Compensation Compensation `json:"compensation"`
	Retries      []RetryAudit `json:"retries"`
	Steps        []StepView   `json:"steps"`
	// Actions are the admin actions enabled for the saga in its state.
	Actions []string `json:"actions"`
	// Audit is the saga's admin audit trail, oldest first: the latest
	// MaxAuditShown records (see Admin).
	Audit []AuditView `json:"audit"`
	// AuditMore says older records exist than Audit shows.
	AuditMore bool `json:"audit_more,omitempty"`
	// AuditUnavailable says why Audit is empty when the trail could not be
	// read, or the store keeps none ("" otherwise).
	AuditUnavailable string `json:"audit_unavailable,omitempty"`
	// Refresh says the saga is still moving: the page polls it.
	Refresh bool `json:"refresh"`
	// Now is when the detail was built (open segments end there).
	Now time.Time `json:"now"`
}

// AuditView is one admin action of a saga's audit trail.
type AuditView struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Detail string    `json:"detail,omitempty"`
	// Result is "ok", "refused: <class>" or "failed[: <class>]".
	Result string `json:"result"`
	// Error is a refused action's error, as its answer gave it.
	Error string `json:"error,omitempty"`
	// ErrorWithheld says a failed action's error is not shown: it can name
	// the store's or Kafka's hosts. It is in the store's record (sagactl
	// show prints it) and in the server's log.
	ErrorWithheld bool `json:"error_withheld,omitempty"`
}

// viewAudit is rec as the API shows it.
func viewAudit(rec eventstore.AuditRecord) AuditView {
	v := AuditView{At: rec.At, Actor: rec.Actor, Action: rec.Action, Detail: rec.Detail, Result: rec.Result, Error: rec.Error}
	if rec.Error != "" && !strings.HasPrefix(rec.Result, eventstore.AuditRefused) {
		v.Error, v.ErrorWithheld = "", true
	}
	return v
}

// Timings sums up where the saga's time went.
type Timings struct {
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// TotalMS is EndedAt (or now) − CreatedAt.
	TotalMS int64 `json:"total_ms"`
	// ForwardMS sums the forward attempts, CompensationMS the compensation
	// attempts, WaitingMS the retry waits and pauses.
	ForwardMS      int64 `json:"forward_ms"`
	CompensationMS int64 `json:"compensation_ms"`
	WaitingMS      int64 `json:"waiting_ms"`
	// Attempts counts the step attempts recorded.
	Attempts int `json:"attempts"`
}

// Timeline is the horizontal chart: one lane per step (span and kind), in
// the order the steps first ran, so forward steps come first in span order
// and compensations after them in the order they ran (reverse).
type Timeline struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Lanes []Lane    `json:"lanes"`
}

// Lane is one step of the timeline.
type Lane struct {
	Span     int    `json:"span"`
	Kind     string `json:"kind"`
	Endpoint string `json:"endpoint"`
	// Outcome is the step's latest: ok, failed, retrying, running, paused.
	Outcome string `json:"outcome"`
	// DurationMS sums the lane's attempts (waits excluded).
	DurationMS int64     `json:"duration_ms"`
	Attempts   int       `json:"attempts"`
	Segments   []Segment `json:"segments"`
}

// Segment is one bar of a lane: an attempt, a wait or a pause.
type Segment struct {
	Category string `json:"category"`
	Label    string `json:"label"`
	Attempt  int    `json:"attempt,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	// Index is the tryout's index (StepView.Index), 0 for waits and the
	// running attempt.
	Index      int       `json:"index,omitempty"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	DurationMS int64     `json:"duration_ms"`
	// Open: the segment goes on (it ends at Detail.Now).
	Open  bool   `json:"open,omitempty"`
	Error string `json:"error,omitempty"`
}

// Compensation is the compensation trail: which reverts ran, in what order,
// whether they succeeded.
type Compensation struct {
	Triggered bool `json:"triggered"`
	// Trigger is the forward failure that started compensation.
	Trigger *StepRef `json:"trigger,omitempty"`
	// Steps are the compensations in the order they ran.
	Steps []CompensationStep `json:"steps"`
	// Pending are completed forward steps still to compensate, next first.
	Pending []CompletedView `json:"pending,omitempty"`
	// Result: compensated, compensation_failed, in_progress or "".
	Result string `json:"result,omitempty"`
}

// StepRef names one attempt.
type StepRef struct {
	Span     int       `json:"span"`
	Kind     string    `json:"kind"`
	Endpoint string    `json:"endpoint"`
	Attempt  int       `json:"attempt"`
	Outcome  string    `json:"outcome"`
	Error    string    `json:"error,omitempty"`
	At       time.Time `json:"at"`
}

// CompensationStep is one compensation of the trail.
type CompensationStep struct {
	Order    int    `json:"order"`
	Span     int    `json:"span"`
	Endpoint string `json:"endpoint"`
	Attempts int    `json:"attempts"`
	// Outcome: ok, failed, retrying, running.
	Outcome    string     `json:"outcome"`
	Error      string     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	DurationMS int64      `json:"duration_ms"`
}

// RetryAudit is the attempts of one step that needed more than one, or
// failed retryably.
type RetryAudit struct {
	Span     int            `json:"span"`
	Kind     string         `json:"kind"`
	Endpoint string         `json:"endpoint"`
	Attempts []RetryAttempt `json:"attempts"`
}

// RetryAttempt is one attempt of a step.
type RetryAttempt struct {
	Attempt int    `json:"attempt"`
	Index   int    `json:"index,omitempty"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	// Node is the retry node that sent the attempt, when the store records
	// it ("" otherwise: the event store keeps no node per attempt yet).
	Node       string     `json:"node,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	DurationMS int64      `json:"duration_ms"`
	// WaitBeforeMS is the time since the previous attempt failed.
	WaitBeforeMS int64 `json:"wait_before_ms,omitempty"`
}

// StepView is one tryout with its entity snapshots as JSON.
type StepView struct {
	Index      int             `json:"index"`
	Span       int             `json:"span"`
	Kind       string          `json:"kind"`
	Endpoint   string          `json:"endpoint"`
	Attempt    int             `json:"attempt"`
	Outcome    string          `json:"outcome"`
	Error      string          `json:"error,omitempty"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt time.Time       `json:"finished_at"`
	DurationMS int64           `json:"duration_ms"`
	Before     json.RawMessage `json:"before"`
	After      json.RawMessage `json:"after"`
	Resume     json.RawMessage `json:"resume_context,omitempty"`
}

// awaitsReply mirrors the orchestrator: states with a command in flight.
func awaitsReply(s eventstore.State) bool {
	switch s {
	case eventstore.StateStarted, eventstore.StateInProgress, eventstore.StateCompensating, eventstore.StateFailed, eventstore.StateCancelling:
		return true
	}
	return false
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 0) }

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// viewSaga builds the SagaView of tx.
func viewSaga(tx *eventstore.Transaction, frozen *eventstore.FrozenTransaction, rcfg recovery.Config) SagaView {
	current, past := SplitError(tx)
	v := SagaView{
		TxID: tx.TxID, Domain: tx.Domain, State: tx.State, Terminal: tx.State.Terminal(), InFlight: InFlight(tx.State),
		Version: tx.Version, Definition: max(tx.Definition, 1), Span: tx.Span, Kind: tx.Kind, Endpoint: tx.Endpoint, Attempt: tx.Attempt, Error: current, LastError: past, TraceID: tx.TraceID,
		CreatedAt: tx.CreatedAt, UpdatedAt: tx.UpdatedAt, LifetimeStart: timePtr(tx.LifetimeStart),
		PausedUntil: timePtr(tx.PausedUntil), Hints: tx.Hints, Entity: EntityJSON(tx.Payload),
		Completed: make([]CompletedView, 0, len(tx.Completed)),
	}
	for _, c := range tx.Completed {
		v.Completed = append(v.Completed, CompletedView{Span: c.Span, Endpoint: c.Endpoint, Compensable: c.Compensable})
	}
	if p := tx.RestorePath; p != nil {
		v.Watchdog = viewPath(rcfg, *p)
	}
	if frozen != nil {
		v.Frozen = &FrozenView{Reason: frozen.Reason, FrozenAt: frozen.FrozenAt, State: frozen.State}
	}
	return v
}

type laneKey struct {
	kind string
	span int
}

// buildDetail assembles the saga page's data from the saga row and its
// history at now (rcfg: the recovery windows the watchdog's time is
// computed with).
func buildDetail(tx *eventstore.Transaction, tryouts []eventstore.Tryout, frozen *eventstore.FrozenTransaction, rcfg recovery.Config, now time.Time) Detail {
	d := Detail{Saga: viewSaga(tx, frozen, rcfg), Now: now, Retries: []RetryAudit{}, Steps: make([]StepView, 0, len(tryouts)), Actions: []string{}, Audit: []AuditView{}}
	slices.SortStableFunc(tryouts, func(a, b eventstore.Tryout) int { return a.Index - b.Index })
	for _, t := range tryouts {
		d.Steps = append(d.Steps, StepView{
			Index: t.Index, Span: t.Span, Kind: t.Kind, Endpoint: t.Endpoint, Attempt: t.Attempt, Outcome: t.Outcome,
			Error: t.Error, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, DurationMS: ms(t.FinishedAt.Sub(t.StartedAt)),
			Before: EntityJSON(t.Before), After: EntityJSON(t.After), Resume: resumeJSON(t.ResumeContext),
		})
	}
	d.Timeline = buildTimeline(tx, tryouts, now)
	d.Compensation = buildCompensation(tx, tryouts, d.Timeline)
	d.Retries = buildRetries(d.Timeline)
	d.Timings = buildTimings(tx, d.Timeline, now)
	d.Refresh = InFlight(tx.State)
	return d
}

func resumeJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return b
	}
	return EntityJSON(b)
}

// buildTimeline turns the history into lanes of segments.
func buildTimeline(tx *eventstore.Transaction, tryouts []eventstore.Tryout, now time.Time) Timeline {
	tl := Timeline{Start: tx.CreatedAt, Lanes: []Lane{}}
	lanes := map[laneKey]int{}
	lane := func(kind string, span int, endpoint string) *Lane {
		k := laneKey{kind, span}
		i, ok := lanes[k]
		if !ok {
			i = len(tl.Lanes)
			lanes[k] = i
			tl.Lanes = append(tl.Lanes, Lane{Span: span, Kind: kind, Endpoint: endpoint, Segments: []Segment{}})
		}
		return &tl.Lanes[i]
	}
	for _, t := range tryouts {
		l := lane(t.Kind, t.Span, t.Endpoint)
		addWait(l, t.StartedAt)
		seg := Segment{
			Category: category(t.Kind, t.Outcome), Attempt: t.Attempt, Outcome: t.Outcome, Index: t.Index,
			Start: t.StartedAt, End: t.FinishedAt, DurationMS: ms(t.FinishedAt.Sub(t.StartedAt)), Error: t.Error,
		}
		seg.Label = segLabel(seg)
		l.Segments = append(l.Segments, seg)
		l.Attempts++
		l.DurationMS += seg.DurationMS
		l.Outcome = laneOutcome(t.Outcome)
	}
	end := tx.UpdatedAt
	if !tx.State.Terminal() {
		end = now
	}
	// The step in flight now, which has no tryout yet.
	if tx.Endpoint != "" && tx.Kind != "" && !tx.State.Terminal() {
		switch {
		case tx.State == eventstore.StateRetryPending:
			l := lane(tx.Kind, tx.Span, tx.Endpoint)
			start := tx.UpdatedAt
			if n := len(l.Segments); n > 0 && l.Segments[n-1].End.Before(start) {
				start = l.Segments[n-1].End
			}
			seg := Segment{Category: CatWait, Start: start, End: now, DurationMS: ms(now.Sub(start)), Open: true, Error: tx.Error}
			seg.Label = segLabel(seg)
			l.Segments = append(l.Segments, seg)
			l.Outcome = "retrying"
		case tx.State == eventstore.StatePaused:
			l := lane(tx.Kind, tx.Span, tx.Endpoint)
			seg := Segment{Category: CatPause, Attempt: tx.Attempt, Start: tx.UpdatedAt, End: now, DurationMS: ms(now.Sub(tx.UpdatedAt)), Open: true}
			seg.Label = segLabel(seg)
			l.Segments = append(l.Segments, seg)
			l.Outcome = "paused"
		case awaitsReply(tx.State) && tx.State != eventstore.StateFailed:
			l := lane(tx.Kind, tx.Span, tx.Endpoint)
			if n := len(l.Segments); n > 0 && l.Segments[n-1].Attempt >= tx.Attempt && l.Segments[n-1].Category != CatWait {
				break // that attempt is recorded already (a restore is re-sending it)
			}
			addWait(l, tx.UpdatedAt)
			seg := Segment{Category: CatRunning, Attempt: tx.Attempt, Start: tx.UpdatedAt, End: now, DurationMS: ms(now.Sub(tx.UpdatedAt)), Open: true}
			seg.Label = segLabel(seg)
			l.Segments = append(l.Segments, seg)
			l.Attempts++
			l.DurationMS += seg.DurationMS
			l.Outcome = "running"
		}
	}
	tl.End = end
	for _, l := range tl.Lanes {
		for _, s := range l.Segments {
			if s.End.After(tl.End) {
				tl.End = s.End
			}
			if s.Start.Before(tl.Start) {
				tl.Start = s.Start
			}
		}
	}
	return tl
}

// addWait adds a wait segment to l when its last attempt failed retryably
// and the next one starts later.
func addWait(l *Lane, next time.Time) {
	n := len(l.Segments)
	if n == 0 || l.Segments[n-1].Category != CatRetry || !next.After(l.Segments[n-1].End) {
		return
	}
	prev := l.Segments[n-1]
	seg := Segment{Category: CatWait, Start: prev.End, End: next, DurationMS: ms(next.Sub(prev.End)), Error: prev.Error}
	seg.Label = segLabel(seg)
	l.Segments = append(l.Segments, seg)
}

func category(kind, outcome string) string {
	switch outcome {
	case outcomeRetryable:
		return CatRetry
	case outcomeNonRetryable:
		return CatFailed
	case outcomePaused:
		return CatPause
	}
	if kind == kindRevert {
		return CatRevert
	}
	return CatForward
}

func laneOutcome(outcome string) string {
	switch outcome {
	case outcomeOK:
		return "ok"
	case outcomeRetryable:
		return "retrying"
	case outcomeNonRetryable:
		return "failed"
	case outcomePaused:
		return "paused"
	}
	return outcome
}

// segLabel is the text on a bar.
func segLabel(s Segment) string {
	d := FormatDuration(s.DurationMS)
	switch s.Category {
	case CatForward:
		return fmt.Sprintf("attempt %d ok · %s", s.Attempt, d)
	case CatRevert:
		return fmt.Sprintf("revert, attempt %d ok · %s", s.Attempt, d)
	case CatRetry:
		return fmt.Sprintf("attempt %d failed, will retry · %s", s.Attempt, d)
	case CatFailed:
		return fmt.Sprintf("attempt %d failed · %s", s.Attempt, d)
	case CatWait:
		if s.Open {
			return "retry pending · " + d
		}
		return "waited for retry · " + d
	case CatPause:
		return "paused · " + d
	case CatRunning:
		return fmt.Sprintf("attempt %d running · %s", s.Attempt, d)
	}
	return d
}

// FormatDuration renders milliseconds as the page does: "850 ms",
// "1.25 s", "3m 05s", "2h 03m".
func FormatDuration(msec int64) string {
	switch d := time.Duration(msec) * time.Millisecond; {
	case d < time.Second:
		return fmt.Sprintf("%d ms", msec)
	case d < time.Minute:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// buildCompensation derives the compensation trail.
func buildCompensation(tx *eventstore.Transaction, tryouts []eventstore.Tryout, tl Timeline) Compensation {
	c := Compensation{Steps: []CompensationStep{}}
	firstRevert := -1
	for i, t := range tryouts {
		if t.Kind == kindRevert {
			firstRevert = i
			break
		}
	}
	switch tx.State {
	case eventstore.StateFailed, eventstore.StateCompensating, eventstore.StateCompensated, eventstore.StateCompensationFailed:
		c.Triggered = true
	default:
		c.Triggered = firstRevert >= 0 || tx.Kind == kindRevert
	}
	if !c.Triggered {
		return c
	}
	// The trigger: the last forward attempt that did not succeed before the
	// first compensation (or at all).
	stop := len(tryouts)
	if firstRevert >= 0 {
		stop = firstRevert
	}
	for i := stop - 1; i >= 0; i-- {
		if t := tryouts[i]; t.Kind == kindProcess && t.Outcome != outcomeOK {
			c.Trigger = &StepRef{Span: t.Span, Kind: t.Kind, Endpoint: t.Endpoint, Attempt: t.Attempt, Outcome: t.Outcome, Error: t.Error, At: t.FinishedAt}
			break
		}
	}
	if c.Trigger == nil && tx.Error != "" {
		// The event manager failed the saga after a step that succeeded.
		c.Trigger = &StepRef{Span: tx.Span, Kind: kindProcess, Outcome: "decision", Error: tx.Error, At: tx.UpdatedAt}
		if stop > 0 {
			t := tryouts[stop-1]
			c.Trigger.Span, c.Trigger.Endpoint, c.Trigger.Attempt, c.Trigger.At = t.Span, t.Endpoint, t.Attempt, t.FinishedAt
		}
	}
	done := map[int]bool{}
	for _, l := range tl.Lanes {
		if l.Kind != kindRevert {
			continue
		}
		s := CompensationStep{Order: len(c.Steps) + 1, Span: l.Span, Endpoint: l.Endpoint, Outcome: l.Outcome}
		for _, seg := range l.Segments {
			if seg.Category == CatWait {
				continue
			}
			if s.StartedAt.IsZero() {
				s.StartedAt = seg.Start
			}
			s.Attempts++
			s.DurationMS += seg.DurationMS
			s.Error = seg.Error
			if !seg.Open {
				s.FinishedAt = timePtr(seg.End)
			} else {
				s.FinishedAt = nil
			}
		}
		if s.Outcome == "ok" {
			s.Error = ""
		}
		done[l.Span] = true
		c.Steps = append(c.Steps, s)
	}
	switch tx.State {
	case eventstore.StateCompensated:
		c.Result = "compensated"
	case eventstore.StateCompensationFailed:
		c.Result = "compensation_failed"
	default:
		c.Result = "in_progress"
		cursor := tx.Span
		for i := len(tx.Completed) - 1; i >= 0; i-- {
			cs := tx.Completed[i]
			if cs.Compensable && !done[cs.Span] && (tx.Kind != kindRevert || cs.Span < cursor) {
				c.Pending = append(c.Pending, CompletedView{Span: cs.Span, Endpoint: cs.Endpoint, Compensable: true})
			}
		}
	}
	return c
}

// buildRetries lists the steps that took more than one attempt or failed
// retryably.
func buildRetries(tl Timeline) []RetryAudit {
	out := []RetryAudit{}
	for _, l := range tl.Lanes {
		retried := false
		for _, s := range l.Segments {
			if s.Category == CatRetry || s.Category == CatWait || s.Attempt > 1 {
				retried = true
			}
		}
		if !retried {
			continue
		}
		ra := RetryAudit{Span: l.Span, Kind: l.Kind, Endpoint: l.Endpoint}
		var wait int64
		for _, s := range l.Segments {
			if s.Category == CatWait {
				wait += s.DurationMS
				continue
			}
			a := RetryAttempt{Attempt: s.Attempt, Index: s.Index, Outcome: s.Outcome, Error: s.Error,
				StartedAt: s.Start, DurationMS: s.DurationMS, WaitBeforeMS: wait}
			if s.Open {
				a.Outcome = "running"
			} else {
				a.FinishedAt = timePtr(s.End)
			}
			wait = 0
			ra.Attempts = append(ra.Attempts, a)
		}
		out = append(out, ra)
	}
	return out
}

func buildTimings(tx *eventstore.Transaction, tl Timeline, now time.Time) Timings {
	t := Timings{CreatedAt: tx.CreatedAt, UpdatedAt: tx.UpdatedAt}
	end := now
	if tx.State.Terminal() {
		end = tx.UpdatedAt
		t.EndedAt = timePtr(end)
	}
	t.TotalMS = ms(end.Sub(tx.CreatedAt))
	for _, l := range tl.Lanes {
		for _, s := range l.Segments {
			switch s.Category {
			case CatWait, CatPause:
				t.WaitingMS += s.DurationMS
				continue
			}
			t.Attempts++
			if l.Kind == kindRevert {
				t.CompensationMS += s.DurationMS
			} else {
				t.ForwardMS += s.DurationMS
			}
		}
	}
	return t
}
