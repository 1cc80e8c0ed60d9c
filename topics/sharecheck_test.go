package topics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/topics"
)

func checkShare(t *testing.T, brokers []string) error {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return topics.CheckShareGroups(ctx, cl)
}

// A broker without share groups (Kafka 3.9) is refused with
// ErrShareGroupsUnsupported naming what it lacks; the in-process broker at
// its newest version has them.
func TestCheckShareGroupsInProcess(t *testing.T) {
	old, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.MaxVersions(kversion.V3_9_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	err = checkShare(t, old.ListenAddrs())
	if !errors.Is(err, topics.ErrShareGroupsUnsupported) || !strings.Contains(err.Error(), "share.version") || !strings.Contains(err.Error(), "ShareFetch") {
		t.Errorf("Kafka 3.9: %v, want ErrShareGroupsUnsupported naming share.version and ShareFetch", err)
	}
	cur, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	if err := checkShare(t, cur.ListenAddrs()); err != nil {
		t.Errorf("newest in-process broker: %v", err)
	}
}

// The project's real Kafka (scripts/services) has share groups.
func TestCheckShareGroupsKafka(t *testing.T) {
	if err := checkShare(t, testenv.KafkaBrokers(t)); err != nil {
		t.Fatal(err)
	}
}
