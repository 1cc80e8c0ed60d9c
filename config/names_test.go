package config_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	sagaconfig "github.com/stacksaga-go/stacksaga/config"
)

// A configured name that matches no registered name is warned about at
// start, naming its key and the registered names, and refused with
// stacksaga.instance.strict-names; the mode each registered domain runs at
// is logged (issue 48 item 2).
func TestCheckNamesUnmatched(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		reg       sagaconfig.Names
		key       string // "" : every name matches
	}{
		{"write-protection domain", "stacksaga:\n  cassandra:\n    write-protection:\n      domains: { shop-ordr: { mode: STRICT } }\n",
			sagaconfig.Names{Domains: []string{"shop-order"}}, "stacksaga.cassandra.write-protection.domains.shop-ordr"},
		{"orchestrator group domain", "stacksaga:\n  kafka:\n    orchestrator:\n      domains: { shop-ordr: { group-type: share } }\n",
			sagaconfig.Names{Domains: []string{"shop-order"}}, "stacksaga.kafka.orchestrator.domains.shop-ordr"},
		{"worker group service", "stacksaga:\n  kafka:\n    worker:\n      services: { payment-servce: { group-type: share } }\n",
			sagaconfig.Names{Services: []string{"payment-service"}}, "stacksaga.kafka.worker.services.payment-servce"},
		{"matching names", "stacksaga:\n  cassandra:\n    write-protection:\n      domains: { shop-order: { mode: STRICT } }\n  kafka:\n    orchestrator:\n      domains: { default: { group-type: share } }\n",
			sagaconfig.Names{Domains: []string{"shop-order"}}, ""},
		{"a worker does not judge domain names", "stacksaga:\n  cassandra:\n    write-protection:\n      domains: { shop-ordr: { mode: STRICT } }\n",
			sagaconfig.Names{Services: []string{"payment-service"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, strict := range []bool{false, true} {
				doc := tc.doc
				if strict {
					doc += "  instance: { strict-names: true }\n"
				}
				cfg, err := sagaconfig.Load([]byte(doc))
				if err != nil {
					t.Fatal(err)
				}
				var logs bytes.Buffer
				err = cfg.CheckNames(slog.New(slog.NewTextHandler(&logs, nil)), tc.reg)
				registered := strings.Join(append(tc.reg.Domains, tc.reg.Services...), ",")
				switch {
				case tc.key == "" && err != nil:
					t.Fatalf("strict=%v: %v", strict, err)
				case tc.key == "" && strings.Contains(logs.String(), "level=WARN"):
					t.Fatalf("strict=%v: warned: %s", strict, logs.String())
				case tc.key != "" && !strict && (err != nil || !strings.Contains(logs.String(), "level=WARN") ||
					!strings.Contains(logs.String(), tc.key) || !strings.Contains(logs.String(), registered)):
					t.Fatalf("err = %v, logs %q: want a warning naming %s and %s", err, logs.String(), tc.key, registered)
				case tc.key != "" && strict && (!errors.Is(err, sagaconfig.ErrUnmatchedName) || !strings.Contains(err.Error(), tc.key) ||
					!strings.Contains(err.Error(), registered)):
					t.Fatalf("strict-names: err = %v, want ErrUnmatchedName naming %s and %s", err, tc.key, registered)
				}
			}
		})
	}
}

// The mode each registered domain runs at is logged at start: a typo's
// victim shows its default mode.
func TestCheckNamesLogsMode(t *testing.T) {
	cfg, err := sagaconfig.Load([]byte("stacksaga:\n  cassandra:\n    write-protection:\n      domains: { shop-ordr: { mode: STRICT } }\n"))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	_ = cfg.CheckNames(slog.New(slog.NewTextHandler(&logs, nil)), sagaconfig.Names{Domains: []string{"shop-order", "shop-ordr"}})
	for _, want := range []string{"domain=shop-order mode=RELAXED_WITH_DEDUP", "domain=shop-ordr mode=STRICT"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs %q: want %q", logs.String(), want)
		}
	}
}
