package ringcoordinator

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("ringcoordinator: invalid configuration")

// Role is what a coordinator process runs.
type Role string

// Roles.
const (
	RoleMaster      Role = "master"
	RoleSlave       Role = "slave"
	RoleMasterSlave Role = "master-slave" // both, in one process (small deployments)
)

// Default ports and address.
const (
	DefaultMasterPort = 7070
	DefaultSlavePort  = 7071
	DefaultHTTPAddr   = ":7080"
)

// Config is the ring coordinator's configuration: the keys below, under the
// stacksaga root (the seed's names where it gives them, marked *):
//
//	instance.region*                       Region (default "default")
//	instance.cluster*                      Cluster: the virtual cluster (default "default")
//	coordinator.deploy.index-based*        IndexBased: role from the StatefulSet ordinal (false)
//	coordinator.deploy.role                Role when not index-based (master-slave)
//	coordinator.deploy.ordinal             Ordinal (default: from the host name, "coordinator-2" is 2)
//	coordinator.cycle                      Cycle: the publish cycle (1m)
//	coordinator.publish-offset             PublishOffset: publish instant in a cycle (0: half the cycle, second 30)
//	coordinator.http.address               HTTPAddr: /healthz and /readyz (":7080"; "off" disables)
//	coordinator.token-file                 TokenFile: a file holding the shared token (see WithToken)
//	coordinator.insecure                   Insecure: run without a token (false; see WithInsecure)
//	agent.master.host / .port              MasterHost, MasterPort: the master's bind address (127.0.0.1:7070)
//	agent.master.lazy-rebalance-cycles     LazyRebalanceCycles (0)
//	agent.master.max-slaves                MaxSlaves: slaves registered at once (256)
//	agent.slave.host / .port               SlaveHost, SlavePort: the slave's bind address (127.0.0.1:7071)
//	agent.slave.advertised-host / -port    AdvertisedHost, AdvertisedPort: how orchestrators reach the slave
//	                                       (default the host name and SlavePort)
//	agent.slave.target-master.host* / .port*  TargetMasterHost, TargetMasterPort: the slave's master
//	                                       (default localhost:7070; the local master when both roles run)
//	agent.connector.target-master.host / .port  ConnectorMasterHost, ConnectorMasterPort: a retry node's master
//	agent.connector.guard                  Guard: a retry node stops this long before its minute ends (0: cycle/30)
//	agent.reconnect.min-backoff / max-backoff  MinBackoff, MaxBackoff (200ms, 10s)
//
// Each key has an environment override: its full path upper-cased with
// '.' and '-' turned into '_' (STACKSAGA_INSTANCE_REGION,
// STACKSAGA_AGENT_SLAVE_TARGET_MASTER_HOST, ...). The token itself is
// never a YAML key: it comes from the environment variable EnvToken
// (STACKSAGA_COORDINATOR_TOKEN) or from the file at coordinator.token-file.
// The hosts bind loopback by default: to bind wider (e.g. 0.0.0.0 in a
// pod), set them and a token.
type Config struct {
	Region, Cluster string

	IndexBased bool
	Role       Role
	// Ordinal is the StatefulSet ordinal; -1: taken from the host name.
	Ordinal int

	Cycle         time.Duration
	PublishOffset time.Duration
	HTTPAddr      string

	MasterHost          string
	MasterPort          int
	LazyRebalanceCycles int

	SlaveHost        string
	SlavePort        int
	AdvertisedHost   string
	AdvertisedPort   int
	TargetMasterHost string
	TargetMasterPort int

	ConnectorMasterHost string
	ConnectorMasterPort int
	Guard               time.Duration

	MinBackoff, MaxBackoff time.Duration

	// Token is the shared secret (from EnvToken or TokenFile; never
	// logged). TokenFile is the file it was read from.
	Token     string
	TokenFile string
	// Insecure runs without a token.
	Insecure  bool
	MaxSlaves int
}

// EnvToken is the environment variable holding the coordinator's token.
const EnvToken = "STACKSAGA_COORDINATOR_TOKEN"

// String describes c without its token.
func (c Config) String() string {
	if c.Token != "" {
		c.Token = "[redacted]"
	}
	type plain Config
	return fmt.Sprintf("%+v", plain(c))
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Region: DefaultRegion, Cluster: DefaultCluster,
		Role: RoleMasterSlave, Ordinal: -1,
		Cycle: DefaultCycle, HTTPAddr: DefaultHTTPAddr,
		MasterHost: "127.0.0.1", MasterPort: DefaultMasterPort,
		SlaveHost: "127.0.0.1", SlavePort: DefaultSlavePort,
		MaxSlaves:        DefaultMaxSlaves,
		TargetMasterHost: "localhost", TargetMasterPort: DefaultMasterPort,
		ConnectorMasterPort: DefaultMasterPort,
		MinBackoff:          DefaultMinBackoff, MaxBackoff: DefaultMaxBackoff,
	}
}

// MasterListenAddr is the master's bind address.
func (c Config) MasterListenAddr() string { return hostPort(c.MasterHost, c.MasterPort) }

// SlaveListenAddr is the slave's bind address.
func (c Config) SlaveListenAddr() string { return hostPort(c.SlaveHost, c.SlavePort) }

// SlaveAdvertisedAddr is the address orchestrators are given for the slave:
// AdvertisedHost (or hostname) and AdvertisedPort (or SlavePort).
func (c Config) SlaveAdvertisedAddr(hostname string) string {
	host, port := c.AdvertisedHost, c.AdvertisedPort
	if host == "" {
		host = hostname
	}
	if port == 0 {
		port = c.SlavePort
	}
	return hostPort(host, port)
}

// TargetMasterAddr is the master a slave registers with.
func (c Config) TargetMasterAddr() string { return hostPort(c.TargetMasterHost, c.TargetMasterPort) }

// ConnectorMasterAddr is the master a retry node asks for a slave ("" if
// no host is configured).
func (c Config) ConnectorMasterAddr() string {
	if c.ConnectorMasterHost == "" {
		return ""
	}
	return hostPort(c.ConnectorMasterHost, c.ConnectorMasterPort)
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

var ordinalSuffix = regexp.MustCompile(`-(\d+)$`)

// Roles resolves which roles this process runs. Index-based: ordinal 0 is
// the master, any other a slave; the ordinal is Ordinal or, if that is -1,
// the number ending hostname (a StatefulSet pod is named <set>-<ordinal>).
// Otherwise Role decides.
func (c Config) Roles(hostname string) (master, slave bool, err error) {
	if !c.IndexBased {
		switch c.Role {
		case RoleMaster:
			return true, false, nil
		case RoleSlave:
			return false, true, nil
		case RoleMasterSlave, "":
			return true, true, nil
		}
		return false, false, fmt.Errorf("%w: %srole: unknown role %q (want master, slave or master-slave)", ErrInvalidConfig, keyDeploy, c.Role)
	}
	ord := c.Ordinal
	if ord < 0 {
		host, _, _ := strings.Cut(hostname, ".")
		m := ordinalSuffix.FindStringSubmatch(host)
		if m == nil {
			return false, false, fmt.Errorf("%w: %sindex-based: host name %q does not end in -<ordinal> (a StatefulSet pod's does); set %sordinal",
				ErrInvalidConfig, keyDeploy, hostname, keyDeploy)
		}
		ord, err = strconv.Atoi(m[1])
		if err != nil {
			return false, false, fmt.Errorf("%w: %sindex-based: host name %q: %w", ErrInvalidConfig, keyDeploy, hostname, err)
		}
	}
	return ord == 0, ord != 0, nil
}

// Validate reports every problem of c at once, each naming its key. Unlike
// LoadConfig it also requires what a process running a role needs: a token,
// or Insecure.
func (c Config) Validate() error {
	p := yamlconfig.Problems{Prefix: "stacksaga."}
	c.check(&p)
	if c.Token == "" && !c.Insecure {
		p.Add("coordinator.token-file", "no token: set %s or coordinator.token-file, or coordinator.insecure: true to run unauthenticated", EnvToken)
	}
	return p.Err(ErrInvalidConfig)
}

func (c Config) check(p *yamlconfig.Problems) {
	if strings.TrimSpace(c.Region) == "" {
		p.Add("instance.region", "must not be empty")
	}
	if strings.TrimSpace(c.Cluster) == "" {
		p.Add("instance.cluster", "must not be empty")
	}
	switch c.Role {
	case RoleMaster, RoleSlave, RoleMasterSlave:
	default:
		p.Add("coordinator.deploy.role", "unknown role %q (want master, slave or master-slave)", c.Role)
	}
	if c.Ordinal < -1 {
		p.Add("coordinator.deploy.ordinal", "must be 0 or more, got %d", c.Ordinal)
	}
	if c.Cycle < MinCycle || c.Cycle%time.Millisecond != 0 {
		p.Add("coordinator.cycle", "must be whole milliseconds and at least %v, got %v", MinCycle, c.Cycle)
	}
	if c.PublishOffset < 0 || c.PublishOffset >= c.Cycle {
		p.Add("coordinator.publish-offset", "must lie strictly within the cycle (%v), got %v", c.Cycle, c.PublishOffset)
	}
	if c.Guard < 0 || c.Guard >= c.Cycle/2 {
		p.Add("agent.connector.guard", "must be 0 or more and under half the cycle (%v), got %v", c.Cycle, c.Guard)
	}
	if c.LazyRebalanceCycles < 0 {
		p.Add("agent.master.lazy-rebalance-cycles", "must be 0 or more, got %d", c.LazyRebalanceCycles)
	}
	port := func(key string, v int, zeroOK bool) {
		if v < 0 || v > 65535 || (v == 0 && !zeroOK) {
			p.Add(key, "must be a port (1..65535), got %d", v)
		}
	}
	port("agent.master.port", c.MasterPort, true)
	port("agent.slave.port", c.SlavePort, true)
	port("agent.slave.advertised-port", c.AdvertisedPort, true)
	port("agent.slave.target-master.port", c.TargetMasterPort, false)
	port("agent.connector.target-master.port", c.ConnectorMasterPort, false)
	if c.MinBackoff <= 0 {
		p.Add("agent.reconnect.min-backoff", "must be positive, got %v", c.MinBackoff)
	}
	if c.MaxBackoff < c.MinBackoff {
		p.Add("agent.reconnect.max-backoff", "must be at least min-backoff (%v), got %v", c.MinBackoff, c.MaxBackoff)
	}
	if c.MaxSlaves <= 0 {
		p.Add("agent.master.max-slaves", "must be positive, got %d", c.MaxSlaves)
	}
	if c.Token != "" && len(c.Token) < MinTokenLength {
		key := "coordinator.token-file"
		if c.TokenFile == "" {
			key = "coordinator.token (" + EnvToken + ")"
		}
		p.Add(key, "the token must be at least %d bytes, got %d", MinTokenLength, len(c.Token))
	}
}

// keyDeploy prefixes the deploy keys in messages.
const keyDeploy = "stacksaga.coordinator.deploy."

// key describes one configuration key: its path under stacksaga, and how
// to set it from a string.
type key struct {
	path string
	set  func(c *Config, v string) error
}

func (k key) env() string {
	return "STACKSAGA_" + strings.NewReplacer(".", "_", "-", "_").Replace(strings.ToUpper(k.path))
}

func str(dst func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *dst(c) = v; return nil }
}

func integer(dst func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("not an integer: %q", v)
		}
		*dst(c) = n
		return nil
	}
}

func duration(dst func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := ParseDuration(v)
		if err != nil {
			return err
		}
		*dst(c) = d
		return nil
	}
}

func boolean(dst func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("not a boolean: %q", v)
		}
		*dst(c) = b
		return nil
	}
}

// keys lists every key, in document order.
var keys = []key{
	{"instance.region", str(func(c *Config) *string { return &c.Region })},
	{"instance.cluster", str(func(c *Config) *string { return &c.Cluster })},
	{"coordinator.deploy.index-based", boolean(func(c *Config) *bool { return &c.IndexBased })},
	{"coordinator.deploy.role", func(c *Config, v string) error { c.Role = Role(strings.ToLower(v)); return nil }},
	{"coordinator.deploy.ordinal", integer(func(c *Config) *int { return &c.Ordinal })},
	{"coordinator.cycle", duration(func(c *Config) *time.Duration { return &c.Cycle })},
	{"coordinator.publish-offset", duration(func(c *Config) *time.Duration { return &c.PublishOffset })},
	{"coordinator.http.address", str(func(c *Config) *string { return &c.HTTPAddr })},
	{"coordinator.token-file", str(func(c *Config) *string { return &c.TokenFile })},
	{"coordinator.insecure", boolean(func(c *Config) *bool { return &c.Insecure })},
	{"agent.master.host", str(func(c *Config) *string { return &c.MasterHost })},
	{"agent.master.port", integer(func(c *Config) *int { return &c.MasterPort })},
	{"agent.master.lazy-rebalance-cycles", integer(func(c *Config) *int { return &c.LazyRebalanceCycles })},
	{"agent.master.max-slaves", integer(func(c *Config) *int { return &c.MaxSlaves })},
	{"agent.slave.host", str(func(c *Config) *string { return &c.SlaveHost })},
	{"agent.slave.port", integer(func(c *Config) *int { return &c.SlavePort })},
	{"agent.slave.advertised-host", str(func(c *Config) *string { return &c.AdvertisedHost })},
	{"agent.slave.advertised-port", integer(func(c *Config) *int { return &c.AdvertisedPort })},
	{"agent.slave.target-master.host", str(func(c *Config) *string { return &c.TargetMasterHost })},
	{"agent.slave.target-master.port", integer(func(c *Config) *int { return &c.TargetMasterPort })},
	{"agent.connector.target-master.host", str(func(c *Config) *string { return &c.ConnectorMasterHost })},
	{"agent.connector.target-master.port", integer(func(c *Config) *int { return &c.ConnectorMasterPort })},
	{"agent.connector.guard", duration(func(c *Config) *time.Duration { return &c.Guard })},
	{"agent.reconnect.min-backoff", duration(func(c *Config) *time.Duration { return &c.MinBackoff })},
	{"agent.reconnect.max-backoff", duration(func(c *Config) *time.Duration { return &c.MaxBackoff })},
}

// EnvName returns the environment variable that overrides the key
// stacksaga.<path> (e.g. "instance.region": STACKSAGA_INSTANCE_REGION).
func EnvName(path string) string { return key{path: path}.env() }

// LoadConfig reads the ring coordinator's keys of a YAML document (see
// Config), applies the environment overrides from the process environment,
// fills the defaults and validates. Other keys are ignored; a key set to
// null or "" takes its default. Durations are Go durations ("30s") or
// ISO-8601 ("PT30S").
func LoadConfig(data []byte) (Config, error) { return LoadConfigWithEnv(data, os.LookupEnv) }

// LoadConfigFile is LoadConfig on the contents of the file at path.
func LoadConfigFile(path string) (Config, error) {
	return yamlconfig.LoadFile("ringcoordinator", path, LoadConfig)
}

// LoadConfigWithEnv is LoadConfig with the environment read through lookup
// (nil: no environment overrides).
func LoadConfigWithEnv(data []byte, lookup func(string) (string, bool)) (Config, error) {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	var doc struct {
		Stacksaga map[string]any `yaml:"stacksaga"`
	}
	if err := yamlconfig.Decode(data, &doc); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c := DefaultConfig()
	p := yamlconfig.Problems{Prefix: "stacksaga."}
	for _, k := range keys {
		v, ok, err := lookupPath(doc.Stacksaga, k.path)
		if err != nil {
			p.Add(k.path, "%v", err)
			continue
		}
		if !ok {
			continue
		}
		if err := k.set(&c, v); err != nil {
			p.Add(k.path, "%w", err)
		}
	}
	get := yamlconfig.Env(lookup)
	for _, k := range keys {
		v, ok := get(k.env())
		if !ok {
			continue
		}
		if err := k.set(&c, v); err != nil {
			p.Append(yamlconfig.EnvError(k.env(), "stacksaga."+k.path, err))
		}
	}
	if v, ok := get(EnvToken); ok {
		c.Token = v
	}
	if c.TokenFile != "" {
		if c.Token != "" {
			p.Add("coordinator.token-file", "set together with %s: give the token one way", EnvToken)
		} else if tok, err := readTokenFile(c.TokenFile); err != nil {
			p.Add("coordinator.token-file", "%w", err)
		} else {
			c.Token = tok
		}
	}
	c.check(&p)
	if err := p.Err(ErrInvalidConfig); err != nil {
		return Config{}, err
	}
	return c, nil
}

// maxTokenFile bounds the size of a token file.
const maxTokenFile = 4 << 10

// readTokenFile reads the token in the regular file at path (surrounding
// white space trimmed); a device, a pipe or a file over 4 KiB is refused.
func readTokenFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxTokenFile {
		return "", fmt.Errorf("%s: not a regular file of at most %d bytes", path, maxTokenFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// EffectivePublishOffset is PublishOffset, or half the cycle if 0.
func (c Config) EffectivePublishOffset() time.Duration {
	if c.PublishOffset == 0 {
		return DefaultPublishOffset(c.Cycle)
	}
	return c.PublishOffset
}

// EffectiveGuard is Guard, or a thirtieth of the cycle if 0.
func (c Config) EffectiveGuard() time.Duration {
	if c.Guard == 0 {
		return DefaultGuard(c.Cycle)
	}
	return c.Guard
}

// lookupPath finds the scalar at a dotted path of a decoded YAML tree.
func lookupPath(tree map[string]any, path string) (string, bool, error) {
	parts := strings.Split(path, ".")
	var cur any = tree
	for _, part := range parts {
		m, ok := cur.(map[string]any)
		if !ok || m == nil {
			return "", false, nil
		}
		cur, ok = m[part]
		if !ok {
			return "", false, nil
		}
	}
	switch v := cur.(type) {
	case nil:
		return "", false, nil
	case map[string]any, []any:
		return "", false, errors.New("must be a scalar")
	default:
		s := strings.TrimSpace(fmt.Sprint(v))
		return s, s != "", nil
	}
}

// ParseDuration parses a Go duration ("30s", "1m", "500ms") or an ISO-8601
// duration ("PT30S"). A bare number is refused: its unit would be
// ambiguous.
func ParseDuration(s string) (time.Duration, error) { return yamlconfig.ParseDuration(s) }
