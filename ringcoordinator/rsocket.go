package ringcoordinator

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	reactor "github.com/jjeffcaii/reactor-go"
	rflux "github.com/jjeffcaii/reactor-go/flux"
	"github.com/jjeffcaii/reactor-go/scheduler"
	"github.com/rsocket/rsocket-go"
	"github.com/rsocket/rsocket-go/core"
	"github.com/rsocket/rsocket-go/core/transport"
	"github.com/rsocket/rsocket-go/logger"
	"github.com/rsocket/rsocket-go/payload"
	"github.com/rsocket/rsocket-go/rx"
	"github.com/rsocket/rsocket-go/rx/flux"
	"github.com/rsocket/rsocket-go/rx/mono"
)

// Defaults of RSocketTransport.
const (
	DefaultKeepAlive         = 2 * time.Second
	DefaultKeepAliveLifetime = 10 * time.Second
	DefaultConnectTimeout    = 5 * time.Second
)

// RSocketTransport is the Transport over RSocket on TCP
// (github.com/rsocket/rsocket-go). The zero value uses the defaults.
//
// rsocket-go has no reconnect and recycles the buffers of the payloads it
// hands to callbacks: a connection that closes is never reopened here (the
// roles dial again with backoff), and every payload is copied before its
// callback returns.
type RSocketTransport struct {
	// KeepAlive is the client's keepalive period (DefaultKeepAlive).
	KeepAlive time.Duration
	// KeepAliveLifetime is how long a connection may go without a
	// keepalive acknowledgement before it is closed
	// (DefaultKeepAliveLifetime).
	KeepAliveLifetime time.Duration
	// ConnectTimeout bounds a dial (DefaultConnectTimeout; a dial's
	// context deadline applies as well).
	ConnectTimeout time.Duration
	// MaxSetupSize bounds, on a listener, the first frame of a connection
	// (its SETUP, which carries the token), read from its length prefix
	// before any byte of it (DefaultMaxSetupSize).
	MaxSetupSize int
	// SetupTimeout bounds, on a listener, the time from accept to a whole
	// SETUP (DefaultSetupTimeout).
	SetupTimeout time.Duration
	// MaxUnauthenticated bounds, on a listener, the connections accepted
	// and not yet authenticated at once; more are closed at accept
	// (DefaultMaxUnauthenticated).
	MaxUnauthenticated int

	// token (set by the roles from WithToken) is sent in the metadata of
	// every connection's setup frame, and required in the setup of every
	// accepted connection; "" sends none and accepts any.
	token string
	log   *slog.Logger
}

func (t RSocketTransport) withAuth(token string, log *slog.Logger) Transport {
	if token != "" {
		t.token = token
	}
	if t.log == nil {
		t.log = log
	}
	return t
}

func (t RSocketTransport) hasToken() bool { return t.token != "" }

// Listen binds addr on TCP.
func (t RSocketTransport) Listen(addr string, h Handler) (Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ringcoordinator: listen %s: %w", addr, err)
	}
	log := t.log
	if log == nil {
		log = slog.Default()
	}
	l := &rsListener{ln: ln, h: h, served: make(chan struct{}), log: log,
		guard: newPreAuth(t.MaxSetupSize, t.SetupTimeout, t.MaxUnauthenticated, log)}
	if t.token != "" {
		d := sha256.Sum256([]byte(t.token))
		l.digest = d[:]
	}
	return l, nil
}

// errSetupRefused is the refusal of a connection whose setup does not
// carry the token; it names no token.
var errSetupRefused = errors.New("ringcoordinator: connection refused: missing or wrong token")

// authorized reports whether a setup's metadata carries the listener's
// token (always, when it has none), comparing digests in constant time.
func (l *rsListener) authorized(setup payload.SetupPayload) bool {
	if l.digest == nil {
		return true
	}
	md, _ := setup.Metadata()
	d := sha256.Sum256(md)
	return subtle.ConstantTimeCompare(d[:], l.digest) == 1
}

type rsListener struct {
	ln     net.Listener
	digest []byte // sha256 of the token; nil: no token required
	guard  *preAuth
	log    *slog.Logger
	h      Handler
	g      group
	mu     sync.Mutex
	cancel context.CancelFunc // of the serving context, once Serve runs
	closed bool
	served chan struct{}
}

func (l *rsListener) Addr() string { return l.ln.Addr().String() }

func (l *rsListener) Close() error {
	l.mu.Lock()
	l.closed = true
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-l.served
		return nil
	}
	return l.ln.Close()
}

func (l *rsListener) Serve(ctx context.Context) error {
	l.mu.Lock()
	if l.closed || l.cancel != nil {
		l.mu.Unlock()
		return errors.New("ringcoordinator: listener closed or already serving")
	}
	// Handlers run under hctx; the RSocket server under rsCtx, which ends
	// only after every handler has returned: rsocket-go races a frame
	// sent while its connection closes, so the handlers stop sending
	// before the connections close.
	hctx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	l.mu.Unlock()
	defer close(l.served)
	defer cancel()
	rsCtx, rsCancel := context.WithCancel(context.Background())
	defer rsCancel()

	factory := func(context.Context) (net.Listener, error) { return l.guard.listener(l.ln), nil }
	served := make(chan error, 1)
	go func() {
		served <- rsocket.Receive().
			Acceptor(func(_ context.Context, setup payload.SetupPayload, peer rsocket.CloseableRSocket) (rsocket.RSocket, error) {
				var addr string
				if a, ok := peer.(interface{ Addr() (string, bool) }); ok {
					addr, _ = a.Addr()
				}
				if !l.authorized(setup) {
					l.log.Warn("ringcoordinator: refused a connection at setup: missing or wrong token", "addr", l.Addr(), "peer", addr)
					return nil, errSetupRefused
				}
				l.guard.authenticated(addr)
				conn, connCancel := context.WithCancel(hctx)
				conn = withConnID(conn)
				peer.OnClose(func(error) { connCancel() })
				return l.responder(conn), nil
			}).
			Transport(func(context.Context) (transport.ServerTransport, error) {
				return transport.NewTCPServerTransport(factory), nil
			}).
			Serve(rsCtx)
	}()
	var err error
	stopped := false
	select {
	case <-hctx.Done():
	case err = <-served: // the listener failed
		stopped = true
		cancel()
	}
	l.g.closeAndWait()
	rsCancel()
	if !stopped {
		err = <-served
	}
	_ = l.ln.Close()
	if isClosedListener(err) {
		return nil
	}
	return fmt.Errorf("ringcoordinator: serve %s: %w", l.Addr(), err)
}

func isClosedListener(err error) bool { return err == nil || errors.Is(err, net.ErrClosed) }

// responder serves the requests of one connection, whose context is conn.
func (l *rsListener) responder(conn context.Context) rsocket.RSocket {
	return rsocket.NewAbstractSocket(
		rsocket.RequestResponse(func(req payload.Payload) mono.Mono {
			data := clone(req.Data())
			return mono.Create(func(_ context.Context, sink mono.Sink) {
				if !l.g.Go(func() {
					resp, err := l.h.RequestResponse(conn, data)
					if conn.Err() != nil {
						return // the connection is going: send nothing
					}
					defer func() { _ = recover() }() // a sink closed under us
					if err != nil {
						sink.Error(err)
						return
					}
					sink.Success(payload.New(resp, nil))
				}) {
					sink.Error(errConnClosed)
				}
			})
		}),
		rsocket.RequestStream(func(req payload.Payload) flux.Flux {
			data := clone(req.Data())
			return flux.Raw(streamFlux{Flux: rflux.Empty(), start: func(sub *streamSub) {
				sctx, cancel := context.WithCancel(conn)
				sub.setCancel(sctx, cancel)
				if !l.g.Go(func() { serveStream(sctx, cancel, l.h, data, sub) }) {
					cancel()
					sub.end(errConnClosed)
				}
			}})
		}),
	)
}

// serveStream runs the handler of one stream and ends the stream with its
// result.
func serveStream(ctx context.Context, cancel context.CancelFunc, h Handler, req []byte, sub *streamSub) {
	defer cancel()
	err := h.RequestStream(ctx, req, sub.next)
	if ctx.Err() != nil {
		sub.abandon() // cancelled, or the connection is going: send nothing more
		return
	}
	sub.end(err)
}

// streamFlux is the responder's side of a request-stream. rsocket-go's own
// sinks (flux.Create, processors) close a channel on cancel that a
// concurrent Next sends on; streamFlux instead serialises the items, the
// end of the stream and its cancellation under one lock, honours the
// requester's demand, and never touches the subscriber once the stream is
// over (rsocket-go recycles it). rsocket-go's responder calls only
// SubscribeOn and SubscribeWith on it; the embedded Flux (empty) answers
// the rest.
type streamFlux struct {
	rflux.Flux
	start func(*streamSub)
}

// SubscribeOn runs the subscription where it is made.
func (f streamFlux) SubscribeOn(scheduler.Scheduler) rflux.Flux { return f }

// SubscribeWith starts the stream for s.
func (f streamFlux) SubscribeWith(ctx context.Context, s reactor.Subscriber) {
	sub := &streamSub{actual: s}
	s.OnSubscribe(ctx, sub)
	f.start(sub)
}

// streamSub is the subscription of a streamFlux.
type streamSub struct {
	mu      sync.Mutex
	actual  reactor.Subscriber
	demand  int64
	pending [][]byte
	ending  bool  // end was called: deliver endErr after pending
	endErr  error // nil: complete
	done    bool  // ended or cancelled: actual is not ours any more
	cancel  context.CancelFunc
	ctx     context.Context // the handler's: nothing is sent once it ends
}

const unbounded = math.MaxInt32

func (s *streamSub) setCancel(ctx context.Context, c context.CancelFunc) {
	s.mu.Lock()
	done := s.done
	s.ctx, s.cancel = ctx, c
	s.mu.Unlock()
	if done {
		c()
	}
}

// Request adds demand.
func (s *streamSub) Request(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || n <= 0 {
		return
	}
	s.demand = min(s.demand+int64(n), unbounded)
	s.flushLocked()
}

// Cancel ends the stream from the requester's side.
func (s *streamSub) Cancel() {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.done, s.pending, s.actual = true, nil, nil
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// abandon ends the stream without telling the requester.
func (s *streamSub) abandon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done, s.pending, s.actual = true, nil, nil
}

// next queues an item (the handler's send).
func (s *streamSub) next(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.ending || (s.ctx != nil && s.ctx.Err() != nil) {
		return fmt.Errorf("ringcoordinator: stream closed: %w", errConnClosed)
	}
	s.pending = append(s.pending, clone(b))
	s.flushLocked()
	return nil
}

// end ends the stream after the queued items: complete (nil) or error.
func (s *streamSub) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.ending {
		return
	}
	s.ending, s.endErr = true, err
	s.flushLocked()
}

func (s *streamSub) flushLocked() {
	for len(s.pending) > 0 && s.demand > 0 && !s.done {
		b := s.pending[0]
		s.pending[0] = nil
		s.pending = s.pending[1:]
		if s.demand < unbounded {
			s.demand--
		}
		s.actual.OnNext(payload.New(b, nil))
	}
	if s.ending && len(s.pending) == 0 && !s.done {
		s.done = true
		actual := s.actual
		s.actual = nil
		if s.endErr != nil {
			actual.OnError(s.endErr)
		} else {
			actual.OnComplete()
		}
	}
}

// Dial connects to addr over TCP.
func (t RSocketTransport) Dial(ctx context.Context, addr string) (Conn, error) {
	keep, life, timeout := t.KeepAlive, t.KeepAliveLifetime, t.ConnectTimeout
	if keep <= 0 {
		keep = DefaultKeepAlive
	}
	if life <= 0 {
		life = DefaultKeepAliveLifetime
	}
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = max(time.Until(d), time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The client lives as long as connCtx, not as long as the dial's ctx.
	connCtx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // a dial cancelled midway
	lost := make(chan struct{})
	var once sync.Once
	c := &rsConn{cancel: cancel, lost: lost}
	setup := payload.New(nil, nil)
	if t.token != "" {
		setup = payload.New(nil, []byte(t.token))
	}
	cli, err := rsocket.Connect().
		SetupPayload(setup).
		KeepAlive(keep, life, 1).
		ConnectTimeout(timeout).
		OnClose(func(err error) {
			once.Do(func() {
				c.closeErr = err
				close(lost)
			})
		}).
		Transport(rsocket.TCPClient().SetAddr(addr).Build()).
		Start(connCtx)
	if !stop() || err != nil {
		cancel()
		if err == nil {
			_ = cli.Close()
			err = ctx.Err()
		}
		return nil, fmt.Errorf("ringcoordinator: dial %s: %w", addr, err)
	}
	c.cli = cli
	return c, nil
}

type rsConn struct {
	cli      rsocket.Client
	cancel   context.CancelFunc
	lost     chan struct{} // closed when the connection closes
	closeErr error         // why it closed (set before lost is closed)

	// sending is read-held while a request's first frame is handed to
	// rsocket-go and write-held by Close before it closes the client:
	// rsocket-go closes its send queue in Close while a concurrent send
	// may be writing to it (it recovers the panic, but the race detector
	// reports the race). closed refuses requests once Close has begun.
	sending sync.RWMutex
	closed  bool
}

// send runs start, which hands a request's first frame to rsocket-go,
// unless the connection is closing.
func (c *rsConn) send(start func()) bool {
	c.sending.RLock()
	defer c.sending.RUnlock()
	if c.closed {
		return false
	}
	start()
	return true
}

// lostErr is the error of a request on a closed connection: the reason
// (a refused setup) when there is one.
func (c *rsConn) lostErr() error {
	if c.closeErr != nil {
		return wireError(c.closeErr)
	}
	return errConnClosed
}

func (c *rsConn) RequestResponse(ctx context.Context, req []byte) ([]byte, error) {
	select {
	case <-c.lost:
		return nil, c.lostErr()
	default:
	}
	var m mono.Mono
	if !c.send(func() { m = c.cli.RequestResponse(payload.New(clone(req), nil)) }) {
		return nil, c.lostErr()
	}
	p, err := m.Block(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		select {
		case <-c.lost:
			return nil, c.lostErr()
		default:
		}
		return nil, wireError(err)
	}
	if p == nil {
		return nil, fmt.Errorf("%w: empty response", ErrBadMessage)
	}
	return clone(p.Data()), nil
}

// RequestStream opens a stream on the connection. A stream that has to be
// cancelled (ctx ends, recv fails) is cancelled by closing the connection:
// rsocket-go recycles a stream's subscriber once the stream ends, so a
// cancel racing the stream's end could cancel another stream. The roles
// open one connection per stream.
func (c *rsConn) RequestStream(ctx context.Context, req []byte, recv func([]byte) error) error {
	select {
	case <-c.lost:
		return c.lostErr()
	default:
	}
	q := newQueue()
	if !c.send(func() {
		c.cli.RequestStream(payload.New(clone(req), nil)).Subscribe(context.Background(),
			rx.OnNext(func(p payload.Payload) error {
				q.push(clone(p.Data())) // the payload's buffer is recycled after this call
				return nil
			}),
			rx.OnError(func(err error) { q.close(wireError(err)) }),
			rx.OnComplete(func() { q.close(nil) }),
		)
	}) {
		return c.lostErr()
	}
	err := q.pump(ctx, c.lost, recv)
	if err == errConnClosed { //nolint:errorlint // pump's own loss, unwrapped
		err = c.lostErr()
	}
	if _, done, _ := q.drain(); !done {
		_ = c.Close()
	}
	return err
}

func (c *rsConn) Close() error {
	// Wait for the requests being handed over (bounded: a send blocked on
	// a full queue is released when the client closes below).
	locked := make(chan struct{})
	go func() {
		c.sending.Lock()
		c.closed = true
		c.sending.Unlock()
		close(locked)
	}()
	select {
	case <-locked:
	case <-time.After(2 * time.Second):
	}
	err := c.cli.Close()
	c.cancel()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("ringcoordinator: close: %w", err)
	}
	return nil
}

// wireError turns an error frame of the peer into a *PeerError; other
// errors (the connection's) are returned wrapped.
func wireError(err error) error {
	var ce core.CustomError
	if errors.As(err, &ce) && ce.ErrorCode() == core.ErrorCodeApplicationError {
		return peerErr(string(ce.ErrorData()))
	}
	return fmt.Errorf("%w: %w", errConnClosed, err)
}

// SetRSocketLogger sends rsocket-go's log lines (a process-wide setting of
// that library) to l at debug level, or discards them if l is nil.
// cmd/ringcoordinator calls it; an embedding service may.
func SetRSocketLogger(l *slog.Logger) {
	if l == nil {
		logger.SetLogger(nil)
		return
	}
	logger.SetLogger(slogAdapter{l})
}

type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Debugf(f string, args ...any) { a.l.Debug("rsocket: " + fmt.Sprintf(f, args...)) }
func (a slogAdapter) Infof(f string, args ...any)  { a.l.Debug("rsocket: " + fmt.Sprintf(f, args...)) }
func (a slogAdapter) Warnf(f string, args ...any)  { a.l.Debug("rsocket: " + fmt.Sprintf(f, args...)) }
func (a slogAdapter) Errorf(f string, args ...any) { a.l.Debug("rsocket: " + fmt.Sprintf(f, args...)) }
