package topics_test

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

func TestEnsureKafka(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	testEnsure(t, newAdmin(t, brokers), testenv.UniqueName(t, "ensure")+"_")
}
