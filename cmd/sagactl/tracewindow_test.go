package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/tracewindow"
	"github.com/stacksaga-go/stacksaga/tracewindow/cassandraindex"
)

func TestTraceWindowUsage(t *testing.T) {
	clearAdminEnv(t)
	t.Setenv(envTraceWindowToken, "")
	t.Setenv(envTraceWindowReadToken, "")
	code, out, _ := sagactl(t, "trace-window", "-h")
	if code != exitOK || !strings.Contains(out, "sagactl trace-window --service NAME") {
		t.Fatalf("-h: %d %q", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"trace-window", "extra", "--service", "s"}, "unexpected arguments"},
		{[]string{"trace-window", "--nope"}, "flag provided but not defined"},
		{[]string{"trace-window", "--service", "s", "--admin"}, envTraceWindowToken},
		{[]string{"trace-window", "--service", "s"}, "reads need a token of at least 16 bytes in " + envTraceWindowReadToken},
		{[]string{"trace-window"}, "no service"},
		{[]string{"trace-window", "--service", "s", "--timeout", "0s"}, "--timeout"},
	} {
		code, _, errOut := sagactl(t, c.args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%s)", c.args, code, exitUsage, errOut)
		}
		oneLineErr(t, c.args, errOut, c.want)
	}
}

// TestTraceWindowServesFromTheStore runs sagactl trace-window against real
// Cassandra, with the index written as an orchestrator service would, and
// uses its API: list, one saga, health, the page, and the token-protected
// restore.
func TestTraceWindowServesFromTheStore(t *testing.T) {
	r := newAdminRig(t)
	hosts := strings.Split(r.hosts, ",")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	idx, err := cassandraindex.New(ctx, cassandra.Config{ContactPoints: hosts, Keyspace: r.ks})
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	done := r.saga(time.Hour, eventstore.StateCompleted, nil)
	disabled := r.saga(2*time.Hour, eventstore.StateDisabled, nil)
	r.freeze(disabled, "transaction lifetime exceeded")
	for _, tx := range []eventstore.Transaction{done, disabled} {
		idx.Observe(r.scope, tracewindow.EntryOf(&tx))
	}
	if err := idx.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	const tok = "an-operator-token-0123456789"
	t.Setenv(envTraceWindowToken, tok)
	t.Setenv(envTraceWindowReadToken, "")
	var stdout, stderr testenv.LockedBuffer
	sctx, stop := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- run(sctx, append([]string{"trace-window", "--addr", "127.0.0.1:0", "--admin"}, r.flags...), &stdout, &stderr)
	}()
	addrRE := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/) \(admin actions: restore`)
	var base string
	for deadline := time.Now().Add(time.Minute); base == ""; {
		if m := addrRE.FindStringSubmatch(stdout.String()); m != nil {
			base = m[1]
			break
		}
		select {
		case code := <-exited:
			t.Fatalf("trace-window exited %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace-window did not start: %q %q", stdout.String(), stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Reads need a token: the admin token reads too.
	if res, err := http.Get(base + "api/sagas?limit=10"); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous read: %v %v, want 401", res, err)
	} else {
		res.Body.Close()
	}
	getJSON := func(path string, v any) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if v != nil {
			if err := json.Unmarshal(b, v); err != nil {
				t.Fatalf("%s: %v: %s", path, err, b)
			}
		}
		return res.StatusCode
	}
	var list struct {
		Sagas []tracewindow.Entry `json:"sagas"`
	}
	if code := getJSON("api/sagas?limit=10", &list); code != 200 || len(list.Sagas) != 2 || list.Sagas[0].TxID != done.TxID || list.Sagas[1].State != eventstore.StateDisabled {
		t.Fatalf("list: %d %+v", code, list.Sagas)
	}
	var d tracewindow.Detail
	if code := getJSON("api/sagas/"+done.TxID, &d); code != 200 || d.Saga.TxID != done.TxID || len(d.Steps) != 2 || len(d.Retries) != 1 {
		t.Fatalf("saga: %d %+v", code, d.Saga)
	}
	var h tracewindow.Health
	if code := getJSON("api/health", &h); code != 200 || h.Frozen != 1 || h.Disabled != 1 {
		t.Fatalf("health: %d %+v", code, h)
	}
	res, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(page), "Trace Window") {
		t.Fatalf("page: %.200s", page)
	}
	post := func(auth string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"api/sagas/"+disabled.TxID+"/restore", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := post(""); code != 401 {
		t.Fatalf("restore without token: %d", code)
	}
	if code := post("wrong-token-wrong-token"); code != 401 {
		t.Fatalf("restore with a wrong token: %d", code)
	}
	if got := r.load(disabled.TxID).State; got != eventstore.StateDisabled {
		t.Fatalf("refused restores changed the saga: %s", got)
	}
	if code := post(tok); code != 200 {
		t.Fatalf("restore: %d %s", code, stderr.String())
	}
	if got := r.load(disabled.TxID).State; got != eventstore.StateRetryPending || r.frozen(disabled.TxID) {
		t.Fatalf("after restore: %s, frozen %v", got, r.frozen(disabled.TxID))
	}
	stop()
	select {
	case code := <-exited:
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("trace-window did not stop")
	}
}
