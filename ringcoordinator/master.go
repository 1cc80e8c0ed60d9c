package ringcoordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Master is the single authority of a region's virtual cluster: it keeps
// the registry of slaves (each held by its request-stream), publishes at
// the publish instant of every minute the split of the ring valid for the
// next minute, and tells orchestrators, round robin, which slave to use.
// It never touches the event store.
type Master struct {
	o   options
	ln  Listener
	id  string
	run sync.Once

	mu        sync.Mutex
	slots     []*slot // registry in registration order; a nil entry is a held slot
	rr        int     // round-robin position
	publishes int     // publish cycles so far
	last      time.Time
	// hold: the minutes starting up to it are not published. A master
	// (re)started at start holds start+2 cycles: a predecessor, whose
	// clock may be up to a cycle ahead of this one, may have published
	// them, and a second split of a minute could overlap the first.
	hold time.Time
	pubs []*publication // recent publications, ascending
}

type slot struct {
	e      *slaveEntry // nil: held for a departed slave (lazy rebalance)
	leftAt int         // Master.publishes when its slave left
}

type slaveEntry struct {
	id, addr string
	conn     *connID // the connection it registered on (nil: none known)
	out      *queue  // slices to push on its stream
	nodes    int     // orchestrators streaming from it, as it last said
}

type publication struct {
	minute, until time.Time
	parts         []SliceAssignment
}

// maxPublications bounds the publications a master remembers.
const maxPublications = 4

// NewMaster binds the master's address (WithListen) and returns it ready
// to Run. Options: WithScope, WithListen, WithCycle, WithPublishOffset,
// WithLazyRebalance, WithMaxSlaves, WithToken, WithInsecure, WithClock,
// WithLogger, WithTransport, WithConfig.
func NewMaster(opts ...Option) (*Master, error) {
	o := build(opts)
	if err := o.validate("master", false); err != nil {
		return nil, err
	}
	m := &Master{o: o, id: "master-" + uuid.NewString()}
	ln, err := o.transport.Listen(o.listen, m)
	if err != nil {
		return nil, fmt.Errorf("ringcoordinator: master: %w", err)
	}
	m.ln = ln
	m.o.log = o.log.With("role", "master", "region", o.region, "cluster", o.cluster)
	return m, nil
}

// Addr returns the master's bound address.
func (m *Master) Addr() string { return m.ln.Addr() }

// Close releases the master's address when Run will not be called (or
// stops a running master, as the end of Run's context does).
func (m *Master) Close() error { return m.ln.Close() }

// ID returns the master's id (fresh per instance).
func (m *Master) ID() string { return m.id }

// Run serves slaves and orchestrators and publishes every cycle until ctx
// ends; it then closes every connection and returns nil (or the error that
// stopped the listener). A Master runs once.
func (m *Master) Run(ctx context.Context) error {
	err := errStopped
	m.run.Do(func() { err = m.serve(ctx) })
	return err
}

func (m *Master) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		err := m.ln.Serve(ctx)
		cancel()
		served <- err
	}()
	start := m.o.now()
	m.mu.Lock()
	m.hold = start.Add(2 * m.o.cycle)
	m.mu.Unlock()
	m.o.log.Info("ringcoordinator: master serving", "addr", m.Addr(), "cycle", m.o.cycle, "publish_offset", m.o.offset,
		"first_minute_after", m.hold)
	for {
		at, minute := nextPublish(m.o.now(), m.o.cycle, m.o.offset)
		if !sleepUntil(ctx, m.o.now, at) {
			break
		}
		m.publish(m.o.now(), minute)
	}
	err := <-served
	m.o.log.Info("ringcoordinator: master stopped", "addr", m.Addr())
	return err
}

// publish computes and pushes the split valid for minute, unless that
// minute is over, was published already (a clock stepping back must not
// publish a minute twice: a second, different split could overlap the
// first) or is within two cycles of the master's start (a predecessor may
// have published it).
func (m *Master) publish(now, minute time.Time) {
	until := minute.Add(m.o.cycle)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !now.Before(until) || !minute.After(m.last) || !minute.After(m.hold) {
		return
	}
	m.last = minute
	// Lazy rebalance: held slots whose slave has not come back within
	// the grace go away now, and the ring is split among the rest.
	kept := m.slots[:0]
	for _, s := range m.slots {
		if s.e == nil && m.publishes-s.leftAt >= m.o.lazy {
			continue
		}
		kept = append(kept, s)
	}
	clear(m.slots[len(kept):])
	m.slots = trimHeld(kept)
	m.publishes++
	pub := &publication{minute: minute, until: until}
	// The ring goes to the slaves that have orchestrators (and to the
	// held slots): a slave without one would leave its slice unscanned,
	// e.g. one restarted after its orchestrators moved to another slave.
	// If no slave has any, it goes to all of them, as pending slices.
	live, withNodes := 0, 0
	for _, s := range m.slots {
		if s.e != nil {
			live++
			if s.e.nodes > 0 {
				withNodes++
			}
		}
	}
	var slots []*slot
	for _, s := range m.slots {
		if s.e == nil || withNodes == 0 || s.e.nodes > 0 {
			slots = append(slots, s)
		}
	}
	if live > 0 {
		parts, err := SplitRing(len(slots))
		if err != nil { // cannot happen: fewer slots than tokens
			m.o.log.Error("ringcoordinator: master: split", "err", err)
			return
		}
		scope := scopeOf(&m.o)
		for i, s := range slots {
			sa := SliceAssignment{Index: i, Of: len(parts), Range: rangeOf(parts[i]), Frozen: s.e == nil}
			if s.e != nil {
				sa.SlaveID, sa.Addr = s.e.id, s.e.addr
				s.e.out.push(encode(msgSlice, rangeMsg{
					scopeMsg: scope, From: m.id,
					ValidForMinute: ms(minute), ValidUntil: ms(until),
					Min: parts[i].Min, Max: parts[i].Max, Index: i, Of: len(parts),
				}))
			}
			pub.parts = append(pub.parts, sa)
		}
	}
	m.pubs = append(m.pubs, pub)
	if len(m.pubs) > maxPublications {
		m.pubs = append(m.pubs[:0:0], m.pubs[len(m.pubs)-maxPublications:]...)
	}
	m.o.log.Info("ringcoordinator: master published", "valid_for_minute", minute, "slaves", live, "slaves_with_nodes", withNodes, "slices", len(pub.parts))
}

// trimHeld drops the held slots at the end of the registry: a departed
// last slave moves no other slave's slice.
func trimHeld(slots []*slot) []*slot {
	for len(slots) > 0 && slots[len(slots)-1].e == nil {
		slots[len(slots)-1] = nil
		slots = slots[:len(slots)-1]
	}
	return slots
}

// addSlave puts e in the registry: in place of a live entry with the same
// id registered on the same connection or on one that is gone (a slave
// re-registering before its old stream was noticed gone), else in the
// first held slot, else at the end. It refuses a second slave on one
// connection, an id live on another connection, and a slave beyond the
// cap.
func (m *Master) addSlave(e *slaveEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	live := 0
	for _, s := range m.slots {
		if s.e == nil {
			continue
		}
		live++
		if s.e.id == e.id {
			if s.e.conn != nil && s.e.conn != e.conn && s.e.conn.ctx.Err() == nil {
				return fmt.Errorf("%w: slave %s is registered on another live connection", ErrRegistrationRefused, e.id)
			}
			s.e.out.close(errors.New("replaced by a new registration"))
			s.e = e
			return nil
		}
		if e.conn != nil && s.e.conn == e.conn {
			return fmt.Errorf("%w: one slave per connection (slave %s is registered on it)", ErrRegistrationRefused, s.e.id)
		}
	}
	if live >= m.o.maxSlaves {
		return fmt.Errorf("%w: the master has %d slaves, its limit", ErrRegistrationRefused, live)
	}
	for _, s := range m.slots {
		if s.e == nil {
			s.e = e
			return nil
		}
	}
	m.slots = append(m.slots, &slot{e: e})
	return nil
}

// removeSlave takes e out of the registry: its slot is held unless it was
// the last one (lazy rebalance). Nothing is recomputed now: the slices
// already published stay as they are.
func (m *Master) removeSlave(e *slaveEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.slots {
		if s.e == e {
			s.e, s.leftAt = nil, m.publishes
			m.slots = trimHeld(m.slots)
			return
		}
	}
}

// RequestResponse answers orchestrators asking for a slave and status
// queries. It implements Handler.
func (m *Master) RequestResponse(ctx context.Context, req []byte) ([]byte, error) {
	typ, err := decode(req, "", nil)
	if err != nil {
		return nil, err
	}
	switch typ {
	case msgAssign:
		var a assignMsg
		if _, err := decode(req, msgAssign, &a); err != nil {
			return nil, err
		}
		return m.assign(a)
	case msgStatus:
		return encode(msgAssigned, m.Assignment(m.o.now())), nil
	case msgNodes:
		var n nodesMsg
		if _, err := decode(req, msgNodes, &n); err != nil {
			return nil, err
		}
		return m.setNodes(connIDOf(ctx), n)
	default:
		return nil, fmt.Errorf("%w: master does not answer %q requests", ErrBadMessage, typ)
	}
}

// assign picks a slave round robin for an orchestrator.
func (m *Master) assign(a assignMsg) ([]byte, error) {
	if err := checkScope(scopeOf(&m.o), a.scopeMsg, "orchestrator "+a.NodeID); err != nil {
		m.o.log.Warn("ringcoordinator: master refused an orchestrator", "node", a.NodeID, "err", err)
		return nil, err
	}
	m.mu.Lock()
	var live []*slaveEntry
	for _, s := range m.slots {
		if s.e != nil {
			live = append(live, s.e)
		}
	}
	if len(live) == 0 {
		m.mu.Unlock()
		return nil, ErrNoSlave
	}
	e := live[m.rr%len(live)]
	m.rr++
	m.mu.Unlock()
	m.o.log.Debug("ringcoordinator: master assigned a slave", "node", a.NodeID, "slave", e.id, "addr", e.addr)
	return encode(msgSlaveAddr, slaveAddrMsg{SlaveID: e.id, Addr: e.addr}), nil
}

// setNodes records how many orchestrators stream from a registered slave.
// Only the connection the slave registered on may.
func (m *Master) setNodes(conn *connID, n nodesMsg) ([]byte, error) {
	if err := checkScope(scopeOf(&m.o), n.scopeMsg, "slave "+n.SlaveID); err != nil {
		return nil, err
	}
	if n.Nodes < 0 {
		return nil, fmt.Errorf("%w: slave %s has %d orchestrators", ErrBadMessage, n.SlaveID, n.Nodes)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.slots {
		if s.e != nil && s.e.id == n.SlaveID {
			if s.e.conn != nil && s.e.conn != conn {
				return nil, fmt.Errorf("%w: slave %s is registered on another connection", ErrRegistrationRefused, n.SlaveID)
			}
			s.e.nodes = n.Nodes
			return encode(msgNodes, nil), nil
		}
	}
	return nil, fmt.Errorf("%w: slave %s is not registered", ErrBadMessage, n.SlaveID)
}

// RequestStream registers a slave and pushes it its slices until its
// stream ends. It implements Handler.
func (m *Master) RequestStream(ctx context.Context, req []byte, send func([]byte) error) error {
	var r registerMsg
	if _, err := decode(req, msgRegister, &r); err != nil {
		return err
	}
	if err := checkScope(scopeOf(&m.o), r.scopeMsg, "slave "+r.SlaveID); err != nil {
		m.o.log.Warn("ringcoordinator: master refused a slave", "slave", r.SlaveID, "err", err)
		return err
	}
	if r.SlaveID == "" || r.Addr == "" || r.Nodes < 0 {
		return fmt.Errorf("%w: a slave registers with an id, an address and its number of orchestrators", ErrBadMessage)
	}
	e := &slaveEntry{id: r.SlaveID, addr: r.Addr, out: newQueue(), nodes: r.Nodes, conn: connIDOf(ctx)}
	if err := m.addSlave(e); err != nil {
		m.o.log.Warn("ringcoordinator: master refused a slave", "slave", r.SlaveID, "addr", r.Addr, "err", err)
		return err
	}
	m.o.log.Info("ringcoordinator: slave registered", "slave", e.id, "addr", e.addr)
	defer func() {
		m.removeSlave(e)
		m.o.log.Info("ringcoordinator: slave left", "slave", e.id, "addr", e.addr)
	}()
	if err := send(encode(msgRegistered, acceptedMsg{ID: m.id})); err != nil {
		return nil // the stream is gone already
	}
	err := e.out.pump(ctx, nil, send)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Assignment returns the master's view at now: its registered slaves and
// the slices of the minutes not over yet.
func (m *Master) Assignment(now time.Time) Assignment {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := Assignment{Region: m.o.region, Cluster: m.o.cluster, Role: "master", ID: m.id, Addr: m.Addr(), At: now, Minutes: []MinuteAssignment{}}
	for i, s := range m.slots {
		if s.e != nil {
			a.Slaves = append(a.Slaves, SlaveInfo{ID: s.e.id, Addr: s.e.addr, Slot: i, Nodes: s.e.nodes})
		}
	}
	for _, p := range m.pubs {
		if !now.Before(p.until) {
			continue
		}
		a.Minutes = append(a.Minutes, MinuteAssignment{
			ValidForMinute: p.minute, ValidUntil: p.until,
			Slices: append([]SliceAssignment(nil), p.parts...),
		})
	}
	return a
}
