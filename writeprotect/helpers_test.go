package writeprotect_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/eventstore/storetest"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

var _ worker.Guard = (*writeprotect.Guard)(nil)

const testDomain = "order-saga"

// fakeClock is a manual clock shared by a memory store and its guards.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// backend is a store under test: memory on a fake clock, or Cassandra on
// the real one.
type backend struct {
	name  string
	store eventstore.Store
	// clock is nil for Cassandra (leases expire in real time).
	clock *fakeClock
	// lease is the STRICT lease the scenarios use.
	lease time.Duration
}

func memoryBackend(t testing.TB) *backend {
	t.Helper()
	c := newFakeClock()
	s := memory.New(memory.WithClock(c.Now))
	t.Cleanup(func() { _ = s.Close() })
	return &backend{name: "memory", store: s, clock: c, lease: 5 * time.Second}
}

// guard makes one guard instance (one "worker instance") on b's store.
func (b *backend) guard(t testing.TB, mode writeprotect.Mode, opts ...writeprotect.Option) *writeprotect.Guard {
	t.Helper()
	cfg := writeprotect.Config{
		DefaultMode:  writeprotect.RelaxedWithDedup,
		DefaultLease: b.lease,
		Domains:      map[string]writeprotect.DomainConfig{testDomain: {Mode: mode}},
	}
	base := []writeprotect.Option{writeprotect.WithLogger(quietLogger()), writeprotect.WithBackoff(time.Millisecond, 20*time.Millisecond)}
	if b.clock != nil {
		base = append(base, writeprotect.WithClock(b.clock.Now))
	}
	g, err := writeprotect.New(b.store, cfg, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// expire lets every lease taken so far run out: the fake clock jumps past
// it; on Cassandra real time passes while the callers poll.
func (b *backend) expire() {
	if b.clock != nil {
		b.clock.Add(b.lease + time.Second)
	}
}

// command builds a command of testDomain in scope.
func command(scope eventstore.Scope, tx string, span int, kind topics.Kind) *topics.Envelope {
	return &topics.Envelope{
		Type: topics.TypeCommand, Region: scope.Region, Cluster: scope.Cluster, Service: scope.Service,
		Domain: testDomain, TxID: tx, Span: span, Kind: kind, Endpoint: "charge",
		IdempotencyKey: topics.IdempotencyKey(tx, span, kind), Attempt: 1,
		ReplyTo: topics.CallbackTopic(testDomain), Payload: pl("entity-v1"), Hints: map[string]string{"h": "1"},
		SentAt: time.Now(),
	}
}

// pl is a msgpack payload holding s (payloads are msgpack on the wire).
func pl(s string) []byte {
	b, err := msgpack.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// str decodes a payload made by pl.
func str(b []byte) string {
	var s string
	if err := msgpack.Unmarshal(b, &s); err != nil {
		return fmt.Sprintf("<undecodable %q>", b)
	}
	return s
}

func uniqueScope(t testing.TB) eventstore.Scope { return storetest.UniqueScope(t) }

// handler counts the business executions of commands and how many run at
// once; every run produces a distinct payload, so a reply tells which run
// made it.
type handler struct {
	runs    atomic.Int64
	cur     atomic.Int64
	maxCur  atomic.Int64
	outcome topics.Outcome
	// block, if set, is waited on inside the handler.
	block chan struct{}
	// started, if set, is sent the command when a run starts.
	started chan *topics.Envelope
	// panicNext makes the next run panic.
	panicNext atomic.Bool

	mu   sync.Mutex
	seen []string // "tx/span/kind" per run, in order
}

func (h *handler) run(cmd *topics.Envelope) func(context.Context) *topics.Envelope {
	return func(ctx context.Context) *topics.Envelope {
		n := h.runs.Add(1)
		c := h.cur.Add(1)
		defer h.cur.Add(-1)
		for {
			m := h.maxCur.Load()
			if c <= m || h.maxCur.CompareAndSwap(m, c) {
				break
			}
		}
		h.mu.Lock()
		h.seen = append(h.seen, fmt.Sprintf("%s/%d/%s", cmd.TxID, cmd.Span, cmd.Kind))
		h.mu.Unlock()
		if h.started != nil {
			h.started <- cmd
		}
		if h.block != nil {
			<-h.block
		}
		if h.panicNext.CompareAndSwap(true, false) {
			panic("simulated crash before commit")
		}
		outcome := h.outcome
		if outcome == "" {
			outcome = topics.OutcomeOK
		}
		return &topics.Envelope{
			Type: topics.TypeReply, Region: cmd.Region, Cluster: cmd.Cluster, Service: cmd.Service,
			Domain: cmd.Domain, TxID: cmd.TxID, Span: cmd.Span, Kind: cmd.Kind, Endpoint: cmd.Endpoint,
			IdempotencyKey: cmd.IdempotencyKey, Attempt: cmd.Attempt, Trace: cmd.Trace,
			Outcome: outcome, Payload: pl(fmt.Sprintf("%s|%s-run-%d", str(cmd.Payload), cmd.Kind, n)),
			Hints: map[string]string{"ran": fmt.Sprint(n)},
		}
	}
}

func (h *handler) ran() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

// execute runs cmd through g as a worker would: an error means "try again
// later", so it retries (bounded by a deadline).
func execute(t testing.TB, g *writeprotect.Guard, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) *topics.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		rep, err := g.Execute(ctx, cmd, run)
		if err == nil {
			return rep
		}
		if ctx.Err() != nil {
			t.Errorf("Execute(%s/%d/%s) kept failing: %v", cmd.TxID, cmd.Span, cmd.Kind, err)
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sameReply compares what a saga sees in two replies.
func sameReply(a, b *topics.Envelope) error {
	if a == nil || b == nil {
		if a == b {
			return nil
		}
		return fmt.Errorf("one reply is nil: %v vs %v", a, b)
	}
	fa := fmt.Sprintf("%s %s %s %d %s %s %d %s %q %q %v", a.Type, a.Domain, a.TxID, a.Span, a.Kind, a.Endpoint, a.Attempt, a.Outcome, a.Error, a.Payload, a.Hints)
	fb := fmt.Sprintf("%s %s %s %d %s %s %d %s %q %q %v", b.Type, b.Domain, b.TxID, b.Span, b.Kind, b.Endpoint, b.Attempt, b.Outcome, b.Error, b.Payload, b.Hints)
	if fa != fb {
		return fmt.Errorf("replies differ:\n %s\n %s", fa, fb)
	}
	return nil
}

// waitUntil polls cond until it holds or fails the test after d.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// retained reports whether m expires after the default retention, as a
// marker written just now with it does (Cassandra's TTLs count down in
// real time: a few seconds are allowed for).
func retained(m eventstore.Marker) bool {
	r := writeprotect.DefaultMarkerRetention
	return m.TTL > r-5*time.Second && m.TTL <= r
}

func sumStats(gs ...*writeprotect.Guard) writeprotect.Stats {
	var s writeprotect.Stats
	for _, g := range gs {
		s = s.Add(g.Stats())
	}
	return s
}

// faultStore injects errors under a real store.
type faultStore struct {
	eventstore.Store
	insertErr, putErr, getErr, loadErr, deleteErr atomic.Pointer[error]
	puts, deletes                                 atomic.Int64
}

var errInjected = errors.New("injected store failure")

func injected() *error { e := errInjected; return &e }

func (f *faultStore) InsertMarker(ctx context.Context, m eventstore.Marker, lease time.Duration) (bool, eventstore.Marker, error) {
	if e := f.insertErr.Load(); e != nil {
		return false, eventstore.Marker{}, *e
	}
	return f.Store.InsertMarker(ctx, m, lease)
}

func (f *faultStore) PutMarker(ctx context.Context, m eventstore.Marker) error {
	f.puts.Add(1)
	if e := f.putErr.Load(); e != nil {
		return *e
	}
	return f.Store.PutMarker(ctx, m)
}

// CommitMarker is the STRICT commit: it counts as a put and fails with
// putErr.
func (f *faultStore) CommitMarker(ctx context.Context, m eventstore.Marker) (bool, eventstore.Marker, error) {
	f.puts.Add(1)
	if e := f.putErr.Load(); e != nil {
		return false, eventstore.Marker{}, *e
	}
	return f.Store.CommitMarker(ctx, m)
}

// DeleteMarkerIf counts as a delete and fails with deleteErr.
func (f *faultStore) DeleteMarkerIf(ctx context.Context, k eventstore.MarkerKey, state eventstore.MarkerState, owner string) (bool, eventstore.Marker, error) {
	f.deletes.Add(1)
	if e := f.deleteErr.Load(); e != nil {
		return false, eventstore.Marker{}, *e
	}
	return f.Store.DeleteMarkerIf(ctx, k, state, owner)
}

func (f *faultStore) GetMarker(ctx context.Context, k eventstore.MarkerKey) (eventstore.Marker, error) {
	if e := f.getErr.Load(); e != nil {
		return eventstore.Marker{}, *e
	}
	return f.Store.GetMarker(ctx, k)
}

func (f *faultStore) DeleteMarker(ctx context.Context, k eventstore.MarkerKey) error {
	f.deletes.Add(1)
	if e := f.deleteErr.Load(); e != nil {
		return *e
	}
	return f.Store.DeleteMarker(ctx, k)
}

func (f *faultStore) LoadTransaction(ctx context.Context, s eventstore.Scope, tx string) (eventstore.Transaction, error) {
	if e := f.loadErr.Load(); e != nil {
		return eventstore.Transaction{}, *e
	}
	return f.Store.LoadTransaction(ctx, s, tx)
}

// TransactionState keeps the guard's fence on the state read
// (eventstore.StateReader, which both stores have); loadErr fails it too.
func (f *faultStore) TransactionState(ctx context.Context, s eventstore.Scope, tx string) (eventstore.State, error) {
	if e := f.loadErr.Load(); e != nil {
		return "", *e
	}
	return f.Store.(eventstore.StateReader).TransactionState(ctx, s, tx)
}
