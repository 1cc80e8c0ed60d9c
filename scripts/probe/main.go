// Command probe checks that the services started by scripts/services answer
// real requests: a Kafka metadata request (listing brokers) and a CQL query
// (SELECT release_version FROM system.local).
//
// Usage:
//
//	go run ./scripts/probe kafka 127.0.0.1:9092
//	go run ./scripts/probe cassandra 127.0.0.1:9042
//	go run ./scripts/probe -nodes 3 kafka 127.0.0.1:9192,127.0.0.2:9192
//	go run ./scripts/probe -nodes 3 cassandra 127.0.0.2:9043
//
// With -nodes n (scripts/services' cluster) it also requires n brokers in
// Kafka's metadata, or n nodes in the gossip of the Cassandra node it asks
// (system_views.gossip_info), every one of them NORMAL (joined the ring).
//
// It makes one attempt bounded by -timeout and exits 0 when the server
// answered, 1 otherwise; scripts/services calls it in a retry loop.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	timeout := flag.Duration("timeout", 10*time.Second, "bound of one probe attempt")
	nodes := flag.Int("nodes", 0, "require this many brokers (kafka) or NORMAL gossip peers, itself included (cassandra)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: probe [-timeout d] [-nodes n] kafka|cassandra host:port[,host:port...]")
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	addrs := strings.Split(flag.Arg(1), ",")
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var (
		info string
		err  error
	)
	switch flag.Arg(0) {
	case "kafka":
		info, err = probeKafka(ctx, addrs, *nodes)
	case "cassandra":
		info, err = probeCassandra(ctx, addrs, *timeout, *nodes)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	fmt.Println(info)
}

func probeKafka(ctx context.Context, addrs []string, nodes int) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return "", fmt.Errorf("probe: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("probe: kafka metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return "", errors.New("probe: kafka metadata lists no broker")
	}
	if md.Controller < 0 {
		return "", errors.New("probe: kafka metadata names no controller")
	}
	if len(md.Brokers) < nodes {
		return "", fmt.Errorf("probe: kafka metadata lists %d broker(s), want %d", len(md.Brokers), nodes)
	}
	return fmt.Sprintf("kafka cluster %s: %d broker(s), controller %d", md.Cluster, len(md.Brokers), md.Controller), nil
}

func probeCassandra(ctx context.Context, addrs []string, timeout time.Duration, nodes int) (string, error) {
	hosts := make([]string, 0, len(addrs))
	port := 9042
	for _, a := range addrs {
		h, p, err := net.SplitHostPort(a)
		if err != nil {
			hosts = append(hosts, a)
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return "", fmt.Errorf("probe: bad port in %q: %w", a, err)
		}
		port = n
		hosts = append(hosts, h)
	}
	cluster := gocql.NewCluster(hosts...)
	cluster.Port = port
	cluster.Timeout = timeout
	cluster.ConnectTimeout = timeout
	cluster.DisableInitialHostLookup = true
	cluster.Logger = gocql.NewLogger(gocql.LogLevelNone)
	session, err := cluster.CreateSession()
	if err != nil {
		return "", fmt.Errorf("probe: cql session: %w", err)
	}
	defer session.Close()
	var version string
	if err := session.Query("SELECT release_version FROM system.local").ScanContext(ctx, &version); err != nil {
		return "", fmt.Errorf("probe: cql query: %w", err)
	}
	if nodes == 0 {
		return "cassandra release_version " + version, nil
	}
	ring, err := gossipRing(ctx, session)
	if err != nil {
		return "", err
	}
	normal := 0
	for _, st := range ring {
		if strings.HasPrefix(st, "NORMAL") {
			normal++
		}
	}
	if normal < nodes {
		return "", fmt.Errorf("probe: gossip shows %d NORMAL node(s) of %d, want %d: %v", normal, len(ring), nodes, ring)
	}
	return fmt.Sprintf("cassandra release_version %s, gossip: %d nodes NORMAL", version, normal), nil
}

// gossipRing maps each node the asked node gossips with (itself included)
// to its gossip status (e.g. "NORMAL,<token>", "BOOT,...", "shutdown").
func gossipRing(ctx context.Context, session *gocql.Session) (map[string]string, error) {
	iter := session.Query("SELECT * FROM system_views.gossip_info").IterContext(ctx)
	ring := make(map[string]string)
	for {
		row := make(map[string]any)
		if !iter.MapScan(row) {
			break
		}
		addr := fmt.Sprint(row["address"])
		st, _ := row["status_with_port"].(string)
		if st == "" {
			st, _ = row["status"].(string)
		}
		ring[addr] = st
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("probe: gossip_info: %w", err)
	}
	return ring, nil
}
