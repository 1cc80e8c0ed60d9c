package placeorder_test

import (
	"flag"
	"testing"

	"github.com/stacksaga-go/stacksaga/examples/placeorder"
)

// --instance-id defaults to $STACKSAGA_INSTANCE_ID, and the flag wins.
func TestInstanceIDFlag(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == placeorder.EnvInstanceID {
				return v
			}
			return ""
		}
	}
	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	id := placeorder.InstanceIDFlag(fs, env("order-service-0"))
	if err := fs.Parse(nil); err != nil || *id != "order-service-0" {
		t.Errorf("from the environment: %q, %v", *id, err)
	}
	fs = flag.NewFlagSet("svc", flag.ContinueOnError)
	id = placeorder.InstanceIDFlag(fs, env("order-service-0"))
	if err := fs.Parse([]string{"--instance-id", "order-service-1"}); err != nil || *id != "order-service-1" {
		t.Errorf("from the flag: %q, %v", *id, err)
	}
	fs = flag.NewFlagSet("svc", flag.ContinueOnError)
	if id = placeorder.InstanceIDFlag(fs, env("")); fs.Parse(nil) != nil || *id != "" {
		t.Errorf("unset: %q", *id)
	}
}
