package ringcoordinator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestConfigDefaults(t *testing.T) {
	c, err := LoadConfigWithEnv(nil, env(map[string]string{EnvToken: testToken}))
	if err == nil {
		err = c.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Token = testToken
	if c != want {
		t.Fatalf("empty document: %+v, want the defaults %+v", c, want)
	}
	if c.EffectivePublishOffset() != 30*time.Second || c.EffectiveGuard() != 2*time.Second || c.MasterListenAddr() != "127.0.0.1:7070" ||
		c.SlaveListenAddr() != "127.0.0.1:7071" ||
		c.TargetMasterAddr() != "localhost:7070" || c.ConnectorMasterAddr() != "" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestConfigYAMLAndEnv(t *testing.T) {
	doc := `
stacksaga:
  instance:
    region: us-central
    cluster: us-central-c1
  coordinator:
    deploy:
      index-based: true
    cycle: 10s
    http:
      address: 127.0.0.1:9000
  agent:
    master:
      port: 7100
      lazy-rebalance-cycles: 2
    slave:
      advertised-host: coordinator-1.coordinator
      target-master:
        host: coordinator-0.coordinator
        port: 7100
    connector:
      target-master:
        host: coordinator-0.coordinator
`
	c, err := LoadConfigWithEnv([]byte(doc), env(map[string]string{
		"STACKSAGA_INSTANCE_CLUSTER":            "us-central-c2",
		"STACKSAGA_AGENT_RECONNECT_MAX_BACKOFF": "PT3S",
		"STACKSAGA_AGENT_SLAVE_PORT":            " 7200 ",
		"STACKSAGA_AGENT_MASTER_HOST":           "",
		"STACKSAGA_COORDINATOR_INSECURE":        "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Region, want.Cluster = "us-central", "us-central-c2"
	want.IndexBased = true
	want.Cycle = 10 * time.Second
	want.HTTPAddr = "127.0.0.1:9000"
	want.MasterPort, want.LazyRebalanceCycles = 7100, 2
	want.SlavePort = 7200
	want.AdvertisedHost = "coordinator-1.coordinator"
	want.TargetMasterHost, want.TargetMasterPort = "coordinator-0.coordinator", 7100
	want.ConnectorMasterHost = "coordinator-0.coordinator"
	want.MaxBackoff = 3 * time.Second
	want.Insecure = true
	if c != want {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
	if c.EffectivePublishOffset() != 5*time.Second || c.EffectiveGuard() != 10*time.Second/30 {
		t.Fatalf("derived offset %v guard %v", c.EffectivePublishOffset(), c.EffectiveGuard())
	}
	if got := c.SlaveAdvertisedAddr("ignored"); got != "coordinator-1.coordinator:7200" {
		t.Fatalf("advertised %s", got)
	}
	if got := c.ConnectorMasterAddr(); got != "coordinator-0.coordinator:7070" {
		t.Fatalf("connector master %s", got)
	}
	if EnvName("agent.slave.target-master.host") != "STACKSAGA_AGENT_SLAVE_TARGET_MASTER_HOST" {
		t.Fatal(EnvName("agent.slave.target-master.host"))
	}
}

func TestConfigErrorsNameTheirKeys(t *testing.T) {
	doc := `
stacksaga:
  coordinator:
    deploy:
      role: boss
      index-based: maybe
    cycle: 60
    publish-offset: 2m
  agent:
    master:
      port: 70000
    connector:
      guard: -1s
    slave:
      target-master: {host: [a, b]}
`
	_, err := LoadConfigWithEnv([]byte(doc), env(map[string]string{"STACKSAGA_AGENT_RECONNECT_MIN_BACKOFF": "fast"}))
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, key := range []string{
		"stacksaga.coordinator.deploy.role: unknown role \"boss\"",
		"stacksaga.coordinator.deploy.index-based: not a boolean",
		"stacksaga.coordinator.cycle: duration \"60\" needs a unit",
		"stacksaga.coordinator.publish-offset: must lie strictly within the cycle",
		"stacksaga.agent.master.port: must be a port",
		"stacksaga.agent.connector.guard: must be 0 or more",
		"stacksaga.agent.slave.target-master.host: must be a scalar",
		"STACKSAGA_AGENT_RECONNECT_MIN_BACKOFF (stacksaga.agent.reconnect.min-backoff): invalid duration",
	} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not report %q:\n%v", key, err)
		}
	}
	if _, err := LoadConfigWithEnv([]byte("stacksaga: ["), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad YAML: %v", err)
	}
}

func TestConfigRoles(t *testing.T) {
	c := DefaultConfig()
	for _, r := range []struct {
		role          Role
		master, slave bool
	}{{RoleMaster, true, false}, {RoleSlave, false, true}, {RoleMasterSlave, true, true}} {
		c.Role = r.role
		m, s, err := c.Roles("whatever")
		if err != nil || m != r.master || s != r.slave {
			t.Errorf("role %s: master %v slave %v err %v", r.role, m, s, err)
		}
	}
	c.IndexBased = true
	for host, want := range map[string][2]bool{
		"coordinator-0":                     {true, false},
		"coordinator-1":                     {false, true},
		"coordinator-12.coordinator.ns.svc": {false, true},
		"ring-coordinator-0":                {true, false},
	} {
		m, s, err := c.Roles(host)
		if err != nil || m != want[0] || s != want[1] {
			t.Errorf("index-based on %s: master %v slave %v err %v", host, m, s, err)
		}
	}
	if _, _, err := c.Roles("laptop"); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "stacksaga.coordinator.deploy.ordinal") {
		t.Fatalf("host without ordinal: %v", err)
	}
	c.Ordinal = 0
	if m, s, _ := c.Roles("laptop"); !m || s {
		t.Fatal("ordinal 0 is not the master")
	}
}

// TestConfigToken: the token comes from the environment or a file, never
// from the document; without one (and without insecure) the configuration
// is refused naming the key, a short one too; Config's String hides it.
func TestConfigToken(t *testing.T) {
	c, err := LoadConfigWithEnv(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "stacksaga.coordinator.token-file: no token") {
		t.Fatalf("no token: %v", err)
	}
	_, err = LoadConfigWithEnv(nil, env(map[string]string{EnvToken: "short"}))
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "at least 16 bytes") || strings.Contains(err.Error(), "short") {
		t.Fatalf("short token: %v", err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = LoadConfigWithEnv([]byte("stacksaga: {coordinator: {token-file: "+file+"}, agent: {master: {max-slaves: 3}}}"), nil)
	if err != nil || c.Token != testToken || c.MaxSlaves != 3 {
		t.Fatalf("token file: %+v %v", c, err)
	}
	if strings.Contains(c.String(), testToken) || strings.Contains(fmt.Sprint(c), testToken) {
		t.Fatalf("String shows the token: %s", c)
	}
	_, err = LoadConfigWithEnv([]byte("stacksaga: {coordinator: {token-file: "+file+"}}"), env(map[string]string{EnvToken: testToken}))
	if err == nil || !strings.Contains(err.Error(), "stacksaga.coordinator.token-file: set together with") {
		t.Fatalf("token twice: %v", err)
	}
	_, err = LoadConfigWithEnv([]byte("stacksaga: {coordinator: {token-file: /nonexistent/token}}"), nil)
	if err == nil || !strings.Contains(err.Error(), "stacksaga.coordinator.token-file:") {
		t.Fatalf("missing token file: %v", err)
	}
	_, err = LoadConfigWithEnv([]byte("stacksaga: {coordinator: {token-file: /dev/zero}}"), nil)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("device as the token file: %v", err)
	}
	if c, err := LoadConfigWithEnv([]byte("stacksaga: {coordinator: {insecure: true}}"), nil); err != nil || c.Validate() != nil {
		t.Fatalf("insecure: %v", err)
	}
}
