package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/examples/placeorder"
	"github.com/stacksaga-go/stacksaga/internal/kafkaloop"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// steps is the number of steps of the place-order saga; a saga has
// 2*steps+1 stages: the start, then per step the worker's handling of the
// command and the orchestrator's handling of the reply.
const (
	steps  = 3
	stages = 2*steps + 1
)

// roundTrips are the Cassandra requests per saga the framework sent in a
// cell, by kind.
type roundTrips struct {
	Total   float64 `json:"total"`
	Reads   float64 `json:"reads"`
	Writes  float64 `json:"writes"`
	LWTs    float64 `json:"lwts"`
	Batches float64 `json:"batches"`
	Other   float64 `json:"other"`
	// BatchedWrites and BatchedLWTs are the statements inside the batches.
	BatchedWrites float64 `json:"batched_writes"`
	BatchedLWTs   float64 `json:"batched_lwts"`
	// Tables are the statements per table (batched ones included).
	Tables map[string]tableTrips `json:"tables"`
}

// tableTrips are one table's statements per saga.
type tableTrips struct {
	Reads   float64 `json:"reads"`
	Writes  float64 `json:"writes"`
	LWTs    float64 `json:"lwts"`
	Batched float64 `json:"batched"`
}

func roundTripsOf(s cassandra.Stats, n int) *roundTrips {
	per := func(v int64) float64 { return float64(v) / float64(n) }
	rt := &roundTrips{
		Total: per(s.RoundTrips()), Reads: per(s.Reads), Writes: per(s.Writes), LWTs: per(s.LWTs),
		Batches: per(s.Batches), Other: per(s.Other), Tables: make(map[string]tableTrips),
	}
	var tw, tl int64
	for name, t := range s.Tables {
		rt.Tables[name] = tableTrips{Reads: per(t.Reads), Writes: per(t.Writes), LWTs: per(t.LWTs), Batched: per(t.Batched)}
		tw += t.Writes
		tl += t.LWTs
	}
	rt.BatchedWrites = per(max(tw-s.Writes, 0))
	rt.BatchedLWTs = per(max(tl-s.LWTs, 0))
	return rt
}

// stmtKind is one kind of floor statement.
type stmtKind uint8

const (
	stmtLWT stmtKind = iota
	stmtRead
	stmtWrite
	stmtCondBatch
	stmtBatch
)

// stmtPlan is the floor's statements: per saga, as many of each kind as
// the framework sent on average.
type stmtPlan struct {
	reads, writes, lwts, batches, condBatches float64
	perBatch                                  int
}

// planFromRoundTrips copies the framework's statement mix (nil: none).
func planFromRoundTrips(rt *roundTrips) stmtPlan {
	if rt == nil {
		return stmtPlan{}
	}
	p := stmtPlan{reads: rt.Reads, writes: rt.Writes, lwts: rt.LWTs, batches: rt.Batches, perBatch: 1}
	if rt.Batches > 0 {
		p.perBatch = max(1, int(math.Round((rt.BatchedWrites+rt.BatchedLWTs)/rt.Batches)))
		p.condBatches = min(rt.Batches, rt.BatchedLWTs)
	}
	return p
}

func (p stmtPlan) perSaga() float64 { return p.reads + p.writes + p.lwts + p.batches }

// share is how many of a kind averaging avg per saga saga i issues: the
// totals over sagas 0..n-1 match avg*n to within one.
func share(avg float64, i int) int {
	return int(math.Floor(avg*float64(i+1)+1e-9) - math.Floor(avg*float64(i)+1e-9))
}

// stages returns saga i's statements dealt over its stages in turn, LWTs
// first (the framework's conditional writes come early: the create, the
// leases). A stage's statements are issued together, the stages one after
// the other: the floor's latency is its hops plus one statement round trip
// per stage that has any.
func (p stmtPlan) stages(i int) [stages][]stmtKind {
	var all []stmtKind
	add := func(k stmtKind, n int) {
		for range n {
			all = append(all, k)
		}
	}
	cond := share(p.condBatches, i)
	add(stmtLWT, share(p.lwts, i))
	add(stmtRead, share(p.reads, i))
	add(stmtWrite, share(p.writes, i))
	add(stmtCondBatch, cond)
	add(stmtBatch, max(share(p.batches, i)-cond, 0))
	var out [stages][]stmtKind
	for j, k := range all {
		out[j%stages] = append(out[j%stages], k)
	}
	return out
}

// floorTable holds the floor's rows; they expire after an hour.
const floorTable = "sagabench_floor"

// floorSession issues the floor's statements.
type floorSession struct {
	s        *gocql.Session
	value    []byte
	insert   string
	insertIf string
	read     string
}

func openFloorSession(ctx context.Context, o options) (*floorSession, error) {
	cl := cluster(o)
	cl.Consistency = gocql.LocalQuorum
	cl.SerialConsistency = gocql.LocalSerial
	cl.Timeout = 10 * time.Second
	cl.WriteTimeout = 10 * time.Second
	cl.ConnectTimeout = 10 * time.Second
	cl.NumConns = 2 // as the store's default pool
	cl.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy("datacenter1"), gocql.DoNotShuffleReplicas())
	cl.Logger = gocql.NewLogger(gocql.LogLevelNone)
	tbl := o.keyspace + "." + floorTable
	ddl := "CREATE TABLE IF NOT EXISTS " + tbl + " (pk text, ck int, v blob, PRIMARY KEY (pk, ck)) WITH default_time_to_live = 3600"
	// The DDL on a session of its own with a minute per request: a schema
	// change on a loaded node takes longer than the floor's queries may.
	dcl := cluster(o)
	dcl.Timeout, dcl.WriteTimeout, dcl.ConnectTimeout = time.Minute, time.Minute, 10*time.Second
	dcl.Logger = gocql.NewLogger(gocql.LogLevelNone)
	ds, err := dcl.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("floor: cassandra session: %w", err)
	}
	err = ds.Query(ddl).Consistency(gocql.One).ExecContext(ctx)
	ds.Close()
	if err != nil {
		return nil, fmt.Errorf("floor: %s: %w", ddl, err)
	}
	s, err := cl.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("floor: cassandra session: %w", err)
	}
	return &floorSession{
		s:        s,
		value:    make([]byte, 200),
		insert:   "INSERT INTO " + tbl + " (pk, ck, v) VALUES (?, ?, ?)",
		insertIf: "INSERT INTO " + tbl + " (pk, ck, v) VALUES (?, ?, ?) IF NOT EXISTS",
		read:     "SELECT v FROM " + tbl + " WHERE pk = ? AND ck = ?",
	}, nil
}

func (f *floorSession) close() { f.s.Close() }

// exec issues the statements of one stage of saga pk, all at once (they
// are independent: each has its own row), and waits for them; ck numbers
// the saga's rows.
func (f *floorSession) exec(ctx context.Context, pk string, ck *int, kinds []stmtKind, perBatch int) error {
	if len(kinds) == 1 {
		*ck++
		return f.one(ctx, pk, *ck, kinds[0], perBatch)
	}
	errs := make([]error, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		*ck++
		wg.Add(1)
		go func(i, row int, k stmtKind) {
			defer wg.Done()
			errs[i] = f.one(ctx, pk, row, k, perBatch)
		}(i, *ck, k)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// one issues one statement of kind k on row ck of saga pk.
func (f *floorSession) one(ctx context.Context, pk string, ck int, k stmtKind, perBatch int) error {
	var err error
	switch k {
	case stmtRead:
		var v []byte
		err = f.s.Query(f.read, pk, ck-1).ScanContext(ctx, &v)
		if errors.Is(err, gocql.ErrNotFound) {
			err = nil
		}
	case stmtWrite:
		err = f.s.Query(f.insert, pk, ck, f.value).Idempotent(true).ExecContext(ctx)
	case stmtLWT:
		_, err = f.s.Query(f.insertIf, pk, ck, f.value).MapScanCASContext(ctx, map[string]any{})
	case stmtBatch, stmtCondBatch:
		b := f.s.Batch(gocql.UnloggedBatch)
		for i := range perBatch {
			stmt := f.insert
			if k == stmtCondBatch && i == 0 {
				stmt = f.insertIf
			}
			b.Query(stmt, pk, ck*100+i, f.value)
		}
		if k == stmtCondBatch {
			var iter *gocql.Iter
			_, iter, err = b.MapExecCASContext(ctx, map[string]any{})
			if iter != nil {
				_ = iter.Close()
			}
		} else {
			err = b.ExecContext(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("floor statement: %w", err)
	}
	return nil
}

// floor is the minimal loop of one cell.
type floor struct {
	spec    cellSpec
	brokers []string
	// kafkaOpts are the clients' TLS and SASL options.
	kafkaOpts   []kgo.Opt
	session     *floorSession // nil: no statements
	plan        stmtPlan
	topicPrefix string
	valueSize   int

	mu      sync.Mutex
	created []string // topics of all runs, deleted at the end of the cell
	runs    int
}

// topics returns the topics the floor's runs created.
func (f *floor) topics() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.created...)
}

// envelopeSize is the size of a framework command record's value (the
// place-order entity in the versioned envelope): the floor's records carry
// as many bytes.
func envelopeSize() int {
	n := placeorder.DefaultNames()
	ord := placeorder.Order{OrderID: "order-12345", CustomerID: "c-1", Item: "book", Quantity: 1, Amount: 1999}
	payload, err := msgpack.Marshal(ord)
	if err != nil {
		return 400
	}
	txID, err := orchestrator.NewTxID(time.Now(), 0)
	if err != nil {
		return 400
	}
	b, err := topics.Encode(&topics.Envelope{
		Type: topics.TypeCommand, Service: n.Order, Domain: n.Domain, TxID: txID, Kind: topics.KindProcess,
		Endpoint: placeorder.ReserveStock, IdempotencyKey: txID + ":0:process", Attempt: 1,
		ReplyTo: topics.CallbackTopic(n.Domain), Payload: payload, SentAt: time.Now(),
	})
	if err != nil {
		return 400
	}
	return len(b)
}

// run runs warmup then n floor sagas at the cell's concurrency: with
// Kafka hops (hops), with the statements (stmts), or both.
func (f *floor) run(ctx context.Context, hops, stmts bool, warmup, n int, timeout time.Duration) (measure, error) {
	if stmts && f.session == nil {
		stmts = false
	}
	f.mu.Lock()
	f.runs++
	prefix := fmt.Sprintf("%s.r%d", f.topicPrefix, f.runs)
	f.mu.Unlock()
	fr := &floorRun{f: f, hops: hops, stmts: stmts, ctx: ctx, lat: newLatencies(), value: make([]byte, max(f.valueSize, 16)), prefix: prefix}
	if hops {
		if err := fr.startKafka(ctx, timeout); err != nil {
			return measure{}, err
		}
		defer fr.stopKafka()
	}
	var runErr atomic.Value
	fr.runErr = &runErr
	if warmup > 0 {
		if _, err := drive(ctx, warmup, f.spec.Concurrency, 0, fr.start, fr.lat, timeout, &runErr); err != nil {
			return measure{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	fr.produce.reset()
	m, err := drive(ctx, n, f.spec.Concurrency, warmup, fr.start, fr.lat, timeout, &runErr)
	m.ProduceMs = fr.produce.meanMs()
	return m, err
}

// floorRun is one run of the floor: its clients and sagas.
type floorRun struct {
	f           *floor
	hops, stmts bool
	ctx         context.Context
	lat         *latencies
	value       []byte
	runErr      *atomic.Value
	prefix      string // of this run's topics and saga ids
	produce     produceClock

	orch    *kgo.Client   // produces commands
	replies *kgo.Client   // consumes replies
	workers []*kgo.Client // consume commands, produce replies
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu   sync.Mutex
	cks  map[string]*int // saga -> its next row number
	plan map[string]*[stages][]stmtKind
}

func (r *floorRun) fail(err error) { r.runErr.CompareAndSwap(nil, err) }

// startKafka provisions the floor's topics (fresh ones per run) and starts
// the worker and reply consumers.
func (r *floorRun) startKafka(ctx context.Context, timeout time.Duration) error {
	f := r.f
	ts := []string{r.replyTopic()}
	for s := range steps {
		ts = append(ts, r.cmdTopic(s))
	}
	f.mu.Lock()
	f.created = append(f.created, ts...)
	f.mu.Unlock()
	admCl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.brokers...)}, f.kafkaOpts...)...)
	if err != nil {
		return err
	}
	defer admCl.Close()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := topics.Ensure(pctx, kadm.NewClient(admCl), ts, topics.Provision{}); err != nil {
		return err
	}
	// Plain clients with the producer settings the framework's clients
	// share (no compression of these small records). Consumers read their
	// topics' partitions directly (no group, no commits): the floor's hops
	// are the records' own.
	mk := func(consume ...string) (*kgo.Client, error) {
		opts := append(append([]kgo.Opt{kgo.SeedBrokers(f.brokers...), r.produce.opt()}, f.kafkaOpts...), kafkaloop.ProducerOpts()...)
		if len(consume) > 0 {
			opts = append(opts, kgo.ConsumeTopics(consume...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		}
		return kgo.NewClient(opts...)
	}
	if r.orch, err = mk(); err != nil {
		return err
	}
	if r.replies, err = mk(r.replyTopic()); err != nil {
		return err
	}
	for s := range steps {
		w, err := mk(r.cmdTopic(s))
		if err != nil {
			return err
		}
		r.workers = append(r.workers, w)
	}
	cctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	for s, w := range r.workers {
		r.consume(cctx, w, func(rec *kgo.Record) { r.work(w, s, rec) })
	}
	r.consume(cctx, r.replies, r.reply)
	return nil
}

func (r *floorRun) stopKafka() {
	if r.stop != nil {
		r.stop()
	}
	r.wg.Wait()
	for _, c := range append([]*kgo.Client{r.orch, r.replies}, r.workers...) {
		if c != nil {
			c.Close()
		}
	}
}

// consume polls cl and hands each record to h on its own goroutine.
func (r *floorRun) consume(ctx context.Context, cl *kgo.Client, h func(*kgo.Record)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(rec *kgo.Record) {
				r.wg.Add(1)
				go func() {
					defer r.wg.Done()
					h(rec)
				}()
			})
		}
	}()
}

func (r *floorRun) cmdTopic(step int) string { return fmt.Sprintf("%s.cmd%d", r.prefix, step) }
func (r *floorRun) replyTopic() string       { return r.prefix + ".reply" }

// stage runs saga id's statements of stage s.
func (r *floorRun) stage(id string, s int) error {
	if !r.stmts {
		return nil
	}
	r.mu.Lock()
	ck, plan := r.cks[id], r.plan[id]
	r.mu.Unlock()
	if plan == nil {
		return fmt.Errorf("floor: unknown saga %q", id)
	}
	return r.f.session.exec(r.ctx, id, ck, plan[s], r.f.plan.perBatch)
}

// start begins saga i: the start stage, then the first command.
func (r *floorRun) start(i int) error {
	id := fmt.Sprintf("%s-%d", r.prefix, i)
	plan := r.f.plan.stages(i)
	r.mu.Lock()
	if r.cks == nil {
		r.cks, r.plan = make(map[string]*int), make(map[string]*[stages][]stmtKind)
	}
	r.cks[id], r.plan[id] = new(int), &plan
	r.mu.Unlock()
	r.lat.begin(id, time.Now())
	if err := r.stage(id, 0); err != nil {
		return err
	}
	if !r.hops {
		// Statements alone: the other stages follow at once.
		for s := 1; s < stages; s++ {
			if err := r.stage(id, s); err != nil {
				return err
			}
		}
		r.finish(id)
		return nil
	}
	return r.send(r.orch, r.cmdTopic(0), id, 0)
}

// send produces the record of step s of saga id and waits for it.
func (r *floorRun) send(cl *kgo.Client, topic, id string, s int) error {
	v := make([]byte, len(r.value))
	binary.BigEndian.PutUint16(v, uint16(s))
	if err := cl.ProduceSync(r.ctx, &kgo.Record{Topic: topic, Key: []byte(id), Value: v}).FirstErr(); err != nil {
		return fmt.Errorf("floor produce: %w", err)
	}
	return nil
}

// work is a worker's handling of a command: its stage, then the reply.
func (r *floorRun) work(cl *kgo.Client, s int, rec *kgo.Record) {
	id := string(rec.Key)
	if err := r.stage(id, 1+2*s); err != nil {
		r.fail(err)
		return
	}
	if err := r.send(cl, r.replyTopic(), id, s); err != nil {
		r.fail(err)
	}
}

// reply is the orchestrator's handling of a reply: its stage, then the
// next command or the end of the saga.
func (r *floorRun) reply(rec *kgo.Record) {
	id := string(rec.Key)
	s := int(binary.BigEndian.Uint16(rec.Value))
	if err := r.stage(id, 2+2*s); err != nil {
		r.fail(err)
		return
	}
	if s+1 < steps {
		if err := r.send(r.orch, r.cmdTopic(s+1), id, s+1); err != nil {
			r.fail(err)
		}
		return
	}
	r.finish(id)
}

func (r *floorRun) finish(id string) {
	r.mu.Lock()
	delete(r.cks, id)
	delete(r.plan, id)
	r.mu.Unlock()
	r.lat.end(id, time.Now())
}
