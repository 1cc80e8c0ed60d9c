package topics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/topics"
)

func TestLoadGroupConfig(t *testing.T) {
	c, err := topics.LoadGroupConfig([]byte(`
stacksaga:
  kafka:
    orchestrator:
      domains:
        place-order: { group-type: share, delivery-count-limit: 7, record-lock-duration: 10s }
    worker:
      services:
        default: { group-type: CONSUMER }
        payment-service: { group-type: SHARE }
`))
	if err != nil {
		t.Fatal(err)
	}
	if e := c.Domain("place-order"); e.Type != topics.GroupShare || e.Share.DeliveryLimit != 7 || e.Share.RecordLock != 10*time.Second {
		t.Errorf("place-order: %+v", e)
	}
	if e := c.Domain("other"); e.Type != topics.GroupConsumer {
		t.Errorf("other: %+v", e)
	}
	if c.Service("payment-service").Type != topics.GroupShare || c.Service("x").Type != topics.GroupConsumer {
		t.Errorf("services: %+v", c.Services)
	}
	_, err = topics.LoadGroupConfig([]byte(`
stacksaga:
  kafka:
    worker:
      services:
        payment-service: { group-type: QUEUE, delivery-count-limit: 50 }
`))
	if !errors.Is(err, topics.ErrInvalidGroupConfig) ||
		!strings.Contains(err.Error(), "stacksaga.kafka.worker.services.payment-service.group-type") ||
		!strings.Contains(err.Error(), "stacksaga.kafka.worker.services.payment-service.delivery-count-limit") {
		t.Errorf("error %v", err)
	}
}
