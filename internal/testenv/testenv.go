// Package testenv gives integration tests the real Kafka and Cassandra they
// run against, and fresh names so that tests never share state.
//
// Endpoints are found in this order:
//
//  1. KAFKA_BROKERS / CASSANDRA_HOSTS (comma-separated host:port lists), as
//     exported by `scripts/services env` or set for a docker compose setup.
//     The first test that asks checks that the endpoint accepts connections
//     and fails with a hint when it does not.
//  2. Otherwise, when a Docker engine answers, testcontainers-go starts the
//     server (once per test binary; containers are reused by name across the
//     packages of one `go test` run and reaped when it ends).
//  3. Otherwise the test is skipped, unless STACKSAGA_REQUIRE_SERVICES=1,
//     which makes it fail with instructions instead (`make test` and CI set
//     it, so nothing silently skips there).
//
// Typical use:
//
//	func TestSomething(t *testing.T) {
//		brokers := testenv.KafkaBrokers(t)
//		hosts, keyspace := testenv.CassandraKeyspace(t)
//		topic := testenv.UniqueName(t, "orders")
//		...
//	}
package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"software.sslmate.com/src/go-pkcs12"
)

// Environment variables read by this package.
const (
	// EnvKafkaBrokers lists Kafka bootstrap brokers, e.g. "127.0.0.1:9092".
	EnvKafkaBrokers = "KAFKA_BROKERS"
	// EnvCassandraHosts lists Cassandra contact points, e.g. "127.0.0.1:9042".
	EnvCassandraHosts = "CASSANDRA_HOSTS"
	// EnvRequireServices, when "1" (or "true"), turns every would-be skip
	// into a failure.
	EnvRequireServices = "STACKSAGA_REQUIRE_SERVICES"
	// EnvCassandraTLSHosts lists the TLS native port of the Cassandra at
	// CASSANDRA_HOSTS, which takes only TLS and requires a client
	// certificate; EnvCassandraTLSCA is the PEM file of the certificate
	// that signs it, EnvCassandraTLSClient the PKCS12 keystore (password
	// EnvCassandraTLSClientPassword) of a client certificate it trusts
	// (scripts/services serves one and exports them all).
	EnvCassandraTLSHosts          = "CASSANDRA_TLS_HOSTS"
	EnvCassandraTLSCA             = "CASSANDRA_TLS_CA"
	EnvCassandraTLSClient         = "CASSANDRA_TLS_CLIENT"
	EnvCassandraTLSClientPassword = "CASSANDRA_TLS_CLIENT_PASSWORD"
	// EnvKafkaSASLSSLBrokers lists the brokers' SASL_SSL listener (TLS and
	// SASL/PLAIN) of the Kafka at KAFKA_BROKERS, EnvKafkaTLSCA the PEM file
	// that signs its certificate and EnvKafkaSASLUser/Password the user it
	// accepts (scripts/services serves one and exports them all).
	EnvKafkaSASLSSLBrokers = "KAFKA_SASL_SSL_BROKERS"
	EnvKafkaTLSCA          = "KAFKA_TLS_CA"
	EnvKafkaSASLUser       = "KAFKA_SASL_USER"
	EnvKafkaSASLPassword   = "KAFKA_SASL_PASSWORD"
)

// howToStart is appended to every "services missing" message.
const howToStart = "start Kafka and Cassandra with `make services-up` (or `docker compose up -d`) " +
	"and export their endpoints with `eval \"$(scripts/services env)\"`, or run everything with `make test`"

// errNotConfigured reports that neither the environment nor Docker provides a service.
var errNotConfigured = errors.New("testenv: service not configured")

// service resolves one server's endpoints once per test binary.
type service struct {
	name   string // "Kafka" or "Cassandra"
	envVar string
	start  func(ctx context.Context) ([]string, error) // Docker branch

	once   sync.Once
	addrs  []string
	source string
	err    error
}

var (
	kafka = &service{name: "Kafka", envVar: EnvKafkaBrokers, start: startKafkaContainer}
	cass  = &service{name: "Cassandra", envVar: EnvCassandraHosts, start: startCassandraContainer}
)

func (s *service) resolve() {
	if v := strings.TrimSpace(os.Getenv(s.envVar)); v != "" {
		s.source = s.envVar
		s.addrs, s.err = parseAddrs(v)
		if s.err == nil {
			s.err = checkReachable(s.addrs, 5*time.Second)
		}
		if s.err != nil {
			s.err = fmt.Errorf("testenv: %s=%q: %w; %s", s.envVar, v, s.err, howToStart)
		}
		return
	}
	if !dockerAnswers() {
		s.err = errNotConfigured
		return
	}
	s.source = "testcontainers"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s.addrs, s.err = s.start(ctx)
	if s.err != nil {
		s.err = fmt.Errorf("testenv: starting %s with testcontainers-go: %w", s.name, s.err)
	}
}

// get returns the endpoints, or skips/fails t.
func (s *service) get(t testing.TB) []string {
	t.Helper()
	s.once.Do(s.resolve)
	switch {
	case errors.Is(s.err, errNotConfigured):
		missing(t, s.name, s.envVar)
		return nil
	case s.err != nil:
		t.Fatal(s.err)
		return nil
	}
	return append([]string(nil), s.addrs...)
}

// missing skips t, or fails it when services are required.
func missing(t testing.TB, name, envVar string) {
	t.Helper()
	if Required() {
		t.Fatalf("testenv: %s is required (%s=1) but %s is not set and no Docker engine answers: %s",
			name, EnvRequireServices, envVar, howToStart)
		return
	}
	t.Skipf("testenv: skipping: %s is not set and no Docker engine answers (%s)", envVar, howToStart)
}

// Required reports whether STACKSAGA_REQUIRE_SERVICES asks for real services,
// in which case a missing service fails the test instead of skipping it.
func Required() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(EnvRequireServices))) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// KafkaBrokers returns the bootstrap brokers of a real Kafka cluster
// (KAFKA_BROKERS, else a container), or skips t; see the package comment.
func KafkaBrokers(t testing.TB) []string {
	t.Helper()
	return kafka.get(t)
}

// CassandraHosts returns "host:port" contact points of a real Cassandra
// cluster (CASSANDRA_HOSTS, else a container), or skips t; see the package
// comment. The strings can be passed to gocql.NewCluster as they are.
func CassandraHosts(t testing.TB) []string {
	t.Helper()
	return cass.get(t)
}

// OtherCA writes, in a test's temporary directory, the PEM file of a
// self-signed CA that signs none of the services' certificates, and
// returns its path: a trust store that every service's TLS fails.
func OtherCA(t testing.TB) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the services' CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// CassandraSecure is a Cassandra native port that takes only TLS and
// requires a client certificate.
type CassandraSecure struct {
	Hosts  []string // the TLS port's contact points, "host:port"
	CAFile string   // PEM: the certificate that signs the node's
	// CertFile and KeyFile are a PEM client certificate the node trusts
	// and its key (written into a temporary directory of the test).
	CertFile, KeyFile string
}

// CassandraTLS returns the TLS native port of the real Cassandra the
// tests run on (CASSANDRA_TLS_HOSTS, CASSANDRA_TLS_CA, CASSANDRA_TLS_CLIENT
// and CASSANDRA_TLS_CLIENT_PASSWORD), the client certificate converted to
// PEM files, or skips t (fails it with STACKSAGA_REQUIRE_SERVICES=1):
// scripts/services' Cassandra serves one next to its plain port; the
// compose file's and testcontainers' do not.
func CassandraTLS(t testing.TB) CassandraSecure {
	t.Helper()
	if CassandraHosts(t) == nil {
		return CassandraSecure{}
	}
	get := func(name string) string { return strings.TrimSpace(os.Getenv(name)) }
	hosts, ca, client, pass := get(EnvCassandraTLSHosts), get(EnvCassandraTLSCA), get(EnvCassandraTLSClient), get(EnvCassandraTLSClientPassword)
	if hosts == "" || ca == "" || client == "" || pass == "" {
		const why = "the Cassandra TLS tests need a node with a TLS port that requires client certificates: scripts/services' has one, and " +
			"`eval \"$(scripts/services env)\"` exports it (make test does it; a server an older scripts/services started has none until " +
			"`scripts/services down && scripts/services up`, and a JDK without keytool gives none: see up's warning); " +
			"against another Cassandra, run `make test TEST_FLAGS='-skip OverTLS'`"
		Unavailable(t, fmt.Sprintf("%s, %s, %s or %s is not set: %s", EnvCassandraTLSHosts, EnvCassandraTLSCA, EnvCassandraTLSClient, EnvCassandraTLSClientPassword, why))
		return CassandraSecure{}
	}
	addrs, err := parseAddrs(hosts)
	if err == nil {
		err = checkReachable(addrs, 5*time.Second)
	}
	if err != nil {
		t.Fatalf("testenv: %s=%q: %v", EnvCassandraTLSHosts, hosts, err)
	}
	if _, err := os.Stat(ca); err != nil {
		t.Fatalf("testenv: %s: %v", EnvCassandraTLSCA, err)
	}
	cert, key, err := pemFromPKCS12(client, pass, t.TempDir())
	if err != nil {
		t.Fatalf("testenv: %s: %v", EnvCassandraTLSClient, err)
	}
	return CassandraSecure{Hosts: addrs, CAFile: ca, CertFile: cert, KeyFile: key}
}

// pemFromPKCS12 writes the certificate and private key of the PKCS12
// keystore at path (as keytool makes them) to PEM files in dir.
func pemFromPKCS12(path, password, dir string) (certFile, keyFile string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	key, cert, _, err := pkcs12.DecodeChain(data, password)
	if err != nil {
		return "", "", fmt.Errorf("decode %s: %w", path, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("%s: private key: %w", path, err)
	}
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// KafkaSecure is a Kafka listener that takes TLS and SASL/PLAIN.
type KafkaSecure struct {
	Brokers        []string
	TLS            *tls.Config // trusts the listener's certificate
	User, Password string
}

// KafkaSASLSSL returns the SASL_SSL listener of the real Kafka the tests
// run on (KAFKA_SASL_SSL_BROKERS, KAFKA_TLS_CA, KAFKA_SASL_USER,
// KAFKA_SASL_PASSWORD), or skips t (fails it with
// STACKSAGA_REQUIRE_SERVICES=1): scripts/services' Kafka has one; the
// compose file's and testcontainers' do not.
func KafkaSASLSSL(t testing.TB) KafkaSecure {
	t.Helper()
	if KafkaBrokers(t) == nil {
		return KafkaSecure{}
	}
	get := func(name string) string { return strings.TrimSpace(os.Getenv(name)) }
	brokers, ca, user, pass := get(EnvKafkaSASLSSLBrokers), get(EnvKafkaTLSCA), get(EnvKafkaSASLUser), get(EnvKafkaSASLPassword)
	if brokers == "" || ca == "" || user == "" || pass == "" {
		const why = "the Kafka TLS and SASL tests need a SASL_SSL listener: scripts/services' Kafka has one, and " +
			"`eval \"$(scripts/services env)\"` exports it (make test does it; a server an older scripts/services started has none until " +
			"`scripts/services down && scripts/services up`, and a JDK without keytool gives none: see up's warning); " +
			"against another Kafka, run `make test TEST_FLAGS='-skip OverTLS'`"
		Unavailable(t, fmt.Sprintf("%s, %s, %s or %s is not set: %s", EnvKafkaSASLSSLBrokers, EnvKafkaTLSCA, EnvKafkaSASLUser, EnvKafkaSASLPassword, why))
		return KafkaSecure{}
	}
	addrs, err := parseAddrs(brokers)
	if err == nil {
		err = checkReachable(addrs, 5*time.Second)
	}
	if err != nil {
		t.Fatalf("testenv: %s=%q: %v", EnvKafkaSASLSSLBrokers, brokers, err)
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatalf("testenv: %s: %v", EnvKafkaTLSCA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("testenv: %s=%s holds no PEM certificate", EnvKafkaTLSCA, ca)
	}
	return KafkaSecure{Brokers: addrs, TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		User: user, Password: pass}
}

// CassandraKeyspace creates a fresh keyspace (SimpleStrategy, replication
// factor 1) for t, drops it when t ends, and returns the contact points and
// the keyspace name. It keeps no session open between those two moments, so
// goroutine-leak checks in the caller's tests stay clean.
func CassandraKeyspace(t testing.TB) (hosts []string, keyspace string) {
	t.Helper()
	hosts = CassandraHosts(t)
	if hosts == nil {
		return nil, ""
	}
	keyspace = UniqueName(t, "ks")
	stmt := "CREATE KEYSPACE " + keyspace +
		" WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
	if err := execDDL(hosts, stmt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := execDDL(hosts, "DROP KEYSPACE IF EXISTS "+keyspace); err != nil {
			t.Errorf("testenv: drop keyspace %s: %v", keyspace, err)
		}
	})
	return hosts, keyspace
}

// execDDL runs one schema statement in a short-lived session.
func execDDL(hosts []string, stmt string) error {
	cluster := gocql.NewCluster(hosts...)
	cluster.Consistency = gocql.One
	cluster.Timeout = 60 * time.Second // schema changes on a loaded CI box
	cluster.ConnectTimeout = 10 * time.Second
	cluster.Logger = gocql.NewLogger(gocql.LogLevelNone)
	session, err := cluster.CreateSession()
	if err != nil {
		return fmt.Errorf("testenv: cassandra session on %v: %w", hosts, err)
	}
	defer session.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := session.Query(stmt).ExecContext(ctx); err != nil {
		return fmt.Errorf("testenv: %s: %w", stmt, err)
	}
	return nil
}

// maxNameLen keeps names valid as Cassandra keyspace and table names (48).
const maxNameLen = 48

// UniqueName returns a name that is unique per call, made of the lowercase
// letters, digits and underscores of prefix and of t's name, at most 48
// characters long and starting with a letter: valid as a Cassandra keyspace
// or table name and as a Kafka topic, group or transactional id.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testenv: random name suffix: %v", err)
	}
	return uniqueName(prefix, t.Name(), hex.EncodeToString(b[:]))
}

func uniqueName(prefix, testName, suffix string) string {
	p := sanitize(prefix)
	if len(p) > 16 {
		p = p[:16]
	}
	if p == "" || p[0] < 'a' || p[0] > 'z' {
		p = "t" + p
	}
	name := sanitize(testName)
	if room := maxNameLen - len(p) - len(suffix) - 2; len(name) > room {
		// Keep the end (the most specific part of a subtest path), starting
		// at a word boundary when there is one.
		cut := name[len(name)-room:]
		if i := strings.IndexByte(cut, '_'); i >= 0 && name[len(name)-room-1] != '_' {
			cut = cut[i+1:]
		}
		name = strings.TrimLeft(cut, "_")
	}
	parts := []string{p}
	if name != "" {
		parts = append(parts, name)
	}
	return strings.Join(append(parts, suffix), "_")
}

// sanitize lowercases s and turns every run of other characters into one "_".
func sanitize(s string) string {
	var b strings.Builder
	underscore := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			underscore = false
			continue
		}
		if !underscore && b.Len() > 0 {
			b.WriteByte('_')
			underscore = true
		}
	}
	return strings.TrimRight(b.String(), "_")
}

// parseAddrs splits a comma-separated host:port list.
func parseAddrs(v string) ([]string, error) {
	var addrs []string
	for _, a := range strings.Split(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("testenv: address %q is not host:port: %w", a, err)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, errors.New("testenv: no address listed")
	}
	return addrs, nil
}

// checkReachable makes sure at least one address accepts TCP connections.
func checkReachable(addrs []string, timeout time.Duration) error {
	var errs []error
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, timeout)
		if err == nil {
			c.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("testenv: nothing accepts connections: %w", errors.Join(errs...))
}

// Unavailable skips t because what it needs (a browser, a tool) is
// missing, or fails it when STACKSAGA_REQUIRE_SERVICES asks for everything.
func Unavailable(t testing.TB, what string) {
	t.Helper()
	if Required() {
		t.Fatalf("testenv: required (%s=1) but missing: %s", EnvRequireServices, what)
		return
	}
	t.Skipf("testenv: skipping: %s", what)
}

// Long skips a long integration test under `go test -short`, unless
// STACKSAGA_REQUIRE_SERVICES asks for everything (then it runs).
func Long(t testing.TB, what string) {
	t.Helper()
	if testing.Short() && !Required() {
		t.Skipf("testenv: skipping under -short: %s", what)
	}
}

// ClosedAddr returns a loopback address ("127.0.0.1:port") on which nothing
// listens: a port the kernel handed out and this process closed again. Tests
// use it for an address that must not answer, so that no traffic ever leaves
// the machine.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: reserve a loopback port: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("testenv: close %s: %v", addr, err)
	}
	return addr
}

// skipOrFail fails t when required, and skips it otherwise, with the same
// message (the cluster's helpers in cluster.go skip through it: this file
// is the only one allowed to skip).
func skipOrFail(t testing.TB, required bool, format string, args ...any) {
	t.Helper()
	if required {
		t.Fatalf(format, args...)
		return
	}
	t.Skipf(format, args...)
}
