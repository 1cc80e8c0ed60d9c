package ringcoordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoHandler answers request-response with "re:"+req and streams back
// n items "<req>-<i>" (n from the request "stream:<n>"), then waits for
// the stream's end if the request ends in ":hold", or fails if it ends in
// ":fail".
type echoHandler struct {
	mu      sync.Mutex
	ended   []string // streams whose handler returned, with why
	started chan string
}

func newEchoHandler() *echoHandler { return &echoHandler{started: make(chan string, 100)} }

func (h *echoHandler) RequestResponse(_ context.Context, req []byte) ([]byte, error) {
	if bytes.HasPrefix(req, []byte("fail")) {
		return nil, errors.New("you asked for it")
	}
	return append([]byte("re:"), req...), nil
}

func (h *echoHandler) RequestStream(ctx context.Context, req []byte, send func([]byte) error) error {
	s := string(req)
	h.started <- s
	var n int
	var mode string
	fmt.Sscanf(strings.ReplaceAll(s, ":", " "), "stream %d %s", &n, &mode)
	for i := range n {
		buf := []byte(fmt.Sprintf("%s-%d", s, i))
		if err := send(buf); err != nil {
			h.end(s, "send: "+err.Error())
			return err
		}
		copy(buf, bytes.Repeat([]byte("x"), len(buf))) // the transport must have copied it
	}
	switch {
	case strings.HasPrefix(mode, "hold"):
		<-ctx.Done()
		h.end(s, "ctx")
		return nil
	case mode == "fail":
		h.end(s, "fail")
		return errors.New("stream failed on purpose")
	}
	h.end(s, "complete")
	return nil
}

func (h *echoHandler) end(s, why string) {
	h.mu.Lock()
	h.ended = append(h.ended, s+" "+why)
	h.mu.Unlock()
}

func (h *echoHandler) waitEnded(t *testing.T, want string) {
	t.Helper()
	waitFor(t, 10*time.Second, "stream handler "+want, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, e := range h.ended {
			if e == want || (strings.HasSuffix(want, " any") && strings.HasPrefix(e, strings.TrimSuffix(want, "any"))) {
				return true
			}
		}
		return false
	})
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// transports runs f against both transports.
func transports(t *testing.T, f func(t *testing.T, tp Transport)) {
	t.Run("rsocket", func(t *testing.T) { f(t, RSocketTransport{}.withAuth(testToken, nil)) })
	t.Run("memory", func(t *testing.T) { f(t, NewMemoryTransport()) })
}

func serve(t *testing.T, tp Transport, h Handler) (Listener, context.CancelFunc, <-chan error) {
	t.Helper()
	ln, err := tp.Listen("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ln.Serve(ctx) }()
	return ln, cancel, done
}

func TestTransportRequestResponse(t *testing.T) {
	transports(t, func(t *testing.T, tp Transport) {
		defer checkNoLeaks(t)
		h := newEchoHandler()
		ln, stop, done := serve(t, tp, h)
		defer func() { stop(); <-done }()
		ctx := context.Background()
		c, err := tp.Dial(ctx, ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := range 50 {
			req := []byte(fmt.Sprintf("hello-%d", i))
			got, err := c.RequestResponse(ctx, req)
			if err != nil || string(got) != "re:"+string(req) {
				t.Fatalf("RequestResponse(%s) = %q, %v", req, got, err)
			}
		}
		_, err = c.RequestResponse(ctx, []byte("fail"))
		var pe *PeerError
		if !errors.As(err, &pe) || !strings.Contains(pe.Message, "you asked for it") {
			t.Fatalf("error response = %v, want a PeerError with the handler's message", err)
		}
	})
}

func TestTransportStreamItemsAreCopies(t *testing.T) {
	transports(t, func(t *testing.T, tp Transport) {
		defer checkNoLeaks(t)
		h := newEchoHandler()
		ln, stop, done := serve(t, tp, h)
		defer func() { stop(); <-done }()
		ctx := context.Background()
		c, err := tp.Dial(ctx, ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Several concurrent streams, the items kept past the callback.
		var wg sync.WaitGroup
		for s := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := fmt.Sprintf("stream:300:s%d", s)
				var kept [][]byte
				err := c.RequestStream(ctx, []byte(req), func(b []byte) error { kept = append(kept, b); return nil })
				if err != nil {
					t.Errorf("stream %s: %v", req, err)
					return
				}
				if len(kept) != 300 {
					t.Errorf("stream %s: %d items, want 300", req, len(kept))
					return
				}
				for i, b := range kept {
					if want := fmt.Sprintf("%s-%d", req, i); string(b) != want {
						t.Errorf("stream %s item %d = %q, want %q (a recycled buffer?)", req, i, b, want)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}

func TestTransportStreamErrorAndCancel(t *testing.T) {
	transports(t, func(t *testing.T, tp Transport) {
		defer checkNoLeaks(t)
		h := newEchoHandler()
		ln, stop, done := serve(t, tp, h)
		defer func() { stop(); <-done }()
		ctx := context.Background()
		c, err := tp.Dial(ctx, ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()

		err = c.RequestStream(ctx, []byte("stream:2:fail"), func([]byte) error { return nil })
		var pe *PeerError
		if !errors.As(err, &pe) || !strings.Contains(pe.Message, "stream failed on purpose") {
			t.Fatalf("failed stream = %v, want a PeerError", err)
		}

		// The requester's context ends the responder's stream.
		sctx, cancel := context.WithCancel(ctx)
		err = c.RequestStream(sctx, []byte("stream:1:hold"), func([]byte) error { cancel(); return nil })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled stream = %v, want context.Canceled", err)
		}
		h.waitEnded(t, "stream:1:hold ctx")

		// recv's error cancels the stream too (the RSocket transport
		// closes the connection to cancel a stream: dial again).
		c, err = tp.Dial(ctx, ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		boom := errors.New("boom")
		err = c.RequestStream(ctx, []byte("stream:1:hold2"), func([]byte) error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("stream with failing recv = %v, want boom", err)
		}
		h.waitEnded(t, "stream:1:hold2 any")
	})
}

// TestTransportConnectionLoss: closing the requester ends the responder's
// stream; stopping the listener ends the requester's stream with an error.
func TestTransportConnectionLoss(t *testing.T) {
	transports(t, func(t *testing.T, tp Transport) {
		defer checkNoLeaks(t)
		h := newEchoHandler()
		ln, stop, done := serve(t, tp, h)
		ctx := context.Background()

		c1, err := tp.Dial(ctx, ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		// (Each close waits for the stream's item: rsocket-go races a
		// frame sent while its connection closes, see RSocketTransport.)
		res := make(chan error, 1)
		got := make(chan struct{}, 1)
		gotItem := func([]byte) error { got <- struct{}{}; return nil }
		go func() { res <- c1.RequestStream(ctx, []byte("stream:1:hold"), gotItem) }()
		<-got
		c1.Close()
		h.waitEnded(t, "stream:1:hold any")
		if err := <-res; err == nil {
			t.Fatal("stream over a closed connection ended without error")
		}

		c2, err := tp.Dial(ctx, ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		go func() { res <- c2.RequestStream(ctx, []byte("stream:1:hold3"), gotItem) }()
		<-got
		stop()
		if err := <-done; err != nil {
			t.Fatalf("Serve = %v", err)
		}
		select {
		case err := <-res:
			if err == nil {
				t.Fatal("stream of a stopped listener ended without error")
			}
		case <-time.After(15 * time.Second):
			t.Fatal("stream of a stopped listener did not end")
		}
		h.waitEnded(t, "stream:1:hold3 any") // ctx, or send if it was stopped before the item went
		if _, err := tp.Dial(ctx, ln.Addr()); err == nil {
			t.Fatal("dial of a stopped listener succeeded")
		}
	})
}

// checkNoLeaks fails if goroutines running this package's code are left
// (rsocket-go keeps worker pools of its own, which are not ours to check).
func checkNoLeaks(t *testing.T) {
	t.Helper()
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		last = ourGoroutines()
		if last == "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("goroutines left running:\n%s", last)
}

func ourGoroutines() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "stacksaga/ringcoordinator.") || strings.Contains(g, "ourGoroutines") ||
			strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*T).Run") || strings.Contains(g, "TestMain") {
			continue
		}
		out = append(out, g)
	}
	return strings.Join(out, "\n\n")
}

// TestVersionRefusedOverTheWire: a peer speaking protocol version 2 is
// refused by a master with an error naming both versions, which the peer
// sees as a PeerError matching ErrUnsupportedVersion; the same for a
// slave's stream.
func TestVersionRefusedOverTheWire(t *testing.T) {
	transports(t, func(t *testing.T, tp Transport) {
		t.Cleanup(func() { checkNoLeaks(t) })
		m, err := NewMaster(WithTransport(tp), WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		mr := run(m.Run)
		defer mr.stop(t)
		ctx := context.Background()
		c, err := tp.Dial(ctx, m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.RequestResponse(ctx, []byte(`{"v":2,"type":"assign","body":{}}`))
		if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "version 2") {
			t.Fatalf("v2 request-response: %v, want a refusal matching ErrUnsupportedVersion", err)
		}
		err = c.RequestStream(ctx, []byte(`{"v":2,"type":"register","body":{}}`), func([]byte) error { return nil })
		if !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("v2 request-stream: %v, want a refusal matching ErrUnsupportedVersion", err)
		}
	})
}
