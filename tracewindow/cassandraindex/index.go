// Package cassandraindex is the Trace Window's listing index on Cassandra
// (a tracewindow.Index): two tables of its own in the event store's
// keyspace, created if absent, and an asynchronous batched writer fed by
// the orchestrator's state changes.
//
//	es_transactions_by_bucket  ((region, cluster, service_name, domain, bucket), transaction_id DESC)
//	es_transaction_domains     ((region, cluster, service_name), domain)
//
// bucket is the UTC hour in which the saga was created, read from its
// transaction id (orchestrator.NewTxID puts the creation time first), so a
// saga's row never moves: each transition overwrites running_status,
// step and updated_at in place. Listing a domain's sagas of a time range
// reads the hour partitions of the range newest first, each with a
// clustering slice on transaction_id: every statement names a full
// partition key; there is no ALLOW FILTERING and no scan.
//
// Writes of a saga's progress never run on the orchestrator's reply path:
// Observe puts the entry on a bounded queue and returns; a writer
// goroutine coalesces the entries of one saga (only its latest state is
// written), groups them by partition and writes each partition's rows in
// one unlogged single-partition batch, every flush interval. A saga's end
// (a terminal state) is written through: Observe writes its row before it
// returns (bounded by WithWriteThroughTimeout; on failure the entry is
// queued as any other). The orchestrator calls its listeners before it
// deletes the saga's restore watchdog, so a process killed at any point
// leaves every saga it lost from the queue named by the recovery
// directory, from which tracewindow.Repair writes it again at the next
// start: what the queue holds when the process dies is lost only until
// then. Each row is written USING
// TIMESTAMP of the saga's UpdatedAt, so a late or repeated write never
// replaces a newer state, and with a TTL (the retention). A saga costs one
// row write per flush it has a transition in: one when it runs within a
// flush interval, at most one per transition. Stats counts them.
package cassandraindex

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/internal/wait"
	"github.com/stacksaga-go/stacksaga/tracewindow"
)

// Table names.
const (
	TableByBucket = "es_transactions_by_bucket"
	TableDomains  = "es_transaction_domains"
)

// ErrNoTable means the index tables do not exist (an index opened with
// WithoutSchema before any service created them).
var ErrNoTable = errors.New("cassandraindex: the index tables do not exist (the orchestrator service's cassandraindex.New creates them)")

// Defaults.
const (
	DefaultRetention     = 30 * 24 * time.Hour
	DefaultFlushInterval = time.Second
	DefaultQueueSize     = 1 << 16
	DefaultBatchSize     = 100
	DefaultScanLimit     = 5000
	DefaultPartitions    = 96
	DefaultCensusLimit   = 200_000
	// DefaultWriteThroughTimeout bounds the write of a saga's end.
	DefaultWriteThroughTimeout = 2 * time.Second
)

// maxPending bounds the entries a flush collects before it writes.
const maxPending = 8192

// writeParallelism bounds the batches one flush has in flight.
const writeParallelism = 4

// Option configures New.
type Option func(*options)

type options struct {
	logger     *slog.Logger
	retention  time.Duration
	flushEvery time.Duration
	queueSize  int
	batchSize  int
	scanLimit  int
	partitions int
	censusMax  int
	schema     bool
	// through bounds a terminal entry's write (0: queued as the others).
	through time.Duration
}

// WithLogger sets the logger. Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithRetention sets the TTL of the index rows (0: none). Default 30 days.
// A saga's row is rewritten (and its TTL renewed) at each transition.
func WithRetention(d time.Duration) Option { return func(o *options) { o.retention = d } }

// WithFlushInterval sets how long the writer gathers entries before it
// writes them. Default 1s: a saga that runs within one interval costs one
// row; a longer one about one row per interval it spans (at most one per
// transition).
func WithFlushInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.flushEvery = d
		}
	}
}

// WithQueueSize bounds the entries waiting to be written; beyond it
// Observe drops them (counted in Stats.Dropped). Default 65536.
func WithQueueSize(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.queueSize = n
		}
	}
}

// WithBatchSize bounds the rows of one batch. Default 100.
func WithBatchSize(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.batchSize = n
		}
	}
}

// WithScanLimits bounds what one Recent call reads: rows and hour
// partitions. Beyond either, it returns what it found with a cursor to go
// on. Default 5000 rows, 96 partitions.
func WithScanLimits(rows, partitions int) Option {
	return func(o *options) {
		if rows > 0 {
			o.scanLimit = rows
		}
		if partitions > 0 {
			o.partitions = partitions
		}
	}
}

// WithCensusLimit bounds the rows one Census reads (then it reports
// Truncated). Default 200000.
func WithCensusLimit(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.censusMax = n
		}
	}
}

// WithWriteThroughTimeout bounds how long Observe writes a saga's end
// before it returns (default 2s); past it, or on an error, the entry is
// queued. 0 queues ends as any other entry: they are then lost with the
// queue when the process is killed, until tracewindow.Repair finds them
// (only those whose watchdog the orchestrator had not deleted yet).
func WithWriteThroughTimeout(d time.Duration) Option {
	return func(o *options) {
		if d >= 0 {
			o.through = d
		}
	}
}

// WithoutSchema skips creating the tables (for read-only tools such as
// sagactl, which never change the schema).
func WithoutSchema() Option { return func(o *options) { o.schema = false } }

// Index is the Cassandra tracewindow.Index. It is safe for concurrent use.
type Index struct {
	session  *gocql.Session
	ks       string
	o        options
	readCL   gocql.Consistency
	writeCL  gocql.Consistency
	stmtRow  string
	stmtDom  string
	selRows  string
	selDoms  string
	obs      observer
	queue    chan item
	flushReq chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	closed   atomic.Bool
	once     sync.Once
	domains  sync.Map // domainKey -> struct{}: written by this process

	observed, coalesced, dropped, failed, skipped, through atomic.Int64
	lastWarn                                               atomic.Int64
}

var _ tracewindow.Index = (*Index)(nil)

type item struct {
	scope eventstore.Scope
	e     tracewindow.Entry
}

type domainKey struct {
	scope  eventstore.Scope
	domain string
}

type rowKey struct {
	scope  eventstore.Scope
	domain string
	txID   string
}

type partKey struct {
	scope  eventstore.Scope
	domain string
	bucket time.Time
}

// New connects with cfg (the event store's configuration, validated:
// contact points, keyspace, data centre, consistency, timeouts,
// reconnection, credentials; see cassandra.Config.ClusterConfig), creates
// the index tables in cfg.Keyspace if absent and adds to tables created by
// an older release the columns they lack (unless WithoutSchema), and
// starts the writer. Close it to flush and disconnect.
func New(ctx context.Context, cfg cassandra.Config, opts ...Option) (*Index, error) {
	o := options{
		logger: slog.Default(), retention: DefaultRetention, flushEvery: DefaultFlushInterval,
		queueSize: DefaultQueueSize, batchSize: DefaultBatchSize, scanLimit: DefaultScanLimit,
		partitions: DefaultPartitions, censusMax: DefaultCensusLimit, schema: true,
		through: DefaultWriteThroughTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.retention < 0 {
		return nil, fmt.Errorf("cassandraindex: negative retention %v", o.retention)
	}
	cfg = cfg.WithDefaults()
	cl, err := cfg.ClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("cassandraindex: %w", err)
	}
	x := &Index{
		ks: cfg.Keyspace, o: o,
		readCL: cfg.ReadConsistency.Driver(), writeCL: cfg.WriteConsistency.Driver(),
		queue: make(chan item, o.queueSize), flushReq: make(chan chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	// The event store's connection settings; the pool, the statement
	// counter and the driver's log are the index's own.
	cl.NumConns = 1
	cl.DefaultTimestamp = false // every write names its timestamp
	cl.QueryObserver = &x.obs
	cl.BatchObserver = &x.obs
	cl.Logger = gocql.NewLogger(gocql.LogLevelNone)
	session, err := cassandra.Connect(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("cassandraindex: connect to %v keyspace %s: %w", cfg.ContactPoints, cfg.Keyspace, err)
	}
	x.session = session
	if o.schema {
		if err := x.createTables(ctx); err != nil {
			session.Close()
			return nil, err
		}
	}
	t := x.ks + "." + TableByBucket
	x.stmtRow = "INSERT INTO " + t + " (region, cluster, service_name, domain, bucket, transaction_id, running_status, span, kind, endpoint, error, updated_at, definition_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
	x.selRows = "SELECT transaction_id, running_status, span, kind, endpoint, error, updated_at, definition_version FROM " + t +
		" WHERE region = ? AND cluster = ? AND service_name = ? AND domain = ? AND bucket = ? AND transaction_id < ? AND transaction_id >= ?"
	d := x.ks + "." + TableDomains
	x.stmtDom = "INSERT INTO " + d + " (region, cluster, service_name, domain, seen_at) VALUES (?, ?, ?, ?, ?)"
	x.selDoms = "SELECT domain FROM " + d + " WHERE region = ? AND cluster = ? AND service_name = ?"
	go x.run()
	return x, nil
}

// SchemaCQL returns the statements that create the index tables in
// keyspace (what New runs). They are also the definition the tables of an
// existing keyspace are upgraded to (cassandra.AddMissingColumns): a
// column added to them here is added to existing tables at New.
func SchemaCQL(keyspace string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + keyspace + `.` + TableByBucket + ` (
  region         text,
  cluster        text,
  service_name   text,
  domain         text,
  bucket         timestamp,
  transaction_id text,
  running_status text,
  span           int,
  kind           text,
  endpoint       text,
  error          text,
  updated_at     timestamp,
  definition_version int,
  PRIMARY KEY ((region, cluster, service_name, domain, bucket), transaction_id)
) WITH CLUSTERING ORDER BY (transaction_id DESC)`,
		`CREATE TABLE IF NOT EXISTS ` + keyspace + `.` + TableDomains + ` (
  region       text,
  cluster      text,
  service_name text,
  domain       text,
  seen_at      timestamp,
  PRIMARY KEY ((region, cluster, service_name), domain)
) WITH CLUSTERING ORDER BY (domain ASC)`,
	}
}

func (x *Index) createTables(ctx context.Context) error {
	stmts := SchemaCQL(x.ks)
	for _, stmt := range stmts {
		if err := x.session.Query(stmt).ExecContext(ctx); err != nil {
			return fmt.Errorf("cassandraindex: create table: %w", err)
		}
		if err := x.session.AwaitSchemaAgreement(ctx); err != nil {
			return fmt.Errorf("cassandraindex: await schema agreement: %w", err)
		}
	}
	if _, err := cassandra.AddMissingColumns(ctx, x.session, stmts); err != nil {
		return fmt.Errorf("cassandraindex: %w", err)
	}
	return nil
}

// Bucket returns the partition bucket of a saga created at t: its UTC hour.
func Bucket(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) }

// Observe implements tracewindow.Index: it queues e for the writer and
// returns at once; a saga's end (a terminal state) it writes first, and
// queues only if that write fails (Stats.WrittenThrough counts those
// written). A full queue drops e (Stats.Dropped).
func (x *Index) Observe(scope eventstore.Scope, e tracewindow.Entry) {
	e, ok := tracewindow.Normalize(e)
	if !ok || scope.Validate() != nil {
		x.skipped.Add(1)
		return
	}
	if x.closed.Load() {
		x.dropped.Add(1)
		return
	}
	if e.State.Terminal() && x.o.through > 0 && x.writeThrough(scope, e) {
		return
	}
	select {
	case x.queue <- item{scope, e}:
		x.observed.Add(1)
	default:
		x.dropped.Add(1)
		x.warn("cassandraindex: queue full: an index entry was dropped (the list may show that saga's older state until its next transition)")
	}
}

// writeThrough writes the row of e now; it reports whether it did.
func (x *Index) writeThrough(scope eventstore.Scope, e tracewindow.Entry) bool {
	ctx, cancel := context.WithTimeout(context.Background(), x.o.through)
	defer cancel()
	x.recordDomain(ctx, domainKey{scope, e.Domain})
	err := x.session.Query(x.stmtRow, x.rowArgs(partKey{scope, e.Domain, Bucket(e.CreatedAt)}, e)...).
		Consistency(x.writeCL).Idempotent(true).ExecContext(ctx)
	if err != nil {
		x.warn("cassandraindex: a saga's end was not written through (queued instead)", "tx", e.TxID, "err", err)
		return false
	}
	x.observed.Add(1)
	x.through.Add(1)
	return true
}

// rowArgs are the values of stmtRow for e in partition pk.
func (x *Index) rowArgs(pk partKey, e tracewindow.Entry) []any {
	return []any{pk.scope.Region, pk.scope.Cluster, pk.scope.Service, pk.domain, pk.bucket,
		e.TxID, string(e.State), e.Span, e.Kind, e.Endpoint, e.Error, e.UpdatedAt, e.Definition, int(x.o.retention / time.Second), e.UpdatedAt.UnixMicro()}
}

// recordDomain writes the domain row of dk unless this process did.
func (x *Index) recordDomain(ctx context.Context, dk domainKey) {
	if _, ok := x.domains.Load(dk); ok {
		return
	}
	err := x.retry(ctx, func() error {
		return x.session.Query(x.stmtDom, dk.scope.Region, dk.scope.Cluster, dk.scope.Service, dk.domain, time.Now()).
			Consistency(x.writeCL).Idempotent(true).ExecContext(ctx)
	})
	if err != nil {
		x.warn("cassandraindex: could not record a domain", "domain", dk.domain, "err", err)
		return
	}
	x.domains.Store(dk, struct{}{})
}

// warn logs at most once every 10 seconds.
func (x *Index) warn(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := x.lastWarn.Load()
	if now-last < int64(10*time.Second) || !x.lastWarn.CompareAndSwap(last, now) {
		return
	}
	x.o.logger.Warn(msg, args...)
}

// Flush waits until every entry observed before the call is written (or
// failed), or ctx ends.
func (x *Index) Flush(ctx context.Context) error {
	if x.closed.Load() {
		return nil
	}
	req := make(chan struct{})
	select {
	case x.flushReq <- req:
	case <-x.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cassandraindex: flush: %w", ctx.Err())
	}
	select {
	case <-req:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cassandraindex: flush: %w", ctx.Err())
	}
}

// Close writes what is queued (for at most 10 seconds), stops the writer
// and disconnects. It is safe to call twice.
func (x *Index) Close() error {
	x.once.Do(func() {
		x.closed.Store(true)
		close(x.stop)
		select {
		case <-x.done:
		case <-time.After(15 * time.Second):
			x.o.logger.Warn("cassandraindex: close: the writer did not finish in time")
		}
		x.session.Close()
	})
	return nil
}

// run is the writer goroutine.
func (x *Index) run() {
	defer close(x.done)
	pending := map[rowKey]tracewindow.Entry{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	add := func(it item) {
		k := rowKey{it.scope, it.e.Domain, it.e.TxID}
		if old, ok := pending[k]; ok {
			x.coalesced.Add(1)
			if it.e.UpdatedAt.Before(old.UpdatedAt) {
				return
			}
		}
		pending[k] = it.e
	}
	drain := func() {
		for {
			select {
			case it := <-x.queue:
				add(it)
			default:
				return
			}
		}
	}
	flush := func(timeout time.Duration) {
		timer.Stop()
		if len(pending) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		x.write(ctx, pending)
		cancel()
		pending = map[rowKey]tracewindow.Entry{}
	}
	for {
		select {
		case it := <-x.queue:
			if len(pending) == 0 {
				timer.Reset(x.o.flushEvery)
			}
			add(it)
			if len(pending) >= maxPending {
				flush(30 * time.Second)
			}
		case <-timer.C:
			flush(30 * time.Second)
		case req := <-x.flushReq:
			drain()
			flush(30 * time.Second)
			close(req)
		case <-x.stop:
			drain()
			flush(10 * time.Second)
			return
		}
	}
}

// write writes pending: the domain rows this process has not written yet,
// then one unlogged batch per partition (chunked by the batch size), a few
// at a time.
func (x *Index) write(ctx context.Context, pending map[rowKey]tracewindow.Entry) {
	parts := map[partKey][]tracewindow.Entry{}
	for k, e := range pending {
		pk := partKey{k.scope, k.domain, Bucket(e.CreatedAt)}
		parts[pk] = append(parts[pk], e)
		x.recordDomain(ctx, domainKey{k.scope, k.domain})
	}
	sem := make(chan struct{}, writeParallelism)
	var wg sync.WaitGroup
	for pk, entries := range parts {
		for chunk := range slices.Chunk(entries, x.o.batchSize) {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				err := x.retry(ctx, func() error {
					b := x.session.Batch(gocql.UnloggedBatch).Consistency(x.writeCL)
					for _, e := range chunk {
						b.Entries = append(b.Entries, gocql.BatchEntry{Stmt: x.stmtRow, Idempotent: true, Args: x.rowArgs(pk, e)})
					}
					return b.ExecContext(ctx)
				})
				if err != nil {
					x.failed.Add(int64(len(chunk)))
					x.warn("cassandraindex: index rows not written (the list may show those sagas' older state until their next transition)", "rows", len(chunk), "err", err)
				}
			}()
		}
	}
	wg.Wait()
}

// retry runs f up to three times with backoff.
func (x *Index) retry(ctx context.Context, f func() error) error {
	var err error
	for i := range 3 {
		if err = f(); err == nil {
			return nil
		}
		if !wait.Sleep(ctx, time.Duration(100<<(2*i))*time.Millisecond) {
			return errors.Join(err, ctx.Err())
		}
	}
	return err
}

// fail wraps a read error, recognising a missing table.
func fail(op string, err error) error {
	if msg := err.Error(); strings.Contains(msg, "unconfigured table") || (strings.Contains(msg, "table ") && strings.Contains(msg, "does not exist")) {
		return fmt.Errorf("cassandraindex: %s: %w: %w", op, ErrNoTable, err)
	}
	return fmt.Errorf("cassandraindex: %s: %w", op, err)
}

// Recent implements tracewindow.Index: it reads the hour partitions of
// q's range newest first, each with the clustering slice of the range and
// the cursor, until the page is full (one more match tells whether there
// is a next page), the range ends, or the scan limits are reached (then
// Page.Next resumes where it stopped).
func (x *Index) Recent(ctx context.Context, q tracewindow.Query) (tracewindow.Page, error) {
	var p tracewindow.Page
	if err := q.Validate(); err != nil {
		return p, err
	}
	upper := tracewindow.IDPrefix(q.To.Add(time.Millisecond))
	if q.After != "" && q.After < upper {
		upper = q.After
	}
	lower := tracewindow.IDPrefix(q.From)
	top := q.To
	if t, ok := tracewindow.IDTime(upper); ok && t.Before(top) {
		top = t
	}
	pageSize := min(max(2*(q.Limit+1), 100), 1000)
	if len(q.States) > 0 {
		pageSize = 1000
	}
	resume := upper
	partitions := 0
	for b := Bucket(top); !b.Before(Bucket(q.From)); b = b.Add(-time.Hour) {
		if partitions == x.o.partitions {
			p.Next = resume
			return p, nil
		}
		partitions++
		iter := x.session.Query(x.selRows, q.Scope.Region, q.Scope.Cluster, q.Scope.Service, q.Domain, b, upper, lower).
			Consistency(x.readCL).PageSize(pageSize).Idempotent(true).IterContext(ctx)
		var (
			e  tracewindow.Entry
			st string
		)
		done := false
		for iter.Scan(&e.TxID, &st, &e.Span, &e.Kind, &e.Endpoint, &e.Error, &e.UpdatedAt, &e.Definition) {
			p.Scanned++
			resume = e.TxID
			e.State, e.Domain = eventstore.State(st), q.Domain
			e.CreatedAt, _ = tracewindow.IDTime(e.TxID)
			e.UpdatedAt = e.UpdatedAt.UTC()
			if len(q.States) == 0 || slices.Contains(q.States, e.State) {
				if len(p.Entries) == q.Limit {
					p.Next = p.Entries[q.Limit-1].TxID
					done = true
					break
				}
				p.Entries = append(p.Entries, e)
			}
			if p.Scanned >= x.o.scanLimit {
				p.Next = resume
				done = true
				break
			}
		}
		if err := iter.Close(); err != nil {
			return tracewindow.Page{}, fail("list sagas", err)
		}
		if done {
			return p, nil
		}
		resume = tracewindow.IDPrefix(b)
	}
	return p, nil
}

// Domains implements tracewindow.Index: one partition read.
func (x *Index) Domains(ctx context.Context, scope eventstore.Scope) ([]string, error) {
	if err := scope.Validate(); err != nil {
		return nil, fmt.Errorf("cassandraindex: domains: %w", err)
	}
	iter := x.session.Query(x.selDoms, scope.Region, scope.Cluster, scope.Service).
		Consistency(x.readCL).Idempotent(true).IterContext(ctx)
	var out []string
	var d string
	for iter.Scan(&d) {
		out = append(out, d)
	}
	if err := iter.Close(); err != nil {
		return nil, fail("list domains", err)
	}
	slices.Sort(out)
	return out, nil
}

// Census implements tracewindow.Index: for each domain, it reads the hour
// partitions of [from, to] newest first, at most the census limit of rows
// in all (then Census.Truncated is set and the counts cover the newest
// sagas).
func (x *Index) Census(ctx context.Context, scope eventstore.Scope, from, to time.Time) (tracewindow.Census, error) {
	c := tracewindow.Census{ByDomain: map[string]map[eventstore.State]int{}}
	domains, err := x.Domains(ctx, scope)
	if err != nil {
		return c, err
	}
	upper, lower := tracewindow.IDPrefix(to.Add(time.Millisecond)), tracewindow.IDPrefix(from)
	for _, dom := range domains {
		counts := map[eventstore.State]int{}
		for b := Bucket(to); !b.Before(Bucket(from)) && !c.Truncated; b = b.Add(-time.Hour) {
			iter := x.session.Query(x.selRows, scope.Region, scope.Cluster, scope.Service, dom, b, upper, lower).
				Consistency(x.readCL).PageSize(1000).Idempotent(true).IterContext(ctx)
			var (
				e  tracewindow.Entry
				st string
			)
			for iter.Scan(&e.TxID, &st, &e.Span, &e.Kind, &e.Endpoint, &e.Error, &e.UpdatedAt, &e.Definition) {
				c.Scanned++
				e.State, e.Domain = eventstore.State(st), dom
				counts[e.State]++
				if tracewindow.InFlight(e.State) && (c.Oldest == nil || e.TxID < c.Oldest.TxID) {
					e.CreatedAt, _ = tracewindow.IDTime(e.TxID)
					e.UpdatedAt = e.UpdatedAt.UTC()
					cp := e
					c.Oldest = &cp
				}
				if c.Scanned >= x.o.censusMax {
					c.Truncated = true
					break
				}
			}
			if err := iter.Close(); err != nil {
				return c, fail("census", err)
			}
		}
		if len(counts) > 0 {
			c.ByDomain[dom] = counts
		}
	}
	return c, nil
}

// Stats is what the index has done since New.
type Stats struct {
	// Observed counts entries queued; Coalesced those merged with a later
	// entry of the same saga before being written; Dropped those refused
	// because the queue was full (or the index closed); Skipped those that
	// cannot be indexed (an id without a creation time); Failed the rows
	// whose batch failed after retries.
	Observed, Coalesced, Dropped, Skipped, Failed int64
	// WrittenThrough counts the saga ends Observe wrote before returning
	// (each one of Observed and of Writes).
	WrittenThrough int64
	// Rows counts the index rows written (statements inside batches);
	// Batches the write batches sent; Writes the statements sent on their
	// own (domain rows); Reads the SELECT round trips (each page counts).
	// Round trips are Batches + Writes + Reads. First attempts only.
	Rows, Batches, Writes, Reads int64
}

// Stats returns a snapshot of the counters.
func (x *Index) Stats() Stats {
	return Stats{
		Observed: x.observed.Load(), Coalesced: x.coalesced.Load(), Dropped: x.dropped.Load(),
		Skipped: x.skipped.Load(), Failed: x.failed.Load(), WrittenThrough: x.through.Load(),
		Rows: x.obs.rows.Load(), Batches: x.obs.batches.Load(), Writes: x.obs.writes.Load(), Reads: x.obs.reads.Load(),
	}
}

// observer counts the statements sent (first attempts only).
type observer struct {
	rows, batches, writes, reads, other atomic.Int64
}

// ObserveQuery implements gocql.QueryObserver.
func (o *observer) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if q.Attempt != 0 {
		return
	}
	switch s := strings.TrimSpace(q.Statement); {
	case hasPrefixFold(s, "SELECT"):
		o.reads.Add(1)
	case hasPrefixFold(s, "INSERT"):
		o.writes.Add(1)
	default:
		o.other.Add(1)
	}
}

// ObserveBatch implements gocql.BatchObserver.
func (o *observer) ObserveBatch(_ context.Context, b gocql.ObservedBatch) {
	if b.Attempt != 0 {
		return
	}
	o.batches.Add(1)
	o.rows.Add(int64(len(b.Statements)))
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
