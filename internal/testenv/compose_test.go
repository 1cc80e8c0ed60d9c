package testenv_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// composeFile is the part of docker-compose.yml this test checks.
type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Ports       []string          `yaml:"ports"`
		Environment map[string]string `yaml:"environment"`
		Healthcheck struct {
			Test     []string `yaml:"test"`
			Interval string   `yaml:"interval"`
			Retries  int      `yaml:"retries"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// TestDockerCompose checks that docker-compose.yml offers Kafka (KRaft),
// Cassandra 5.0 and PostgreSQL on the ports the tests and scripts/services use, with health
// checks that run a real client request.
func TestDockerCompose(t *testing.T) {
	var f composeFile
	readYAML(t, composePath, &f)
	cases := []struct {
		service, imagePrefix, port, healthWord string
	}{
		{"kafka", "apache/kafka:4.", "127.0.0.1:9092:9092", "kafka-broker-api-versions"},
		{"cassandra", "cassandra:5.0", "127.0.0.1:9042:9042", "cqlsh"},
		{"postgres", "postgres:1", "127.0.0.1:55432:5432", "pg_isready"},
	}
	for _, c := range cases {
		s, ok := f.Services[c.service]
		if !ok {
			t.Errorf("service %q missing (have %v)", c.service, keys(f.Services))
			continue
		}
		if !strings.HasPrefix(s.Image, c.imagePrefix) {
			t.Errorf("%s: image %q, want %s*", c.service, s.Image, c.imagePrefix)
		}
		if len(s.Ports) != 1 || s.Ports[0] != c.port {
			t.Errorf("%s: ports %q, want [%s]", c.service, s.Ports, c.port)
		}
		hc := s.Healthcheck
		if len(hc.Test) < 2 || (hc.Test[0] != "CMD" && hc.Test[0] != "CMD-SHELL") ||
			!strings.Contains(strings.Join(hc.Test, " "), c.healthWord) || hc.Interval == "" || hc.Retries < 1 {
			t.Errorf("%s: healthcheck %+v, want a CMD/CMD-SHELL test running %s with interval and retries", c.service, hc, c.healthWord)
		}
	}
	k := f.Services["kafka"].Environment
	for key, want := range map[string]string{
		"KAFKA_PROCESS_ROLES":        "broker,controller",
		"KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://127.0.0.1:9092",
	} {
		if k[key] != want {
			t.Errorf("kafka: %s = %q, want %q", key, k[key], want)
		}
	}
	if got := f.Services["cassandra"].Environment["CASSANDRA_BROADCAST_RPC_ADDRESS"]; got != "127.0.0.1" {
		t.Errorf("cassandra: CASSANDRA_BROADCAST_RPC_ADDRESS = %q, want 127.0.0.1 so clients reach the published port", got)
	}
	pg := f.Services["postgres"].Environment
	if pg["POSTGRES_PASSWORD"] == "" || pg["POSTGRES_HOST_AUTH_METHOD"] == "trust" {
		t.Errorf("postgres: environment %v, want password authentication", pg)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestComposeObservabilityProfile checks the optional observability profile:
// Jaeger (OTLP and UI), Prometheus and Grafana only start with --profile
// observability, Prometheus scrapes every example service on the port
// docs/observability.md gives it, and Grafana, on loopback, is provisioned
// with that Prometheus as its datasource and the StackSaga dashboard (whose
// queries cmd/sagademo's metrics tests check against a real scrape).
func TestComposeObservabilityProfile(t *testing.T) {
	var f struct {
		Services map[string]struct {
			Image      string   `yaml:"image"`
			Profiles   []string `yaml:"profiles"`
			Ports      []string `yaml:"ports"`
			Volumes    []string `yaml:"volumes"`
			ExtraHosts []string `yaml:"extra_hosts"`
		} `yaml:"services"`
	}
	readYAML(t, composePath, &f)
	for name, s := range f.Services {
		observability := name == "jaeger" || name == "prometheus" || name == "grafana"
		if inProfile := len(s.Profiles) == 1 && s.Profiles[0] == "observability"; inProfile != observability {
			t.Errorf("%s: profiles %v", name, s.Profiles)
		}
	}
	j, p := f.Services["jaeger"], f.Services["prometheus"]
	if !strings.HasPrefix(j.Image, "jaegertracing/") || !slices.Contains(j.Ports, "127.0.0.1:16686:16686") || !slices.Contains(j.Ports, "127.0.0.1:4318:4318") {
		t.Errorf("jaeger: image %q ports %v, want the UI and OTLP/HTTP on loopback", j.Image, j.Ports)
	}
	if !strings.HasPrefix(p.Image, "prom/prometheus:") || !slices.Contains(p.Ports, "127.0.0.1:9090:9090") ||
		!slices.Contains(p.Volumes, "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro") || !slices.Contains(p.ExtraHosts, "host.docker.internal:host-gateway") {
		t.Errorf("prometheus: %+v", p)
	}
	g := f.Services["grafana"]
	if !strings.HasPrefix(g.Image, "grafana/grafana:") || !slices.Equal(g.Ports, []string{"127.0.0.1:3000:3000"}) ||
		!slices.Contains(g.Volumes, "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro") ||
		!slices.Contains(g.Volumes, "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro") {
		t.Errorf("grafana: %+v", g)
	}
	checkGrafanaProvisioning(t)
	cfg, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(cfg, &prom); err != nil {
		t.Fatalf("deploy/prometheus.yml: %v", err)
	}
	jobs := map[string]string{}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				jobs[sc.JobName] = tg
			}
		}
	}
	for job, target := range map[string]string{
		"order-service": "host.docker.internal:9464", "inventory-service": "host.docker.internal:9465",
		"payment-service": "host.docker.internal:9466", "shipping-service": "host.docker.internal:9467",
		"sagademo": "host.docker.internal:9468",
	} {
		if jobs[job] != target {
			t.Errorf("deploy/prometheus.yml: job %s scrapes %q, want %q", job, jobs[job], target)
		}
	}
}

// checkGrafanaProvisioning: the datasource is the profile's Prometheus under
// the uid the dashboard's panels name, the dashboards provider reads the
// directory compose mounts, and the dashboard is valid JSON whose every
// panel queries that datasource.
func checkGrafanaProvisioning(t *testing.T) {
	t.Helper()
	dir := filepath.Join("..", "..", "deploy", "grafana")
	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(dir, "provisioning", "datasources", "prometheus.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Fatalf("grafana datasources: %+v", ds)
	}
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(dir, "provisioning", "dashboards", "stacksaga.yml"), &prov)
	if len(prov.Providers) != 1 || prov.Providers[0].Options.Path != "/var/lib/grafana/dashboards" {
		t.Fatalf("grafana dashboard providers: %+v", prov)
	}
	data, err := os.ReadFile(filepath.Join(dir, "dashboards", "stacksaga.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("stacksaga.json: %v", err)
	}
	if d.UID == "" || len(d.Panels) < 8 {
		t.Fatalf("stacksaga.json: uid %q, %d panels", d.UID, len(d.Panels))
	}
	for _, p := range d.Panels {
		if p.Datasource.UID != ds.Datasources[0].UID || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %q, %d queries", p.Title, p.Datasource.UID, len(p.Targets))
		}
	}
}

// composePath is the repository's docker-compose.yml, from this package.
var composePath = filepath.Join("..", "..", "docker-compose.yml")

// readYAML decodes the YAML file at path into v.
func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestComposeClusterProfile checks the optional cluster profile against
// what scripts/services --cluster configures (docs/clusters.md): three
// Cassandra 5.0 nodes of one data centre, a rack each, joining one after
// the other, CQL published on 127.0.0.1-3:9043; three KRaft brokers, each
// broker and controller, of one voter set, advertising 127.0.0.1-3:9192,
// with replication factor 3 and min.insync.replicas 2 (internal topics
// too). Only with --profile cluster, on ports that do not clash with the
// single-node services'. No Docker runs here: the profile itself is
// untested, its shape is what this test checks.
func TestComposeClusterProfile(t *testing.T) {
	var f struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Profiles    []string          `yaml:"profiles"`
			Ports       []string          `yaml:"ports"`
			Environment map[string]string `yaml:"environment"`
			DependsOn   any               `yaml:"depends_on"` // a list or a map
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	readYAML(t, composePath, &f)
	single := map[string]bool{}
	var cluster []string
	for name, s := range f.Services {
		inCluster := slices.Equal(s.Profiles, []string{"cluster"})
		if strings.HasPrefix(name, "cluster-") != inCluster {
			t.Errorf("%s: profiles %v: the cluster-* services, and only they, are in the cluster profile", name, s.Profiles)
		}
		if inCluster {
			cluster = append(cluster, name)
			continue
		}
		for _, p := range s.Ports {
			single[p[:strings.LastIndex(p, ":")]] = true
		}
	}
	if len(cluster) != 6 {
		t.Errorf("cluster profile: %v, want 3 Cassandra nodes and 3 brokers", cluster)
	}
	var voters []string
	for n := 1; n <= 3; n++ {
		voters = append(voters, fmt.Sprintf("%d@cluster-kafka-%d:19192", n, n))
	}
	for n := 1; n <= 3; n++ {
		ip := fmt.Sprintf("127.0.0.%d", n)
		c := f.Services[fmt.Sprintf("cluster-cassandra-%d", n)]
		if !strings.HasPrefix(c.Image, "cassandra:5.0") || !slices.Equal(c.Ports, []string{ip + ":9043:9042"}) {
			t.Errorf("cluster-cassandra-%d: image %q ports %v, want cassandra:5.0 on %s:9043", n, c.Image, c.Ports, ip)
		}
		for k, want := range map[string]string{
			"CASSANDRA_CLUSTER_NAME": "stacksaga-cluster", "CASSANDRA_SEEDS": "cluster-cassandra-1",
			"CASSANDRA_ENDPOINT_SNITCH": "GossipingPropertyFileSnitch", "CASSANDRA_DC": "datacenter1",
			"CASSANDRA_RACK": fmt.Sprintf("rack%d", n), "CASSANDRA_BROADCAST_RPC_ADDRESS": ip,
		} {
			if got := c.Environment[k]; got != want {
				t.Errorf("cluster-cassandra-%d: %s = %q, want %q", n, k, got, want)
			}
		}
		deps, _ := c.DependsOn.(map[string]any)
		prev, _ := deps[fmt.Sprintf("cluster-cassandra-%d", n-1)].(map[string]any)
		if n > 1 && prev["condition"] != "service_healthy" {
			t.Errorf("cluster-cassandra-%d: depends_on %v, want node %d healthy first (nodes join one at a time)", n, c.DependsOn, n-1)
		}
		if !strings.Contains(strings.Join(c.Healthcheck.Test, " "), "cqlsh") {
			t.Errorf("cluster-cassandra-%d: healthcheck %v", n, c.Healthcheck.Test)
		}
		k := f.Services[fmt.Sprintf("cluster-kafka-%d", n)]
		if !strings.HasPrefix(k.Image, "apache/kafka:4.") || !slices.Equal(k.Ports, []string{ip + ":9192:9192"}) {
			t.Errorf("cluster-kafka-%d: image %q ports %v, want apache/kafka:4.* on %s:9192", n, k.Image, k.Ports, ip)
		}
		for key, want := range map[string]string{
			"KAFKA_NODE_ID": fmt.Sprint(n), "KAFKA_PROCESS_ROLES": "broker,controller",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":   strings.Join(voters, ","),
			"KAFKA_DEFAULT_REPLICATION_FACTOR": "3", "KAFKA_MIN_INSYNC_REPLICAS": "2",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "3", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "2", "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "3",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "2", "KAFKA_BROKER_RACK": fmt.Sprintf("rack%d", n),
			"CLUSTER_ID": f.Services["cluster-kafka-1"].Environment["CLUSTER_ID"],
		} {
			if got := k.Environment[key]; got != want || got == "" {
				t.Errorf("cluster-kafka-%d: %s = %q, want %q", n, key, got, want)
			}
		}
		if adv := k.Environment["KAFKA_ADVERTISED_LISTENERS"]; !strings.Contains(adv, "EXTERNAL://"+ip+":9192") {
			t.Errorf("cluster-kafka-%d: advertised listeners %q, want EXTERNAL://%s:9192", n, adv, ip)
		}
		for _, s := range []string{fmt.Sprintf("cluster-cassandra-%d", n), fmt.Sprintf("cluster-kafka-%d", n)} {
			for _, p := range f.Services[s].Ports {
				if hostPort := p[:strings.LastIndex(p, ":")]; single[hostPort] {
					t.Errorf("%s: port %s clashes with a single-node service's", s, hostPort)
				}
			}
		}
	}
}
