package cassandra

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("cassandra: invalid configuration")

// Consistency is a consistency level name as written in configuration.
type Consistency string

// Consistency levels accepted in configuration (seed 000's property table:
// reads and writes QUORUM or LOCAL_QUORUM; LWTs SERIAL or LOCAL_SERIAL).
const (
	LocalQuorum Consistency = "LOCAL_QUORUM"
	Quorum      Consistency = "QUORUM"
	LocalSerial Consistency = "LOCAL_SERIAL"
	Serial      Consistency = "SERIAL"
)

func (c Consistency) gocql() gocql.Consistency {
	switch c {
	case Quorum:
		return gocql.Quorum
	case LocalSerial:
		return gocql.LocalSerial
	case Serial:
		return gocql.Serial
	default:
		return gocql.LocalQuorum
	}
}

// Timestamp generators.
const (
	// ServerTimestamps lets the coordinator assign write timestamps (the
	// seed's ServerSideTimestampGenerator); with token-aware routing a
	// saga's writes go to the same coordinator, whose clock orders them.
	ServerTimestamps = "server"
	// ClientTimestamps has the driver assign them from this process's clock.
	// The execution markers' rows also take LWTs, whose timestamps come
	// from the node's clock: with a process clock ahead of the nodes', a
	// plain marker write (a RELAXED put, a partition delete) hides the LWT
	// writes made after it within the skew (an insert that reports applied
	// and cannot be read; see TestMarkerWritesBesideLWTs).
	ClientTimestamps = "client"
)

// Reconnection is the exponential reconnection policy.
type Reconnection struct {
	// BaseDelay is the first delay. Default 1s.
	BaseDelay time.Duration `yaml:"base-delay"`
	// MaxDelay caps the delay. Default 60s.
	MaxDelay time.Duration `yaml:"max-delay"`
	// MaxRetries bounds the attempts to open a connection. Default 10.
	MaxRetries int `yaml:"max-retries"`
}

// Config is the connection configuration, the YAML keys under
// stacksaga.cassandra (mirroring seed 000's properties and its
// stacksaga-cassandra.conf driver example). Zero fields take the defaults
// named in their comments.
type Config struct {
	// ContactPoints are "host" or "host:port" (port 9042 when absent).
	// Default ["127.0.0.1:9042"].
	ContactPoints []string `yaml:"contact-points"`
	// Keyspace holds the StackSaga tables. Default "stacksaga_event_store".
	Keyspace string `yaml:"keyspace"`
	// LocalDatacenter is the data centre the DC-aware load balancing
	// prefers and LOCAL_* consistency levels are local to. Default
	// "datacenter1".
	LocalDatacenter string `yaml:"local-datacenter"`
	// Username and Password authenticate with PasswordAuthenticator when
	// Username is set.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// TLS encrypts the connections (see TLS). Default off.
	TLS TLS `yaml:"tls"`
	// ReadConsistency and WriteConsistency: LOCAL_QUORUM (default) or
	// QUORUM.
	ReadConsistency  Consistency `yaml:"read-consistency-level"`
	WriteConsistency Consistency `yaml:"write-consistency-level"`
	// SerialConsistency is used by lightweight transactions: LOCAL_SERIAL
	// (default) or SERIAL.
	SerialConsistency Consistency `yaml:"serial-consistency-level"`
	// RequestTimeout bounds one request. Default 10s.
	RequestTimeout time.Duration `yaml:"request-timeout"`
	// ConnectTimeout bounds opening a connection. Default 10s.
	ConnectTimeout time.Duration `yaml:"connect-timeout"`
	// ConnectionsPerHost is the pool size per host. Default 2.
	ConnectionsPerHost int `yaml:"connections-per-host"`
	// TimestampGenerator is "server" (default) or "client".
	TimestampGenerator string `yaml:"timestamp-generator"`
	// ReconnectionPolicy is the exponential reconnection policy.
	ReconnectionPolicy Reconnection `yaml:"reconnection-policy"`
	// Replication is used when the schema is created (CreateSchema, sagactl).
	Replication Replication `yaml:"replication"`
	// CreateSchema makes New apply the schema (idempotent) before
	// connecting to the keyspace. Default false: the schema is applied by
	// `sagactl schema apply`, the second step of seed 000's setup guide
	// (docs/design.md).
	CreateSchema bool `yaml:"create-schema"`
}

// Key prefix of every configuration key.
const keyPrefix = "stacksaga.cassandra."

// DefaultConfig returns the defaults: a local single data centre.
func DefaultConfig() Config { return Config{}.withDefaults() }

// withDefaults fills zero fields with their defaults.
func (c Config) withDefaults() Config {
	if len(c.ContactPoints) == 0 {
		c.ContactPoints = []string{"127.0.0.1:9042"}
	}
	if c.Keyspace == "" {
		c.Keyspace = "stacksaga_event_store"
	}
	if c.LocalDatacenter == "" {
		c.LocalDatacenter = "datacenter1"
	}
	if c.ReadConsistency == "" {
		c.ReadConsistency = LocalQuorum
	}
	if c.WriteConsistency == "" {
		c.WriteConsistency = LocalQuorum
	}
	if c.SerialConsistency == "" {
		c.SerialConsistency = LocalSerial
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.ConnectionsPerHost == 0 {
		c.ConnectionsPerHost = 2
	}
	if c.TimestampGenerator == "" {
		c.TimestampGenerator = ServerTimestamps
	}
	if c.ReconnectionPolicy.BaseDelay == 0 {
		c.ReconnectionPolicy.BaseDelay = time.Second
	}
	if c.ReconnectionPolicy.MaxDelay == 0 {
		c.ReconnectionPolicy.MaxDelay = 60 * time.Second
	}
	if c.ReconnectionPolicy.MaxRetries == 0 {
		c.ReconnectionPolicy.MaxRetries = 10
	}
	if c.Replication.Class == "" {
		c.Replication.Class = NetworkTopologyStrategy
	}
	if c.Replication.Class == SimpleStrategy && c.Replication.ReplicationFactor == 0 {
		c.Replication.ReplicationFactor = 1
	}
	if c.Replication.Class == NetworkTopologyStrategy && len(c.Replication.DataCenters) == 0 {
		c.Replication.DataCenters = map[string]int{c.LocalDatacenter: 3}
	}
	return c
}

// Validate reports every problem of c at once (errors.Join), each naming
// its full key; the result wraps ErrInvalidConfig. Call it on a Config
// with defaults applied (LoadConfig and New do).
func (c Config) Validate() error {
	p := yamlconfig.Problems{Prefix: keyPrefix}
	if len(c.ContactPoints) == 0 {
		p.Add("contact-points", "at least one contact point is required")
	}
	for _, cp := range c.ContactPoints {
		if err := checkContactPoint(cp); err != nil {
			p.Add("contact-points", "%v", err)
		}
	}
	if err := checkKeyspace(c.Keyspace); err != nil {
		p.Add("keyspace", "%v", err)
	}
	if !dcName.MatchString(c.LocalDatacenter) {
		p.Add("local-datacenter", "invalid data-centre name %q", c.LocalDatacenter)
	}
	if c.Password != "" && c.Username == "" {
		p.Add("username", "required when a password is set")
	}
	c.TLS.client(&p)
	for key, v := range map[string]Consistency{"read-consistency-level": c.ReadConsistency, "write-consistency-level": c.WriteConsistency} {
		if v != LocalQuorum && v != Quorum {
			p.Add(key, "must be LOCAL_QUORUM or QUORUM, got %q", string(v))
		}
	}
	if c.SerialConsistency != LocalSerial && c.SerialConsistency != Serial {
		p.Add("serial-consistency-level", "must be LOCAL_SERIAL or SERIAL, got %q", string(c.SerialConsistency))
	}
	if c.RequestTimeout <= 0 {
		p.Add("request-timeout", "must be positive, got %v", c.RequestTimeout)
	}
	if c.ConnectTimeout <= 0 {
		p.Add("connect-timeout", "must be positive, got %v", c.ConnectTimeout)
	}
	if c.ConnectionsPerHost < 1 {
		p.Add("connections-per-host", "must be at least 1, got %d", c.ConnectionsPerHost)
	}
	if c.TimestampGenerator != ServerTimestamps && c.TimestampGenerator != ClientTimestamps {
		p.Add("timestamp-generator", "must be %q or %q, got %q", ServerTimestamps, ClientTimestamps, c.TimestampGenerator)
	}
	rp := c.ReconnectionPolicy
	if rp.BaseDelay <= 0 {
		p.Add("reconnection-policy.base-delay", "must be positive, got %v", rp.BaseDelay)
	}
	if rp.MaxDelay < rp.BaseDelay {
		p.Add("reconnection-policy.max-delay", "must be at least base-delay (%v), got %v", rp.BaseDelay, rp.MaxDelay)
	}
	if rp.MaxRetries < 1 {
		p.Add("reconnection-policy.max-retries", "must be at least 1, got %d", rp.MaxRetries)
	}
	p.Append(c.Replication.validate(keyPrefix + "replication")...)
	return p.Err(ErrInvalidConfig)
}

func checkContactPoint(cp string) error {
	if strings.TrimSpace(cp) == "" {
		return errors.New("empty contact point")
	}
	host, port, err := net.SplitHostPort(cp)
	if err != nil {
		if strings.Contains(cp, ":") && !strings.Contains(cp, "::") {
			return fmt.Errorf("contact point %q: %v", cp, err)
		}
		return nil // a bare host
	}
	if host == "" {
		return fmt.Errorf("contact point %q: empty host", cp)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("contact point %q: invalid port %q", cp, port)
	}
	return nil
}

// file is the YAML document: stacksaga.cassandra holds Config; other keys
// (other packages' sections) are ignored.
type file struct {
	Stacksaga struct {
		Cassandra Config `yaml:"cassandra"`
	} `yaml:"stacksaga"`
}

// LoadConfig reads the stacksaga.cassandra section of a YAML document,
// applies the environment overrides (see ApplyEnv) from the process
// environment, fills defaults and validates. Keys of other sections and
// other packages' keys under stacksaga.cassandra are ignored.
func LoadConfig(data []byte) (Config, error) {
	return loadConfig(data, os.LookupEnv)
}

// LoadConfigFile is LoadConfig on the contents of the file at path.
func LoadConfigFile(path string) (Config, error) {
	return yamlconfig.LoadFile("cassandra", path, LoadConfig)
}

func loadConfig(data []byte, lookup func(string) (string, bool)) (Config, error) {
	var f file
	if err := yamlconfig.Decode(data, &f); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c := f.Stacksaga.Cassandra
	if err := c.ApplyEnv(lookup); err != nil {
		return Config{}, err
	}
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Environment variables that override configuration keys: the key's path
// upper-cased with '.' and '-' turned into '_'.
const (
	EnvContactPoints     = "STACKSAGA_CASSANDRA_CONTACT_POINTS" // comma-separated
	EnvKeyspace          = "STACKSAGA_CASSANDRA_KEYSPACE"
	EnvLocalDatacenter   = "STACKSAGA_CASSANDRA_LOCAL_DATACENTER"
	EnvUsername          = "STACKSAGA_CASSANDRA_USERNAME"
	EnvPassword          = "STACKSAGA_CASSANDRA_PASSWORD"
	EnvReadConsistency   = "STACKSAGA_CASSANDRA_READ_CONSISTENCY_LEVEL"
	EnvWriteConsistency  = "STACKSAGA_CASSANDRA_WRITE_CONSISTENCY_LEVEL"
	EnvSerialConsistency = "STACKSAGA_CASSANDRA_SERIAL_CONSISTENCY_LEVEL"
	EnvRequestTimeout    = "STACKSAGA_CASSANDRA_REQUEST_TIMEOUT" // a Go duration, "10s"
	EnvConnectTimeout    = "STACKSAGA_CASSANDRA_CONNECT_TIMEOUT"
	EnvReplication       = "STACKSAGA_CASSANDRA_REPLICATION"   // ParseReplication's form
	EnvCreateSchema      = "STACKSAGA_CASSANDRA_CREATE_SCHEMA" // true/false

	EnvTLSEnabled            = "STACKSAGA_CASSANDRA_TLS_ENABLED" // true/false; false turns TLS off whatever else is set
	EnvTLSCAFile             = "STACKSAGA_CASSANDRA_TLS_CA_FILE"
	EnvTLSCertFile           = "STACKSAGA_CASSANDRA_TLS_CERT_FILE"
	EnvTLSKeyFile            = "STACKSAGA_CASSANDRA_TLS_KEY_FILE"
	EnvTLSServerName         = "STACKSAGA_CASSANDRA_TLS_SERVER_NAME"
	EnvTLSInsecureSkipVerify = "STACKSAGA_CASSANDRA_TLS_INSECURE_SKIP_VERIFY" // true/false
)

// ApplyEnv overrides fields from the variables Env* (set and non-empty
// ones only), looked up with lookup (os.LookupEnv in LoadConfig). Every
// unparsable value is reported, naming the variable and the key.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	get := yamlconfig.Env(lookup)
	var errs []error
	str := func(name string, dst *string) {
		if v, ok := get(name); ok {
			*dst = v
		}
	}
	dur := func(name, key string, dst *time.Duration) {
		if v, ok := get(name); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, yamlconfig.EnvError(name, keyPrefix+key, err))
				return
			}
			*dst = d
		}
	}
	cons := func(name string, dst *Consistency) {
		if v, ok := get(name); ok {
			*dst = Consistency(strings.ToUpper(v))
		}
	}
	if v, ok := get(EnvContactPoints); ok {
		c.ContactPoints = nil
		for _, cp := range strings.Split(v, ",") {
			if cp = strings.TrimSpace(cp); cp != "" {
				c.ContactPoints = append(c.ContactPoints, cp)
			}
		}
	}
	str(EnvKeyspace, &c.Keyspace)
	str(EnvLocalDatacenter, &c.LocalDatacenter)
	str(EnvUsername, &c.Username)
	str(EnvPassword, &c.Password)
	cons(EnvReadConsistency, &c.ReadConsistency)
	cons(EnvWriteConsistency, &c.WriteConsistency)
	cons(EnvSerialConsistency, &c.SerialConsistency)
	dur(EnvRequestTimeout, "request-timeout", &c.RequestTimeout)
	dur(EnvConnectTimeout, "connect-timeout", &c.ConnectTimeout)
	if v, ok := get(EnvReplication); ok {
		r, err := ParseReplication(v)
		if err != nil {
			errs = append(errs, yamlconfig.EnvError(EnvReplication, keyPrefix+"replication", err))
		} else {
			c.Replication = r
		}
	}
	boolean := func(name, key string, dst *bool) {
		if v, ok := get(name); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, yamlconfig.EnvError(name, keyPrefix+key, err))
				return
			}
			*dst = b
		}
	}
	boolean(EnvCreateSchema, "create-schema", &c.CreateSchema)
	str(EnvTLSCAFile, &c.TLS.CAFile)
	str(EnvTLSCertFile, &c.TLS.CertFile)
	str(EnvTLSKeyFile, &c.TLS.KeyFile)
	str(EnvTLSServerName, &c.TLS.ServerName)
	boolean(EnvTLSInsecureSkipVerify, "tls.insecure-skip-verify", &c.TLS.InsecureSkipVerify)
	boolean(EnvTLSEnabled, "tls.enabled", &c.TLS.Enabled)
	if _, set := get(EnvTLSEnabled); set && !c.TLS.Enabled {
		c.TLS = TLS{} // false: off, whatever the YAML says
	}
	if len(errs) > 0 {
		return errors.Join(append([]error{ErrInvalidConfig}, errs...)...)
	}
	return nil
}

// cluster builds the driver configuration (see clusterWith), reading the
// TLS files. Its error (TLS files that cannot be read, wrapping
// ErrInvalidConfig) names the key.
func (c Config) cluster(qo gocql.QueryObserver, bo gocql.BatchObserver) (*gocql.ClusterConfig, error) {
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	return c.clusterWith(tlsCfg, qo, bo), nil
}

// tlsConfig reads the TLS files into the connections' TLS configuration
// (nil when TLS is off); its error names the key.
func (c Config) tlsConfig() (*tls.Config, error) {
	p := yamlconfig.Problems{Prefix: keyPrefix}
	tlsCfg := c.TLS.client(&p)
	return tlsCfg, p.Err(ErrInvalidConfig)
}

// clusterWith builds a new driver configuration (each session needs its
// own: the token-aware policy cannot be shared): token-aware routing over
// DC-aware round robin, per-statement consistency, the statement
// observer, tlsCfg (nil: plain connections).
func (c Config) clusterWith(tlsCfg *tls.Config, qo gocql.QueryObserver, bo gocql.BatchObserver) *gocql.ClusterConfig {
	cl := gocql.NewCluster(c.ContactPoints...)
	cl.SslOpts = sslOptions(tlsCfg)
	cl.Keyspace = c.Keyspace
	cl.Consistency = c.WriteConsistency.gocql()
	cl.SerialConsistency = c.SerialConsistency.gocql()
	cl.Timeout = c.RequestTimeout
	cl.WriteTimeout = c.RequestTimeout
	cl.ConnectTimeout = c.ConnectTimeout
	cl.NumConns = c.ConnectionsPerHost
	cl.DefaultTimestamp = c.TimestampGenerator == ClientTimestamps
	cl.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(
		gocql.DCAwareRoundRobinPolicy(c.LocalDatacenter), gocql.DoNotShuffleReplicas())
	cl.ReconnectionPolicy = &gocql.ExponentialReconnectionPolicy{
		MaxRetries:      c.ReconnectionPolicy.MaxRetries,
		InitialInterval: c.ReconnectionPolicy.BaseDelay,
		MaxInterval:     c.ReconnectionPolicy.MaxDelay,
	}
	// Only idempotent statements (reads and plain upserts/deletes) are
	// retried by the driver; LWTs are retried by the store, which can tell
	// an unknown outcome from a refusal.
	cl.RetryPolicy = &gocql.ExponentialBackoffRetryPolicy{NumRetries: 3, Min: 50 * time.Millisecond, Max: time.Second}
	if c.Username != "" {
		cl.Authenticator = gocql.PasswordAuthenticator{Username: c.Username, Password: c.Password}
	}
	cl.QueryObserver = qo
	cl.BatchObserver = bo
	return cl
}
