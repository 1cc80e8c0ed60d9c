package ringcoordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Transport carries the coordinator's two interaction models, RSocket's
// request-response and request-stream, between a requester (Conn) and a
// responder (Handler behind a Listener). RSocketTransport is the product's;
// NewMemoryTransport connects the nodes of one process without sockets. The
// roles depend on nothing else of the transport, so the ring logic is tested
// without sockets.
type Transport interface {
	// Listen binds addr ("host:port"; port 0 picks a free one) and returns
	// a listener that will pass requests to h once served.
	Listen(addr string, h Handler) (Listener, error)
	// Dial opens a connection to addr. ctx bounds the dial only.
	Dial(ctx context.Context, addr string) (Conn, error)
}

// Listener is a bound, not yet serving, responder.
type Listener interface {
	// Addr is the bound address ("host:port").
	Addr() string
	// Serve answers requests until ctx ends or Close is called, then
	// closes every connection, waits for the handlers it started to
	// return, and returns nil (or the error that stopped it).
	Serve(ctx context.Context) error
	// Close stops serving, or releases the address of a listener never
	// served.
	Close() error
}

// Handler answers the requests of a listener's connections.
type Handler interface {
	// RequestResponse answers one request. ctx ends when the connection
	// closes. An error is sent to the requester as its message.
	RequestResponse(ctx context.Context, req []byte) ([]byte, error)
	// RequestStream serves one stream: it sends items with send (safe for
	// concurrent use; it fails once the stream is gone) and returns when
	// the stream is over: nil completes it, an error ends it with that
	// error's message. ctx ends when the requester cancels the stream, the
	// connection drops or the listener stops; the handler must then return.
	RequestStream(ctx context.Context, req []byte, send func([]byte) error) error
}

// Conn is a requester's connection.
type Conn interface {
	// RequestResponse sends req and waits for the answer. An error of the
	// responder is returned as a *PeerError.
	RequestResponse(ctx context.Context, req []byte) ([]byte, error)
	// RequestStream opens a stream and calls recv with each item (a copy
	// the callee may keep), in order, from the calling goroutine. It
	// returns when the stream ends: nil when the responder completed it, a
	// *PeerError when the responder ended it with an error, the error of
	// recv (the stream is then cancelled), ctx.Err() when ctx ends (the
	// stream is cancelled), or an error when the connection is lost.
	RequestStream(ctx context.Context, req []byte, recv func([]byte) error) error
	// Close closes the connection; its streams end.
	Close() error
}

// connID identifies an accepted connection; the transports put one in the
// context they give the handler for each connection's requests.
type connID struct{ ctx context.Context } // the connection's context

type connKey struct{}

// withConnID returns a child of ctx carrying a fresh connection identity;
// call it on the connection's own context.
func withConnID(ctx context.Context) context.Context {
	id := &connID{}
	ctx = context.WithValue(ctx, connKey{}, id)
	id.ctx = ctx
	return ctx
}

// connIDOf returns the connection identity in ctx (nil if none).
func connIDOf(ctx context.Context) *connID {
	id, _ := ctx.Value(connKey{}).(*connID)
	return id
}

// errConnClosed reports a connection that closed under a request.
var errConnClosed = errors.New("ringcoordinator: connection closed")

// queue is an unbounded FIFO of byte slices with a terminal error, so that
// a sender never blocks on a slow receiver (the coordinator's streams carry
// a few small messages a minute).
type queue struct {
	mu     sync.Mutex
	items  [][]byte
	done   bool
	err    error
	signal chan struct{} // capacity 1: something changed
}

func newQueue() *queue { return &queue{signal: make(chan struct{}, 1)} }

// push appends b; false once the queue is closed.
func (q *queue) push(b []byte) bool {
	q.mu.Lock()
	if q.done {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, b)
	q.mu.Unlock()
	q.notify()
	return true
}

// close ends the queue with err (nil: completed) after its items; the
// first call wins.
func (q *queue) close(err error) {
	q.mu.Lock()
	if !q.done {
		q.done, q.err = true, err
	}
	q.mu.Unlock()
	q.notify()
}

func (q *queue) notify() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// drain takes the items queued so far, and reports whether the queue is
// closed (with its error) once they are consumed.
func (q *queue) drain() (items [][]byte, done bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items, q.items = q.items, nil
	return items, q.done, q.err
}

// pump calls recv with each item of q until q is closed (returning its
// error), recv fails (returning its error), ctx ends or lost is closed.
func (q *queue) pump(ctx context.Context, lost <-chan struct{}, recv func([]byte) error) error {
	for {
		items, done, err := q.drain()
		for _, b := range items {
			if rerr := recv(b); rerr != nil {
				return rerr
			}
		}
		if done {
			return err
		}
		select {
		case <-q.signal:
		case <-ctx.Done():
			return ctx.Err()
		case <-lost:
			// deliver what arrived before the loss, then report it
			items, done, err := q.drain()
			for _, b := range items {
				if rerr := recv(b); rerr != nil {
					return rerr
				}
			}
			if done {
				return err
			}
			return errConnClosed
		}
	}
}

// group runs goroutines and waits for them; once closed it starts none.
type group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f in a goroutine unless the group is closed.
func (g *group) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// closeAndWait stops new goroutines and waits for the running ones.
func (g *group) closeAndWait() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}

// MemoryTransport connects listeners and connections of one process
// through function calls and queues, with the semantics of the RSocket
// transport (copies of every payload, streams that end when either side
// closes). Addresses are names ("mem-1", or the name given to Listen).
// It is for tests and for embedding master, slaves and connectors in one
// process without sockets.
type MemoryTransport struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	next      atomic.Int64
}

// NewMemoryTransport returns an empty in-process transport.
func NewMemoryTransport() *MemoryTransport {
	return &MemoryTransport{listeners: make(map[string]*memListener)}
}

// Listen registers h under addr ("" or a port-0 address picks a fresh
// name). Requests are answered once Serve runs.
func (t *MemoryTransport) Listen(addr string, h Handler) (Listener, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if addr == "" || hasPortZero(addr) {
		addr = fmt.Sprintf("mem-%d", t.next.Add(1))
	}
	if _, ok := t.listeners[addr]; ok {
		return nil, fmt.Errorf("ringcoordinator: memory transport: address %s in use", addr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &memListener{t: t, addr: addr, h: h, ctx: ctx, cancel: cancel, serving: make(chan struct{})}
	t.listeners[addr] = l
	return l, nil
}

// Dial connects to the listener at addr; it fails if none is bound there.
func (t *MemoryTransport) Dial(ctx context.Context, addr string) (Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	l := t.listeners[addr]
	t.mu.Unlock()
	if l == nil || l.ctx.Err() != nil {
		return nil, fmt.Errorf("ringcoordinator: memory transport: dial %s: connection refused", addr)
	}
	cctx, cancel := context.WithCancel(l.ctx)
	cctx = withConnID(cctx)
	return &memConn{l: l, ctx: cctx, cancel: cancel}, nil
}

func hasPortZero(addr string) bool {
	return len(addr) >= 2 && addr[len(addr)-2:] == ":0"
}

type memListener struct {
	t       *MemoryTransport
	addr    string
	h       Handler
	ctx     context.Context // ends when the listener stops: every connection ends
	cancel  context.CancelFunc
	g       group
	once    sync.Once
	serving chan struct{} // closed when Serve starts
}

func (l *memListener) Addr() string { return l.addr }

func (l *memListener) Serve(ctx context.Context) error {
	select {
	case <-l.serving:
		return errors.New("ringcoordinator: memory transport: Serve called twice")
	default:
	}
	close(l.serving)
	select {
	case <-ctx.Done():
	case <-l.ctx.Done():
	}
	l.stop()
	return nil
}

func (l *memListener) Close() error {
	l.stop()
	return nil
}

func (l *memListener) stop() {
	l.once.Do(func() {
		l.cancel()
		l.t.mu.Lock()
		if l.t.listeners[l.addr] == l {
			delete(l.t.listeners, l.addr)
		}
		l.t.mu.Unlock()
	})
	l.g.closeAndWait()
}

// waitServing waits until Serve runs (requests queue up until then, as
// TCP connections do in a listen backlog).
func (l *memListener) waitServing(ctx, conn context.Context) error {
	select {
	case <-l.serving:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-conn.Done():
		return errConnClosed
	}
}

type memConn struct {
	l      *memListener
	ctx    context.Context // ends when the connection closes
	cancel context.CancelFunc
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func (c *memConn) RequestResponse(ctx context.Context, req []byte) ([]byte, error) {
	if err := c.l.waitServing(ctx, c.ctx); err != nil {
		return nil, err
	}
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	req = clone(req)
	if !c.l.g.Go(func() {
		b, err := c.l.h.RequestResponse(c.ctx, req)
		ch <- result{clone(b), err}
	}) {
		return nil, errConnClosed
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, peerErr(r.err.Error())
		}
		return r.b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, errConnClosed
	}
}

func (c *memConn) RequestStream(ctx context.Context, req []byte, recv func([]byte) error) error {
	if err := c.l.waitServing(ctx, c.ctx); err != nil {
		return err
	}
	q := newQueue()
	sctx, cancel := context.WithCancel(c.ctx)
	defer cancel() // cancels the responder's stream whatever ends it here
	req = clone(req)
	if !c.l.g.Go(func() {
		defer cancel()
		var mu sync.Mutex
		send := func(b []byte) error {
			mu.Lock()
			defer mu.Unlock()
			if err := sctx.Err(); err != nil {
				return fmt.Errorf("ringcoordinator: stream closed: %w", err)
			}
			q.push(clone(b))
			return nil
		}
		err := c.l.h.RequestStream(sctx, req, send)
		switch {
		case c.ctx.Err() != nil:
			q.close(errConnClosed)
		case err != nil:
			q.close(peerErr(err.Error()))
		default:
			q.close(nil)
		}
	}) {
		return errConnClosed
	}
	lost := c.ctx.Done()
	return q.pump(ctx, lost, recv)
}

func (c *memConn) Close() error {
	c.cancel()
	return nil
}
