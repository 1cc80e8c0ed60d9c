package kafkaflags_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stacksaga-go/stacksaga/internal/kafkaflags"
)

// parse registers the flags on a new flag set and parses args.
func parse(t *testing.T, args ...string) *kafkaflags.Flags {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := kafkaflags.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return f
}

// env is a lookup over a fixed map.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// pki is a CA and the server and client certificates it signs, as files.
type pki struct {
	dir                       string
	caFile, certFile, keyFile string // the CA's PEM; the client's certificate and key
	server                    tls.Certificate
	pool                      *x509.CertPool // the CA
	otherCAFile, emptyFile    string         // a CA that signs nothing here; a file with no PEM block
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	write := func(name string, blocks ...*pem.Block) string {
		var b []byte
		for _, bl := range blocks {
			b = append(b, pem.EncodeToMemory(bl)...)
		}
		path := filepath.Join(p.dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	serial := int64(1)
	mkCA := func(cn string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		serial++
		k := key()
		tpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		return tpl, k, der
	}
	caTpl, caKey, caDER := mkCA("kafkaflags test CA")
	_, _, otherDER := mkCA("another CA")
	p.caFile = write("ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	p.otherCAFile = write("other-ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: otherDER})
	p.emptyFile = write("empty.pem")
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	leaf := func(cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		serial++
		k := key()
		tpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tpl, caTpl, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	srvDER, srvKey := leaf("broker", x509.ExtKeyUsageServerAuth)
	p.server = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
	cliDER, cliKey := leaf("client", x509.ExtKeyUsageClientAuth)
	cliKeyDER, err := x509.MarshalECPrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	p.certFile = write("client.pem", &pem.Block{Type: "CERTIFICATE", Bytes: cliDER})
	p.keyFile = write("client-key.pem", &pem.Block{Type: "EC PRIVATE KEY", Bytes: cliKeyDER})
	return p
}

// Every invalid combination fails, naming its flag; valid ones give the
// options they ask for.
func TestOptsValidation(t *testing.T) {
	p := newPKI(t)
	withPass := env(map[string]string{kafkaflags.DefaultPasswordEnv: "pw", "OTHER_PASS": "pw2", "EMPTY_PASS": ""})
	for _, tc := range []struct {
		name  string
		args  []string
		env   func(string) (string, bool)
		opts  int      // options returned when valid
		wants []string // substrings of the error; none: valid
	}{
		{name: "nothing", opts: 0},
		{name: "tls", args: []string{"--kafka-tls"}, opts: 1},
		{name: "ca implies tls", args: []string{"--kafka-tls-ca", p.caFile}, opts: 1},
		{name: "mutual tls", args: []string{"--kafka-tls-ca", p.caFile, "--kafka-tls-cert", p.certFile, "--kafka-tls-key", p.keyFile}, opts: 1},
		{name: "sasl plain by default", args: []string{"--kafka-sasl-user", "u"}, env: withPass, opts: 1},
		{name: "sasl over tls", args: []string{"--kafka-tls", "--kafka-sasl-user", "u", "--kafka-sasl-mechanism", "SCRAM-SHA-512"}, env: withPass, opts: 2},
		{name: "password from another variable", args: []string{"--kafka-sasl-user", "u", "--kafka-sasl-password-env", "OTHER_PASS", "--kafka-sasl-mechanism", "scram-sha-256"}, env: withPass, opts: 1},
		{name: "password variable set, no sasl asked for", args: nil, env: withPass, opts: 0},

		{name: "missing ca", args: []string{"--kafka-tls-ca", filepath.Join(p.dir, "nope.pem")}, wants: []string{"--kafka-tls-ca:", "nope.pem"}},
		{name: "ca without pem", args: []string{"--kafka-tls-ca", p.emptyFile}, wants: []string{"--kafka-tls-ca:", "no PEM certificate"}},
		{name: "cert without key", args: []string{"--kafka-tls-cert", p.certFile}, wants: []string{"--kafka-tls-cert: needs --kafka-tls-key"}},
		{name: "key without cert", args: []string{"--kafka-tls-key", p.keyFile}, wants: []string{"--kafka-tls-key: needs --kafka-tls-cert"}},
		{name: "cert and key that do not load", args: []string{"--kafka-tls-cert", p.caFile, "--kafka-tls-key", p.caFile}, wants: []string{"--kafka-tls-cert: with --kafka-tls-key:"}},
		{name: "user without password", args: []string{"--kafka-sasl-user", "u"}, env: env(nil), wants: []string{"--kafka-sasl-user: no password", kafkaflags.DefaultPasswordEnv, "--kafka-sasl-password-env"}},
		{name: "user with an empty password", args: []string{"--kafka-sasl-user", "u", "--kafka-sasl-password-env", "EMPTY_PASS"}, env: withPass, wants: []string{"--kafka-sasl-user: no password", "EMPTY_PASS"}},
		{name: "user, password variable unset", args: []string{"--kafka-sasl-user", "u", "--kafka-sasl-password-env", "UNSET"}, env: withPass, wants: []string{"--kafka-sasl-user: no password", "UNSET"}},
		{name: "unknown mechanism", args: []string{"--kafka-sasl-user", "u", "--kafka-sasl-mechanism", "gssapi"}, env: withPass, wants: []string{`--kafka-sasl-mechanism: "gssapi": want plain, scram-sha-256 or scram-sha-512`}},
		{name: "mechanism without user", args: []string{"--kafka-sasl-mechanism", "plain"}, env: withPass, wants: []string{"--kafka-sasl-mechanism: needs --kafka-sasl-user"}},
		{name: "password variable without user", args: []string{"--kafka-sasl-password-env", "OTHER_PASS"}, env: withPass, wants: []string{"--kafka-sasl-password-env: needs --kafka-sasl-user"}},
		{name: "every problem at once", args: []string{"--kafka-tls-ca", p.emptyFile, "--kafka-tls-key", p.keyFile, "--kafka-sasl-mechanism", "md5"}, env: withPass,
			wants: []string{"--kafka-tls-ca:", "--kafka-tls-key:", `--kafka-sasl-mechanism: "md5"`, "--kafka-sasl-mechanism: needs --kafka-sasl-user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := tc.env
			if lookup == nil {
				lookup = env(nil)
			}
			f := parse(t, tc.args...)
			opts, err := f.Opts(lookup)
			if len(tc.wants) == 0 {
				if err != nil || len(opts) != tc.opts {
					t.Fatalf("Opts: %d options, %v; want %d, no error", len(opts), err, tc.opts)
				}
				return
			}
			if err == nil {
				t.Fatalf("Opts accepted %q", tc.args)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "pw") {
				t.Errorf("error %q shows a password", err)
			}
		})
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "plaintext"},
		{[]string{"--kafka-tls"}, "TLS"},
		{[]string{"--kafka-sasl-user", "u"}, "SASL/PLAIN as u"},
		{[]string{"--kafka-tls-ca", "x", "--kafka-sasl-user", "u", "--kafka-sasl-mechanism", "scram-sha-256"}, "TLS, SASL/SCRAM-SHA-256 as u"},
	} {
		f := parse(t, tc.args...)
		if got := f.String(); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.args, got, tc.want)
		}
		if f.Requested() != (tc.args != nil) {
			t.Errorf("%q: Requested() = %v", tc.args, f.Requested())
		}
	}
}

// ping connects to brokers with the options of args (password pass in
// KAFKA_SASL_PASSWORD) and returns the error of a metadata request.
func ping(t *testing.T, brokers []string, pass string, args ...string) error {
	t.Helper()
	opts, err := parse(t, args...).Opts(env(map[string]string{kafkaflags.DefaultPasswordEnv: pass}))
	if err != nil {
		t.Fatalf("Opts %q: %v", args, err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RequestRetries(0), kgo.RetryTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

// The options reach a broker that takes only TLS and SASL with each
// mechanism (an in-process kfake cluster with a certificate of a CA of
// the test's): a client built from the flags authenticates; one with the
// wrong password, or trusting another CA, or without TLS, is refused.
func TestOptsReachTLSAndSASLBroker(t *testing.T) {
	p := newPKI(t)
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(mech, "saga", "s3cret"),
				kfake.TLS(&tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			brokers := c.ListenAddrs()
			args := []string{"--kafka-tls-ca", p.caFile, "--kafka-sasl-user", "saga", "--kafka-sasl-mechanism", strings.ToLower(mech)}
			if err := ping(t, brokers, "s3cret", args...); err != nil {
				t.Fatalf("with the flags %q: %v", args, err)
			}
			if err := ping(t, brokers, "wrong", args...); err == nil {
				t.Error("a wrong password was accepted")
			}
			if err := ping(t, brokers, "s3cret", "--kafka-tls-ca", p.otherCAFile, "--kafka-sasl-user", "saga", "--kafka-sasl-mechanism", mech); err == nil {
				t.Error("a broker whose certificate another CA signs was trusted")
			}
			if err := ping(t, brokers, "s3cret", "--kafka-sasl-user", "saga", "--kafka-sasl-mechanism", mech); err == nil {
				t.Error("a client without TLS reached the TLS listener")
			}
		})
	}
}

// --kafka-tls-cert and --kafka-tls-key present the client certificate to a
// broker that requires one.
func TestOptsMutualTLS(t *testing.T) {
	p := newPKI(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{p.server},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := ping(t, c.ListenAddrs(), "", "--kafka-tls-ca", p.caFile, "--kafka-tls-cert", p.certFile, "--kafka-tls-key", p.keyFile); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
	if err := ping(t, c.ListenAddrs(), "", "--kafka-tls-ca", p.caFile); err == nil {
		t.Error("a client without a certificate was accepted")
	}
}

// SASL/PLAIN without TLS is allowed (a SASL_PLAINTEXT listener) but warned
// about: the password travels in cleartext. SCRAM, or PLAIN over TLS, is
// not.
func TestWarning(t *testing.T) {
	for _, c := range []struct {
		f    kafkaflags.Flags
		warn bool
	}{
		{kafkaflags.Flags{User: "u"}, true},
		{kafkaflags.Flags{User: "u", Mechanism: "PLAIN"}, true},
		{kafkaflags.Flags{User: "u", TLS: true}, false},
		{kafkaflags.Flags{User: "u", CAFile: "ca.pem"}, false},
		{kafkaflags.Flags{User: "u", Mechanism: kafkaflags.ScramSHA256}, false},
		{kafkaflags.Flags{TLS: true}, false},
		{kafkaflags.Flags{}, false},
	} {
		if w := c.f.Warning(); (w != "") != c.warn || c.warn && !strings.Contains(w, "cleartext") {
			t.Errorf("%+v: Warning() = %q, want a warning: %v", c.f, w, c.warn)
		}
	}
}
