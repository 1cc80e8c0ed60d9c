package ringcoordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/wait"
)

// Slave relays the master's slices to orchestrators: it registers with the
// master by request-stream (again, with backoff, whenever the stream is
// lost), splits each minute's slice among the orchestrators streaming from
// it, and pushes each its sub-range. It never touches the event store.
type Slave struct {
	o   options
	ln  Listener
	id  string
	run sync.Once

	mu        sync.Mutex
	orchs     []*orchEntry  // subscribed orchestrators, in subscription order
	slices    []*sliceState // minutes not over, ascending
	connected bool          // registered with the master right now
	masterID  string
	changed   chan struct{} // capacity 1: the number of orchestrators changed
}

type orchEntry struct {
	node  string
	out   *queue
	holds []time.Time // minutes it held a range of when it subscribed
}

// holdsMinute reports whether e held a range of minute when it subscribed.
func (e *orchEntry) holdsMinute(minute time.Time) bool {
	for _, h := range e.holds {
		if h.Equal(minute) {
			return true
		}
	}
	return false
}

type sliceState struct {
	msg           rangeMsg // as received from the master
	minute, until time.Time
	split         bool       // its split among orchestrators is fixed
	refused       bool       // not split: a node held a range of its minute already
	nodes         []nodePart // the split, in order
}

type nodePart struct {
	node string
	r    eventstore.TokenRange
}

// NewSlave binds the slave's address (WithListen) and returns it ready to
// Run. It needs its master (WithMaster) and the master's cycle
// (WithCycle). Options: WithScope, WithListen, WithAdvertise, WithMaster,
// WithCycle, WithBackoff, WithNodeID, WithClock,
// WithToken, WithInsecure, WithLogger, WithTransport, WithConfig.
func NewSlave(opts ...Option) (*Slave, error) {
	o := build(opts)
	if err := o.validate("slave", true); err != nil {
		return nil, err
	}
	s := &Slave{o: o, id: o.nodeID, changed: make(chan struct{}, 1)}
	if s.id == "" {
		s.id = "slave-" + uuid.NewString()
	}
	ln, err := o.transport.Listen(o.listen, s)
	if err != nil {
		return nil, fmt.Errorf("ringcoordinator: slave: %w", err)
	}
	s.ln = ln
	s.o.advertise = advertiseAddr(s.o.advertise, ln.Addr())
	s.o.log = o.log.With("role", "slave", "slave", s.id, "region", o.region, "cluster", o.cluster)
	return s, nil
}

// advertiseAddr returns the address to advertise: bound if none is
// configured, with bound's port if the configured one is 0.
func advertiseAddr(configured, bound string) string {
	if configured == "" {
		return bound
	}
	host, port, err := net.SplitHostPort(configured)
	if err != nil || port != "0" {
		return configured
	}
	if _, bport, err := net.SplitHostPort(bound); err == nil {
		return net.JoinHostPort(host, bport)
	}
	return configured
}

// Addr returns the slave's bound address.
func (s *Slave) Addr() string { return s.ln.Addr() }

// AdvertisedAddr returns the address orchestrators are given for the slave.
func (s *Slave) AdvertisedAddr() string { return s.o.advertise }

// Close releases the slave's address when Run will not be called (or
// stops serving orchestrators, as the end of Run's context does).
func (s *Slave) Close() error { return s.ln.Close() }

// ID returns the slave's id.
func (s *Slave) ID() string { return s.id }

// Connected reports whether the slave is registered with its master now.
func (s *Slave) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connected
}

// Run serves orchestrators and keeps the slave registered with its master
// until ctx ends; it then closes every connection and returns nil (or the
// error that stopped the listener). A Slave runs once.
func (s *Slave) Run(ctx context.Context) error {
	err := errStopped
	s.run.Do(func() { err = s.serve(ctx) })
	return err
}

func (s *Slave) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		err := s.ln.Serve(ctx)
		cancel()
		served <- err
	}()
	s.o.log.Info("ringcoordinator: slave serving", "addr", s.Addr(), "advertised", s.o.advertise, "master", s.o.master)
	s.registerLoop(ctx)
	err := <-served
	s.o.log.Info("ringcoordinator: slave stopped", "addr", s.Addr())
	return err
}

// registerLoop keeps the slave registered with its master until ctx ends.
// A lost master is reported and retried with backoff; the slices already
// received stay in force until their minutes end.
func (s *Slave) registerLoop(ctx context.Context) {
	b := backoff{min: s.o.minBackoff, max: s.o.maxBackoff}
	for ctx.Err() == nil {
		accepted, err := s.registerOnce(ctx)
		s.mu.Lock()
		s.connected = false
		s.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if accepted {
			b.reset()
		}
		d := b.next()
		s.o.log.Warn("ringcoordinator: slave not registered with its master; retrying", "master", s.o.master, "err", err, "retry_in", d)
		if !wait.Sleep(ctx, d) {
			return
		}
	}
}

// registerOnce registers and receives slices until the stream ends. It
// reports whether the master accepted the registration.
func (s *Slave) registerOnce(ctx context.Context) (accepted bool, err error) {
	conn, err := s.o.transport.Dial(ctx, s.o.master)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	rctx, cancel := context.WithCancel(ctx)
	var reporter sync.WaitGroup
	defer func() { cancel(); reporter.Wait() }() // before the connection closes
	nodes := s.nodeCount()
	req := encode(msgRegister, registerMsg{scopeMsg: scopeOf(&s.o), SlaveID: s.id, Addr: s.o.advertise, Nodes: nodes})
	err = conn.RequestStream(ctx, req, func(b []byte) error {
		typ, err := decode(b, "", nil)
		if err != nil {
			return err
		}
		switch typ {
		case msgRegistered:
			var a acceptedMsg
			if _, err := decode(b, msgRegistered, &a); err != nil {
				return err
			}
			s.mu.Lock()
			s.connected, s.masterID = true, a.ID
			s.mu.Unlock()
			s.o.log.Info("ringcoordinator: slave registered with its master", "master", s.o.master, "master_id", a.ID, "orchestrators", nodes)
			if !accepted {
				accepted = true
				reporter.Add(1)
				go func() { defer reporter.Done(); s.reportNodes(rctx, conn, nodes) }()
			}
			return nil
		case msgSlice:
			var m rangeMsg
			if _, err := decode(b, msgSlice, &m); err != nil {
				return err
			}
			return s.onSlice(m)
		default:
			return fmt.Errorf("%w: unexpected %q message from the master", ErrBadMessage, typ)
		}
	})
	if err == nil {
		err = errors.New("the master ended the stream")
	}
	return accepted, err
}

// nodeCount returns the number of orchestrators streaming from the slave.
func (s *Slave) nodeCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.orchs)
}

// nodesChanged wakes reportNodes.
func (s *Slave) nodesChanged() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// reportNodes tells the master, over conn, the number of orchestrators
// streaming from the slave whenever it differs from the one the master
// has (reported, given at registration), until ctx ends. The master
// gives slices only to slaves that have orchestrators.
func (s *Slave) reportNodes(ctx context.Context, conn Conn, reported int) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		}
		n := s.nodeCount()
		if n == reported {
			continue
		}
		_, err := conn.RequestResponse(ctx, encode(msgNodes, nodesMsg{scopeMsg: scopeOf(&s.o), SlaveID: s.id, Nodes: n}))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.o.log.Warn("ringcoordinator: slave could not tell its master its orchestrators; retrying", "orchestrators", n, "err", err)
			if !wait.Sleep(ctx, s.o.minBackoff) {
				return
			}
			s.nodesChanged()
			continue
		}
		reported = n
		s.o.log.Debug("ringcoordinator: slave told its master its orchestrators", "orchestrators", n)
	}
}

// onSlice records the slice of a minute and splits it among the
// orchestrators connected now (if any: else the first to connect gets it).
func (s *Slave) onSlice(m rangeMsg) error {
	now := s.o.now()
	if err := m.validateSlice(now, s.o.cycle); err != nil {
		s.o.log.Warn("ringcoordinator: slave refused a slice", "from", m.From, "err", err)
		return err
	}
	if err := checkScope(scopeOf(&s.o), m.scopeMsg, "master "+m.From); err != nil {
		return err
	}
	st := &sliceState{msg: m, minute: fromMS(m.ValidForMinute), until: fromMS(m.ValidUntil)}
	if !now.Before(st.until) {
		s.o.log.Warn("ringcoordinator: slave ignored a slice of a minute already over", "valid_for_minute", st.minute)
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(now)
	for _, x := range s.slices {
		if x.minute.Equal(st.minute) {
			// One slice per minute: a second one (a restarted master
			// publishing a minute again) could overlap other slaves'.
			s.o.log.Warn("ringcoordinator: slave ignored a second slice for a minute", "valid_for_minute", st.minute)
			return nil
		}
	}
	s.slices = append(s.slices, st)
	sort.Slice(s.slices, func(i, j int) bool { return s.slices[i].minute.Before(s.slices[j].minute) })
	s.o.log.Info("ringcoordinator: slave received its slice", "valid_for_minute", st.minute,
		"min", m.Min, "max", m.Max, "part", m.Index+1, "of", m.Of, "orchestrators", len(s.orchs))
	for _, e := range s.orchs {
		if e.holdsMinute(st.minute) {
			s.refuseLocked(st, e.node)
			return nil
		}
	}
	if len(s.orchs) > 0 {
		s.splitLocked(st)
	}
	return nil
}

// refuseLocked fixes st unsplit: node holds a range of its minute from
// another split (a slave or master that restarted), which a part of st
// could overlap. Nobody scans st from this slave.
func (s *Slave) refuseLocked(st *sliceState, node string) {
	st.split, st.refused = true, true
	s.o.log.Warn("ringcoordinator: slave refused to split a slice: a node holds a range of its minute from another split",
		"valid_for_minute", st.minute, "node", node)
}

// splitLocked fixes the split of st among the orchestrators connected now
// and pushes each its part.
func (s *Slave) splitLocked(st *sliceState) {
	orchs := s.orchs
	if span := Span(st.msg.tokenRange()); uint64(len(orchs)-1) > span {
		orchs = orchs[:span+1] // more orchestrators than tokens: one each
	}
	parts, err := Split(st.msg.tokenRange(), len(orchs))
	if err != nil { // cannot happen after the check above
		s.o.log.Error("ringcoordinator: slave: split", "err", err)
		return
	}
	st.split = true
	scope := scopeOf(&s.o)
	for i, e := range orchs {
		st.nodes = append(st.nodes, nodePart{node: e.node, r: parts[i]})
		e.out.push(encode(msgRange, rangeMsg{
			scopeMsg: scope, From: s.id,
			ValidForMinute: st.msg.ValidForMinute, ValidUntil: st.msg.ValidUntil,
			Min: parts[i].Min, Max: parts[i].Max, Index: i, Of: len(parts),
		}))
	}
}

// prune forgets the minutes that are over.
func (s *Slave) prune(now time.Time) {
	kept := s.slices[:0]
	for _, st := range s.slices {
		if now.Before(st.until) {
			kept = append(kept, st)
		}
	}
	clear(s.slices[len(kept):])
	s.slices = kept
}

// RequestStream serves an orchestrator's stream: it pushes its sub-range
// of every minute whose split includes it. It implements Handler.
func (s *Slave) RequestStream(ctx context.Context, req []byte, send func([]byte) error) error {
	var sub subscribeMsg
	if _, err := decode(req, msgSubscribe, &sub); err != nil {
		return err
	}
	if err := checkScope(scopeOf(&s.o), sub.scopeMsg, "orchestrator "+sub.NodeID); err != nil {
		s.o.log.Warn("ringcoordinator: slave refused an orchestrator", "node", sub.NodeID, "err", err)
		return err
	}
	if sub.NodeID == "" {
		return fmt.Errorf("%w: an orchestrator subscribes with a node id", ErrBadMessage)
	}
	e := &orchEntry{node: sub.NodeID, out: newQueue()}
	for _, h := range sub.Holds[:min(len(sub.Holds), maxHolds)] {
		e.holds = append(e.holds, fromMS(h))
	}
	if err := send(encode(msgSubscribed, acceptedMsg{ID: s.id})); err != nil {
		return nil
	}
	s.addOrch(e)
	s.o.log.Info("ringcoordinator: orchestrator connected", "node", e.node)
	defer func() {
		s.removeOrch(e)
		s.o.log.Info("ringcoordinator: orchestrator disconnected", "node", e.node)
	}()
	err := e.out.pump(ctx, nil, send)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// addOrch registers e, replacing an entry of the same node (its stream
// re-opened), and gives it its part of the minutes not over: the part it
// had already (a node that re-connects), or the whole of a pending slice.
func (s *Slave) addOrch(e *orchEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	replaced := false
	for i, x := range s.orchs {
		if x.node == e.node {
			x.out.close(errors.New("replaced by a new stream of the same node"))
			s.orchs[i], replaced = e, true
			break
		}
	}
	if !replaced {
		s.orchs = append(s.orchs, e)
		s.nodesChanged()
	}
	now := s.o.now()
	s.prune(now)
	scope := scopeOf(&s.o)
	for _, st := range s.slices {
		if !st.split {
			if e.holdsMinute(st.minute) {
				s.refuseLocked(st, e.node)
			} else {
				s.splitLocked(st)
			}
			continue
		}
		for i, p := range st.nodes {
			if p.node == e.node {
				e.out.push(encode(msgRange, rangeMsg{
					scopeMsg: scope, From: s.id,
					ValidForMinute: st.msg.ValidForMinute, ValidUntil: st.msg.ValidUntil,
					Min: p.r.Min, Max: p.r.Max, Index: i, Of: len(st.nodes),
				}))
			}
		}
	}
}

// removeOrch forgets e. Its parts of the minutes already split stay
// unassigned until those minutes end.
func (s *Slave) removeOrch(e *orchEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.orchs {
		if x == e {
			s.orchs = append(s.orchs[:i], s.orchs[i+1:]...)
			s.nodesChanged()
			return
		}
	}
}

// RequestResponse answers status queries. It implements Handler.
func (s *Slave) RequestResponse(_ context.Context, req []byte) ([]byte, error) {
	typ, err := decode(req, "", nil)
	if err != nil {
		return nil, err
	}
	if typ != msgStatus {
		return nil, fmt.Errorf("%w: slave does not answer %q requests", ErrBadMessage, typ)
	}
	return encode(msgAssigned, s.Assignment(s.o.now())), nil
}

// Assignment returns the slave's view at now: its slices of the minutes
// not over and their split among its orchestrators.
func (s *Slave) Assignment(now time.Time) Assignment {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := Assignment{Region: s.o.region, Cluster: s.o.cluster, Role: "slave", ID: s.id, Addr: s.o.advertise, At: now, Connected: s.connected, Minutes: []MinuteAssignment{}}
	live := make(map[string]bool, len(s.orchs))
	for _, e := range s.orchs {
		live[e.node] = true
	}
	for _, st := range s.slices {
		if !now.Before(st.until) {
			continue
		}
		sa := SliceAssignment{Index: st.msg.Index, Of: st.msg.Of, Range: rangeOf(st.msg.tokenRange()), SlaveID: s.id, Addr: s.o.advertise,
			Pending: !st.split, Refused: st.refused}
		for _, p := range st.nodes {
			sa.Nodes = append(sa.Nodes, NodeAssignment{NodeID: p.node, Range: rangeOf(p.r), Connected: live[p.node]})
		}
		a.Minutes = append(a.Minutes, MinuteAssignment{ValidForMinute: st.minute, ValidUntil: st.until, Slices: []SliceAssignment{sa}})
	}
	return a
}
