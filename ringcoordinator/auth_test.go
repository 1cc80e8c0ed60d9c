package ringcoordinator

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// textLogger logs text lines into b.
func textLogger(b *testenv.LockedBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// startAuthMaster runs a master on RSocket over loopback with the test
// token.
func startAuthMaster(t *testing.T, log *slog.Logger, opts ...Option) *Master {
	t.Helper()
	m, err := NewMaster(append([]Option{WithToken(testToken), WithCycle(time.Second), WithLogger(log)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r := run(m.Run)
	t.Cleanup(func() { r.stop(t) })
	return m
}

func registerReq(id, addr string) []byte {
	return encode(msgRegister, registerMsg{scopeMsg: scopeMsg{Region: DefaultRegion, Cluster: DefaultCluster}, SlaveID: id, Addr: addr})
}

// register opens a registration of id on c and waits until the master
// accepts it (nil) or refuses it (the error). An accepted registration
// stays open until the test ends.
func register(t *testing.T, c Conn, id, addr string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	accepted := make(chan struct{})
	ended := make(chan error, 1)
	var once sync.Once
	go func() {
		ended <- c.RequestStream(ctx, registerReq(id, addr), func(b []byte) error {
			if typ, _ := decode(b, "", nil); typ == msgRegistered {
				once.Do(func() { close(accepted) })
			}
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-ended })
	select {
	case <-accepted:
		return nil
	case err := <-ended:
		ended <- err
		if err == nil {
			return errors.New("stream completed without an answer")
		}
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("registration of %s: no answer", id)
		return nil
	}
}

func dial(t *testing.T, tp Transport, addr string) Conn {
	t.Helper()
	c, err := tp.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestSetupRefusedWithoutTheToken: over RSocket on loopback, a peer that
// presents no token or a wrong one is refused at connection setup (it can
// neither ask for the status nor register a slave), the refusal is logged
// at WARN without either token; a peer with the token is served.
func TestSetupRefusedWithoutTheToken(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) })
	var logs testenv.LockedBuffer
	m := startAuthMaster(t, textLogger(&logs))
	const wrong = "not-the-right-token-at-all"
	for name, tp := range map[string]Transport{
		"no token":    RSocketTransport{},
		"wrong token": RSocketTransport{}.withAuth(wrong, nil),
	} {
		// The master closes the connection at setup: wait for that (a
		// request sent meanwhile would race rsocket-go's closing of its
		// send queue, which it recovers from but -race reports), then
		// nothing can be asked on it, with the refusal as the reason.
		c := dial(t, tp, m.Addr())
		select {
		case <-c.(*rsConn).lost:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the connection stays open", name)
		}
		if _, err := c.RequestResponse(context.Background(), encode(msgStatus, nil)); err == nil || !strings.Contains(err.Error(), "missing or wrong token") {
			t.Fatalf("%s: status: %v, want the setup refusal", name, err)
		}
		if err := register(t, c, "intruder", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "missing or wrong token") {
			t.Fatalf("%s: registration: %v, want the setup refusal", name, err)
		}
	}
	if n := len(m.Assignment(time.Now()).Slaves); n != 0 {
		t.Fatalf("%d slaves registered by unauthenticated peers", n)
	}
	waitFor(t, 10*time.Second, "the refusals logged", func() bool {
		return strings.Count(logs.String(), "level=WARN msg=\"ringcoordinator: refused a connection at setup") >= 2
	})
	if strings.Contains(logs.String(), wrong) || strings.Contains(logs.String(), testToken) {
		t.Fatalf("the log shows a token:\n%s", logs.String())
	}
	good := dial(t, RSocketTransport{}.withAuth(testToken, nil), m.Addr())
	if _, err := good.RequestResponse(context.Background(), encode(msgStatus, nil)); err != nil {
		t.Fatalf("peer with the token: %v", err)
	}
	// FetchAssignment presents the token too.
	if _, err := FetchAssignment(context.Background(), m.Addr(), WithToken(testToken)); err != nil {
		t.Fatalf("FetchAssignment with the token: %v", err)
	}
}

// TestRolesNeedATokenOrInsecure: master, slave and connector on RSocket
// refuse to start without a token (or with a short one) unless insecure,
// which logs a warning.
func TestRolesNeedATokenOrInsecure(t *testing.T) {
	roles := map[string]func(...Option) error{
		"master": func(o ...Option) error {
			m, err := NewMaster(o...)
			if err == nil {
				_ = m.Close()
			}
			return err
		},
		"slave": func(o ...Option) error {
			s, err := NewSlave(append(o, WithMaster("127.0.0.1:1"))...)
			if err == nil {
				_ = s.Close()
			}
			return err
		},
		"connector": func(o ...Option) error {
			_, err := NewConnector(append(o, WithMaster("127.0.0.1:1"))...)
			return err
		},
	}
	for name, newRole := range roles {
		if err := newRole(WithLogger(quiet)); err == nil || !strings.Contains(err.Error(), "no token") || !strings.Contains(err.Error(), "WithInsecure") {
			t.Errorf("%s without a token: %v", name, err)
		}
		if err := newRole(WithLogger(quiet), WithToken("short-token")); err == nil || !strings.Contains(err.Error(), "at least 16 bytes") ||
			strings.Contains(err.Error(), "short-token") {
			t.Errorf("%s with a short token: %v", name, err)
		}
		if err := newRole(WithLogger(quiet), WithToken(testToken)); err != nil {
			t.Errorf("%s with a token: %v", name, err)
		}
		var logs testenv.LockedBuffer
		if err := newRole(WithLogger(textLogger(&logs)), WithInsecure()); err != nil {
			t.Errorf("%s insecure: %v", name, err)
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "insecure") {
			t.Errorf("%s insecure: no warning logged: %s", name, logs.String())
		}
	}
}

// TestRegistrationCannotEvictALiveSlave: a peer with valid credentials
// registering the id of a live slave is refused; the slave keeps its
// registration and its address. Once the slave's connection is gone, its
// id may register again.
func TestRegistrationCannotEvictALiveSlave(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) })
	m := startAuthMaster(t, quiet)
	tp := RSocketTransport{}.withAuth(testToken, nil)
	real := dial(t, tp, m.Addr())
	if err := register(t, real, "S", "127.0.0.1:7071"); err != nil {
		t.Fatal(err)
	}
	evil := dial(t, tp, m.Addr())
	err := register(t, evil, "S", "127.0.0.1:6666")
	if !errors.Is(err, ErrRegistrationRefused) {
		t.Fatalf("second registration of a live id: %v, want ErrRegistrationRefused", err)
	}
	_, err = evil.RequestResponse(context.Background(), encode(msgNodes, nodesMsg{scopeMsg: scopeMsg{Region: DefaultRegion, Cluster: DefaultCluster}, SlaveID: "S", Nodes: 0}))
	if !errors.Is(err, ErrRegistrationRefused) {
		t.Fatalf("nodes of another connection's slave: %v, want ErrRegistrationRefused", err)
	}
	a := m.Assignment(time.Now())
	if len(a.Slaves) != 1 || a.Slaves[0].ID != "S" || a.Slaves[0].Addr != "127.0.0.1:7071" {
		t.Fatalf("registry after the takeover attempt: %+v", a.Slaves)
	}
	_ = real.Close()
	waitFor(t, 10*time.Second, "the slave's departure noticed", func() bool { return len(m.Assignment(time.Now()).Slaves) == 0 })
	again := dial(t, tp, m.Addr())
	if err := register(t, again, "S", "127.0.0.1:7072"); err != nil {
		t.Fatalf("registration after the old connection is gone: %v", err)
	}
}

// TestOneSlavePerConnection: a connection that registered a slave cannot
// register another.
func TestOneSlavePerConnection(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) })
	m := startAuthMaster(t, quiet)
	c := dial(t, RSocketTransport{}.withAuth(testToken, nil), m.Addr())
	if err := register(t, c, "A", "127.0.0.1:7071"); err != nil {
		t.Fatal(err)
	}
	if err := register(t, c, "B", "127.0.0.1:7072"); !errors.Is(err, ErrRegistrationRefused) {
		t.Fatalf("second slave on one connection: %v, want ErrRegistrationRefused", err)
	}
	if n := len(m.Assignment(time.Now()).Slaves); n != 1 {
		t.Fatalf("%d slaves registered, want 1", n)
	}
}

// TestSlaveCap: the master refuses a slave beyond WithMaxSlaves.
func TestSlaveCap(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) })
	m := startAuthMaster(t, quiet, WithMaxSlaves(2))
	tp := RSocketTransport{}.withAuth(testToken, nil)
	for _, id := range []string{"A", "B"} {
		if err := register(t, dial(t, tp, m.Addr()), id, "127.0.0.1:7071"); err != nil {
			t.Fatal(err)
		}
	}
	if err := register(t, dial(t, tp, m.Addr()), "C", "127.0.0.1:7071"); !errors.Is(err, ErrRegistrationRefused) {
		t.Fatalf("third slave with a cap of 2: %v, want ErrRegistrationRefused", err)
	}
	if n := len(m.Assignment(time.Now()).Slaves); n != 2 {
		t.Fatalf("%d slaves registered, want 2", n)
	}
}

// TestOversizedMessageRefused: a request over MaxMessageSize is refused
// before it is decoded.
func TestOversizedMessageRefused(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) })
	m := startAuthMaster(t, quiet)
	c := dial(t, RSocketTransport{}.withAuth(testToken, nil), m.Addr())
	big := encode(msgAssign, assignMsg{scopeMsg: scopeMsg{Region: DefaultRegion, Cluster: DefaultCluster}, NodeID: strings.Repeat("x", MaxMessageSize)})
	_, err := c.RequestResponse(context.Background(), big)
	if !errors.Is(err, ErrBadMessage) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("oversized request: %v, want ErrBadMessage", err)
	}
}
