package kafkaloop

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/stack"
)

type tp struct {
	topic     string
	partition int32
}

// keyID names a key within a partition: records sharing it run in order.
type keyID struct {
	tp
	key string
}

// failure is the retry state of a record that failed and is not finished.
type failure struct {
	first, last time.Time
	tries       int
}

// entry is one polled record, from its poll until the commit point of its
// partition passes it.
type entry struct {
	rec   *kgo.Record // nil once finished: only the offset is kept
	p     *part
	k     *keyState
	off   int64
	epoch int32
	done  bool
	fail  failure
}

// part is the state of one partition this consumer owns: its entries from
// the commit point on. A revoked or lost partition's part is dropped; if
// the partition comes back, it gets a new part.
type part struct {
	tp      tp
	q       queue
	last    int64 // offset of the last entry added
	undone  int   // entries not finished
	failing int   // entries not finished that failed at least once
	running int   // handlers running on its records
	// revoking: start nothing more (a drain waits for running); dropped:
	// forgotten, the outcome of a handler still running is ignored.
	revoking, dropped bool
	paused            bool
}

// keyState queues the unfinished records of one key. Its head runs when
// the key is in the ready list and a slot is free.
type keyState struct {
	id      keyID
	q       []*entry
	running bool        // its head is being handled
	queued  bool        // in the ready list
	timer   *time.Timer // set while its head waits out a backoff
}

// queue is a FIFO of entries.
type queue struct {
	s    []*entry
	head int
}

func (q *queue) len() int      { return len(q.s) - q.head }
func (q *queue) push(e *entry) { q.s = append(q.s, e) }
func (q *queue) front() *entry { return q.s[q.head] }
func (q *queue) pop() (e *entry) {
	e, q.s[q.head] = q.s[q.head], nil
	q.head++
	if q.head == len(q.s) {
		q.s, q.head = q.s[:0], 0
	} else if q.head >= 1024 && q.head*2 >= len(q.s) {
		n := copy(q.s, q.s[q.head:])
		clear(q.s[n:])
		q.s, q.head = q.s[:n], 0
	}
	return e
}

// loop is the state of one Run.
type loop struct {
	cl   *kgo.Client
	h    Handler
	o    Options
	ctx  context.Context // Run's: once it ends nothing new starts
	hctx context.Context // the handlers': does not end at shutdown

	maxHeld int // records held unfinished at most (polls wait below it)
	// A partition is paused when it is stuck (see stuckLocked), and resumed
	// when it is well clear of it.
	pauseUndone, maxAhead int

	mu      sync.Mutex
	cond    *sync.Cond // signalled when held, running or part.running drop
	parts   map[tp]*part
	keys    map[keyID]*keyState
	ready   []*keyState // keys whose head may start, oldest first
	running int
	held    int
	stopped bool
	wg      sync.WaitGroup // the runs in flight
	// idle hands a record to a pool goroutine waiting for one. Handlers
	// run on long-lived goroutines (at most Concurrency, started as
	// needed) rather than one new goroutine per record: a fresh
	// goroutine's stack grows (is copied) on every record's deep call
	// path, which cost a tenth of the embedded demo's CPU. Closed by
	// shutdown, under mu, once stopped is set and the last run is over.
	idle chan *entry
	pool sync.WaitGroup
}

func newLoop(ctx context.Context, cl *kgo.Client, h Handler, o Options) *loop {
	l := &loop{
		cl: cl, h: h, o: o, ctx: ctx,
		// Handlers run to completion even when ctx ends: a shutdown
		// finishes in-flight work instead of abandoning it half way.
		hctx:    context.WithoutCancel(ctx),
		maxHeld: o.MaxPollRecords,
		parts:   make(map[tp]*part),
		keys:    make(map[keyID]*keyState),
		idle:    make(chan *entry),
	}
	l.pauseUndone = max(l.maxHeld/4, 1)
	l.maxAhead = aheadFactor * l.maxHeld
	l.cond = sync.NewCond(&l.mu)
	return l
}

// wake wakes every waiter (room, drain, shutdown) to look again.
func (l *loop) wake() {
	l.mu.Lock()
	l.cond.Broadcast()
	l.mu.Unlock()
}

func (l *loop) stoppedLocked() bool { return l.stopped || l.ctx.Err() != nil }

// add queues polled records, in order, and starts what it can.
func (l *loop) add(recs []*kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		id := tp{r.Topic, r.Partition}
		p := l.parts[id]
		if p == nil {
			p = &part{tp: id, last: -1}
			l.parts[id] = p
		}
		if r.Offset <= p.last {
			continue // queued already
		}
		p.last = r.Offset
		kid := keyID{id, string(r.Key)}
		k := l.keys[kid]
		if k == nil {
			k = &keyState{id: kid}
			l.keys[kid] = k
		}
		e := &entry{rec: r, p: p, k: k, off: r.Offset, epoch: r.LeaderEpoch}
		p.q.push(e)
		p.undone++
		l.held++
		k.q = append(k.q, e)
		if len(k.q) == 1 && !k.running && k.timer == nil {
			l.readyLocked(k)
		}
		l.pauseLocked(p)
	}
	l.scheduleLocked()
}

func (l *loop) readyLocked(k *keyState) {
	if !k.queued {
		k.queued = true
		l.ready = append(l.ready, k)
	}
}

// scheduleLocked starts the heads of ready keys while slots are free.
func (l *loop) scheduleLocked() {
	for l.running < l.o.Concurrency && len(l.ready) > 0 && !l.stoppedLocked() {
		k := l.ready[0]
		l.ready[0] = nil
		l.ready = l.ready[1:]
		k.queued = false
		if len(k.q) == 0 || k.running || k.timer != nil {
			continue
		}
		e := k.q[0]
		if e.p.revoking {
			continue // left to the next owner
		}
		k.running = true
		l.running++
		e.p.running++
		l.wg.Add(1)
		select {
		case l.idle <- e: // a pool goroutine was waiting
		default:
			l.pool.Add(1)
			go l.worker(e)
		}
	}
}

// worker runs e, then every record handed to it, until shutdown. Its
// stack is grown before a record's handler runs whenever a garbage
// collection may have shrunk it while it waited (see package stack): a
// handler's store round trip would otherwise grow it back midway through
// a driver call, about a tenth of the process's CPU at concurrency 64 on
// Cassandra.
func (l *loop) worker(e *entry) {
	defer l.pool.Done()
	var room stack.Keeper
	for ok := true; ok; e, ok = <-l.idle {
		room.Ensure()
		l.run(e)
	}
}

// settleLocked ends the run of e, its key's head.
func (l *loop) settleLocked(e *entry) {
	e.k.running = false
	e.p.running--
	l.running--
	l.cond.Broadcast()
}

// finish records that e succeeded (or was dead-lettered): the key's next
// record may start and the partition's commit point may advance.
func (l *loop) finish(e *entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settleLocked(e)
	k, p := e.k, e.p
	k.q[0] = nil
	k.q = k.q[1:]
	e.done, e.rec = true, nil
	if !p.dropped {
		p.undone--
		if e.fail.tries > 0 {
			p.failing--
		}
		l.held--
		l.advanceLocked(p)
	}
	l.nextLocked(k)
	l.scheduleLocked()
}

// stuckLocked reports whether p should stop being fetched: a record of it
// keeps failing and it holds many unfinished records (those waiting behind
// the failing one, say), or its commit point is held behind a very long
// run of finished records. Pausing is for these cases only: a resumed
// partition is fetched again only after the fetch in flight to its broker
// returns (up to FetchMaxWait).
func (l *loop) stuckLocked(p *part) bool {
	return p.q.len() >= l.maxAhead || p.failing > 0 && p.undone >= l.pauseUndone
}

// pauseLocked pauses p if it is stuck.
func (l *loop) pauseLocked(p *part) {
	if !p.paused && !p.dropped && l.stuckLocked(p) {
		p.paused = true
		l.cl.PauseFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
	}
}

// resumeLocked resumes p once it is well clear of being stuck.
func (l *loop) resumeLocked(p *part) {
	if p.paused && (p.failing == 0 || p.undone < l.pauseUndone/2) && p.q.len() < l.maxAhead/2 {
		p.paused = false
		l.cl.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
		l.cond.Broadcast() // room: its records count against the bound again
	}
}

// advanceLocked moves p's commit point past its finished prefix and marks
// it for the next commit.
func (l *loop) advanceLocked(p *part) {
	var last *entry
	for p.q.len() > 0 && p.q.front().done {
		last = p.q.pop()
	}
	if last != nil {
		l.cl.MarkCommitOffsets(map[string]map[int32]kgo.EpochOffset{
			p.tp.topic: {p.tp.partition: {Epoch: last.epoch, Offset: last.off + 1}},
		})
	}
	l.resumeLocked(p)
}

// nextLocked makes k's next record ready, or forgets k if it has none.
func (l *loop) nextLocked(k *keyState) {
	if len(k.q) > 0 {
		if !k.q[0].p.revoking {
			l.readyLocked(k)
		}
		return
	}
	if l.keys[k.id] == k {
		delete(l.keys, k.id)
	}
}

// failed records a failure of e at now and returns its retry state.
func (l *loop) failed(e *entry, now time.Time) failure {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.fail.tries == 0 {
		e.fail.first = now
		if !e.p.dropped {
			e.p.failing++
		}
	}
	e.fail.last = now
	e.fail.tries++
	return e.fail
}

// retryLater ends a failed run of e and makes it ready again after its
// backoff, unless its partition is going or Run is ending: then it stays
// unfinished, for the next owner (Options.Abandoned is told when its
// partition is gone already).
func (l *loop) retryLater(e *entry) {
	l.mu.Lock()
	k, p := e.k, e.p
	if p.dropped {
		l.settleLocked(e)
		k.q[0] = nil
		k.q = k.q[1:]
		l.nextLocked(k)
		l.scheduleLocked()
		l.mu.Unlock()
		l.abandon([]*kgo.Record{e.rec})
		return
	}
	defer l.mu.Unlock()
	l.settleLocked(e)
	if p.revoking || l.stoppedLocked() {
		return
	}
	l.pauseLocked(p)
	d := time.Until(e.fail.last.Add(l.backoff(e.fail.tries)))
	var t *time.Timer
	t = time.AfterFunc(max(d, 0), func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if k.timer != t {
			return // stopped
		}
		k.timer = nil
		if len(k.q) > 0 && !k.q[0].p.revoking {
			l.readyLocked(k)
		}
		l.scheduleLocked()
	})
	k.timer = t
	l.scheduleLocked()
}

// drain stops starting records of the partitions in ps and waits, at most
// MaxBatchTime, for their running handlers.
func (l *loop) drain(ps map[string][]int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var mine []*part
	for topic, parts := range ps {
		for _, n := range parts {
			if p := l.parts[tp{topic, n}]; p != nil {
				p.revoking = true
				mine = append(mine, p)
			}
		}
	}
	if len(mine) == 0 {
		return
	}
	for _, k := range l.keys {
		if k.timer != nil && len(k.q) > 0 && k.q[0].p.revoking {
			k.timer.Stop()
			k.timer = nil
		}
	}
	busy := func() int {
		n := 0
		for _, p := range mine {
			n += p.running
		}
		return n
	}
	expired := false
	if l.o.MaxBatchTime > 0 {
		t := time.AfterFunc(l.o.MaxBatchTime, func() {
			l.mu.Lock()
			expired = true
			l.cond.Broadcast()
			l.mu.Unlock()
		})
		defer t.Stop()
	}
	for busy() > 0 && !expired {
		l.cond.Wait()
	}
	if n := busy(); n > 0 {
		l.o.Logger.Warn("kafkaloop: revoked partitions still have handlers running; their records are left to the next owner",
			"running", n, "waited", l.o.MaxBatchTime)
	}
}

// drop forgets the partitions in ps: their unfinished records are left to
// the next owner, and the outcome of a handler of theirs still running is
// ignored (its key stays busy until it returns). It returns the records
// of theirs that failed at least once, for abandon.
func (l *loop) drop(ps map[string][]int32) (failed []*kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	gone := make(map[tp]bool)
	var resume map[string][]int32
	for topic, parts := range ps {
		for _, n := range parts {
			id := tp{topic, n}
			p := l.parts[id]
			if p == nil {
				continue
			}
			if p.failing > 0 && l.o.Abandoned != nil {
				for i := p.q.head; i < len(p.q.s); i++ {
					if e := p.q.s[i]; !e.done && e.fail.tries > 0 {
						failed = append(failed, e.rec)
					}
				}
			}
			delete(l.parts, id)
			gone[id] = true
			p.revoking, p.dropped = true, true
			l.held -= p.undone
			p.undone, p.failing = 0, 0
			p.q = queue{}
			if p.paused {
				p.paused = false
				if resume == nil {
					resume = make(map[string][]int32)
				}
				resume[topic] = append(resume[topic], n)
			}
		}
	}
	if len(gone) == 0 {
		return failed
	}
	for id, k := range l.keys {
		if !gone[id.tp] {
			continue
		}
		if k.timer != nil {
			k.timer.Stop()
			k.timer = nil
		}
		if k.running {
			clear(k.q[1:])
			k.q = k.q[:1] // the running head; records polled later join behind it
			continue
		}
		clear(k.q)
		k.q = nil
		delete(l.keys, id)
	}
	if resume != nil {
		// Paused partitions stay paused across rebalances: resume them,
		// or the next assignment of one would never be fetched.
		l.cl.ResumeFetchPartitions(resume)
	}
	l.cond.Broadcast()
	return failed
}

// abandon hands recs, records left unfinished to another owner after they
// failed, to Options.Abandoned; call it without l.mu held.
func (l *loop) abandon(recs []*kgo.Record) {
	if l.o.Abandoned == nil {
		return
	}
	for _, r := range recs {
		l.o.Abandoned(r)
	}
}

// shutdown stops starting records and retries and waits for the running
// handlers.
func (l *loop) shutdown() {
	l.mu.Lock()
	l.stopped = true
	for _, k := range l.keys {
		if k.timer != nil {
			k.timer.Stop()
			k.timer = nil
		}
	}
	for l.running > 0 {
		l.cond.Wait()
	}
	close(l.idle)
	l.mu.Unlock()
	l.wg.Wait()
	l.pool.Wait()
}
