package ringcoordinator

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// rawDial opens a plain TCP connection to addr, as a peer that speaks no
// RSocket (or lies about its frames) would.
func rawDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedWithin reports whether the server closes c within d (a read ends
// with EOF or a reset, not with the client's own deadline).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b [64]byte
	for {
		_, err := c.Read(b[:])
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, os.ErrDeadlineExceeded)
	}
}

// An unauthenticated peer costs the master almost nothing (issue 48 item
// 5): its first frame's length is read before any of the frame, and one
// over the setup limit closes the connection (before: the master read and
// buffered up to 16 MiB of it, with no deadline); a peer that sends nothing
// is closed at the setup deadline (before: held for ever); connections
// beyond the cap of unauthenticated ones are closed at accept, and a peer
// with the token is served once the flood is gone.
func TestUnauthenticatedPeerCostsAlmostNothing(t *testing.T) {
	cases := []struct {
		name  string
		tp    RSocketTransport
		check func(t *testing.T, m *Master, logs *testenv.LockedBuffer)
	}{
		{"large setup", RSocketTransport{SetupTimeout: time.Minute}, func(t *testing.T, m *Master, logs *testenv.LockedBuffer) {
			c := rawDial(t, m.Addr())
			// a frame of 16 MiB - 1 announced, then 256 KiB of it sent
			if _, err := c.Write([]byte{0xff, 0xff, 0xff}); err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = c.Write(make([]byte, 256<<10)) }()
			if !closedWithin(c, 5*time.Second) {
				t.Fatal("a peer announcing a 16 MiB setup frame is still connected after 5 s")
			}
			waitFor(t, 5*time.Second, "the refusal logged", func() bool { return strings.Contains(logs.String(), "first frame is over the limit") })
		}},
		{"silent peer", RSocketTransport{SetupTimeout: 300 * time.Millisecond}, func(t *testing.T, m *Master, _ *testenv.LockedBuffer) {
			c := rawDial(t, m.Addr())
			if !closedWithin(c, 10*time.Second) {
				t.Fatal("a peer that sends nothing is still connected 10 s after a 300 ms setup deadline")
			}
		}},
		{"unauthenticated cap", RSocketTransport{SetupTimeout: time.Minute, MaxUnauthenticated: 3}, func(t *testing.T, m *Master, logs *testenv.LockedBuffer) {
			var silent []net.Conn
			for range 3 {
				silent = append(silent, rawDial(t, m.Addr()))
			}
			g := m.ln.(*rsListener).guard
			waitFor(t, 10*time.Second, "the three accepted and held", func() bool {
				g.mu.Lock()
				defer g.mu.Unlock()
				return len(g.pending) == 3
			})
			extra := rawDial(t, m.Addr())
			if !closedWithin(extra, 5*time.Second) {
				t.Fatal("a fourth unauthenticated connection is held with a cap of 3")
			}
			waitFor(t, 5*time.Second, "the refusal logged", func() bool { return strings.Contains(logs.String(), "too many connections have not authenticated") })
			for _, c := range silent {
				_ = c.Close()
			}
			waitFor(t, 10*time.Second, "a peer with the token served", func() bool {
				c, err := RSocketTransport{}.withAuth(testToken, nil).Dial(context.Background(), m.Addr())
				if err != nil {
					return false
				}
				defer c.Close()
				_, err = c.RequestResponse(context.Background(), encode(msgStatus, nil))
				return err == nil
			})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs testenv.LockedBuffer
			m := startAuthMaster(t, textLogger(&logs), WithTransport(tc.tp))
			tc.check(t, m, &logs)
		})
	}
}

// A peer with the token is served as before through the guard, and a
// setup up to the limit (a long token) passes it.
func TestPreAuthPassesAnAuthenticatedPeer(t *testing.T) {
	long := strings.Repeat("t", 3000)
	var logs testenv.LockedBuffer
	m := startAuthMaster(t, textLogger(&logs), WithTransport(RSocketTransport{}), WithToken(long))
	c := dial(t, RSocketTransport{}.withAuth(long, nil), m.Addr())
	if _, err := c.RequestResponse(context.Background(), encode(msgStatus, nil)); err != nil {
		t.Fatalf("peer with a 3000-byte token: %v", err)
	}
}

// FuzzPreAuthConn: whatever a peer sends, the guard hands on exactly its
// bytes when the first frame's announced length is within the limit, and
// none of the frame when it is over.
func FuzzPreAuthConn(f *testing.F) {
	f.Add([]byte{0, 0, 10, 1, 2, 3}, 16)
	f.Add([]byte{0xff, 0xff, 0xff, 1}, 4096)
	f.Add([]byte{0, 1}, 8)
	f.Fuzz(func(t *testing.T, in []byte, limit int) {
		if limit <= 0 || limit > 1<<20 {
			return
		}
		client, server := net.Pipe()
		g := newPreAuth(limit, time.Second, 1, slog.New(slog.DiscardHandler))
		c := &preAuthConn{Conn: server, g: g}
		go func() { _, _ = client.Write(in); _ = client.Close() }()
		got, err := io.ReadAll(c)
		_ = c.Close()
		over := len(in) >= 3 && int(in[0])<<16|int(in[1])<<8|int(in[2]) > limit
		switch {
		case over && (!errors.Is(err, errSetupTooLarge) || len(got) != 0):
			t.Fatalf("announced over %d: read %d bytes, err %v", limit, len(got), err)
		case !over && len(in) >= 3 && !bytes.Equal(got, in):
			t.Fatalf("within %d: read %x, sent %x (err %v)", limit, got, in, err)
		case len(in) < 3 && len(got) != 0:
			t.Fatalf("a partial prefix handed on %x", got)
		}
	})
}
