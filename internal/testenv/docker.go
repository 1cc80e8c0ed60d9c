package testenv

// The Docker branch: used only when KAFKA_BROKERS / CASSANDRA_HOSTS are unset
// and a Docker engine answers. It is not exercised on machines without Docker
// (ours and CI run the servers from scripts/services instead).

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tccassandra "github.com/testcontainers/testcontainers-go/modules/cassandra"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
)

// Images of the Docker branch; override with the environment variables
// STACKSAGA_TEST_KAFKA_IMAGE and STACKSAGA_TEST_CASSANDRA_IMAGE.
//
// The testcontainers-go kafka module (v0.44) drives the Confluent images'
// startup scripts, so the Docker branch runs Confluent Local (Apache Kafka
// inside); docker-compose.yml runs the apache/kafka image.
const (
	defaultKafkaImage     = "confluentinc/confluent-local:7.9.0"
	defaultCassandraImage = "cassandra:5.0"
)

// Containers are reused by name, so the packages of one `go test ./...` run
// share one Kafka and one Cassandra; testcontainers' reaper removes them when
// the run ends.
const (
	kafkaContainerName     = "stacksaga-test-kafka"
	cassandraContainerName = "stacksaga-test-cassandra"
)

// dockerAnswers reports whether a Docker engine responds; it never panics.
func dockerAnswers() (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Health(ctx) == nil // Health closes the provider
}

func imageFromEnv(envVar, def string) string {
	if v := os.Getenv(envVar); v != "" {
		return v
	}
	return def
}

func startKafkaContainer(ctx context.Context) ([]string, error) {
	c, err := tckafka.Run(ctx, imageFromEnv("STACKSAGA_TEST_KAFKA_IMAGE", defaultKafkaImage),
		tckafka.WithClusterID("stacksaga-test"),
		testcontainers.WithReuseByName(kafkaContainerName),
	)
	if err != nil {
		return nil, fmt.Errorf("testenv: kafka container: %w", err)
	}
	brokers, err := c.Brokers(ctx)
	if err != nil {
		return nil, fmt.Errorf("testenv: kafka container brokers: %w", err)
	}
	return brokers, nil
}

func startCassandraContainer(ctx context.Context) ([]string, error) {
	c, err := tccassandra.Run(ctx, imageFromEnv("STACKSAGA_TEST_CASSANDRA_IMAGE", defaultCassandraImage),
		testcontainers.WithReuseByName(cassandraContainerName),
	)
	if err != nil {
		return nil, fmt.Errorf("testenv: cassandra container: %w", err)
	}
	host, err := c.ConnectionHost(ctx)
	if err != nil {
		return nil, fmt.Errorf("testenv: cassandra container host: %w", err)
	}
	return []string{host}, nil
}
