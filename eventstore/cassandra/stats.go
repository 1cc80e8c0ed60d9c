package cassandra

import (
	"context"
	"maps"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Stats counts the statements a Store sent, first attempts only (driver
// retries are not counted). Reads+Writes+LWTs+Batches+Other is the number
// of round trips.
type Stats struct {
	// Reads are SELECT round trips (each page of a paged read counts).
	Reads int64
	// Writes are non-conditional INSERT/UPDATE/DELETE sent on their own.
	Writes int64
	// LWTs are conditional statements (IF ...) sent on their own.
	LWTs int64
	// Batches are batch round trips, conditional or not.
	Batches int64
	// Other counts statements of no event-store table (schema changes).
	Other int64
	// Tables counts statements per table, those inside batches included.
	Tables map[string]TableStats
}

// TableStats counts the statements against one table.
type TableStats struct {
	Reads, Writes, LWTs int64
	// Batched is how many of Writes and LWTs were sent inside a batch.
	Batched int64
}

// RoundTrips is the number of requests sent.
func (s Stats) RoundTrips() int64 { return s.Reads + s.Writes + s.LWTs + s.Batches + s.Other }

type stmtKind uint8

const (
	kindOther stmtKind = iota
	kindRead
	kindWrite
	kindLWT
)

type tableCounters struct {
	reads, writes, lwts, batched atomic.Int64
}

type stmtClass struct {
	kind  stmtKind
	table *tableCounters // nil: not an event-store table
	// tableName is the event-store table ("" for others); op the
	// statement's first keyword (SELECT, INSERT…).
	tableName string
	op        string
}

// observer is the gocql QueryObserver and BatchObserver that counts
// statements.
type observer struct {
	reads, writes, lwts, batches, other atomic.Int64
	tables                              map[string]*tableCounters // fixed at construction
	classes                             sync.Map                  // statement -> stmtClass
	// timing records request durations once RegisterMetrics ran.
	timing atomic.Pointer[timing]
}

var _ gocql.QueryObserver = (*observer)(nil)
var _ gocql.BatchObserver = (*observer)(nil)

func newObserver() *observer {
	o := &observer{tables: make(map[string]*tableCounters, len(tableNames))}
	for _, t := range tableNames {
		o.tables[t] = new(tableCounters)
	}
	return o
}

var (
	stmtTable = regexp.MustCompile(`(?is)^\s*(SELECT\b.*?\bFROM|INSERT\s+INTO|UPDATE|DELETE\b.*?\bFROM)\s+(?:"?\w+"?\.)?"?(\w+)"?`)
	stmtCond  = regexp.MustCompile(`(?is)\bIF\s+(NOT\s+EXISTS|EXISTS|\w+\s*(=|<|>|!=|IN\b))`)
)

// classify parses a statement once and caches the result.
func (o *observer) classify(stmt string) stmtClass {
	if c, ok := o.classes.Load(stmt); ok {
		return c.(stmtClass)
	}
	c := stmtClass{op: operation(stmt)}
	if m := stmtTable.FindStringSubmatch(stmt); m != nil {
		c.table = o.tables[strings.ToLower(m[2])]
		if c.table != nil {
			c.tableName = strings.ToLower(m[2])
		}
		switch verb := strings.ToUpper(strings.Fields(m[1])[0]); {
		case verb == "SELECT":
			c.kind = kindRead
		case stmtCond.MatchString(stmt):
			c.kind = kindLWT
		default:
			c.kind = kindWrite
		}
	}
	if c.table == nil {
		c.kind = kindOther
	}
	o.classes.Store(stmt, c)
	return c
}

// ObserveQuery counts one statement sent on its own.
func (o *observer) ObserveQuery(ctx context.Context, q gocql.ObservedQuery) {
	c := o.classify(q.Statement)
	if t := o.timing.Load(); t != nil {
		t.record(ctx, c, c.op, q.Start, q.End, q.Err)
	}
	if q.Attempt != 0 {
		return
	}
	switch c.kind {
	case kindRead:
		o.reads.Add(1)
		c.table.reads.Add(1)
	case kindWrite:
		o.writes.Add(1)
		c.table.writes.Add(1)
	case kindLWT:
		o.lwts.Add(1)
		c.table.lwts.Add(1)
	default:
		o.other.Add(1)
	}
}

// ObserveBatch counts one batch and the statements in it.
func (o *observer) ObserveBatch(ctx context.Context, b gocql.ObservedBatch) {
	if t := o.timing.Load(); t != nil {
		t.record(ctx, stmtClass{}, "BATCH", b.Start, b.End, b.Err)
	}
	if b.Attempt != 0 {
		return
	}
	o.batches.Add(1)
	for _, stmt := range b.Statements {
		c := o.classify(stmt)
		switch c.kind {
		case kindWrite:
			c.table.writes.Add(1)
			c.table.batched.Add(1)
		case kindLWT:
			c.table.lwts.Add(1)
			c.table.batched.Add(1)
		}
	}
}

func (o *observer) snapshot() Stats {
	s := Stats{
		Reads:   o.reads.Load(),
		Writes:  o.writes.Load(),
		LWTs:    o.lwts.Load(),
		Batches: o.batches.Load(),
		Other:   o.other.Load(),
		Tables:  make(map[string]TableStats),
	}
	for name, t := range o.tables {
		ts := TableStats{Reads: t.reads.Load(), Writes: t.writes.Load(), LWTs: t.lwts.Load(), Batched: t.batched.Load()}
		if ts != (TableStats{}) {
			s.Tables[name] = ts
		}
	}
	return s
}

func (o *observer) reset() {
	for _, c := range []*atomic.Int64{&o.reads, &o.writes, &o.lwts, &o.batches, &o.other} {
		c.Store(0)
	}
	for _, t := range o.tables {
		t.reads.Store(0)
		t.writes.Store(0)
		t.lwts.Store(0)
		t.batched.Store(0)
	}
}

// Sub returns s minus an earlier snapshot: what happened in between.
func (s Stats) Sub(earlier Stats) Stats {
	d := Stats{
		Reads:   s.Reads - earlier.Reads,
		Writes:  s.Writes - earlier.Writes,
		LWTs:    s.LWTs - earlier.LWTs,
		Batches: s.Batches - earlier.Batches,
		Other:   s.Other - earlier.Other,
		Tables:  maps.Clone(s.Tables),
	}
	if d.Tables == nil {
		d.Tables = make(map[string]TableStats)
	}
	for name, e := range earlier.Tables {
		t := d.Tables[name]
		t = TableStats{Reads: t.Reads - e.Reads, Writes: t.Writes - e.Writes, LWTs: t.LWTs - e.LWTs, Batched: t.Batched - e.Batched}
		if t == (TableStats{}) {
			delete(d.Tables, name)
		} else {
			d.Tables[name] = t
		}
	}
	return d
}
