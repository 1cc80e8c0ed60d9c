package main

// sagactl dlt list|show|replay TOPIC: the dead letters of a topic (its
// ".dlt" topic), read straight from Kafka, and their replay to the origin
// topic, audited in the store like restore and resume.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
	"github.com/stacksaga-go/stacksaga/topics"
)

// auditActionReplay is the audit action of a dead letter replayed.
const auditActionReplay = "dlt-replay"

const dltUsage = `usage:
  sagactl dlt list TOPIC [--limit 50] [--json]
  sagactl dlt show TOPIC --partition P --offset O [--json]
  sagactl dlt replay TOPIC --partition P --offset O[,O...] --reason TEXT [--actor NAME]
                     [--config file | --hosts ... --keyspace ...] [--region R --cluster C --service S]

TOPIC is a topic or its dead-letter topic (TOPIC.dlt). Every form takes
--brokers (or STACKSAGA_KAFKA_BROKERS) and the --kafka-tls*/--kafka-sasl-*
flags. list prints each record's partition/offset, saga, writer, code and
reason; show one record's reason, origin, saga and headers; replay
re-publishes the selected records to their origin topic (key, value and
original headers, plus stacksaga-dlt-replayed-from) and appends an audit
record (action dlt-replay) to each one's saga in the store.
`

// dltFlags are the flags of sagactl dlt.
type dltFlags struct {
	*adminFlags
	partition *int
	offsets   *string
}

func newDLTFlags() *dltFlags {
	f := &dltFlags{adminFlags: newAdminFlags("dlt")}
	fs := f.fs
	f.limit = fs.Int("limit", defaultListLimit, "records listed at most")
	f.partition = fs.Int("partition", -1, "the dead-letter topic's partition")
	f.offsets = fs.String("offset", "", "offset(s) in that partition, comma-separated")
	f.reason = fs.String("reason", "", "why (recorded in the audit trail)")
	f.actor = fs.String("actor", "", "who the audit records name")
	f.brokers = fs.String("brokers", "", "Kafka brokers")
	f.kafka = kafkaflags.Register(fs)
	return f
}

// dltRecord is one dead letter as list and show print it.
type dltRecord struct {
	Topic     string            `json:"topic"`
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	TxID      string            `json:"tx_id"`
	By        string            `json:"by"`
	Code      string            `json:"code"`
	Reason    string            `json:"reason"`
	Origin    string            `json:"origin"`
	OriginPos string            `json:"origin_position"`
	Bytes     int               `json:"value_bytes"`
	Headers   map[string]string `json:"headers,omitempty"`
	Replay    string            `json:"replay,omitempty"`
	Audit     string            `json:"audit,omitempty"`
}

func dltRecordOf(r *kgo.Record) dltRecord {
	in := topics.ReadDeadLetter(r)
	d := dltRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, TxID: in.TxID, By: in.By, Code: in.Code,
		Reason: in.Reason, Origin: in.Origin, OriginPos: fmt.Sprintf("%d/%d", in.OriginPartition, in.OriginOffset), Bytes: len(r.Value)}
	for _, h := range in.Headers {
		if d.Headers == nil {
			d.Headers = map[string]string{}
		}
		d.Headers[h.Key] = string(h.Value)
	}
	return d
}

// runDLT runs sagactl dlt.
func runDLT(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "show" && args[0] != "replay") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, dltUsage)
			return exitOK
		}
		return failf(stderr, exitUsage, "dlt: want list, show or replay (see sagactl dlt -h)")
	}
	sub := args[0]
	f := newDLTFlags()
	pos, err := f.parse(args[1:])
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, dltUsage)
		return exitOK
	}
	if err != nil {
		return failf(stderr, exitUsage, "dlt %s: %v (see sagactl dlt -h)", sub, err)
	}
	req, code := f.request(sub, pos, stderr)
	if code != exitOK {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(req.brokers...), kgo.ProducerLinger(0)}, req.kafkaOpts...)...)
	if err != nil {
		return failf(stderr, exitUsage, "dlt %s: --brokers: %v", sub, err)
	}
	defer cl.Close()
	c := &cli{stdout: stdout, stderr: stderr, json: *f.json}
	switch sub {
	case "list":
		return c.dltList(ctx, cl, req.topic, *f.limit)
	case "show":
		return c.dltShow(ctx, cl, req)
	default:
		return c.dltReplay(ctx, cl, f, req)
	}
}

// dltRequest is what the arguments of sagactl dlt ask for.
type dltRequest struct {
	topic     string // the dead-letter topic
	brokers   []string
	kafkaOpts []kgo.Opt
	partition int32
	offsets   []int64
}

// request checks the arguments of sub, printing a usage error (exit 2).
func (f *dltFlags) request(sub string, pos []string, stderr io.Writer) (dltRequest, int) {
	var req dltRequest
	if len(pos) != 1 || topics.ValidName(pos[0]) != nil {
		return req, failf(stderr, exitUsage, "dlt %s: want one TOPIC, got %q (see sagactl dlt -h)", sub, pos)
	}
	req.topic = pos[0]
	if !strings.HasSuffix(req.topic, ".dlt") {
		req.topic = topics.DeadLetterTopic(req.topic)
	}
	if *f.brokers == "" {
		*f.brokers = envBrokers(stderr)
	}
	if req.brokers = kafkaflags.SplitBrokers(*f.brokers); len(req.brokers) == 0 {
		return req, failf(stderr, exitUsage, "dlt %s: --brokers (or %s) is required", sub, kafkaflags.EnvBrokers)
	}
	var err error
	if req.kafkaOpts, err = f.kafka.Opts(os.LookupEnv); err != nil {
		return req, failf(stderr, exitUsage, "dlt %s: %v", sub, err)
	}
	if w := f.kafka.Warning(); w != "" {
		fmt.Fprintf(stderr, "sagactl: dlt %s: warning: %s\n", sub, w)
	}
	switch sub {
	case "list":
		if *f.limit < 1 {
			return req, failf(stderr, exitUsage, "dlt list: --limit %d: want at least 1", *f.limit)
		}
		return req, exitOK
	case "replay":
		if strings.TrimSpace(*f.reason) == "" {
			return req, failf(stderr, exitUsage, "dlt replay: --reason is required (it is recorded in the audit trail)")
		}
	}
	if *f.partition < 0 || *f.offsets == "" {
		return req, failf(stderr, exitUsage, "dlt %s: --partition and --offset are required (see sagactl dlt list %s)", sub, pos[0])
	}
	req.partition = int32(*f.partition)
	for _, s := range strings.Split(*f.offsets, ",") {
		o, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || o < 0 {
			return req, failf(stderr, exitUsage, "dlt %s: --offset %q: want offsets ≥ 0, comma-separated", sub, s)
		}
		req.offsets = append(req.offsets, o)
	}
	if sub == "show" && len(req.offsets) != 1 {
		return req, failf(stderr, exitUsage, "dlt show: --offset: want one offset")
	}
	return req, exitOK
}

// dltRange reads the first and end offsets of topic's partitions.
func dltRange(ctx context.Context, cl *kgo.Client, topic string) (start, end kadm.ListedOffsets, err error) {
	adm := kadm.NewClient(cl)
	if start, err = adm.ListStartOffsets(ctx, topic); err == nil {
		err = start.Error()
	}
	if err == nil {
		if end, err = adm.ListEndOffsets(ctx, topic); err == nil {
			err = end.Error()
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the offsets of %s: %w", topic, topics.NameBrokerError(err, nil))
	}
	if len(end[topic]) == 0 {
		return nil, nil, fmt.Errorf("%s: %w", topic, errNoTopic)
	}
	return start, end, nil
}

var errNoTopic = errors.New("no such topic")

// readDLT reads the records of topic at want (partition → offsets; nil:
// every record), at most limit, in partition then offset order.
func readDLT(ctx context.Context, opts []kgo.Opt, cl *kgo.Client, topic string, want map[int32][]int64, limit int) ([]*kgo.Record, error) {
	start, end, err := dltRange(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	from := map[int32]kgo.Offset{}
	until := map[int32]int64{} // the last offset to read, inclusive
	for p, e := range end[topic] {
		first := start[topic][p].Offset
		last := e.Offset - 1
		if offs, ok := want[p]; want != nil && !ok {
			continue
		} else if ok {
			first, last = minOf(offs), maxOf(offs)
			if first < start[topic][p].Offset || last >= e.Offset {
				return nil, fmt.Errorf("%s partition %d holds offsets %d..%d, not %d..%d", topic, p, start[topic][p].Offset, e.Offset-1, first, last)
			}
		}
		if last >= first {
			from[p], until[p] = kgo.NewOffset().At(first), last
		}
	}
	if want != nil && len(from) == 0 {
		return nil, fmt.Errorf("%s has no partition %v", topic, keys(want))
	}
	if len(from) == 0 {
		return nil, nil
	}
	cons, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))...)
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	var out []*kgo.Record
	for len(until) > 0 && len(out) < limit {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("read %s: %w", topic, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return out, fmt.Errorf("read %s: %w", topic, errs[0].Err)
		}
		for _, r := range fs.Records() {
			last, ok := until[r.Partition]
			if !ok || r.Offset > last {
				continue
			}
			if r.Offset == last {
				delete(until, r.Partition)
			}
			if want == nil || contains(want[r.Partition], r.Offset) {
				out = append(out, r)
			}
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (c *cli) dltList(ctx context.Context, cl *kgo.Client, topic string, limit int) int {
	recs, err := readDLT(ctx, dltOpts(cl), cl, topic, nil, limit)
	if err != nil {
		return c.dltFail("list", err)
	}
	out := make([]dltRecord, 0, len(recs))
	for _, r := range recs {
		out = append(out, dltRecordOf(r))
	}
	if c.json {
		return c.printJSON(struct {
			Topic   string      `json:"topic"`
			Records []dltRecord `json:"records"`
		}{topic, out})
	}
	fmt.Fprintf(c.stdout, "%s: %d dead letter(s)\n", topic, len(out))
	for _, d := range out {
		fmt.Fprintf(c.stdout, "%d/%d\tsaga=%s\tby=%s\tcode=%s\treason=%s\n", d.Partition, d.Offset, orNone(d.TxID), orNone(d.By), orNone(d.Code), oneLine(d.Reason, 300))
	}
	return exitOK
}

func (c *cli) dltShow(ctx context.Context, cl *kgo.Client, req dltRequest) int {
	recs, err := readDLT(ctx, dltOpts(cl), cl, req.topic, map[int32][]int64{req.partition: req.offsets}, 1)
	if err != nil {
		return c.dltFail("show", err)
	}
	if len(recs) == 0 {
		return c.failf(exitNotFound, "dlt show: no record at %s/%d/%d", req.topic, req.partition, req.offsets[0])
	}
	d := dltRecordOf(recs[0])
	if c.json {
		return c.printJSON(d)
	}
	fmt.Fprintf(c.stdout, "record:  %s/%d/%d (%d bytes)\nsaga:    %s\nby:      %s\ncode:    %s\nreason:  %s\norigin:  %s/%s\n",
		d.Topic, d.Partition, d.Offset, d.Bytes, orNone(d.TxID), orNone(d.By), orNone(d.Code), d.Reason, orNone(d.Origin), d.OriginPos)
	for _, k := range keys(d.Headers) {
		fmt.Fprintf(c.stdout, "header:  %s=%s\n", k, oneLine(d.Headers[k], 300))
	}
	return exitOK
}

// dltReplay re-publishes the selected records and audits each.
func (c *cli) dltReplay(ctx context.Context, cl *kgo.Client, f *dltFlags, req dltRequest) int {
	if code := c.openAuditStore(ctx, f); code != exitOK {
		return code
	}
	defer c.store.Close()
	recs, err := readDLT(ctx, dltOpts(cl), cl, req.topic, map[int32][]int64{req.partition: req.offsets}, len(req.offsets))
	if err != nil {
		return c.dltFail("replay", err)
	}
	if len(recs) != len(req.offsets) {
		return c.failf(exitNotFound, "dlt replay: %d of the %d offsets hold a record in %s/%d (compacted or deleted?)", len(recs), len(req.offsets), req.topic, req.partition)
	}
	var out []dltRecord
	code := exitOK
	for _, r := range recs {
		d := dltRecordOf(r)
		detail := fmt.Sprintf("%s/%d/%d to %s; reason: %s", r.Topic, r.Partition, r.Offset, d.Origin, *f.reason)
		rep, err := topics.ReplayRecord(r)
		if err == nil {
			err = cl.ProduceSync(ctx, rep).FirstErr()
		}
		result := eventstore.AuditOK
		d.Replay = "replayed"
		if err != nil {
			result, d.Replay, code = eventstore.AuditFailed, "failed: "+err.Error(), exitFailure
			fmt.Fprintf(c.stderr, "sagactl: dlt replay %s/%d/%d: %v\n", r.Topic, r.Partition, r.Offset, err)
		}
		if d.TxID == "" {
			d.Audit = "not recorded: the record names no saga"
			fmt.Fprintf(c.stderr, "sagactl: warning: dlt replay %s/%d/%d: the record names no saga: no audit record\n", r.Topic, r.Partition, r.Offset)
		} else {
			d.Audit = c.audit(ctx, d.TxID, auditActionReplay, detail, result, err)
		}
		out = append(out, d)
	}
	if c.json {
		if code2 := c.printJSON(out); code2 != exitOK {
			return code2
		}
		return code
	}
	for _, d := range out {
		fmt.Fprintf(c.stdout, "%s/%d/%d saga=%s -> %s: %s (audit: %s)\n", d.Topic, d.Partition, d.Offset, orNone(d.TxID), d.Origin, d.Replay, d.Audit)
	}
	return code
}

// openAuditStore opens the store replay audits in, as the admin commands
// do (--config, --hosts, ...; the scope from --region/--cluster/--service).
func (c *cli) openAuditStore(ctx context.Context, f *dltFlags) int {
	set := f.set()
	actor := strings.TrimSpace(*f.actor)
	switch {
	case !set["actor"]:
		actor = defaultActor()
	case actor == "" || len(actor) > eventstore.MaxAuditActorBytes:
		return c.failf(exitUsage, "dlt replay: --actor: want 1..%d bytes", eventstore.MaxAuditActorBytes)
	}
	c.actor = actor
	var data []byte
	var err error
	if *f.config != "" {
		if data, err = os.ReadFile(*f.config); err != nil {
			return c.failf(exitFailure, "read configuration: %v", err)
		}
	}
	if c.scope, err = resolveScope(f.adminFlags, set, data); err != nil {
		return c.failf(exitUsage, "%v", err)
	}
	ccfg, err := cassandraConfig(f.adminFlags, set)
	if err != nil {
		return c.failf(exitFailure, "%v", err)
	}
	store, err := cassandra.New(ctx, ccfg, cassandra.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return c.failf(exitFailure, "open the event store (%s, keyspace %s) for the audit trail: %v", strings.Join(ccfg.ContactPoints, ","), ccfg.Keyspace, err)
	}
	c.store = store
	return exitOK
}

func (c *cli) dltFail(sub string, err error) int {
	if errors.Is(err, errNoTopic) {
		return c.failf(exitNotFound, "dlt %s: %v", sub, err)
	}
	return c.failf(exitFailure, "dlt %s: %v", sub, err)
}

// dltOpts are the options of the reading client: cl's own (brokers, TLS,
// SASL).
func dltOpts(cl *kgo.Client) []kgo.Opt {
	return cl.Opts()
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func minOf(xs []int64) int64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []int64) int64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func contains(xs []int64, x int64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// keys returns m's keys, sorted.
func keys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }
