package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestDockerKafkaMatchesCompose: without KAFKA_BROKERS, testenv's Docker
// branch runs the Kafka of docker-compose.yml (the same image, hence share
// groups) with the same settings, but for the addresses (a free host port
// of its own, the controller on a port clear of it) and the cluster id.
func TestDockerKafkaMatchesCompose(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	k := f.Services["kafka"]
	if k.Image != defaultKafkaImage {
		t.Errorf("testenv's Docker Kafka is %s, compose's %s", defaultKafkaImage, k.Image)
	}
	env := kafkaEnv(39092)
	addresses := map[string]bool{"CLUSTER_ID": true, "KAFKA_CONTROLLER_QUORUM_VOTERS": true, "KAFKA_LISTENERS": true, "KAFKA_ADVERTISED_LISTENERS": true}
	for name, want := range k.Environment {
		got, ok := env[name]
		switch {
		case !ok:
			t.Errorf("compose sets %s=%s, testenv's Docker Kafka does not", name, want)
		case !addresses[name] && got != want:
			t.Errorf("%s: testenv %q, compose %q", name, got, want)
		}
	}
	for name := range env {
		if _, ok := k.Environment[name]; !ok {
			t.Errorf("testenv's Docker Kafka sets %s, compose does not", name)
		}
	}
	if env["KAFKA_ADVERTISED_LISTENERS"] != "PLAINTEXT://127.0.0.1:39092" || env["KAFKA_LISTENERS"] != "PLAINTEXT://0.0.0.0:39092,CONTROLLER://0.0.0.0:29093" {
		t.Errorf("listeners: %s, advertised %s", env["KAFKA_LISTENERS"], env["KAFKA_ADVERTISED_LISTENERS"])
	}
}

// TestDockerIgnore: the compose file's ring coordinator build sends the
// sources as its context, not the repository's history, caches or the local
// servers' data (.cache/services), and keeps what the build needs.
func TestDockerIgnore(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimPrefix(l, "/"))
		}
	}
	excluded := func(path string) bool {
		for _, p := range patterns {
			for dir := path; dir != "."; dir = filepath.Dir(dir) {
				if ok, _ := filepath.Match(p, dir); ok {
					return true
				}
			}
		}
		return false
	}
	for _, p := range []string{".git/HEAD", ".cache/services/cassandra/data/x", ".cache/test.log"} {
		if !excluded(p) {
			t.Errorf("%s is sent to the Docker build", p)
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "ringcoordinator/config.go", "cmd/ringcoordinator/main.go", "examples/order-service/main.go", "eventstore/cassandra/schema.cql"} {
		if excluded(p) {
			t.Errorf("%s is left out of the Docker build, which needs it", p)
		}
	}
}
