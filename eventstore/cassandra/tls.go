package cassandra

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"gopkg.in/yaml.v3"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// TLS encrypts the connections to the nodes, as the server's
// client_encryption_options expect (managed Cassandra services require it).
// It is on when Enabled or any other field is set; the zero value is plain
// connections. An explicit `enabled: false` in the YAML block turns it off
// whatever its other keys (or the environment's file and name variables)
// set; STACKSAGA_CASSANDRA_TLS_ENABLED=false does too, clearing the fields.
// Enabled or Config set afterwards (STACKSAGA_CASSANDRA_TLS_ENABLED=true, or
// code) turns it back on with the other fields. A node's certificate is
// verified against CAFile (the system's roots without it) and must carry
// ServerName when set; without it, the IP address the driver dials, among
// its IP subject alternative names: the driver resolves a contact point's
// host name to addresses and checks those, so a certificate that names
// only a DNS host needs ServerName. Relative file names are relative to
// the working directory.
type TLS struct {
	// Enabled turns TLS on with the system's roots and no client
	// certificate (every other field implies it, unless the YAML block
	// says `enabled: false`).
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM file of the certificates that sign the nodes'
	// certificates, used instead of the system's roots.
	CAFile string `yaml:"ca-file"`
	// CertFile and KeyFile are the PEM certificate and private key this
	// client presents, for nodes that require client certificates
	// (require_client_auth). Both or neither.
	CertFile string `yaml:"cert-file"`
	KeyFile  string `yaml:"key-file"`
	// ServerName is the name every node's certificate must carry: for
	// certificates that name a DNS host (the driver dials IP addresses),
	// or nodes that share one certificate.
	ServerName string `yaml:"server-name"`
	// InsecureSkipVerify accepts any certificate: the connection is
	// encrypted but the node is not authenticated. For tests only.
	InsecureSkipVerify bool `yaml:"insecure-skip-verify"`
	// Config, when set, is the TLS configuration itself (cloned), used
	// instead of the fields above: for certificates kept in memory or
	// rotated (tls.Config.GetClientCertificate). Not read from YAML.
	Config *tls.Config `yaml:"-"`

	// off records an explicit `enabled: false` in YAML (UnmarshalYAML):
	// the other keys then do not turn TLS on.
	off bool
}

// UnmarshalYAML decodes the tls block as usual and remembers whether it
// says `enabled: false` explicitly, which a bool cannot tell from an absent
// key. An invalid enabled value is reported under its full key.
func (t *TLS) UnmarshalYAML(n *yaml.Node) error {
	// yaml.v3 resolves aliases before, and calls no unmarshaler for a
	// null value (`tls:`, `tls: ~`: nothing set).
	if n.Kind != yaml.MappingNode {
		got := map[yaml.Kind]string{yaml.SequenceNode: "a sequence", yaml.DocumentNode: "a document"}[n.Kind]
		if got == "" {
			got = fmt.Sprintf("%q", n.Value)
		}
		return fmt.Errorf("%stls: line %d: want a mapping of TLS settings (enabled, ca-file, cert-file, key-file, server-name, insecure-skip-verify), got %s",
			keyPrefix, n.Line, got)
	}
	type fields TLS // TLS without this method, decoded field by field
	var explicit struct {
		Enabled *bool `yaml:"enabled"`
	}
	eerr := n.Decode(&explicit)
	if err := n.Decode((*fields)(t)); err != nil {
		return nameKey(err, eerr, keyPrefix+"tls.enabled")
	}
	t.off = explicit.Enabled != nil && !*explicit.Enabled
	return nil
}

// nameKey returns err, the decoding error of a whole block, with the
// messages that sub, the error of decoding the block's key alone, repeats
// prefixed by key (yaml's messages name only a line).
func nameKey(err, sub error, key string) error {
	var all, own *yaml.TypeError
	if !errors.As(err, &all) || !errors.As(sub, &own) {
		return err
	}
	named := &yaml.TypeError{Errors: slices.Clone(all.Errors)}
	left := slices.Clone(own.Errors)
	for i, msg := range named.Errors {
		if j := slices.Index(left, msg); j >= 0 {
			named.Errors[i] = key + ": " + msg
			left = slices.Delete(left, j, j+1)
		}
	}
	return named
}

// on reports whether TLS is on: Enabled or Config (set in code or by
// STACKSAGA_CASSANDRA_TLS_ENABLED=true) always turn it on, the other
// fields unless the YAML said `enabled: false`.
func (t TLS) on() bool {
	if t.Enabled || t.Config != nil {
		return true
	}
	return !t.off && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify)
}

// client builds the connections' TLS configuration (nil when TLS is off),
// reading the files; every problem is added to p under its key.
func (t TLS) client(p *yamlconfig.Problems) *tls.Config {
	if !t.on() {
		return nil
	}
	if t.Config != nil {
		if t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify {
			p.Add("tls", "set either Config or the file, server-name and insecure-skip-verify keys, not both")
		}
		return t.Config.Clone()
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		switch {
		case err != nil:
			p.Add("tls.ca-file", "%v", err)
		default:
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				p.Add("tls.ca-file", "%s holds no PEM certificate", t.CAFile)
			}
		}
	}
	switch {
	case t.CertFile == "" && t.KeyFile == "":
	case t.CertFile == "":
		p.Add("tls.cert-file", "required with tls.key-file")
	case t.KeyFile == "":
		p.Add("tls.key-file", "required with tls.cert-file")
	default:
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			p.Add("tls.cert-file", "with tls.key-file: %v", err)
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	return cfg
}

// sslOptions is the driver's form of cfg: the driver verifies a node's
// certificate unless cfg says not to, taking the address it dials as the
// server name when cfg has none.
func sslOptions(cfg *tls.Config) *gocql.SslOptions {
	if cfg == nil {
		return nil
	}
	return &gocql.SslOptions{Config: cfg, EnableHostVerification: !cfg.InsecureSkipVerify}
}
