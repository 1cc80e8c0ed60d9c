package recovery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/cassandra"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/ringcoordinator"
)

// The scenarios run against the in-memory store and against real Cassandra
// (CASSANDRA_HOSTS, see internal/testenv), each in a scope of its own, with
// an injected clock: no scenario waits for a window to pass.

// quiet discards the logs of the scenarios' writers and engines.
var quiet = slog.New(slog.DiscardHandler)

// base is the scenarios' starting time: W is 10:30 on 2026-03-10.
var base = at("2026-03-10T10:30:15Z")

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is what a scenario gets.
type env struct {
	t     *testing.T
	store eventstore.Store
	cass  *cassandra.Store // nil on the memory store
	scope eventstore.Scope
	clock *clock
	cfg   Config
}

type scenario struct {
	name string
	run  func(t *testing.T, e *env)
}

func uniqueScope(t *testing.T) eventstore.Scope {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return eventstore.Scope{Region: "recovery", Cluster: "default", Service: name + "-" + hex.EncodeToString(b[:])}
}

func newEnv(t *testing.T, store eventstore.Store) *env {
	cfg := DefaultConfig()
	e := &env{t: t, store: store, scope: uniqueScope(t), clock: newClock(base), cfg: cfg}
	e.cass, _ = store.(*cassandra.Store)
	return e
}

func TestScenarios(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		for _, sc := range scenarios {
			t.Run(sc.name, func(t *testing.T) {
				s := memory.New()
				t.Cleanup(func() { _ = s.Close() })
				sc.run(t, newEnv(t, s))
			})
		}
	})
	t.Run("cassandra", func(t *testing.T) {
		s := cassandraStore(t)
		for _, sc := range scenarios {
			t.Run(sc.name, func(t *testing.T) { sc.run(t, newEnv(t, s)) })
		}
	})
}

// cassandraStore opens a store on a fresh keyspace (dropped at the end).
func cassandraStore(t *testing.T) *cassandra.Store {
	t.Helper()
	hosts, keyspace := testenv.CassandraKeyspace(t)
	if hosts == nil {
		return nil
	}
	cfg := cassandra.Config{
		ContactPoints:  hosts,
		Keyspace:       keyspace,
		Replication:    cassandra.SimpleReplication(1),
		RequestTimeout: 20 * time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cassandra.ApplySchemaWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s, err := cassandra.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// writer returns a Writer on the scenario's store, config and clock.
func (e *env) writer(opts ...Option) *Writer {
	e.t.Helper()
	w, err := NewWriter(e.store, e.cfg, append([]Option{WithClock(e.clock.Now), WithLogger(quiet)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// engine returns an Engine on the scenario's store, config and clock.
func (e *env) engine(r Redriver, opts ...Option) *Engine {
	e.t.Helper()
	return e.engineOn(e.store, r, opts...)
}

func (e *env) engineOn(dir eventstore.Directory, r Redriver, opts ...Option) *Engine {
	e.t.Helper()
	en, err := NewEngine(dir, e.scope, r, e.cfg, append([]Option{WithClock(e.clock.Now), WithLogger(quiet)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return en
}

// scan runs one Scan and fails the test on an error.
func (e *env) scan(en *Engine) Result {
	e.t.Helper()
	res, err := en.Scan(e.t.Context())
	if err != nil {
		e.t.Fatalf("Scan: %v", err)
	}
	return res
}

// interval advances the clock by n windows.
func (e *env) windows(n int) { e.clock.Advance(time.Duration(n) * e.cfg.Interval) }

// retry registers a retry and fails the test on an error.
func (e *env) retry(w *Writer, txID string, delay int) eventstore.RecoveryPath {
	e.t.Helper()
	p, err := w.RegisterRetry(e.t.Context(), e.scope, txID, "order-saga", delay)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// restore registers a restore watchdog and fails the test on an error.
func (e *env) restore(w *Writer, txID string) eventstore.RecoveryPath {
	e.t.Helper()
	p, err := w.RegisterRestore(e.t.Context(), e.scope, txID, "order-saga")
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// dump lists every directory row of the scope from day from to day to, one
// line per row, tier by tier ("t1 day", "t2 day/slot", "t3 day/slot/inst",
// "t4 day/slot/inst/bucket", "t5 day/slot/inst/bucket tx").
func (e *env) dump(from, to time.Time) []string {
	e.t.Helper()
	ctx := e.t.Context()
	var out []string
	must := func(err error) {
		if err != nil {
			e.t.Fatalf("dump: %v", err)
		}
	}
	days, err := e.store.ListDays(ctx, e.scope, from, to)
	must(err)
	for _, d := range days {
		ds := d.Format(time.DateOnly)
		out = append(out, "t1 "+ds)
		slots, err := e.store.ListWindows(ctx, e.scope, d)
		must(err)
		for _, s := range slots {
			out = append(out, fmt.Sprintf("t2 %s/%04d", ds, s))
			insts, err := e.store.ListInstances(ctx, e.scope, d, s, eventstore.FullRing)
			must(err)
			for _, in := range insts {
				out = append(out, fmt.Sprintf("t3 %s/%04d/%s", ds, s, in.ID))
				buckets, err := e.store.ListBuckets(ctx, e.scope, d, s, in.ID)
				must(err)
				for _, b := range buckets {
					p := eventstore.RecoveryPath{Day: d, MinuteOfDay: s, InstanceID: in.ID, Bucket: b}
					out = append(out, "t4 "+fmtPath(p))
					for _, en := range e.entries(p) {
						out = append(out, "t5 "+fmtPath(p)+" "+en.TxID)
					}
				}
			}
		}
	}
	return out
}

// dumpAround dumps the days around the clock (lookback included).
func (e *env) dumpAround() []string {
	now := e.clock.Now()
	ws := MustWindows(e.cfg.Interval)
	d := ws.At(now).Day
	return e.dump(d.AddDate(0, 0, -4), d.AddDate(0, 0, 4))
}

// entries lists the tier-5 rows of a bucket.
func (e *env) entries(p eventstore.RecoveryPath) []eventstore.RecoveryEntry {
	e.t.Helper()
	list, err := e.store.ListRecoveryEntries(e.t.Context(), e.scope, p, "", 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return list
}

func (e *env) buckets(p eventstore.RecoveryPath) []int {
	e.t.Helper()
	b, err := e.store.ListBuckets(e.t.Context(), e.scope, p.Day, p.MinuteOfDay, p.InstanceID)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func (e *env) windowsOf(d time.Time) []int {
	e.t.Helper()
	s, err := e.store.ListWindows(e.t.Context(), e.scope, d)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// only keeps the lines of dump starting with prefix.
func only(lines []string, prefix string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// sagas is a fake orchestrator: an idempotent Redriver over fake sagas. A
// saga is pending until it is re-driven once; re-driving it again does
// nothing, as the real orchestrator's Redrive does for a saga no longer
// RETRY_PENDING (retry) or already terminal (restore).
type sagas struct {
	mu        sync.Mutex
	pending   map[string]bool
	calls     map[string]int // Redrive calls per saga
	completed map[string]int // completions per saga
	failures  map[string]int // errors to return before succeeding
	later     map[string]int // Later answers to give before succeeding
	total     int
	hook      func(n int, e eventstore.RecoveryEntry) // called with the call number, unlocked
}

func newSagas(ids ...string) *sagas {
	s := &sagas{pending: map[string]bool{}, calls: map[string]int{}, completed: map[string]int{}, failures: map[string]int{}, later: map[string]int{}}
	s.add(ids...)
	return s
}

func (s *sagas) add(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.pending[id] = true
	}
}

func (s *sagas) Redrive(_ context.Context, e eventstore.RecoveryEntry) error {
	s.mu.Lock()
	s.total++
	n := s.total
	s.calls[e.TxID]++
	hook := s.hook
	s.mu.Unlock()
	if hook != nil {
		hook(n, e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures[e.TxID] > 0 {
		s.failures[e.TxID]--
		return errors.New("fake: downstream unavailable")
	}
	if s.later[e.TxID] > 0 {
		s.later[e.TxID]--
		return Later(0, "fake: still running")
	}
	if s.pending[e.TxID] {
		s.pending[e.TxID] = false
		s.completed[e.TxID]++
	}
	return nil
}

// check fails t unless every saga in ids completed exactly once and was
// re-driven calls times (calls < 0: any number).
func (s *sagas) check(t *testing.T, calls int, ids ...string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.completed[id] != 1 {
			t.Errorf("saga %s completed %d times, want 1", id, s.completed[id])
		}
		if calls >= 0 && s.calls[id] != calls {
			t.Errorf("saga %s re-driven %d times, want %d", id, s.calls[id], calls)
		}
	}
}

func (s *sagas) callsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// instanceIn returns an instance id whose token lies in r.
func instanceIn(r eventstore.TokenRange, prefix string) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if r.Contains(ringcoordinator.Token([]byte(id))) {
			return id
		}
	}
}

var (
	lowHalf  = eventstore.TokenRange{Min: math.MinInt64, Max: -1}
	highHalf = eventstore.TokenRange{Min: 0, Max: math.MaxInt64}
)

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

// faultyDir fails chosen directory calls, to simulate crashes between
// steps.
type faultyDir struct {
	eventstore.Directory
	mu                sync.Mutex
	failDeleteBucket  int
	beforeWrite       func() // called before each tier-5 write
	failWrites        atomic.Bool
	deleteBucketCalls int
}

var errCrash = errors.New("fake crash")

func (f *faultyDir) DeleteBucket(ctx context.Context, scope eventstore.Scope, p eventstore.RecoveryPath) error {
	f.mu.Lock()
	f.deleteBucketCalls++
	fail := f.failDeleteBucket > 0
	if fail {
		f.failDeleteBucket--
	}
	f.mu.Unlock()
	if fail {
		return errCrash
	}
	return f.Directory.DeleteBucket(ctx, scope, p)
}

func (f *faultyDir) RegisterRecovery(ctx context.Context, scope eventstore.Scope, e eventstore.RecoveryEntry) error {
	if f.beforeWrite != nil {
		f.beforeWrite()
	}
	if f.failWrites.Load() {
		return errCrash
	}
	return f.Directory.RegisterRecovery(ctx, scope, e)
}

func (f *faultyDir) PutRecoveryEntry(ctx context.Context, scope eventstore.Scope, e eventstore.RecoveryEntry) error {
	if f.beforeWrite != nil {
		f.beforeWrite()
	}
	if f.failWrites.Load() {
		return errCrash
	}
	return f.Directory.PutRecoveryEntry(ctx, scope, e)
}
