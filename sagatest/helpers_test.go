package sagatest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/sagatest"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Order is the entity of the test saga: reserve (inventory) → charge
// (payment) → ship (shipping); shipping fails non-retryably when Reject is
// set, and the saga compensates the first two steps.
type Order struct {
	ID       string `msgpack:"id"`
	Reject   bool   `msgpack:"reject,omitempty"`
	Reserved bool   `msgpack:"reserved,omitempty"`
	Charged  bool   `msgpack:"charged,omitempty"`
	Shipped  bool   `msgpack:"shipped,omitempty"`
}

// names are the service and domain names of one test.
type names struct {
	order, inventory, payment, shipping, domain string
}

var fixed = names{"order-service", "inventory-service", "payment-service", "shipping-service", "order"}

// uniqueNames returns names no other test uses, for a shared broker.
func uniqueNames(t *testing.T) names {
	u := testenv.UniqueName(t, "saga")
	return names{u + "-order", u + "-inventory", u + "-payment", u + "-shipping", u}
}

func (n names) saga() orchestrator.Domain[Order] {
	return orchestrator.Domain[Order]{
		Name: n.domain,
		OnNext: orchestrator.Sequence[Order](
			orchestrator.Step{Service: n.inventory, Endpoint: "reserve"},
			orchestrator.Step{Service: n.payment, Endpoint: "charge"},
			orchestrator.Step{Service: n.shipping, Endpoint: "ship"},
		),
	}
}

var errRejected = errors.New("address rejected")

// start runs the three worker services and the orchestrator in env.
func start(env *sagatest.Env, n names) *orchestrator.Orchestrator[Order] { return startWith(env, n) }

// startWith is start with options for the orchestrator.
func startWith(env *sagatest.Env, n names, opts ...orchestrator.Option) *orchestrator.Orchestrator[Order] {
	step := func(name string, do, undo func(*Order)) worker.Endpoint[Order] {
		return worker.Endpoint[Order]{
			Name: name,
			Process: func(_ context.Context, _ *worker.Step, o Order) (Order, error) {
				if name == "ship" && o.Reject {
					return o, worker.NonRetryable(errRejected)
				}
				do(&o)
				return o, nil
			},
			Revert: func(_ context.Context, _ *worker.Step, o Order) (Order, error) {
				undo(&o)
				return o, nil
			},
		}
	}
	sagatest.Worker(env, n.inventory, func(w *worker.Worker) error {
		return worker.Register(w, step("reserve", func(o *Order) { o.Reserved = true }, func(o *Order) { o.Reserved = false }))
	})
	sagatest.Worker(env, n.payment, func(w *worker.Worker) error {
		return worker.Register(w, step("charge", func(o *Order) { o.Charged = true }, func(o *Order) { o.Charged = false }))
	})
	sagatest.Worker(env, n.shipping, func(w *worker.Worker) error {
		return worker.Register(w, step("ship", func(o *Order) { o.Shipped = true }, func(o *Order) { o.Shipped = false }))
	})
	return sagatest.Orchestrator(env, n.order, n.saga(), opts...)
}

// run starts count sagas, every rejectEvery-th one rejected (0: none), and
// returns their ids with the terminal state each must reach.
func run(t *testing.T, o *orchestrator.Orchestrator[Order], count, rejectEvery int) (ids []string, want map[string]eventstore.State) {
	t.Helper()
	want = make(map[string]eventstore.State, count)
	for i := range count {
		reject := rejectEvery > 0 && i%rejectEvery == rejectEvery-1
		id, err := o.Start(t.Context(), Order{ID: fmt.Sprint(i), Reject: reject})
		if err != nil {
			t.Fatalf("start saga %d: %v", i, err)
		}
		ids = append(ids, id)
		want[id] = eventstore.StateCompleted
		if reject {
			want[id] = eventstore.StateCompensated
		}
	}
	return ids, want
}

// expected returns the executions each saga must have: three forward
// steps, and for a compensated one the reverts of the first two.
func expected(want map[string]eventstore.State) map[sagatest.Execution]bool {
	out := make(map[sagatest.Execution]bool)
	for id, s := range want {
		for span := range 3 {
			out[sagatest.Execution{TxID: id, Span: span, Kind: topics.KindProcess}] = true
		}
		if s == eventstore.StateCompensated {
			for span := range 2 {
				out[sagatest.Execution{TxID: id, Span: span, Kind: topics.KindRevert}] = true
			}
		}
	}
	return out
}

// atLeastOnce, as checkEnd's times, accepts one run or more.
const atLeastOnce = -1

// checkEnd waits for the sagas, checks their terminal states and entities,
// settles the env and checks that every expected execution ran exactly
// times times (at least once: atLeastOnce) and no other one ran.
func checkEnd(t *testing.T, env *sagatest.Env, o *orchestrator.Orchestrator[Order], ids []string, want map[string]eventstore.State, times int) {
	t.Helper()
	got := env.WaitTerminal(o, ids...)
	bad := 0
	for _, id := range ids {
		if got[id] != want[id] {
			if bad++; bad <= 5 {
				t.Errorf("saga %s ended %s, want %s", id, got[id], want[id])
			}
			continue
		}
		s, err := o.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		e := s.Entity
		ok := e.Reserved && e.Charged && e.Shipped
		if want[id] == eventstore.StateCompensated {
			ok = !e.Reserved && !e.Charged && !e.Shipped
		}
		if !ok {
			if bad++; bad <= 5 {
				t.Errorf("saga %s ended %s with entity %+v", id, got[id], e)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d sagas ended wrong", bad, len(ids))
	}
	env.Settle()
	exp := expected(want)
	counts := env.ExecutionCounts()
	wrong := 0
	for x := range exp {
		if n := counts[x]; n != times && (times != atLeastOnce || n < 1) {
			if wrong++; wrong <= 5 {
				t.Errorf("%s ran %d times, want %d", x, n, times)
			}
		}
	}
	for x, n := range counts {
		if !exp[x] && want[x.TxID] != "" {
			if wrong++; wrong <= 5 {
				t.Errorf("%s ran %d times, want never", x, n)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d executions ran the wrong number of times", wrong)
	}
}

// memoGuard is a correct in-process guard shared by every instance: one
// execution per idempotency key at a time, and the recorded reply for the
// later deliveries.
type memoGuard struct {
	mu   sync.Mutex
	keys map[string]*memo
}

type memo struct {
	mu    sync.Mutex
	reply *topics.Envelope
}

func newMemoGuard() *memoGuard { return &memoGuard{keys: make(map[string]*memo)} }

func (g *memoGuard) Execute(ctx context.Context, cmd *topics.Envelope, run func(context.Context) *topics.Envelope) (*topics.Envelope, error) {
	g.mu.Lock()
	m := g.keys[cmd.IdempotencyKey]
	if m == nil {
		m = &memo{}
		g.keys[cmd.IdempotencyKey] = m
	}
	g.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reply == nil {
		r := run(ctx)
		saved := *r // the worker writes to the reply it is given
		m.reply = &saved
		return r, nil
	}
	c := *m.reply
	return &c, nil
}

// shared returns a WithGuard factory handing every instance g.
func shared(g worker.Guard) func(string) worker.Guard {
	return func(string) worker.Guard { return g }
}

// staleReplies reads the callback topic of domain and checks every reply
// ReorderReplies marked stale: an earlier reply of its saga, with another
// span or kind than a reply that first appeared after it and before it,
// the one its sagatest.HeaderStale header names. It returns how many
// stale replies it found.
func staleReplies(t *testing.T, env *sagatest.Env, domain string) int {
	t.Helper()
	topic := topics.CallbackTopic(domain)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{} // partition -> end offset not yet reached
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	type reply struct {
		span int
		kind topics.Kind
	}
	first := map[string]map[string]int{} // tx -> span/kind/attempt -> position of its first appearance
	ids := map[string]map[string]reply{}
	pos, stale, bad := 0, 0, 0
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v (partitions left %v)", topic, ctx.Err(), left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			m, err := topics.Decode(r.Value)
			if err != nil {
				t.Errorf("%s[%d]@%d: %v", topic, r.Partition, r.Offset, err)
				return
			}
			id := strconv.Itoa(m.Span) + "/" + string(m.Kind) + "/" + strconv.Itoa(m.Attempt)
			pos++
			if first[m.TxID] == nil {
				first[m.TxID], ids[m.TxID] = map[string]int{}, map[string]reply{}
			}
			newer := ""
			for _, h := range r.Headers {
				if h.Key == sagatest.HeaderStale {
					newer = string(h.Value)
				}
			}
			if newer == "" {
				if _, ok := first[m.TxID][id]; !ok {
					first[m.TxID][id] = pos
					ids[m.TxID][id] = reply{m.Span, m.Kind}
				}
				return
			}
			stale++
			at, seen := first[m.TxID][id]
			nat, nseen := first[m.TxID][newer]
			if !seen || !nseen || nat <= at || ids[m.TxID][newer] == (reply{m.Span, m.Kind}) {
				if bad++; bad <= 5 {
					t.Errorf("stale reply %s of %s at %s[%d]@%d does not follow a newer reply %s with another span or kind",
						id, m.TxID, topic, r.Partition, r.Offset, newer)
				}
			}
		})
	}
	if bad > 0 {
		t.Errorf("%d of %d stale replies misplaced", bad, stale)
	}
	return stale
}
