package testenv_test

import (
	"os"
	"path/filepath"
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

// TestDockerCompose checks that docker-compose.yml offers Kafka (KRaft) and
// Cassandra 5.0 on the ports the tests and scripts/services use, with health
// checks that run a real client request.
func TestDockerCompose(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	cases := []struct {
		service, imagePrefix, port, healthWord string
	}{
		{"kafka", "apache/kafka:4.", "127.0.0.1:9092:9092", "kafka-broker-api-versions"},
		{"cassandra", "cassandra:5.0", "127.0.0.1:9042:9042", "cqlsh"},
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
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
