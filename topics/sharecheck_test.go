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

// A client whose kgo.MaxVersions caps ShareAcknowledge below v2 cannot
// send renewals, whatever the brokers take: ProbeShareGroups reports no
// lock renewal and says it is the client's cap (and the brokers' age where
// they are old too).
func TestProbeShareGroupsClientCap(t *testing.T) {
	ack := (&kmsg.ShareAcknowledgeRequest{}).Key()
	capped := kversion.Stable()
	capped.SetMaxKeyVersion(ack, 1)
	oldBroker := kversion.V4_2_0()
	oldBroker.SetMaxKeyVersion(ack, 1)
	for _, c := range []struct {
		name   string
		broker *kversion.Versions // nil: the newest
		client *kversion.Versions // nil: kgo's default
		why    []string
	}{
		{name: "uncapped"},
		{name: "client capped at v2", client: kversion.V4_2_0()},
		{name: "client capped at v1", client: capped, why: []string{"client's kgo.MaxVersions caps ShareAcknowledge at v1"}},
		{name: "old broker", broker: oldBroker, why: []string{"brokers take ShareAcknowledge up to v1"}},
		{name: "both", broker: oldBroker, client: capped, why: []string{"brokers take ShareAcknowledge up to v1", "client's kgo.MaxVersions caps"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kopts := []kfake.Opt{kfake.NumBrokers(1)}
			if c.broker != nil {
				kopts = append(kopts, kfake.MaxVersions(c.broker))
			}
			cluster, err := kfake.NewCluster(kopts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
			if c.client != nil {
				opts = append(opts, kgo.MaxVersions(c.client))
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			s, err := topics.ProbeShareGroups(t.Context(), cl)
			if err != nil {
				t.Fatal(err)
			}
			if s.LockRenewal != (len(c.why) == 0) {
				t.Errorf("%+v, want LockRenewal %v", s, len(c.why) == 0)
			}
			for _, w := range c.why {
				if !strings.Contains(s.NoLockRenewal, w) {
					t.Errorf("NoLockRenewal %q, want it to say %q", s.NoLockRenewal, w)
				}
			}
			if len(c.why) == 0 && s.NoLockRenewal != "" {
				t.Errorf("NoLockRenewal %q with renewal", s.NoLockRenewal)
			}
		})
	}
}

// A client whose kgo.MaxVersions leaves out a share-group API cannot
// consume in a share group at all: the probe fails naming the APIs (and
// not as the brokers' lack of support).
func TestProbeShareGroupsClientLeavesOutAPIs(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	for name, c := range map[string]struct {
		versions *kversion.Versions
		says     []string
	}{
		"pinned to Kafka 3.9": {kversion.V3_9_0(), []string{"ShareGroupHeartbeat", "ShareFetch", "ShareAcknowledge"}},
		"without ShareFetch": {func() *kversion.Versions {
			v := kversion.Stable()
			v.SetMaxKeyVersion((&kmsg.ShareFetchRequest{}).Key(), -1)
			return v
		}(), []string{"ShareFetch"}},
	} {
		t.Run(name, func(t *testing.T) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.MaxVersions(c.versions))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			_, err = topics.ProbeShareGroups(t.Context(), cl)
			if err == nil || errors.Is(err, topics.ErrShareGroupsUnsupported) || !strings.Contains(err.Error(), "kgo.MaxVersions leaves out") {
				t.Fatalf("err = %v, want the client's cap named (not ErrShareGroupsUnsupported)", err)
			}
			for _, api := range c.says {
				if !strings.Contains(err.Error(), api) {
					t.Errorf("%v does not name %s", err, api)
				}
			}
		})
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
