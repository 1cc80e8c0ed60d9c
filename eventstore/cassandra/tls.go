package cassandra

import (
	"crypto/tls"
	"crypto/x509"
	"os"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// TLS encrypts the connections to the nodes, as the server's
// client_encryption_options expect (managed Cassandra services require it).
// It is on when Enabled or any other field is set; the zero value is plain
// connections. `enabled: false` next to other keys does not turn it off
// (a false bool is not told from an absent one); removing the keys does, and
// so does STACKSAGA_CASSANDRA_TLS_ENABLED=false, whatever else is set. A node's certificate is verified against CAFile (the
// system's roots without it) and must carry ServerName when set; without
// it, the IP address the driver dials, among its IP subject alternative
// names: the driver resolves a contact point's host name to addresses and
// checks those, so a certificate that names only a DNS host needs
// ServerName. Relative file names are relative to the working directory.
type TLS struct {
	// Enabled turns TLS on with the system's roots and no client
	// certificate (every other field implies it).
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
}

func (t TLS) on() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" ||
		t.InsecureSkipVerify || t.Config != nil
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
