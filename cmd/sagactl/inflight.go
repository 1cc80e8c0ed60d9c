package main

// sagactl list in-flight and list all, the argument checks of list, and the
// syntax of a transaction id.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/tracewindow/cassandraindex"
)

// defaultAllRange is how far back `list all` looks without --newer-than.
const defaultAllRange = 24 * time.Hour

// errTxIDSyntax is wrapped by validTxID's errors.
var errTxIDSyntax = errors.New("not a transaction id")

// validTxID checks the syntax of a transaction id given on the command
// line: the 36-character UUID text orchestrator.NewTxID makes
// (8-4-4-4-12 hex digits). A usage error costs no store round trip and
// does not read as "no such saga".
func validTxID(id string) error {
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return fmt.Errorf("%q: %w (want a UUID such as 01a248d8-98cb-8001-8112-9d9eae1ef6ea)", oneLine(id, 64), errTxIDSyntax)
	}
	return nil
}

// listFilter is what list in-flight and list all keep.
type listFilter struct {
	states               []eventstore.State
	domain, businessKey  string
	olderThan, newerThan time.Duration
}

// filterFlags are the flags only list in-flight and list all take.
var filterFlags = []string{"state", "domain", "business-key", "older-than", "newer-than"}

// parseList checks list's arguments; code is exitOK or the usage error's.
func parseList(f *adminFlags, set map[string]bool, pos []string, stderr io.Writer) (string, listFilter, int) {
	var lf listFilter
	names := strings.Join(listNames, ", ")
	if len(pos) != 1 {
		return "", lf, failf(stderr, exitUsage, "list: want one of %s, got %q (see sagactl list -h)", names, pos)
	}
	which := pos[0]
	if which == "terminated" {
		// The older name of the list, from before Terminate: kept.
		fmt.Fprintln(stderr, `sagactl: note: "list terminated" is the older name of "list compensation-failed": it lists frozen COMPENSATION_FAILED sagas, not TERMINATED ones`)
		which = "compensation-failed"
	}
	if !slices.Contains(listNames, which) {
		return "", lf, failf(stderr, exitUsage, "list: unknown list %q: want one of %s", which, names)
	}
	sagaList := which == "in-flight" || which == "all"
	switch {
	case *f.limit < 1:
		return "", lf, failf(stderr, exitUsage, "list: --limit %d: want at least 1", *f.limit)
	case set["page"] && *f.page < 1:
		return "", lf, failf(stderr, exitUsage, "list: --page %d: pages count from 1", *f.page)
	case set["page"] && set["after"]:
		return "", lf, failf(stderr, exitUsage, "list: --page and --after exclude each other")
	case which == "all" && set["page"]:
		return "", lf, failf(stderr, exitUsage, "list all: --page: the index pages by cursor only: use --after")
	case which == "all" && *f.limit > tracewindow.MaxLimit:
		return "", lf, failf(stderr, exitUsage, "list all: --limit %d: at most %d", *f.limit, tracewindow.MaxLimit)
	case sagaList && *f.after != "" && !tracewindow.ValidCursor(*f.after):
		return "", lf, failf(stderr, exitUsage, "list %s: --after %q: not a cursor (a transaction id from next_after)", which, oneLine(*f.after, 64))
	}
	for _, name := range filterFlags {
		if set[name] && !sagaList {
			return "", lf, failf(stderr, exitUsage, "list %s: --%s: only list in-flight and list all take filters", which, name)
		}
	}
	if !sagaList {
		return which, lf, exitOK
	}
	lf = listFilter{domain: strings.TrimSpace(*f.domain), businessKey: *f.businessKey, olderThan: *f.olderThan, newerThan: *f.newerThan}
	if err := lf.parseStates(which, *f.states); err != nil {
		return "", lf, failf(stderr, exitUsage, "list %s: %v", which, err)
	}
	if err := lf.check(which, set); err != nil {
		return "", lf, failf(stderr, exitUsage, "list %s: %v", which, err)
	}
	return which, lf, exitOK
}

// parseStates reads --state: names as the store spells them, any case,
// "-" for "_"; in-flight takes only states that have not ended.
func (lf *listFilter) parseStates(which, raw string) error {
	for _, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		st := eventstore.State(strings.ToUpper(strings.ReplaceAll(part, "-", "_")))
		switch {
		case !tracewindow.KnownState(st):
			return fmt.Errorf("--state %q: want states among %s", oneLine(part, 40), joinStates(tracewindow.States))
		case which == "in-flight" && !tracewindow.Unended(st):
			return fmt.Errorf("--state %s: a saga in it has ended: see list all --state %s", st, st)
		case !slices.Contains(lf.states, st):
			lf.states = append(lf.states, st)
		}
	}
	return nil
}

// check validates the other filters.
func (lf *listFilter) check(which string, set map[string]bool) error {
	switch {
	case set["domain"] && lf.domain == "":
		return errors.New("--domain is empty")
	case lf.olderThan < 0 || lf.newerThan < 0:
		return errors.New("--older-than and --newer-than take positive durations")
	case set["newer-than"] && set["older-than"] && lf.newerThan <= lf.olderThan:
		return fmt.Errorf("--newer-than %v is not above --older-than %v: no saga can be both", lf.newerThan, lf.olderThan)
	case which == "all" && lf.newerThan > tracewindow.MaxRange:
		return fmt.Errorf("--newer-than %v: the index lists at most %v back", lf.newerThan, tracewindow.MaxRange)
	case set["business-key"] && lf.domain == "":
		return errors.New("--business-key needs --domain (business keys are per domain)")
	}
	if set["business-key"] {
		if err := orchestrator.ValidBusinessKey(lf.businessKey); err != nil {
			return fmt.Errorf("--business-key: %w", err)
		}
	}
	return nil
}

func joinStates(ss []eventstore.State) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

// keepState is the state test of lf: its states, else every state that
// has not ended (tracewindow.Unended, what in flight means).
func (lf listFilter) keepState() func(eventstore.State) bool {
	if len(lf.states) == 0 {
		return tracewindow.Unended
	}
	return func(st eventstore.State) bool { return slices.Contains(lf.states, st) }
}

// created reports whether a saga created at t passes the age filters at.
func (lf listFilter) created(t, at time.Time) bool {
	age := at.Sub(t)
	return age >= lf.olderThan && (lf.newerThan == 0 || age <= lf.newerThan)
}

// keeps reports whether the saga of entry e passes every filter at.
func (lf listFilter) keeps(e tracewindow.Entry, at time.Time, which string) bool {
	ok := lf.created(e.CreatedAt, at) && (lf.domain == "" || e.Domain == lf.domain)
	if len(lf.states) > 0 {
		return ok && slices.Contains(lf.states, e.State)
	}
	return ok && (which == "all" || tracewindow.Unended(e.State))
}

// jsonRow is one saga of list in-flight and list all.
type jsonRow struct {
	TxID       string           `json:"tx_id"`
	Domain     string           `json:"domain"`
	State      eventstore.State `json:"state"`
	Definition int              `json:"definition_version"`
	Span       int              `json:"span"`
	Kind       string           `json:"kind,omitempty"`
	Endpoint   string           `json:"endpoint,omitempty"`
	// Error is the saga's error when it explains its state, LastError an
	// earlier attempt's (tracewindow.ErrorIsState).
	Error      string    `json:"error,omitempty"`
	LastError  string    `json:"last_error,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	AgeSeconds int64     `json:"age_seconds"`
}

func rowOf(e tracewindow.Entry, at time.Time) jsonRow {
	r := jsonRow{TxID: e.TxID, Domain: e.Domain, State: e.State, Definition: max(e.Definition, 1), Span: e.Span, Kind: e.Kind,
		Endpoint: e.Endpoint, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, AgeSeconds: int64(at.Sub(e.CreatedAt) / time.Second)}
	if tracewindow.ErrorIsState(e.State) {
		r.Error = e.Error
	} else {
		r.LastError = e.Error
	}
	return r
}

// jsonSagaList is the document of list in-flight and list all.
type jsonSagaList struct {
	List  string    `json:"list"`
	Scope jsonScope `json:"scope"`
	// Means says which sagas the list holds.
	Means string `json:"means"`
	// Source names where the sagas were found: "store" (the recovery
	// directory and the frozen table) or "index" (the Trace Window's).
	Source string     `json:"source"`
	Filter jsonFilter `json:"filter"`
	Limit  int        `json:"limit"`
	// Next is the --after cursor of the next page ("" on the last page).
	Next  string    `json:"next_after"`
	Sagas []jsonRow `json:"sagas"`
}

type jsonFilter struct {
	States      []eventstore.State `json:"states,omitempty"`
	Domain      string             `json:"domain,omitempty"`
	BusinessKey string             `json:"business_key,omitempty"`
	// CreatedFrom and CreatedTo bound the creation time (from the age
	// filters; list all: default the last 24 hours).
	CreatedFrom time.Time `json:"created_from,omitzero"`
	CreatedTo   time.Time `json:"created_to,omitzero"`
}

// means describes what each list holds (the help says the same).
var means = map[string]string{
	"in-flight": "every saga that has not ended: any state but COMPLETED, COMPENSATED, COMPENSATION_FAILED and TERMINATED (DISABLED included)",
	"all":       "every saga created in the range, in any state",
}

// listSagas runs list in-flight and list all.
func (c *cli) listSagas(ctx context.Context, which string, page recovery.Page, lf listFilter) int {
	at := now()
	out := jsonSagaList{List: which, Scope: jsonScope(c.scope), Means: means[which], Source: "store", Limit: page.Limit, Sagas: []jsonRow{},
		Filter: jsonFilter{States: lf.states, Domain: lf.domain, BusinessKey: lf.businessKey}}
	if lf.newerThan > 0 {
		out.Filter.CreatedFrom = at.Add(-lf.newerThan)
	}
	if lf.olderThan > 0 {
		out.Filter.CreatedTo = at.Add(-lf.olderThan)
	}
	var rows []tracewindow.Entry
	var err error
	switch {
	case lf.businessKey != "":
		rows, err = c.byBusinessKey(ctx, lf)
	case which == "in-flight":
		rows, out.Next, err = c.inFlight(ctx, at, page, lf)
	default:
		out.Source = "index"
		if lf.newerThan == 0 {
			lf.newerThan, out.Filter.CreatedFrom = defaultAllRange, at.Add(-defaultAllRange)
		}
		rows, out.Next, err = c.allFromIndex(ctx, at, page, lf)
	}
	if err != nil {
		return c.failf(exitFailure, "list %s in %s: %v", which, c.scopeString(), err)
	}
	for _, e := range rows {
		if lf.keeps(e, at, which) {
			out.Sagas = append(out.Sagas, rowOf(e, at))
		}
	}
	if c.json {
		return c.printJSON(out)
	}
	return c.printSagaList(out, page)
}

// inFlight reads the sagas that have not ended from the store alone.
func (c *cli) inFlight(ctx context.Context, at time.Time, page recovery.Page, lf listFilter) ([]tracewindow.Entry, string, error) {
	f := recovery.SagaFilter{Domain: lf.domain, States: lf.keepState(), IDs: func(id string) bool {
		t, ok := tracewindow.IDTime(id)
		return !ok || lf.created(t, at) // an id without a time: its row decides
	}}
	l, err := recovery.ListInFlight(ctx, c.store, c.scope, c.rcfg, at, page, f)
	if err != nil {
		return nil, "", err
	}
	rows := make([]tracewindow.Entry, 0, len(l.Sagas))
	for i := range l.Sagas {
		rows = append(rows, tracewindow.EntryOf(&l.Sagas[i]))
	}
	return rows, l.Next, nil
}

// allFromIndex reads one page of the Trace Window's index, each state read
// from the store.
func (c *cli) allFromIndex(ctx context.Context, at time.Time, page recovery.Page, lf listFilter) ([]tracewindow.Entry, string, error) {
	idx, err := cassandraindex.New(ctx, c.ccfg, cassandraindex.WithoutSchema(), cassandraindex.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, "", err
	}
	defer idx.Close()
	q := tracewindow.Query{Scope: c.scope, Domain: lf.domain, From: at.Add(-lf.newerThan), To: at.Add(-lf.olderThan),
		States: lf.states, After: page.After, Limit: page.Limit}
	p, _, err := tracewindow.List(ctx, c.store, idx, q)
	if errors.Is(err, cassandraindex.ErrNoTable) {
		return nil, "", fmt.Errorf("%w (list all reads the Trace Window's index, which the orchestrator service feeds through tracewindow/cassandraindex; list in-flight needs no index)", err)
	}
	return p.Entries, p.Next, err
}

// byBusinessKey reads the saga a business key names (no row: none).
func (c *cli) byBusinessKey(ctx context.Context, lf listFilter) ([]tracewindow.Entry, error) {
	r, ok := c.store.(eventstore.BusinessKeyReader)
	if !ok {
		return nil, errors.New("the store does not keep business keys")
	}
	k, err := r.GetBusinessKey(ctx, eventstore.BusinessKeyID{Scope: c.scope, Domain: lf.domain, Key: lf.businessKey})
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read business key %q: %w", lf.businessKey, err)
	}
	tx, err := c.store.LoadTransaction(ctx, c.scope, k.TxID)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, nil // claimed, its saga not created (yet)
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", k.TxID, err)
	}
	return []tracewindow.Entry{tracewindow.EntryOf(&tx)}, nil
}

// printSagaList prints list in-flight and list all as a table.
func (c *cli) printSagaList(out jsonSagaList, page recovery.Page) int {
	if len(out.Sagas) == 0 {
		more := ""
		if page.After != "" || page.Offset > 0 {
			more = "more "
		}
		if out.List == "in-flight" {
			fmt.Fprintf(c.stdout, "no %ssagas in flight in %s (in flight: %s)\n", more, c.scopeString(), out.Means)
		} else {
			fmt.Fprintf(c.stdout, "no %ssagas in %s created %s..%s\n", more, c.scopeString(), fmtTime(out.Filter.CreatedFrom), fmtTime(out.Filter.CreatedTo))
		}
	} else {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TXID\tSTATE\tDOMAIN\tDEF\tSTEP\tAGE\tUPDATED\tERROR")
		at := now()
		for _, r := range out.Sagas {
			st := "-"
			if r.Endpoint != "" {
				st = fmt.Sprintf("%d %s %s", r.Span, r.Kind, r.Endpoint)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s ago\t%s\n", r.TxID, r.State, cell(r.Domain, 60), r.Definition, cell(st, 80),
				age(at.Sub(r.CreatedAt)), age(at.Sub(r.UpdatedAt)), cell(r.Error, 100))
		}
		if err := tw.Flush(); err != nil {
			return c.failf(exitFailure, "write: %v", err)
		}
	}
	if out.Next != "" {
		fmt.Fprintf(c.stdout, "next page: --after %s\n", out.Next)
	}
	return exitOK
}
