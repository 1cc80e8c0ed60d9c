package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/recovery"
)

func clearAdminEnv(t *testing.T) {
	clearEnv(t)
	for _, v := range []string{envRegion, envCluster, envService,
		recovery.EnvIntervalMinutes, recovery.EnvInterval, recovery.EnvLookbackDays, recovery.EnvTransactionLifetime} {
		t.Setenv(v, "")
	}
}

// oneLineErr fails t unless stderr is one line starting "sagactl: " and
// containing want.
func oneLineErr(t *testing.T, args []string, stderr, want string) {
	t.Helper()
	if !strings.HasPrefix(stderr, "sagactl: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want) {
		t.Errorf("sagactl %q: stderr %q, want one line naming %q", args, stderr, want)
	}
}

func TestAdminUsage(t *testing.T) {
	clearAdminEnv(t)
	for _, args := range [][]string{
		{"list"},
		{"list", "everything", "--service", "s"},
		{"list", "frozen", "disabled", "--service", "s"},
		{"list", "frozen", "--service", "s", "--limit", "0"},
		{"list", "frozen", "--service", "s", "--page", "0"},
		{"list", "frozen", "--service", "s", "--page", "2", "--after", "x"},
		{"list", "frozen", "--service", "s", "--all-disabled"}, // restore-only flag
		{"list", "frozen"}, // no service
		{"show", "--service", "s"},
		{"show", "a", "b", "--service", "s"},
		{"show", aTxID, "--service", "s", "--limit", "3"}, // list-only flag
		{"restore", "--service", "s"},
		{"restore", "a", "--all-disabled", "--service", "s"},
		{"restore", aTxID, "--service", "s", "--timeout", "0s"},
		{"restore", aTxID, "--service", "s", "--bogus"},
	} {
		code, out, errOut := sagactl(t, args...)
		if code != exitUsage {
			t.Errorf("sagactl %q: exit %d, want 2 (stderr %q)", args, code, errOut)
			continue
		}
		if out != "" {
			t.Errorf("sagactl %q: stdout %q on a usage error", args, out)
		}
		oneLineErr(t, args, errOut, "")
	}
	_, _, errOut := sagactl(t, "list", "frozen")
	oneLineErr(t, nil, errOut, "--service")

	for _, args := range [][]string{{"list", "-h"}, {"restore", "--help"}, {"show", "-h"}} {
		code, out, _ := sagactl(t, args...)
		if code != exitOK || !strings.Contains(out, "exit codes:") || !strings.Contains(out, "restore --all-disabled") || !strings.Contains(out, "--json") {
			t.Errorf("sagactl %q: exit %d, help %.200q", args, code, out)
		}
	}
	if code, out, _ := sagactl(t, "help"); code != exitOK || !strings.Contains(out, "sagactl show TXID") {
		t.Errorf("sagactl help: exit %d, %q", code, out)
	}
}

// aTxID is a well-formed transaction id no test saga has.
const aTxID = "01a248d8-98cb-8001-8112-9d9eae1ef6ea"

func TestAdminRuntimeErrors(t *testing.T) {
	clearAdminEnv(t)
	// Nothing listens on port 1.
	args := []string{"list", "frozen", "--service", "s", "--hosts", "127.0.0.1:1", "--timeout", "10s"}
	code, out, errOut := sagactl(t, args...)
	if code != exitFailure || out != "" {
		t.Errorf("unreachable store: exit %d stdout %q", code, out)
	}
	oneLineErr(t, args, errOut, "open the event store (127.0.0.1:1")

	args = []string{"show", aTxID, "--service", "s", "--config", filepath.Join(t.TempDir(), "missing.yaml")}
	code, _, errOut = sagactl(t, args...)
	if code != exitFailure {
		t.Errorf("missing config: exit %d", code)
	}
	oneLineErr(t, args, errOut, "missing.yaml")

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("stacksaga:\n  cassandra:\n    recovery:\n      window-interval-minutes: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args = []string{"restore", aTxID, "--service", "s", "--config", bad}
	code, _, errOut = sagactl(t, args...)
	if code != exitFailure {
		t.Errorf("invalid recovery config: exit %d", code)
	}
	oneLineErr(t, args, errOut, "window-interval-minutes")

	// A misspelt key of the instance block fails naming it, instead of being
	// ignored (the scope would silently fall back to its defaults).
	misspelt := filepath.Join(t.TempDir(), "misspelt.yaml")
	if err := os.WriteFile(misspelt, []byte("stacksaga:\n  instance:\n    servcie: order-service\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args = []string{"show", aTxID, "--config", misspelt}
	code, _, errOut = sagactl(t, args...)
	if code == 0 {
		t.Errorf("misspelt instance key: exit %d", code)
	}
	oneLineErr(t, args, errOut, "stacksaga.instance.servcie (line 3): unknown configuration key (did you mean \"service\"?)")
}

// adminRig is a keyspace with the schema applied by sagactl and a store on
// it to seed and check sagas.
type adminRig struct {
	t       *testing.T
	hosts   string
	ks      string
	scope   eventstore.Scope
	store   *cassandra.Store
	writer  *recovery.Writer
	flags   []string
	started time.Time
}

func newAdminRig(t *testing.T) *adminRig {
	clearAdminEnv(t)
	hosts, ks := testenv.CassandraKeyspace(t)
	r := &adminRig{t: t, hosts: strings.Join(hosts, ","), ks: ks, started: time.Now().UTC()}
	if code, _, errOut := sagactl(t, "schema", "apply", "--hosts", r.hosts, "--keyspace", ks, "--replication", "SimpleStrategy:1"); code != 0 {
		t.Fatalf("schema apply: exit %d: %s", code, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cassandra.New(ctx, cassandra.Config{ContactPoints: hosts, Keyspace: ks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	r.store = s
	r.scope = eventstore.Scope{Region: "eu", Cluster: "cell-1", Service: testenv.UniqueName(t, "order")}
	r.writer, err = recovery.NewWriter(s, recovery.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r.flags = []string{"--hosts", r.hosts, "--keyspace", ks, "--region", "eu", "--cluster", "cell-1", "--service", r.scope.Service}
	return r
}

// run runs sagactl with the rig's connection and scope flags.
func (r *adminRig) run(args ...string) (int, string, string) {
	r.t.Helper()
	return sagactl(r.t, append(args, r.flags...)...)
}

// ok runs sagactl and fails the test unless it exits 0.
func (r *adminRig) ok(args ...string) string {
	r.t.Helper()
	code, out, errOut := r.run(args...)
	if code != exitOK {
		r.t.Fatalf("sagactl %q: exit %d: %s", args, code, errOut)
	}
	if errOut != "" {
		r.t.Errorf("sagactl %q: stderr %q", args, errOut)
	}
	return out
}

// jsonOf runs sagactl with --json and decodes its one document into v.
func (r *adminRig) jsonOf(v any, args ...string) {
	r.t.Helper()
	decodeOne(r.t, r.ok(append(args, "--json")...), v)
}

func decodeOne(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON document:\n%s", out)
	}
}

// saga creates a saga with a time-ordered id (orchestrator.NewTxID) made
// ago before the rig started.
func (r *adminRig) saga(ago time.Duration, st eventstore.State, mod func(tx *eventstore.Transaction)) eventstore.Transaction {
	r.t.Helper()
	created := eventstore.StoredTime(r.started.Add(-ago))
	id, err := orchestrator.NewTxID(created, 7)
	if err != nil {
		r.t.Fatal(err)
	}
	tx := eventstore.Transaction{
		Scope: r.scope, TxID: id, Domain: "place-order", State: st, Version: 3,
		Span: 1, Kind: "process", Endpoint: "payment-service.charge", Attempt: 2,
		Payload: []byte(`{"order":42}`), Error: "payment gateway timeout",
		Completed: []eventstore.CompletedSpan{{Span: 0, Endpoint: "stock-service.reserve", Compensable: true}},
		CreatedAt: created, UpdatedAt: created.Add(time.Minute),
	}
	if mod != nil {
		mod(&tx)
	}
	first := &eventstore.Tryout{Index: 1, Span: 0, Kind: "process", Endpoint: "stock-service.reserve", Attempt: 1, Outcome: "ok",
		StartedAt: created, FinishedAt: created.Add(1500 * time.Millisecond)}
	ctx := r.t.Context()
	if err := r.store.CreateTransaction(ctx, tx, first); err != nil {
		r.t.Fatal(err)
	}
	second := &eventstore.Tryout{Index: 2, Span: 1, Kind: "process", Endpoint: "payment-service.charge", Attempt: 1, Outcome: "retryable",
		Error: "payment gateway timeout\nat gateway.go:12", StartedAt: created.Add(2 * time.Second), FinishedAt: created.Add(2*time.Second + 250*time.Millisecond)}
	if err := r.store.Transition(ctx, tx, second); err != nil {
		r.t.Fatal(err)
	}
	return tx
}

func (r *adminRig) freeze(tx eventstore.Transaction, reason string) {
	r.t.Helper()
	if err := r.store.Freeze(r.t.Context(), tx, reason); err != nil {
		r.t.Fatal(err)
	}
}

func (r *adminRig) load(id string) eventstore.Transaction {
	r.t.Helper()
	tx, err := r.store.LoadTransaction(r.t.Context(), r.scope, id)
	if err != nil {
		r.t.Fatal(err)
	}
	return tx
}

func (r *adminRig) frozen(id string) bool {
	r.t.Helper()
	_, err := r.store.GetFrozen(r.t.Context(), r.scope, id)
	if err != nil && !errors.Is(err, eventstore.ErrNotFound) {
		r.t.Fatal(err)
	}
	return err == nil
}

type listDoc struct {
	List  string `json:"list"`
	Scope struct {
		Region, Cluster, Service string
	} `json:"scope"`
	Limit int    `json:"limit"`
	Next  string `json:"next_after"`
	Sagas []struct {
		TxID        string    `json:"tx_id"`
		State       string    `json:"state"`
		FrozenState string    `json:"frozen_state"`
		Reason      string    `json:"reason"`
		Error       string    `json:"error"`
		Endpoint    string    `json:"endpoint"`
		Kind        string    `json:"kind"`
		AgeSeconds  int64     `json:"age_seconds"`
		RetryDue    time.Time `json:"retry_due"`
		Retries     []struct {
			Slot   int `json:"slot"`
			Bucket int `json:"bucket"`
		} `json:"retries"`
	} `json:"sagas"`
	TotalFrozen *int `json:"total_frozen"`
}

func (d listDoc) ids() []string {
	var out []string
	for _, s := range d.Sagas {
		out = append(out, s.TxID)
	}
	return out
}

func (r *adminRig) list(args ...string) listDoc {
	r.t.Helper()
	var d listDoc
	r.jsonOf(&d, append([]string{"list"}, args...)...)
	return d
}

// TestAdminCommands seeds sagas in every state an admin deals with, then
// runs list, show and restore end to end against real Cassandra.
func TestAdminCommands(t *testing.T) {
	r := newAdminRig(t)
	ctx := t.Context()
	retry := func(tx eventstore.Transaction) {
		if _, err := r.writer.RegisterRetry(ctx, r.scope, tx.TxID, tx.Domain, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Parked after a retryable failure, a retry registered.
	p1 := r.saga(3*time.Hour, eventstore.StateRetryPending, nil)
	p2 := r.saga(2*time.Hour, eventstore.StateRetryPending, nil)
	p3 := r.saga(1*time.Hour, eventstore.StateRetryPending, nil)
	for _, p := range []eventstore.Transaction{p1, p2, p3} {
		retry(p)
	}
	// Disabled by the recovery Redriver.
	d1 := r.saga(30*time.Hour, eventstore.StateDisabled, nil)
	d2 := r.saga(26*time.Hour, eventstore.StateDisabled, nil)
	r.freeze(d1, "transaction lifetime 24h0m0s exceeded")
	r.freeze(d2, "transaction lifetime 24h0m0s exceeded")
	// Terminated during a compensation; the orchestrator freezes the copy
	// before its transition to COMPENSATION_FAILED.
	t1 := r.saga(5*time.Hour, eventstore.StateCompensating, func(tx *eventstore.Transaction) {
		tx.Span, tx.Kind, tx.Endpoint, tx.Attempt, tx.Error = 0, "revert", "stock-service.reserve", 1, "release rejected"
	})
	r.freeze(t1, "release rejected")
	t1.State, t1.Version = eventstore.StateCompensationFailed, t1.Version+1
	if err := r.store.Transition(ctx, t1, nil); err != nil {
		t.Fatal(err)
	}
	// Terminated outside a compensation (its entity no longer decoded).
	t2 := r.saga(4*time.Hour, eventstore.StateCompensationFailed, func(tx *eventstore.Transaction) { tx.Error = "entity does not decode" })
	r.freeze(t2, "entity does not decode")
	done := r.saga(10*time.Minute, eventstore.StateCompleted, func(tx *eventstore.Transaction) { tx.Error, tx.Definition = "", 2 })

	t.Run("list retry-pending", func(t *testing.T) {
		d := r.list("retry-pending")
		if want := []string{p3.TxID, p2.TxID, p1.TxID}; !slices.Equal(d.ids(), want) {
			t.Fatalf("retry-pending %v, want newest first %v", d.ids(), want)
		}
		if d.List != "retry-pending" || d.Next != "" || d.Limit != defaultListLimit || d.Scope.Service != r.scope.Service || d.Scope.Region != "eu" || d.Scope.Cluster != "cell-1" {
			t.Errorf("document %+v", d)
		}
		s := d.Sagas[0]
		if s.State != "RETRY_PENDING" || s.Error != "payment gateway timeout" || s.Endpoint != "payment-service.charge" ||
			len(s.Retries) != 1 || s.Retries[0].Bucket%2 != 0 || s.RetryDue.IsZero() || s.AgeSeconds < 3600 || s.AgeSeconds > 3600+600 {
			t.Errorf("saga %+v", s)
		}
		// Pages: --limit with --after and --page.
		pg := r.list("retry-pending", "--limit", "2")
		if !slices.Equal(pg.ids(), []string{p3.TxID, p2.TxID}) || pg.Next != p2.TxID {
			t.Errorf("page 1: %v next %q", pg.ids(), pg.Next)
		}
		pg = r.list("retry-pending", "--limit", "2", "--after", pg.Next)
		if !slices.Equal(pg.ids(), []string{p1.TxID}) || pg.Next != "" {
			t.Errorf("page 2 by cursor: %v next %q", pg.ids(), pg.Next)
		}
		pg = r.list("retry-pending", "--limit", "2", "--page", "2")
		if !slices.Equal(pg.ids(), []string{p1.TxID}) {
			t.Errorf("--page 2: %v", pg.ids())
		}
		// The table.
		out := r.ok("list", "retry-pending", "--limit", "2")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "TXID") || !strings.Contains(lines[0], "RETRY DUE") || !strings.Contains(lines[0], " DEF ") ||
			!strings.HasPrefix(lines[1], p3.TxID) || !strings.Contains(lines[1], "1 process payment-service.charge") ||
			!strings.Contains(lines[1], "payment gateway timeout") || !strings.Contains(lines[1], "1h00m") ||
			lines[3] != "next page: --after "+p2.TxID {
			t.Errorf("table:\n%s", out)
		}
	})

	t.Run("list frozen", func(t *testing.T) {
		all := r.list("frozen")
		if want := []string{t2.TxID, t1.TxID, d2.TxID, d1.TxID}; !slices.Equal(all.ids(), want) {
			t.Fatalf("frozen %v, want newest first %v", all.ids(), want)
		}
		if all.TotalFrozen == nil || *all.TotalFrozen != 4 {
			t.Errorf("total_frozen %v", all.TotalFrozen)
		}
		if s := all.Sagas[1]; s.State != "COMPENSATION_FAILED" || s.FrozenState != "COMPENSATING" || s.Reason != "release rejected" || s.Kind != "revert" {
			t.Errorf("terminated saga as listed: %+v", s)
		}
		dis := r.list("disabled")
		if !slices.Equal(dis.ids(), []string{d2.TxID, d1.TxID}) || dis.Sagas[1].Reason != "transaction lifetime 24h0m0s exceeded" || dis.Sagas[1].AgeSeconds < 30*3600 {
			t.Errorf("disabled %+v", dis.Sagas)
		}
		if cf := r.list("compensation-failed"); !slices.Equal(cf.ids(), []string{t2.TxID, t1.TxID}) || cf.List != "compensation-failed" {
			t.Errorf("compensation-failed %q: %v", cf.List, cf.ids())
		}
		// the older name of that list still works, with a note
		if code, stdout, stderr := r.run("list", "terminated", "--json"); code != 0 || !strings.Contains(stderr, `older name of "list compensation-failed"`) {
			t.Errorf("list terminated: exit %d, stderr %q", code, stderr)
		} else {
			var term listDoc
			decodeOne(t, stdout, &term)
			if !slices.Equal(term.ids(), []string{t2.TxID, t1.TxID}) {
				t.Errorf("terminated %v", term.ids())
			}
		}
		pg := r.list("disabled", "--limit", "1")
		if !slices.Equal(pg.ids(), []string{d2.TxID}) || pg.Next != d2.TxID {
			t.Errorf("disabled page 1: %v next %q", pg.ids(), pg.Next)
		}
		out := r.ok("list", "disabled")
		if !strings.Contains(out, "FROZEN") || !strings.Contains(out, "REASON") || !strings.Contains(out, d1.TxID+"  DISABLED") ||
			!strings.Contains(out, "1d06h") || !strings.Contains(out, "transaction lifetime 24h0m0s exceeded") || strings.Contains(out, "next page") {
			t.Errorf("table:\n%s", out)
		}
	})

	t.Run("show", func(t *testing.T) {
		out := r.ok("show", done.TxID)
		for _, want := range []string{
			"saga           " + done.TxID, "state          COMPLETED (version 3)", "definition     version 2", "step           1 process payment-service.charge, attempt 2",
			"completed      0 stock-service.reserve", "history (2 tryouts)",
			"INDEX  SPAN  KIND     ENDPOINT", "OUTCOME", "DURATION",
			"ok         -", "1.5s", "retryable  payment gateway timeout …", "250ms",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("show lacks %q:\n%s", want, out)
			}
		}
		var doc struct {
			Saga struct {
				TxID       string `json:"tx_id"`
				State      string `json:"state"`
				Version    int64  `json:"version"`
				Definition int    `json:"definition_version"`
			} `json:"saga"`
			Frozen  *struct{ State, Reason string } `json:"frozen"`
			History []struct {
				Index      int    `json:"index"`
				Outcome    string `json:"outcome"`
				Error      string `json:"error"`
				DurationMS *int64 `json:"duration_ms"`
			} `json:"history"`
		}
		r.jsonOf(&doc, "show", done.TxID)
		if doc.Saga.TxID != done.TxID || doc.Saga.State != "COMPLETED" || doc.Saga.Definition != 2 || doc.Frozen != nil || len(doc.History) != 2 ||
			doc.History[1].Error != "payment gateway timeout\nat gateway.go:12" || doc.History[1].DurationMS == nil || *doc.History[1].DurationMS != 250 {
			t.Errorf("show --json %+v", doc)
		}
		r.jsonOf(&doc, "show", t1.TxID)
		if doc.Frozen == nil || doc.Frozen.State != "COMPENSATING" || doc.Frozen.Reason != "release rejected" {
			t.Errorf("frozen copy of a terminated saga: %+v", doc.Frozen)
		}
		if out := r.ok("show", d1.TxID); !strings.Contains(out, "outlived the 24h0m0s lifetime") || !strings.Contains(out, "frozen ") {
			t.Errorf("show of a disabled saga:\n%s", out)
		}

		args := []string{"show", aTxID, "--json"}
		code, out, errOut := r.run(args...)
		if code != exitNotFound || out != "" {
			t.Errorf("show of a missing saga: exit %d, stdout %q", code, out)
		}
		oneLineErr(t, args, errOut, aTxID+": no such saga in eu/cell-1/")
	})

	t.Run("restore refused", func(t *testing.T) {
		for _, c := range []struct {
			id   string
			code int
			want string
		}{
			{done.TxID, exitNotRestorable, "is COMPLETED"},
			{t2.TxID, exitNotRestorable, "terminated outside a compensation"},
			{aTxID, exitNotFound, "no such saga"},
		} {
			before, _ := r.store.LoadTransaction(ctx, r.scope, c.id)
			args := []string{"restore", c.id}
			code, out, errOut := r.run(args...)
			if code != c.code || out != "" {
				t.Errorf("restore %s: exit %d (want %d), stdout %q", c.id, code, c.code, out)
			}
			oneLineErr(t, args, errOut, c.want)
			if after, _ := r.store.LoadTransaction(ctx, r.scope, c.id); after.Version != before.Version {
				t.Errorf("restore %s changed the saga", c.id)
			}
		}
	})

	t.Run("restore", func(t *testing.T) {
		// The retry nodes run 5-minute windows: restore must register into
		// them. The scope comes from the same file.
		cfgFile := filepath.Join(t.TempDir(), "stacksaga.yaml")
		yaml := fmt.Sprintf("stacksaga:\n  instance:\n    region: eu\n    cluster: cell-1\n    service: %s\n  cassandra:\n    contact-points: [%q]\n    keyspace: %s\n    recovery:\n      window-interval-minutes: 5\n",
			r.scope.Service, r.hosts, r.ks)
		if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		before := time.Now().UTC()
		code, out, errOut := sagactl(t, "restore", t1.TxID, "--config", cfgFile)
		if code != exitOK {
			t.Fatalf("restore %s: exit %d: %s", t1.TxID, code, errOut)
		}
		for _, want := range []string{
			"restored " + t1.TxID + ": COMPENSATION_FAILED -> RETRY_PENDING (version 5)", "lifetime restarts at",
			"new restore watchdog:", "removed from the frozen table", "retry registered:", "bucket 0, due",
			"sends span 0 revert stock-service.reserve again with attempt 2",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("restore output lacks %q:\n%s", want, out)
			}
		}
		got := r.load(t1.TxID)
		if got.State != eventstore.StateRetryPending || got.Kind != "revert" || got.LifetimeStart.Before(before.Truncate(time.Millisecond)) || got.RestorePath == nil || r.frozen(t1.TxID) {
			t.Errorf("saga after restore: %+v, frozen %v", got, r.frozen(t1.TxID))
		}
		// Its retry lies in a 5-minute window.
		d := r.list("retry-pending")
		var slot = -1
		for _, s := range d.Sagas {
			if s.TxID == t1.TxID && len(s.Retries) == 1 {
				slot = s.Retries[0].Slot
			}
		}
		if slot < 0 || slot%5 != 0 {
			t.Errorf("restored saga's retry in slot %d, want a 5-minute window (%+v)", slot, d.Sagas)
		}

		// Every disabled saga, as JSON.
		var all struct {
			Disabled, Restored, Failed int
			Results                    []struct {
				TxID          string    `json:"tx_id"`
				From          string    `json:"from"`
				To            string    `json:"to"`
				Transitioned  bool      `json:"transitioned"`
				Unfrozen      bool      `json:"unfrozen"`
				LifetimeStart time.Time `json:"lifetime_start"`
				Retry         *struct{ Bucket int }
				Watchdog      *struct{ Bucket int }
				NextAttempt   int `json:"next_attempt"`
			}
		}
		r.jsonOf(&all, "restore", "--all-disabled")
		if all.Disabled != 2 || all.Restored != 2 || all.Failed != 0 || len(all.Results) != 2 {
			t.Fatalf("restore --all-disabled: %+v", all)
		}
		for i, want := range []string{d2.TxID, d1.TxID} {
			res := all.Results[i]
			if res.TxID != want || res.From != "DISABLED" || res.To != "RETRY_PENDING" || !res.Transitioned || !res.Unfrozen ||
				res.LifetimeStart.Before(before.Truncate(time.Millisecond)) || res.Retry == nil || res.Retry.Bucket%2 != 0 ||
				res.Watchdog == nil || res.Watchdog.Bucket%2 != 1 || res.NextAttempt != 3 {
				t.Errorf("result %d: %+v", i, res)
			}
			if tx := r.load(want); tx.State != eventstore.StateRetryPending || !tx.LifetimeStart.Equal(res.LifetimeStart) ||
				!strings.HasPrefix(tx.Error, "payment gateway timeout [restored from DISABLED at ") {
				t.Errorf("saga %s after restore: %+v", want, tx)
			}
		}
		if out := r.ok("list", "disabled"); out != "no disabled sagas in eu/cell-1/"+r.scope.Service+"\n" {
			t.Errorf("list disabled after restoring all: %q", out)
		}
		if d := r.list("compensation-failed"); !slices.Equal(d.ids(), []string{t2.TxID}) {
			t.Errorf("compensation-failed after restore: %v", d.ids())
		}
		if d := r.list("retry-pending"); !slices.Equal(d.ids(), []string{p3.TxID, p2.TxID, p1.TxID, t1.TxID, d2.TxID, d1.TxID}) {
			t.Errorf("retry-pending after restore: %v", d.ids())
		}
		if out := r.ok("restore", "--all-disabled"); out != "restored 0 of 0 disabled sagas in eu/cell-1/"+r.scope.Service+"\n" {
			t.Errorf("second --all-disabled: %q", out)
		}

		// A RETRY_PENDING saga: a retry registered, nothing else.
		var one struct {
			TxID         string `json:"tx_id"`
			From, To     string
			Transitioned bool `json:"transitioned"`
			Retry        *struct{ Bucket int }
		}
		v := r.load(p1.TxID).Version
		r.jsonOf(&one, "restore", p1.TxID)
		if one.TxID != p1.TxID || one.From != "RETRY_PENDING" || one.Transitioned || one.Retry == nil || r.load(p1.TxID).Version != v {
			t.Errorf("restore of a RETRY_PENDING saga: %+v", one)
		}
		if out := r.ok("restore", p2.TxID); !strings.Contains(out, "restored "+p2.TxID+": already RETRY_PENDING, retry registered") {
			t.Errorf("restore text: %q", out)
		}
	})
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 59 * time.Second: "59s", 5 * time.Minute: "5m", 3*time.Hour + 5*time.Minute: "3h05m",
		30 * time.Hour: "1d06h", -2 * time.Minute: "-2m",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
	if got := oneLine("boom\nstack", 80); got != "boom …" {
		t.Errorf("oneLine %q", got)
	}
	if got := oneLine(strings.Repeat("x", 10), 5); got != "xxxx…" {
		t.Errorf("oneLine %q", got)
	}
	var b bytes.Buffer
	if code := failf(&b, 4, "a\nb  c"); code != 4 || b.String() != "sagactl: a; b c\n" {
		t.Errorf("failf: %d %q", code, b.String())
	}
}
