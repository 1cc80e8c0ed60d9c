package topics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
	"github.com/stacksaga-go/stacksaga/topics"
)

func checkShare(t *testing.T, brokers []string) error {
	t.Helper()
	_, err := probeShare(t, brokers)
	return err
}

func probeShare(t *testing.T, brokers []string) (topics.ShareSupport, error) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := topics.CheckShareGroups(ctx, cl); err != nil {
		return topics.ShareSupport{}, err
	}
	return topics.ProbeShareGroups(ctx, cl)
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
	if s, err := probeShare(t, cur.ListenAddrs()); err != nil || !s.LockRenewal {
		t.Errorf("newest in-process broker: %+v, %v; want share groups with lock renewal", s, err)
	}
}

// Lock renewal (KIP-1222) came with Kafka 4.2's ShareAcknowledge v2: a
// broker with share groups but ShareAcknowledge v1 (a 4.1 cluster with
// share.version finalized) has none.
func TestProbeShareGroupsLockRenewal(t *testing.T) {
	v1 := kversion.V4_2_0()
	v1.SetMaxKeyVersion((&kmsg.ShareAcknowledgeRequest{}).Key(), 1)
	for _, c := range []struct {
		v     *kversion.Versions
		name  string
		renew bool
	}{{v1, "ShareAcknowledge v1", false}, {kversion.V4_2_0(), "4.2", true}} {
		cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.MaxVersions(c.v))
		if err != nil {
			t.Fatal(err)
		}
		s, err := probeShare(t, cl.ListenAddrs())
		cl.Close()
		if err != nil || s.LockRenewal != c.renew {
			t.Errorf("%s: %+v, %v; want LockRenewal %v", c.name, s, err, c.renew)
		}
	}
}

// The project's real Kafka (scripts/services) has share groups, with lock
// renewal.
func TestCheckShareGroupsKafka(t *testing.T) {
	s, err := probeShare(t, testenv.KafkaBrokers(t))
	if err != nil || !s.LockRenewal {
		t.Fatalf("%+v, %v; want share groups with lock renewal", s, err)
	}
}
