package sqlbarrier_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/sqlbarrier"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// order is the entity of the Kafka tests' steps. Fail names the endpoint
// whose process fails non-retryably (after its write, which the barrier
// rolls back), making the saga compensate.
type order struct {
	Amount int64  `msgpack:"amount"`
	Fail   string `msgpack:"fail,omitempty"`
}

// errDeclined is the non-retryable failure of the endpoint an order names
// in Fail.
var errDeclined = errors.New("declined")

// chargeEndpoint is ledgerEndpoint "charge".
func chargeEndpoint(inside func()) sqlbarrier.Endpoint[order] {
	return ledgerEndpoint("charge", inside)
}

// ledgerEndpoint is the endpoint name that debits the ledger (process) and
// refunds it (revert), in the barrier's transaction; inside, when set, runs
// after the write. Its process fails non-retryably, after the write, for an
// order whose Fail is name.
func ledgerEndpoint(name string, inside func()) sqlbarrier.Endpoint[order] {
	write := func(ctx context.Context, tx *sql.Tx, s *worker.Step, amount int64) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO ledger (tx_id, span, kind, amount) VALUES ($1, $2, $3, $4)`, s.TxID, s.Span, string(s.Kind), amount)
		if err == nil && inside != nil {
			inside()
		}
		return err
	}
	return sqlbarrier.Endpoint[order]{
		Name: name,
		Process: func(ctx context.Context, tx *sql.Tx, s *worker.Step, in order) (order, error) {
			if err := write(ctx, tx, s, -in.Amount); err != nil {
				return in, err
			}
			if in.Fail == name {
				return in, worker.NonRetryable(fmt.Errorf("%s: %w", name, errDeclined))
			}
			return in, nil
		},
		Revert: func(ctx context.Context, tx *sql.Tx, s *worker.Step, in order) (order, error) {
			return in, write(ctx, tx, s, in.Amount)
		},
	}
}

// kafkaRig is a service's command topic and a callback topic on the real
// Kafka, with a client that produces commands and reads replies.
type kafkaRig struct {
	brokers  []string
	service  string
	callback string
	cl       *kgo.Client
}

func newKafkaRig(t testing.TB, partitions int32) *kafkaRig {
	t.Helper()
	r := &kafkaRig{brokers: testenv.KafkaBrokers(t), service: testenv.UniqueName(t, "pay")}
	r.callback = topics.CallbackTopic(testenv.UniqueName(t, "dom"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.ConsumeTopics(r.callback), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r.cl = cl
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := topics.Ensure(ctx, kadm.NewClient(cl), append(topics.WorkerTopics(r.service), r.callback), topics.Provision{Partitions: partitions, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *kafkaRig) command(txID string, span int, kind topics.Kind, amount int64) *topics.Envelope {
	cmd := command(txID, span, kind, 1)
	cmd.ReplyTo = r.callback
	cmd.Payload, _ = msgpack.Marshal(&order{Amount: amount})
	return cmd
}

func (r *kafkaRig) produce(t testing.TB, cmds ...*topics.Envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs := make([]*kgo.Record, 0, len(cmds))
	for _, c := range cmds {
		b, err := topics.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topics.CommandTopic(r.service), Key: []byte(c.TxID), Value: b})
	}
	if err := r.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// stepKey names a command's step.
type stepKey struct {
	tx   string
	span int
	kind topics.Kind
}

// awaitReplies reads replies until done says they are enough, calling seen
// for each.
func (r *kafkaRig) awaitReplies(t testing.TB, d time.Duration, seen func(*topics.Envelope), done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !done() {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("replies: timed out after %v", d)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if e, err := topics.Decode(rec.Value); err == nil {
				seen(e)
			}
		})
	}
}

// runWorker runs a worker of r's service in group with the barrier over db
// until the test ends.
func runWorker(t testing.TB, r *kafkaRig, db *sql.DB, group string, inside func()) *sqlbarrier.Barrier {
	t.Helper()
	b, err := sqlbarrier.New(db, sqlbarrier.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(r.service, worker.WithBrokers(r.brokers...), worker.WithGuard(b), worker.WithGroup(group),
		worker.WithLogger(quietLogger()), worker.WithoutProvision())
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlbarrier.Register(w, b, chargeEndpoint(inside)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-w.Running():
	case err := <-done:
		t.Fatalf("worker: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("worker never joined its group")
	}
	return b
}

// Over real Kafka, twin workers (two groups, so both get every command)
// handle every command delivered three times: sagas that compensate, sagas
// whose revert comes first. Each debit and refund is in the ledger exactly
// once, a revert before its process is a null compensation and the process
// after it runs nothing.
func TestKafkaDuplicatesAndTwinWorkers(t *testing.T) {
	db, _ := openDB(t)
	r := newKafkaRig(t, 2)
	twins := []*sqlbarrier.Barrier{
		runWorker(t, r, db, testenv.UniqueName(t, "g1"), nil),
		runWorker(t, r, db, testenv.UniqueName(t, "g2"), nil),
	}
	const sagas = 30
	var cmds []*topics.Envelope
	for i := range sagas {
		tx := fmt.Sprintf("tx-%d", i)
		switch i % 3 {
		case 0: // runs
			cmds = append(cmds, r.command(tx, 0, topics.KindProcess, 100))
		case 1: // runs, then compensates
			cmds = append(cmds, r.command(tx, 0, topics.KindProcess, 100), r.command(tx, 0, topics.KindRevert, 100))
		case 2: // the revert overtakes the process
			cmds = append(cmds, r.command(tx, 0, topics.KindRevert, 100), r.command(tx, 0, topics.KindProcess, 100))
		}
	}
	var dup []*topics.Envelope
	for _, c := range cmds {
		dup = append(dup, c, c, c)
	}
	r.produce(t, dup...)

	var mu sync.Mutex
	replies := map[stepKey][]*topics.Envelope{}
	r.awaitReplies(t, 3*time.Minute, func(e *topics.Envelope) {
		mu.Lock()
		defer mu.Unlock()
		k := stepKey{e.TxID, e.Span, e.Kind}
		replies[k] = append(replies[k], e)
	}, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range cmds {
			if len(replies[stepKey{c.TxID, c.Span, c.Kind}]) < 6 { // 2 twins x 3 deliveries
				return false
			}
		}
		return true
	})
	for i := range sagas {
		tx := fmt.Sprintf("tx-%d", i)
		debits, refunds := ledgerCount(t, db, tx, 0, topics.KindProcess), ledgerCount(t, db, tx, 0, topics.KindRevert)
		want := [3][2]int{{1, 0}, {1, 1}, {0, 0}}[i%3]
		if debits != want[0] || refunds != want[1] {
			t.Errorf("%s: %d debits, %d refunds; want %d, %d", tx, debits, refunds, want[0], want[1])
		}
		p := replies[stepKey{tx, 0, topics.KindProcess}]
		for _, rep := range p {
			if rep.Outcome != p[0].Outcome || rep.Error != p[0].Error {
				t.Errorf("%s: replies differ: %s %q vs %s %q", tx, rep.Outcome, rep.Error, p[0].Outcome, p[0].Error)
			}
		}
		wantOutcome := topics.OutcomeOK
		if i%3 == 2 {
			wantOutcome = topics.OutcomeNonRetryable // hanging: not run
		}
		if p[0].Outcome != wantOutcome {
			t.Errorf("%s: process replied %s (%s), want %s", tx, p[0].Outcome, p[0].Error, wantOutcome)
		}
	}
	var st sqlbarrier.Stats
	for _, b := range twins {
		s := b.Stats()
		st.Ran += s.Ran
		st.Duplicates += s.Duplicates
		st.NullCompensations += s.NullCompensations
		st.Hanging += s.Hanging
	}
	// 50 commands, each delivered 6 times: 30 runs (20 debits, 10
	// refunds), 10 null compensations, 60 hanging processes, 200 duplicates.
	if st.Ran != 30 || st.NullCompensations != 10 || st.Hanging != 60 || st.Duplicates != 200 {
		t.Errorf("twins' stats %+v: want 30 runs, 10 null compensations, 60 hanging, 200 duplicates", st)
	}
	t.Logf("twins' stats: %+v", st)
}
