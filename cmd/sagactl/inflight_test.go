package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/recovery"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/tracewindow/cassandraindex"
)

// TestListNamesOneSource: every list sagactl list takes is named by
// sagactl --help and by sagactl list -h, and no other list is.
func TestListNamesOneSource(t *testing.T) {
	clearAdminEnv(t)
	_, top, _ := sagactl(t, "--help")
	_, sub, _ := sagactl(t, "list", "-h")
	line := "sagactl list " + strings.Join(listNames, "|") + " "
	for name, help := range map[string]string{"sagactl --help": top, "sagactl list -h": sub} {
		if !strings.Contains(help, line) {
			t.Errorf("%s lacks the list line %q:\n%s", name, line, help)
		}
	}
	for _, want := range []string{"in-flight", "all", "retry-pending", "paused", "frozen", "disabled", "compensation-failed"} {
		if !slices.Contains(listNames, want) {
			t.Errorf("list %s is not among listNames %v", want, listNames)
		}
		// Each is accepted (it then fails to connect: exit 1, not 2).
		args := []string{"list", want, "--service", "s", "--hosts", testenv.ClosedAddr(t), "--timeout", "5s"}
		if code, _, errOut := sagactl(t, args...); code != exitFailure {
			t.Errorf("sagactl %q: exit %d, want 1 (a connection error): %s", args, code, errOut)
		}
	}
}

// TestTxIDSyntaxIsAUsageError: a TXID that is not a transaction id is a
// usage error (exit 2) before any store is opened, for every command that
// takes one.
func TestTxIDSyntaxIsAUsageError(t *testing.T) {
	clearAdminEnv(t)
	t.Setenv(envKafkaBrokers, "")
	closed := testenv.ClosedAddr(t)
	for _, args := range [][]string{
		{"show", "not-a-txid"},
		{"show", "01a248d8-98cb-8001-8112"},
		{"show", "01a248d8-98cb-8001-8112-9d9eae1ef6eaX"},
		{"restore", "not-a-txid"},
		{"resume", "not-a-txid", "not-a-txid:1:process"},
		{"cancel", "not-a-txid", "--reason", "r", "--brokers", closed},
		{"terminate", "tx 1", "--reason", "r", "--brokers", closed},
	} {
		args = append(args, "--service", "s", "--hosts", closed, "--timeout", "5s")
		code, out, errOut := sagactl(t, args...)
		if code != exitUsage || out != "" {
			t.Errorf("sagactl %q: exit %d stdout %q, want a usage error (2)", args, code, out)
		}
		oneLineErr(t, args, errOut, "not a transaction id")
	}
	// A well-formed id goes on to the store (here: none answers).
	args := []string{"show", "01a248d8-98cb-8001-8112-9d9eae1ef6ea", "--service", "s", "--hosts", closed, "--timeout", "5s"}
	if code, _, errOut := sagactl(t, args...); code != exitFailure {
		t.Errorf("sagactl %q: exit %d, want 1: %s", args, code, errOut)
	}
}

// sagaRows is the document of list in-flight and list all.
type sagaRows struct {
	List   string `json:"list"`
	Means  string `json:"means"`
	Source string `json:"source"`
	Next   string `json:"next_after"`
	Sagas  []struct {
		TxID      string `json:"tx_id"`
		State     string `json:"state"`
		Domain    string `json:"domain"`
		Error     string `json:"error"`
		LastError string `json:"last_error"`
	} `json:"sagas"`
}

func (d sagaRows) ids() []string {
	out := []string{}
	for _, s := range d.Sagas {
		out = append(out, s.TxID)
	}
	return out
}

// TestListInFlightAndAll seeds sagas in every state on real Cassandra and
// runs list in-flight (the store alone) and list all (the Trace Window's
// index) with each filter and paging.
func TestListInFlightAndAll(t *testing.T) {
	r := newAdminRig(t)
	ctx := t.Context()
	watch := func(tx eventstore.Transaction) {
		if _, err := r.writer.RegisterRestore(ctx, r.scope, tx.TxID, tx.Domain); err != nil {
			t.Fatal(err)
		}
	}
	c1 := r.saga(time.Minute, eventstore.StateCompleted, nil) // ended, its watchdog not yet cleaned up
	s1 := r.saga(5*time.Minute, eventstore.StateStarted, nil)
	s5 := r.saga(10*time.Minute, eventstore.StateCompensating, func(tx *eventstore.Transaction) { tx.Domain = "refund" })
	s3 := r.saga(30*time.Minute, eventstore.StatePaused, nil)
	c2 := r.saga(40*time.Minute, eventstore.StateCompensated, nil)
	c3 := r.saga(50*time.Minute, eventstore.StateCompensationFailed, nil)
	s2 := r.saga(2*time.Hour, eventstore.StateInProgress, nil)
	s4 := r.saga(3*time.Hour, eventstore.StateRetryPending, nil)
	s6 := r.saga(30*time.Hour, eventstore.StateDisabled, nil)
	for _, tx := range []eventstore.Transaction{c1, s1, s5, s3, s2, s4} {
		watch(tx)
	}
	if _, err := r.writer.RegisterRetry(ctx, r.scope, s4.TxID, s4.Domain, 1); err != nil {
		t.Fatal(err)
	}
	r.freeze(s6, "transaction lifetime 24h0m0s exceeded")
	r.freeze(c3, "release rejected")
	key := eventstore.BusinessKey{BusinessKeyID: eventstore.BusinessKeyID{Scope: r.scope, Domain: "place-order", Key: "order-42"},
		TxID: s3.TxID, Owner: "start-1", CreatedAt: s3.CreatedAt, ClaimedAt: s3.CreatedAt}
	if _, _, err := r.store.InsertBusinessKey(ctx, key, time.Hour); err != nil {
		t.Fatal(err)
	}
	ids := func(txs ...eventstore.Transaction) []string {
		out := []string{}
		for _, tx := range txs {
			out = append(out, tx.TxID)
		}
		return out
	}

	t.Run("in-flight", func(t *testing.T) {
		for _, c := range []struct {
			name string
			args []string
			want []string
		}{
			{"every saga not ended", nil, ids(s1, s5, s3, s2, s4, s6)},
			{"states", []string{"--state", "PAUSED,retry-pending"}, ids(s3, s4)},
			{"domain", []string{"--domain", "refund"}, ids(s5)},
			{"older than", []string{"--older-than", "1h"}, ids(s2, s4, s6)},
			{"newer than", []string{"--newer-than", "1h"}, ids(s1, s5, s3)},
			{"age range", []string{"--older-than", "20m", "--newer-than", "150m"}, ids(s3, s2)},
			{"business key", []string{"--business-key", "order-42", "--domain", "place-order"}, ids(s3)},
			{"business key of another domain", []string{"--business-key", "order-42", "--domain", "refund"}, ids()},
			{"unknown business key", []string{"--business-key", "order-43", "--domain", "place-order"}, ids()},
			{"first page", []string{"--limit", "2"}, ids(s1, s5)},
			{"next page", []string{"--limit", "2", "--after", s5.TxID}, ids(s3, s2)},
			{"page number", []string{"--limit", "2", "--page", "3"}, ids(s4, s6)},
		} {
			t.Run(c.name, func(t *testing.T) {
				var d sagaRows
				r.jsonOf(&d, append([]string{"list", "in-flight"}, c.args...)...)
				if !slices.Equal(d.ids(), c.want) || d.Source != "store" || !strings.Contains(d.Means, "DISABLED included") {
					t.Fatalf("list in-flight %q: %v (source %s), want %v", c.args, d.ids(), d.Source, c.want)
				}
			})
		}
		var d sagaRows
		r.jsonOf(&d, "list", "in-flight", "--limit", "2")
		if d.Next != s5.TxID {
			t.Errorf("next_after %q, want %s", d.Next, s5.TxID)
		}
		out := r.ok("list", "in-flight", "--limit", "5")
		if !strings.Contains(out, "TXID") || !strings.Contains(out, s1.TxID+"  STARTED") || !strings.Contains(out, "next page: --after "+s4.TxID) {
			t.Errorf("table:\n%s", out)
		}
	})

	t.Run("all without an index", func(t *testing.T) {
		args := []string{"list", "all"}
		code, _, errOut := r.run(args...)
		if code != exitFailure {
			t.Fatalf("list all without index tables: exit %d: %s", code, errOut)
		}
		oneLineErr(t, args, errOut, "list in-flight needs no index")
	})

	// The orchestrator service's index: every saga observed, s2's last
	// transition missed (the index holds it STARTED).
	idx, err := cassandraindex.New(ctx, cassandra.Config{ContactPoints: strings.Split(r.hosts, ","), Keyspace: r.ks})
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	for _, tx := range []eventstore.Transaction{c1, s1, s5, s3, c2, c3, s2, s4, s6} {
		tx = r.load(tx.TxID)
		e := tracewindow.EntryOf(&tx)
		if tx.TxID == s2.TxID {
			e.State = eventstore.StateStarted
		}
		idx.Observe(r.scope, e)
	}
	if err := idx.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	t.Run("all", func(t *testing.T) {
		for _, c := range []struct {
			name string
			args []string
			want []string
		}{
			{"last 24 hours", nil, ids(c1, s1, s5, s3, c2, c3, s2, s4)},
			{"two days", []string{"--newer-than", "48h"}, ids(c1, s1, s5, s3, c2, c3, s2, s4, s6)},
			{"ended", []string{"--state", "COMPLETED,compensated"}, ids(c1, c2)},
			{"domain", []string{"--domain", "refund"}, ids(s5)},
			{"older than", []string{"--older-than", "35m"}, ids(c2, c3, s2, s4)},
			{"business key", []string{"--business-key", "order-42", "--domain", "place-order"}, ids(s3)},
			{"first page", []string{"--limit", "3"}, ids(c1, s1, s5)},
			{"next page", []string{"--limit", "3", "--after", s5.TxID}, ids(s3, c2, c3)},
		} {
			t.Run(c.name, func(t *testing.T) {
				var d sagaRows
				r.jsonOf(&d, append([]string{"list", "all"}, c.args...)...)
				if !slices.Equal(d.ids(), c.want) {
					t.Fatalf("list all %q: %v, want %v", c.args, d.ids(), c.want)
				}
			})
		}
		var d sagaRows
		r.jsonOf(&d, "list", "all")
		for _, s := range d.Sagas {
			if s.TxID == s2.TxID && s.State != "IN_PROGRESS" {
				t.Errorf("s2 listed %s: the store's state is IN_PROGRESS", s.State)
			}
			if s.TxID == c1.TxID && (s.Error != "" || s.LastError != "payment gateway timeout") {
				t.Errorf("a COMPLETED saga's old error: error %q last_error %q, want it as history", s.Error, s.LastError)
			}
		}
	})
}

// TestListUsage: the filters' usage errors.
func TestListUsage(t *testing.T) {
	clearAdminEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "in-flight", "--state", "COMPLETED"}, "has ended"},
		{[]string{"list", "in-flight", "--state", "RUNNING"}, "want states among"},
		{[]string{"list", "all", "--business-key", "k"}, "needs --domain"},
		{[]string{"list", "all", "--business-key", "a key", "--domain", "d"}, "--business-key"},
		{[]string{"list", "all", "--newer-than", "1h", "--older-than", "2h"}, "no saga can be both"},
		{[]string{"list", "all", "--newer-than", "800h"}, "at most"},
		{[]string{"list", "all", "--page", "2"}, "use --after"},
		{[]string{"list", "all", "--limit", "501"}, "at most 500"},
		{[]string{"list", "in-flight", "--after", "not-a-cursor"}, "not a cursor"},
		{[]string{"list", "frozen", "--domain", "d"}, "only list in-flight and list all take filters"},
		{[]string{"list", "in-flight", "--domain", " "}, "--domain is empty"},
		{[]string{"list", "everything"}, "want one of in-flight, all,"},
	} {
		args := append(c.args, "--service", "s")
		code, out, errOut := sagactl(t, args...)
		if code != exitUsage || out != "" {
			t.Errorf("sagactl %q: exit %d stdout %q, want 2", args, code, out)
		}
		oneLineErr(t, args, errOut, c.want)
	}
}

// TestShowErrorAsHistoryAndWatchdogTime: show prints a COMPLETED saga's
// old error as history, a RETRY_PENDING saga's as its error, and the
// watchdog's window in real time under a one-second window (whose
// directory day is a synthetic date).
func TestShowErrorAsHistoryAndWatchdogTime(t *testing.T) {
	r := newAdminRig(t)
	t.Setenv(recovery.EnvInterval, "1s")
	cfg := recovery.DefaultConfig()
	cfg.Interval = time.Second
	ws, err := cfg.Windows()
	if err != nil {
		t.Fatal(err)
	}
	due := ws.RestoreWindow(time.Now(), 5)
	p := due.Path("instance-1", 1)
	done := r.saga(time.Minute, eventstore.StateCompleted, func(tx *eventstore.Transaction) { tx.RestorePath = &p })
	parked := r.saga(time.Minute, eventstore.StateRetryPending, nil)

	out := r.ok("show", done.TxID)
	start := due.Start.UTC().Format(time.RFC3339)
	for _, want := range []string{"error          -\n", "last error     history, the saga went on: payment gateway timeout\n",
		"watchdog       window " + start + ".." + due.End.UTC().Format("15:04:05Z07:00") + " instance instance-1 bucket 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("show of a COMPLETED saga lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, p.Day.Format(time.DateOnly)) {
		t.Errorf("show prints the synthetic day %s:\n%s", p.Day.Format(time.DateOnly), out)
	}
	var doc struct {
		Saga struct {
			Error     string `json:"error"`
			LastError string `json:"last_error"`
			Watchdog  struct {
				WindowStart time.Time `json:"window_start"`
				WindowEnd   time.Time `json:"window_end"`
			} `json:"watchdog"`
		} `json:"saga"`
	}
	r.jsonOf(&doc, "show", done.TxID)
	if doc.Saga.Error != "" || doc.Saga.LastError != "payment gateway timeout" || !doc.Saga.Watchdog.WindowStart.Equal(due.Start) || !doc.Saga.Watchdog.WindowEnd.Equal(due.End) {
		t.Errorf("show --json of a COMPLETED saga: %+v, want last_error and window %v..%v", doc.Saga, due.Start, due.End)
	}
	if out := r.ok("show", parked.TxID); !strings.Contains(out, "error          payment gateway timeout\n") || strings.Contains(out, "last error") {
		t.Errorf("show of a RETRY_PENDING saga: its error is its state:\n%s", out)
	}
}
