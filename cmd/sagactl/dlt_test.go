package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/topics"
)

// TestDLTUsage: each form's missing argument is a usage error naming it.
func TestDLTUsage(t *testing.T) {
	clearAdminEnv(t)
	t.Setenv(envKafkaBrokers, "")
	t.Setenv("KAFKA_BROKERS", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlt"}, "want list, show or replay"},
		{[]string{"dlt", "list"}, "want one TOPIC"},
		{[]string{"dlt", "list", "t"}, "--brokers (or STACKSAGA_KAFKA_BROKERS) is required"},
		{[]string{"dlt", "show", "t", "--brokers", "127.0.0.1:1"}, "--partition and --offset are required"},
		{[]string{"dlt", "show", "t", "--brokers", "127.0.0.1:1", "--partition", "0", "--offset", "1,2"}, "want one offset"},
		{[]string{"dlt", "replay", "t", "--brokers", "127.0.0.1:1", "--partition", "0", "--offset", "1"}, "--reason is required"},
		{[]string{"dlt", "replay", "t", "--brokers", "127.0.0.1:1", "--partition", "0", "--offset", "x", "--reason", "r"}, `--offset "x"`},
	} {
		code, _, errOut := sagactl(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d: %s, want usage naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestDLTEndToEnd on real Kafka and Cassandra: dead letters of both
// writers' format are listed and shown with their reason, writer, headers
// and saga; replay re-publishes the selected one to its origin topic
// (marked replayed-from) and audits it in the saga's trail.
func TestDLTEndToEnd(t *testing.T) {
	r := newAdminRig(t)
	brokers := testenv.KafkaBrokers(t)
	if brokers == nil {
		return
	}
	t.Setenv(envKafkaBrokers, strings.Join(brokers, ","))
	origin := topics.CommandTopic(testenv.UniqueName(t, "dltpay"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := topics.Ensure(ctx, kadm.NewClient(cl), []string{origin, topics.DeadLetterTopic(origin)}, topics.Provision{Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	tx1 := r.saga(time.Minute, eventstore.StateInProgress, nil).TxID
	env := &topics.Envelope{Version: topics.EnvelopeVersion, TxID: tx1}
	value, err := topics.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	src := []*kgo.Record{
		{Topic: origin, Partition: 0, Offset: 11, Value: value, Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-abc-def-01")}}},
		{Topic: origin, Partition: 0, Offset: 12, Key: []byte("tx-unknown"), Value: []byte{0xc1}},
	}
	causes := []topics.DeadLetterCause{
		{By: topics.DeadLetterByWorker, Code: "unknown-endpoint", Detail: "no endpoint charge"},
		{By: topics.DeadLetterByOrchestrator, Code: "undecodable", Detail: "orchestrator: malformed envelope"},
	}
	for i := range src {
		if err := cl.ProduceSync(ctx, topics.DeadLetter(src[i], causes[i])).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	var list struct {
		Records []dltRecord `json:"records"`
	}
	decodeOne(t, r.ok("dlt", "list", origin, "--json"), &list)
	if len(list.Records) != 2 {
		t.Fatalf("list: %d records, want 2: %+v", len(list.Records), list.Records)
	}
	first, second := list.Records[0], list.Records[1]
	if first.TxID != tx1 || first.By != "worker" || first.Reason != "unknown-endpoint: no endpoint charge" || first.Headers["traceparent"] != "00-abc-def-01" || first.OriginPos != "0/11" {
		t.Errorf("first dead letter %+v", first)
	}
	if second.TxID != "tx-unknown" || second.By != "orchestrator" || second.Reason != "undecodable: malformed envelope" {
		t.Errorf("second dead letter %+v", second)
	}
	text := r.ok("dlt", "list", origin)
	if !strings.Contains(text, fmt.Sprintf("saga=%s\tby=worker\tcode=unknown-endpoint\treason=unknown-endpoint: no endpoint charge", tx1)) {
		t.Errorf("list text:\n%s", text)
	}
	show := r.ok("dlt", "show", origin+".dlt", "--partition", "0", "--offset", strconv.FormatInt(first.Offset, 10))
	for _, want := range []string{"saga:    " + tx1, "reason:  unknown-endpoint: no endpoint charge", "origin:  " + origin + "/0/11", "header:  traceparent=00-abc-def-01"} {
		if !strings.Contains(show, want) {
			t.Errorf("show lacks %q:\n%s", want, show)
		}
	}

	out := r.ok("dlt", "replay", origin, "--partition", "0", "--offset", strconv.FormatInt(first.Offset, 10), "--reason", "endpoint deployed", "--actor", "alice")
	if !strings.Contains(out, "replayed (audit: recorded)") {
		t.Errorf("replay: %s", out)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{origin: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var got *kgo.Record
	for got == nil && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(rec *kgo.Record) { got = rec })
	}
	if got == nil || string(got.Value) != string(value) {
		t.Fatalf("the origin topic got %+v", got)
	}
	var from string
	for _, h := range got.Headers {
		if h.Key == topics.HeaderDeadLetterReplayedFrom {
			from = string(h.Value)
		}
		if h.Key == topics.HeaderDeadLetterReason {
			t.Errorf("the replayed record keeps %s", h.Key)
		}
	}
	if want := fmt.Sprintf("%s/0/%d", topics.DeadLetterTopic(origin), first.Offset); from != want {
		t.Errorf("replayed-from %q, want %q", from, want)
	}
	recs, err := r.store.AuditTrail(ctx, r.scope, tx1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Action != auditActionReplay || recs[0].Actor != "alice" || !strings.Contains(recs[0].Detail, "endpoint deployed") || recs[0].Result != "ok" {
		t.Errorf("audit trail %+v", recs)
	}
	if code, _, errOut := r.run("dlt", "show", origin, "--partition", "0", "--offset", "99"); code == exitOK || !strings.Contains(errOut, "offsets") {
		t.Errorf("show of a missing offset: exit %d %s", code, errOut)
	}
}
