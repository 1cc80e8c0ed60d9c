package topics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/topics"
)

func TestValidInstanceID(t *testing.T) {
	for _, id := range []string{"order-service-0", "a", "pod_1.eu-west", strings.Repeat("x", topics.MaxInstanceIDLen)} {
		if err := topics.ValidInstanceID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", "pod 1", "pod/1", "pod:1", "é", strings.Repeat("x", topics.MaxInstanceIDLen+1)} {
		if err := topics.ValidInstanceID(id); err == nil {
			t.Errorf("%q: accepted", id)
		}
	}
}

func TestMembershipValidate(t *testing.T) {
	if err := (topics.Membership{}).Validate(); err != nil {
		t.Errorf("zero value: %v", err)
	}
	ok := topics.Membership{InstanceID: "order-service-0", SessionTimeout: 10 * time.Second}
	if err := ok.Validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
	err := topics.Membership{InstanceID: "pod 1", SessionTimeout: 500 * time.Millisecond}.Validate()
	if err == nil || !strings.Contains(err.Error(), "instance-id: ") || !strings.Contains(err.Error(), "session-timeout: ") {
		t.Errorf("both invalid: %v", err)
	}
	if err := (topics.Membership{SessionTimeout: 31 * time.Minute}).Validate(); err == nil {
		t.Error("a session timeout over the maximum was accepted")
	}
	if err := (topics.Membership{SessionTimeout: -time.Second}).Validate(); err == nil {
		t.Error("a negative session timeout was accepted")
	}
}

func TestMembershipTimeout(t *testing.T) {
	if got := (topics.Membership{}).Timeout(); got != topics.DefaultSessionTimeout {
		t.Errorf("default: %v, want %v", got, topics.DefaultSessionTimeout)
	}
	if got := (topics.Membership{SessionTimeout: time.Minute}).Timeout(); got != time.Minute {
		t.Errorf("set: %v", got)
	}
}

func TestLoadGroupConfigMembership(t *testing.T) {
	c, err := topics.LoadGroupConfig([]byte(`
stacksaga:
  kafka:
    orchestrator:
      domains:
        default: { session-timeout: 20s }
        place-order: { session-timeout: 6s }
    worker:
      services:
        payment-service: { session-timeout: 1m }
`))
	if err != nil {
		t.Fatal(err)
	}
	if e := c.Domain("place-order"); e.SessionTimeout != 6*time.Second {
		t.Errorf("place-order: %+v", e)
	}
	if e := c.Domain("other"); e.SessionTimeout != 20*time.Second {
		t.Errorf("other: %+v", e)
	}
	if e := c.Service("payment-service"); e.SessionTimeout != time.Minute {
		t.Errorf("payment-service: %+v", e)
	}
	for doc, key := range map[string]string{
		"stacksaga:\n  kafka: {worker: {services: {s: {session-timeout: 100ms}}}}\n":                       "stacksaga.kafka.worker.services.s.session-timeout",
		"stacksaga:\n  kafka: {worker: {services: {s: {session-timeout: soon}}}}\n":                        "stacksaga.kafka.worker.services.s.session-timeout",
		"stacksaga:\n  kafka: {orchestrator: {domains: {d: {group-type: SHARE, session-timeout: 10s}}}}\n": "stacksaga.kafka.orchestrator.domains.d.session-timeout",
	} {
		_, err := topics.LoadGroupConfig([]byte(doc))
		if !errors.Is(err, topics.ErrInvalidGroupConfig) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v, want one naming %s", doc, err, key)
		}
	}
}
