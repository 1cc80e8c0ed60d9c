package ringcoordinator

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// What a peer that has not authenticated may cost a listener (RSocketTransport's
// defaults; see its fields).
const (
	// DefaultMaxSetupSize bounds the first frame of a connection, its
	// SETUP, which carries the token: a few hundred bytes in practice.
	DefaultMaxSetupSize = 4 << 10
	// DefaultSetupTimeout bounds the time from accept to a whole SETUP.
	DefaultSetupTimeout = 10 * time.Second
	// DefaultMaxUnauthenticated bounds the connections accepted and not
	// yet authenticated at once; more are closed at accept.
	DefaultMaxUnauthenticated = 64
)

// errSetupTooLarge ends a connection whose first frame is over the setup
// limit: nothing of it is read past its length.
var errSetupTooLarge = errors.New("ringcoordinator: setup frame over the limit before authentication")

// preAuth is the one guard of what an unauthenticated peer costs a
// listener: it caps the connections that have not authenticated, the
// size of their first frame (read from its length prefix before any of
// the frame is), and the time they take to send it. A connection stops
// counting against the cap once the acceptor authenticates it (by its
// remote address) or it closes.
type preAuth struct {
	maxSetup int
	timeout  time.Duration
	maxConns int
	log      *slog.Logger

	mu      sync.Mutex
	pending map[string]*preAuthConn // remote address → unauthenticated
}

func newPreAuth(maxSetup int, timeout time.Duration, maxConns int, log *slog.Logger) *preAuth {
	if maxSetup <= 0 {
		maxSetup = DefaultMaxSetupSize
	}
	if timeout <= 0 {
		timeout = DefaultSetupTimeout
	}
	if maxConns <= 0 {
		maxConns = DefaultMaxUnauthenticated
	}
	return &preAuth{maxSetup: maxSetup, timeout: timeout, maxConns: maxConns, log: log, pending: map[string]*preAuthConn{}}
}

// listener wraps ln: its connections pass the guard.
func (g *preAuth) listener(ln net.Listener) net.Listener { return &preAuthListener{Listener: ln, g: g} }

// authenticated lifts the guard from the connection of remote address addr.
func (g *preAuth) authenticated(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pending, addr)
}

// admit counts c against the cap, or reports false when it is full.
func (g *preAuth) admit(c *preAuthConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) >= g.maxConns {
		return false
	}
	g.pending[c.RemoteAddr().String()] = c
	return true
}

func (g *preAuth) release(c *preAuthConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending[c.RemoteAddr().String()] == c {
		delete(g.pending, c.RemoteAddr().String())
	}
}

type preAuthListener struct {
	net.Listener
	g *preAuth
}

// Accept returns the next connection the guard admits; one over the cap
// is closed at once (and logged), and Accept goes on.
func (l *preAuthListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &preAuthConn{Conn: nc, g: l.g}
		if !l.g.admit(c) {
			l.g.log.Warn("ringcoordinator: refused a connection: too many connections have not authenticated",
				"addr", l.Addr().String(), "peer", nc.RemoteAddr().String(), "max", l.g.maxConns)
			_ = nc.Close()
			continue
		}
		_ = nc.SetReadDeadline(time.Now().Add(l.g.timeout))
		return c, nil
	}
}

// preAuthConn checks its first frame's length prefix before handing any
// byte of it on. The read deadline set at accept bounds the SETUP; the
// RSocket transport sets its own keepalive deadline after each frame.
type preAuthConn struct {
	net.Conn
	g *preAuth

	head    []byte // the first frame's length prefix, still to hand on
	checked bool   // the prefix was read and is within the limit
	once    sync.Once
}

func (c *preAuthConn) Read(p []byte) (int, error) {
	if !c.checked {
		var h [3]byte
		if _, err := io.ReadFull(c.Conn, h[:]); err != nil {
			return 0, err
		}
		if n := int(h[0])<<16 | int(h[1])<<8 | int(h[2]); n > c.g.maxSetup {
			c.g.log.Warn("ringcoordinator: refused a connection at setup: its first frame is over the limit",
				"peer", c.RemoteAddr().String(), "size", n, "max", c.g.maxSetup)
			_ = c.Close()
			return 0, errSetupTooLarge
		}
		c.head, c.checked = h[:], true
	}
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *preAuthConn) Close() error {
	c.once.Do(func() { c.g.release(c) })
	return c.Conn.Close()
}
