package testenv

// The Docker branch: used only when KAFKA_BROKERS / CASSANDRA_HOSTS are unset
// and a Docker engine answers. It is not exercised on machines without Docker
// (ours and CI run the servers from scripts/services instead).

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tccassandra "github.com/testcontainers/testcontainers-go/modules/cassandra"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Images of the Docker branch; override with the environment variables
// STACKSAGA_TEST_KAFKA_IMAGE and STACKSAGA_TEST_CASSANDRA_IMAGE.
//
// Kafka is the image docker-compose.yml runs, apache/kafka 4.4 (share
// groups on), configured as compose configures it
// (TestDockerKafkaMatchesCompose). The testcontainers-go kafka module (v0.44)
// drives only the Confluent images' startup scripts (Kafka 3.9 in
// confluent-local 7.9, without share groups), so the container is started
// with the generic API instead.
const (
	defaultKafkaImage     = "apache/kafka:4.4.0"
	defaultCassandraImage = "cassandra:5.0"
)

// kafkaEnv is the apache/kafka container's environment for a broker that
// listens, and is advertised, on 127.0.0.1:port of the host (the container
// port is bound to the same host port, so the advertised address holds on
// both sides). The settings are docker-compose.yml's.
func kafkaEnv(port int) map[string]string {
	p := strconv.Itoa(port)
	return map[string]string{
		"CLUSTER_ID":                                             "c3RhY2tzYWdhLXRlc3QwMQ",
		"KAFKA_NODE_ID":                                          "1",
		"KAFKA_PROCESS_ROLES":                                    "broker,controller",
		"KAFKA_CONTROLLER_QUORUM_VOTERS":                         "1@localhost:29093",
		"KAFKA_LISTENERS":                                        "PLAINTEXT://0.0.0.0:" + p + ",CONTROLLER://0.0.0.0:29093",
		"KAFKA_ADVERTISED_LISTENERS":                             "PLAINTEXT://127.0.0.1:" + p,
		"KAFKA_CONTROLLER_LISTENER_NAMES":                        "CONTROLLER",
		"KAFKA_INTER_BROKER_LISTENER_NAME":                       "PLAINTEXT",
		"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":                   "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"KAFKA_NUM_PARTITIONS":                                   "1",
		"KAFKA_DEFAULT_REPLICATION_FACTOR":                       "1",
		"KAFKA_MIN_INSYNC_REPLICAS":                              "1",
		"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":                 "1",
		"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":                     "3",
		"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR":         "1",
		"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":                    "1",
		"KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS":             "3",
		"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
		"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR":            "1",
		"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":                 "0",
		"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS":                     "1000",
		"KAFKA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS":             "1000",
		"KAFKA_GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS":         "500",
		"KAFKA_GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS":            "6000",
		"KAFKA_GROUP_SHARE_HEARTBEAT_INTERVAL_MS":                "1000",
		"KAFKA_GROUP_SHARE_MIN_HEARTBEAT_INTERVAL_MS":            "500",
		"KAFKA_GROUP_SHARE_MIN_SESSION_TIMEOUT_MS":               "6000",
		"KAFKA_GROUP_SHARE_MIN_RECORD_LOCK_DURATION_MS":          "1000",
		"KAFKA_HEAP_OPTS":                                        "-Xms512m -Xmx512m",
	}
}

// freeLoopbackPort returns a TCP port free on 127.0.0.1 a moment ago.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

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
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, fmt.Errorf("testenv: kafka container port: %w", err)
	}
	cport := network.MustParsePort(strconv.Itoa(port) + "/tcp")
	c, err := testcontainers.Run(ctx, imageFromEnv("STACKSAGA_TEST_KAFKA_IMAGE", defaultKafkaImage),
		testcontainers.WithEnv(kafkaEnv(port)),
		testcontainers.WithExposedPorts(cport.String()),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{cport: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}}}
		}),
		testcontainers.WithWaitStrategy(wait.ForLog("Kafka Server started").WithStartupTimeout(3*time.Minute)),
		testcontainers.WithReuseByName(kafkaContainerName),
	)
	if err != nil {
		return nil, fmt.Errorf("testenv: kafka container: %w", err)
	}
	// A container reused by name keeps the address it was created with.
	inspect, err := c.Inspect(ctx)
	if err != nil {
		return nil, fmt.Errorf("testenv: kafka container: %w", err)
	}
	for _, e := range inspect.Config.Env {
		if v, ok := strings.CutPrefix(e, "KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://"); ok {
			return []string{v}, nil
		}
	}
	return nil, fmt.Errorf("testenv: kafka container %s has no KAFKA_ADVERTISED_LISTENERS", kafkaContainerName)
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
