package cassandra

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, all in PEM files under dir.
type testPKI struct {
	dir                        string
	caFile, certFile, keyFile  string // the client's certificate and key
	server                     tls.Certificate
	pool                       *x509.CertPool
	serverCertFile, serverName string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := testPKI{dir: dir, pool: x509.NewCertPool(), serverName: "127.0.0.1"}
	p.pool.AddCert(ca)
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage, ips ...net.IP) (certDER []byte, key *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	sDER, sKey := leaf(2, x509.ExtKeyUsageServerAuth, net.ParseIP("127.0.0.1"))
	p.server = tls.Certificate{Certificate: [][]byte{sDER}, PrivateKey: sKey}
	p.serverCertFile = writePEM(t, dir, "server.pem", "CERTIFICATE", sDER)
	cDER, cKey := leaf(3, x509.ExtKeyUsageClientAuth)
	p.certFile = writePEM(t, dir, "client.pem", "CERTIFICATE", cDER)
	keyDER, err := x509.MarshalPKCS8PrivateKey(cKey)
	if err != nil {
		t.Fatal(err)
	}
	p.keyFile = writePEM(t, dir, "client-key.pem", "PRIVATE KEY", keyDER)
	return p
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTLSFromYAMLAndEnvironment(t *testing.T) {
	c, err := loadConfig([]byte(`
stacksaga:
  cassandra:
    tls:
      enabled: true
      server-name: cassandra.internal
`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if want := (TLS{Enabled: true, ServerName: "cassandra.internal"}); c.TLS != want {
		t.Fatalf("tls from YAML: %+v, want %+v", c.TLS, want)
	}
	p := newTestPKI(t)
	c, err = loadConfig(nil, envMap(map[string]string{
		EnvTLSCAFile: p.caFile, EnvTLSCertFile: p.certFile, EnvTLSKeyFile: p.keyFile,
		EnvTLSServerName: "node-1", EnvTLSInsecureSkipVerify: "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := TLS{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile, ServerName: "node-1", InsecureSkipVerify: true}
	if c.TLS != want {
		t.Fatalf("tls from the environment: %+v, want %+v", c.TLS, want)
	}
	// false in the environment turns TLS off, whatever the YAML sets.
	c, err = loadConfig([]byte("stacksaga:\n  cassandra:\n    tls: {ca-file: "+p.caFile+", server-name: x}\n"),
		envMap(map[string]string{EnvTLSEnabled: "false"}))
	if err != nil || c.TLS != (TLS{}) {
		t.Fatalf("%s=false over YAML tls keys: %+v, %v; want TLS off", EnvTLSEnabled, c.TLS, err)
	}
	_, err = loadConfig(nil, envMap(map[string]string{EnvTLSEnabled: "yes please"}))
	if err == nil || !strings.Contains(err.Error(), EnvTLSEnabled) || !strings.Contains(err.Error(), "stacksaga.cassandra.tls.enabled") {
		t.Fatalf("an unparsable %s: %v, want an error naming it and its key", EnvTLSEnabled, err)
	}
}

// Without TLS keys the driver connects in plain text; with them, the
// driver gets the certificates and verifies the nodes unless told not to.
func TestTLSDriverOptions(t *testing.T) {
	p := newTestPKI(t)
	plain, err := Config{}.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	if plain.SslOpts != nil {
		t.Fatalf("TLS options without TLS keys: %+v", plain.SslOpts)
	}
	cl, err := Config{TLS: TLS{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile}}.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	o := cl.SslOpts
	if o == nil || o.Config == nil || !o.EnableHostVerification || o.Config.InsecureSkipVerify ||
		o.Config.RootCAs == nil || len(o.Config.Certificates) != 1 || o.Config.MinVersion != tls.VersionTLS12 {
		t.Fatalf("TLS options: %+v", o)
	}
	cl, err = Config{TLS: TLS{InsecureSkipVerify: true}}.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cl.SslOpts == nil || cl.SslOpts.EnableHostVerification || !cl.SslOpts.Config.InsecureSkipVerify {
		t.Fatalf("insecure-skip-verify: %+v", cl.SslOpts)
	}
	own := &tls.Config{ServerName: "mine", MinVersion: tls.VersionTLS13}
	cl, err = Config{TLS: TLS{Config: own}}.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	if got := cl.SslOpts.Config; got == own || got.ServerName != "mine" || got.MinVersion != tls.VersionTLS13 || !cl.SslOpts.EnableHostVerification {
		t.Fatalf("a caller's tls.Config is used as a clone with verification: %+v", cl.SslOpts)
	}
}

// Every TLS problem fails at start, naming its key, before anything
// connects.
func TestTLSProblemsNameTheirKeys(t *testing.T) {
	p := newTestPKI(t)
	notPEM := filepath.Join(p.dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tls  TLS
		key  string
		says string
	}{
		{"missing CA file", TLS{CAFile: filepath.Join(p.dir, "absent.pem")}, "tls.ca-file", "no such file"},
		{"CA file without PEM", TLS{CAFile: notPEM}, "tls.ca-file", "no PEM certificate"},
		{"certificate without key", TLS{CertFile: p.certFile}, "tls.key-file", "required with tls.cert-file"},
		{"key without certificate", TLS{KeyFile: p.keyFile}, "tls.cert-file", "required with tls.key-file"},
		{"key of another certificate", TLS{CertFile: p.serverCertFile, KeyFile: p.keyFile}, "tls.cert-file", "private key does not match"},
		{"a tls.Config and files", TLS{Config: &tls.Config{}, CAFile: p.caFile}, "tls", "not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{TLS: tc.tls}.withDefaults()
			err := cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "stacksaga.cassandra."+tc.key+":") ||
				!strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Validate: %v, want ErrInvalidConfig naming stacksaga.cassandra.%s and saying %q", err, tc.key, tc.says)
			}
			// New fails the same way, before it connects anywhere.
			cfg.ContactPoints = []string{testenv.ClosedAddr(t)} // a closed loopback port: nothing answers
			if _, err := New(t.Context(), cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New: %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// The configuration the driver gets completes a TLS handshake with a node
// that requires a client certificate, and refuses a node whose
// certificate another CA signed or that names another host. (The driver
// sets the server name to the address it dials.)
func TestTLSHandshake(t *testing.T) {
	p := newTestPKI(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{p.server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
				_, _ = c.Write([]byte{1})
			}()
		}
	}()
	dial := func(tc TLS, serverName string) error {
		cl, err := Config{TLS: tc}.ClusterConfig()
		if err != nil {
			return err
		}
		cfg := cl.SslOpts.Config.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = serverName
		}
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		// The server's verdict on the client certificate arrives with the
		// first read (TLS 1.3 finishes the client's side first).
		_, err = c.Read(make([]byte, 1))
		return err
	}
	if err := dial(TLS{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile}, p.serverName); err != nil {
		t.Fatalf("handshake with the right CA and a client certificate: %v", err)
	}
	if err := dial(TLS{CAFile: p.caFile}, p.serverName); err == nil {
		t.Fatal("a node that requires a client certificate accepted none")
	}
	other := newTestPKI(t)
	if err := dial(TLS{CAFile: other.caFile, CertFile: p.certFile, KeyFile: p.keyFile}, p.serverName); err == nil ||
		!strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("a node signed by another CA: %v, want an unknown-authority error", err)
	}
	if err := dial(TLS{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile, ServerName: "cassandra.example"}, ""); err == nil ||
		!strings.Contains(err.Error(), "cassandra.example") {
		t.Fatalf("a node whose certificate names another host: %v, want a name mismatch", err)
	}
}

// The store works over TLS with a client certificate on real Cassandra:
// scripts/services' node has a native port that takes only TLS and
// requires a client certificate it trusts. The schema is applied and a
// saga written and read back over it. The client refuses a node signed by
// another CA or without the expected server name; the node refuses a
// client without a certificate and one whose certificate it does not
// trust (Go's client sends a certificate only if it is signed by one of
// the authorities the node names, so the node sees none, "certificate
// required"; sent anyway, the node refuses it itself).
func TestStoreOverTLS(t *testing.T) {
	sec := testenv.CassandraTLS(t)
	_, keyspace := testenv.CassandraKeyspace(t)
	cfg := Config{
		ContactPoints: sec.Hosts, Keyspace: keyspace, Replication: SimpleReplication(1), CreateSchema: true,
		RequestTimeout: 20 * time.Second, ConnectTimeout: 20 * time.Second,
		TLS: TLS{CAFile: sec.CAFile, CertFile: sec.CertFile, KeyFile: sec.KeyFile},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s, err := New(ctx, cfg) // the schema too is applied over TLS
	if err != nil {
		t.Fatalf("New over TLS: %v", err)
	}
	defer s.Close()
	scope := eventstore.Scope{Region: "eu", Cluster: "c1", Service: "order-service"}
	tx := eventstore.Transaction{Scope: scope, TxID: "tx-tls", Domain: "d", State: eventstore.StateStarted, Version: 1}
	if err := s.CreateTransaction(ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadTransaction(ctx, scope, tx.TxID)
	if err != nil || got.State != eventstore.StateStarted || got.Domain != "d" {
		t.Fatalf("LoadTransaction over TLS: %+v, %v", got, err)
	}

	cfg.CreateSchema = false
	cfg.ReconnectionPolicy.MaxRetries = 1
	other := newTestPKI(t)
	for _, tc := range []struct {
		name string
		tls  TLS
		says []string // one of them
	}{
		{"another CA", TLS{CAFile: other.caFile, CertFile: sec.CertFile, KeyFile: sec.KeyFile}, []string{"unknown authority"}},
		{"another name", TLS{CAFile: sec.CAFile, ServerName: "cassandra.example", CertFile: sec.CertFile, KeyFile: sec.KeyFile}, []string{"cassandra.example"}},
		// A refused client certificate shows as the node's alert; on a
		// loaded node the driver's connect timeout may come first, as no
		// answer to its STARTUP (ci30 saw it). That alone would not prove
		// a refusal, but the same paths with the trusted certificate
		// connect (above, and at the end).
		{"no client certificate", TLS{CAFile: sec.CAFile}, []string{"certificate required", "bad certificate", "no response to connection startup"}},
		{"an untrusted client certificate", TLS{CAFile: sec.CAFile, CertFile: other.certFile, KeyFile: other.keyFile}, []string{"certificate required", "bad certificate", "unknown certificate authority", "certificate unknown", "no response to connection startup"}},
		// Sent whatever the authorities the node names: the node itself
		// refuses it (its TLS engine answers a certificate its trust
		// manager rejects with an internal_error alert; the same
		// configuration with the trusted certificate connects, below).
		{"an untrusted client certificate sent anyway", TLS{Config: sendAnyway(t, sec.CAFile, other.certFile, other.keyFile)}, []string{"internal error", "bad certificate", "unknown certificate authority", "certificate unknown", "no response to connection startup"}},
	} {
		bad := cfg
		bad.TLS = tc.tls
		s, err := New(ctx, bad)
		if s != nil {
			_ = s.Close()
		}
		if err == nil || !slices.ContainsFunc(tc.says, func(w string) bool { return strings.Contains(err.Error(), w) }) {
			t.Errorf("%s: New: %v, want a TLS error saying one of %q", tc.name, err, tc.says)
		}
	}
	good := cfg
	good.TLS = TLS{Config: sendAnyway(t, sec.CAFile, sec.CertFile, sec.KeyFile)}
	s2, err := New(ctx, good)
	if err != nil {
		t.Fatalf("the trusted certificate through TLS.Config: New: %v", err)
	}
	_ = s2.Close()
}

// sendAnyway is a client TLS configuration that trusts caFile and presents
// the client certificate in certFile and keyFile whatever authorities the
// server asks for.
func sendAnyway(t *testing.T, caFile, certFile, keyFile string) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	return &tls.Config{
		RootCAs:              pool,
		MinVersion:           tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
	}
}
