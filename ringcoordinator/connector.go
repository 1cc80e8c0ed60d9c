package ringcoordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/wait"
)

// RangeSource is the recovery engine's question "which token range may this
// node scan now?". It has the method set of recovery.RangeSource, which it
// satisfies (recovery imports this package for Token, so the interface is
// repeated here rather than imported): pass Connector.Ranges() to
// recovery.WithRanges.
type RangeSource interface {
	// Range returns the node's range at now and until when it may be
	// used; ok is false when the node holds no range valid at now.
	Range(now time.Time) (r eventstore.TokenRange, validUntil time.Time, ok bool)
}

// Connector is the orchestrator side of the ring coordinator: it makes an
// orchestrator a retry node. It asks the master (request-response) which
// slave to use, streams its sub-ranges from that slave (request-stream),
// and hands each out from the start of its minute until a guard interval
// before its end. When the stream is lost it keeps the range of the current
// minute, drops those of minutes not started, and asks the master again with
// backoff.
type Connector struct {
	o   options
	id  string
	run sync.Once

	mu        sync.Mutex
	holdings  []*holding // minutes not over, ascending
	history   []Holding
	connected bool
	slaveID   string
	slaveAddr string
}

type holding struct {
	minute, until time.Time
	r             eventstore.TokenRange
	rec           int // index in history
}

// Holding is the connector's record of one range it received: the proof,
// from the node's own records, of what it held when.
type Holding struct {
	// ValidForMinute and ValidUntil bound the minute the range is for.
	ValidForMinute time.Time `json:"valid_for_minute"`
	ValidUntil     time.Time `json:"valid_until"`
	// ActiveUntil is ValidUntil less the guard: the connector hands the
	// range out from ValidForMinute (or ReceivedAt, if later) until then.
	ActiveUntil time.Time `json:"active_until"`
	Range       Range     `json:"range"`
	// Index and Of place it among its slave's split of the minute.
	Index int `json:"index"`
	Of    int `json:"of"`
	// SlaveID is the slave it came from.
	SlaveID    string    `json:"slave_id"`
	ReceivedAt time.Time `json:"received_at"`
	// Dropped: the stream from its slave was lost before its minute
	// started, so it was never handed out.
	Dropped   bool      `json:"dropped,omitempty"`
	DroppedAt time.Time `json:"dropped_at,omitempty"`
}

// ActiveFrom returns when the connector began handing the range out (if it
// was not dropped): the start of its minute, or its receipt if later.
func (h Holding) ActiveFrom() time.Time {
	if h.ReceivedAt.After(h.ValidForMinute) {
		return h.ReceivedAt
	}
	return h.ValidForMinute
}

// maxHistory bounds the records a connector keeps.
const maxHistory = 4096

// NewConnector returns a connector to the master given by WithMaster.
// Options: WithScope, WithMaster, WithGuard, WithCycle (the master's: it
// also derives the default guard), WithBackoff, WithNodeID, WithClock, WithLogger,
// WithToken, WithInsecure, WithTransport, WithConfig.
func NewConnector(opts ...Option) (*Connector, error) {
	o := build(opts)
	if err := o.validate("connector", true); err != nil {
		return nil, err
	}
	c := &Connector{o: o, id: o.nodeID}
	if c.id == "" {
		c.id = "node-" + uuid.NewString()
	}
	c.o.log = o.log.With("role", "connector", "node", c.id, "region", o.region, "cluster", o.cluster)
	return c, nil
}

// ID returns the node id the connector subscribes with.
func (c *Connector) ID() string { return c.id }

// Ranges returns the connector as the recovery engine's range source:
// recovery.WithRanges(c.Ranges()).
func (c *Connector) Ranges() RangeSource { return c }

// Range returns the range the node may scan at now and until when (the end
// of its minute less the guard); ok is false when it holds none valid at
// now, and the engine then does not scan.
func (c *Connector) Range(now time.Time) (eventstore.TokenRange, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.holdings {
		end := h.until.Add(-c.o.guard)
		if !now.Before(h.minute) && now.Before(end) {
			return h.r, end, true
		}
	}
	return eventstore.TokenRange{}, time.Time{}, false
}

// History returns the records of every range received (the last 4096).
func (c *Connector) History() []Holding {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Holding(nil), c.history...)
}

// Connected reports whether the connector's stream from a slave is open
// now, and names the slave.
func (c *Connector) Connected() (ok bool, slaveID, slaveAddr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected, c.slaveID, c.slaveAddr
}

// Run asks the master for a slave and streams ranges from it, again and
// again with backoff whenever that fails, until ctx ends; then it returns
// nil. The range of the current minute outlives Run: the engine may finish
// the minute with it. A Connector runs once.
func (c *Connector) Run(ctx context.Context) error {
	err := errStopped
	c.run.Do(func() {
		err = nil
		c.loop(ctx)
	})
	return err
}

func (c *Connector) loop(ctx context.Context) {
	b := backoff{min: c.o.minBackoff, max: c.o.maxBackoff}
	for ctx.Err() == nil {
		got, err := c.session(ctx)
		c.lost()
		if ctx.Err() != nil {
			return
		}
		if got {
			b.reset()
		}
		d := b.next()
		c.o.log.Warn("ringcoordinator: connector has no slave stream; asking the master again", "master", c.o.master, "err", err, "retry_in", d)
		if !wait.Sleep(ctx, d) {
			return
		}
	}
}

// session asks the master for a slave and streams from it until the
// stream ends. got reports whether a range arrived.
func (c *Connector) session(ctx context.Context) (got bool, err error) {
	slaveID, addr, err := c.askMaster(ctx)
	if err != nil {
		return false, err
	}
	conn, err := c.o.transport.Dial(ctx, addr)
	if err != nil {
		return false, fmt.Errorf("slave %s at %s: %w", slaveID, addr, err)
	}
	defer conn.Close()
	req := encode(msgSubscribe, subscribeMsg{scopeMsg: scopeOf(&c.o), NodeID: c.id, Holds: c.held()})
	err = conn.RequestStream(ctx, req, func(b []byte) error {
		typ, err := decode(b, "", nil)
		if err != nil {
			return err
		}
		switch typ {
		case msgSubscribed:
			c.mu.Lock()
			c.connected, c.slaveID, c.slaveAddr = true, slaveID, addr
			c.mu.Unlock()
			c.o.log.Info("ringcoordinator: connector streaming from its slave", "slave", slaveID, "addr", addr)
			return nil
		case msgRange:
			var m rangeMsg
			if _, err := decode(b, msgRange, &m); err != nil {
				return err
			}
			ok, err := c.onRange(m, slaveID)
			got = got || ok
			return err
		default:
			return fmt.Errorf("%w: unexpected %q message from the slave", ErrBadMessage, typ)
		}
	})
	if err == nil {
		err = errors.New("the slave ended the stream")
	}
	return got, fmt.Errorf("slave %s at %s: %w", slaveID, addr, err)
}

// askMaster asks the master which slave to stream from.
func (c *Connector) askMaster(ctx context.Context) (slaveID, addr string, err error) {
	conn, err := c.o.transport.Dial(ctx, c.o.master)
	if err != nil {
		return "", "", fmt.Errorf("master %s: %w", c.o.master, err)
	}
	defer conn.Close()
	resp, err := conn.RequestResponse(ctx, encode(msgAssign, assignMsg{scopeMsg: scopeOf(&c.o), NodeID: c.id}))
	if err != nil {
		return "", "", fmt.Errorf("master %s: %w", c.o.master, err)
	}
	var a slaveAddrMsg
	if _, err := decode(resp, msgSlaveAddr, &a); err != nil {
		return "", "", fmt.Errorf("master %s: %w", c.o.master, err)
	}
	if a.Addr == "" {
		return "", "", fmt.Errorf("master %s: %w: no slave address", c.o.master, ErrBadMessage)
	}
	return a.SlaveID, a.Addr, nil
}

// onRange records a range received from slave; ok reports it was taken.
func (c *Connector) onRange(m rangeMsg, slave string) (ok bool, err error) {
	now := c.o.now()
	if err := m.validate(now, c.o.cycle); err != nil {
		c.o.log.Warn("ringcoordinator: connector refused a range", "slave", slave, "err", err)
		return false, err
	}
	if err := checkScope(scopeOf(&c.o), m.scopeMsg, "slave "+m.From); err != nil {
		return false, err
	}
	minute, until := fromMS(m.ValidForMinute), fromMS(m.ValidUntil)
	active := until.Add(-c.o.guard)
	if !now.Before(active) {
		c.o.log.Warn("ringcoordinator: connector ignored a range received too late", "valid_for_minute", minute, "now", now)
		return false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prune(now)
	for _, h := range c.holdings {
		if h.minute.Equal(minute) {
			if h.r == m.tokenRange() {
				return true, nil // the same range again (a re-opened stream)
			}
			// One range per minute: another one would come from another
			// split, which may overlap another node's range.
			c.o.log.Warn("ringcoordinator: connector ignored a second range for a minute", "valid_for_minute", minute, "from", slave)
			return false, nil
		}
	}
	if len(c.history) >= maxHistory {
		removed := len(c.history) - maxHistory/2
		c.history = append(c.history[:0:0], c.history[removed:]...)
		for _, h := range c.holdings {
			h.rec = max(h.rec-removed, -1)
		}
	}
	c.history = append(c.history, Holding{
		ValidForMinute: minute, ValidUntil: until, ActiveUntil: active, Range: rangeOf(m.tokenRange()),
		Index: m.Index, Of: m.Of, SlaveID: slave, ReceivedAt: now,
	})
	c.holdings = append(c.holdings, &holding{minute: minute, until: until, r: m.tokenRange(), rec: len(c.history) - 1})
	sort.Slice(c.holdings, func(i, j int) bool { return c.holdings[i].minute.Before(c.holdings[j].minute) })
	c.o.log.Info("ringcoordinator: connector received its range", "valid_for_minute", minute,
		"min", m.Min, "max", m.Max, "part", m.Index+1, "of", m.Of, "slave", slave)
	return true, nil
}

// held returns the minutes the connector holds a range of (unix ms).
func (c *Connector) held() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prune(c.o.now())
	var out []int64
	for _, h := range c.holdings {
		out = append(out, ms(h.minute))
	}
	return out
}

// lost handles the end of a slave stream: the ranges of minutes not
// started are dropped (their slave may be gone and nobody can tell whether
// the next split will reuse them); the current one is kept to its end.
func (c *Connector) lost() {
	now := c.o.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.connected = false
	c.prune(now)
	kept := c.holdings[:0]
	for _, h := range c.holdings {
		if now.Before(h.minute) {
			if h.rec >= 0 && h.rec < len(c.history) {
				c.history[h.rec].Dropped, c.history[h.rec].DroppedAt = true, now
			}
			continue
		}
		kept = append(kept, h)
	}
	clear(c.holdings[len(kept):])
	c.holdings = kept
}

// prune forgets the minutes that are over.
func (c *Connector) prune(now time.Time) {
	kept := c.holdings[:0]
	for _, h := range c.holdings {
		if now.Before(h.until) {
			kept = append(kept, h)
		}
	}
	clear(c.holdings[len(kept):])
	c.holdings = kept
}
