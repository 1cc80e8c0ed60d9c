package writeprotect_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/eventstore/memory"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// A misspelt write-protection domain (shop-ordr for shop-order) leaves
// the real domain on the default mode: the guard's first command of that
// domain logs the mode it runs at and warns naming the entry that matched
// nothing, once per domain, on both entry points (issue 48 item 2; before:
// STRICT silently became RELAXED_WITH_DEDUP without a word).
func TestFirstCommandOfADomainNamesItsMode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		domains  map[string]writeprotect.DomainConfig
		run      []string // the domains of the commands, in order
		warnings int
		want     []string // in the log
		wantNot  []string
	}{
		{"misspelt entry", map[string]writeprotect.DomainConfig{"shop-ordr": {Mode: writeprotect.Strict}},
			[]string{"shop-order", "shop-order"}, 1,
			[]string{"domain=shop-order mode=RELAXED_WITH_DEDUP", "unmatched=shop-ordr", "own-entry=false"}, nil},
		{"entry matches", map[string]writeprotect.DomainConfig{"shop-order": {Mode: writeprotect.Strict}},
			[]string{"shop-order"}, 0, []string{"domain=shop-order mode=STRICT", "own-entry=true"}, []string{"unmatched"}},
		{"no entries: the default is the choice", nil,
			[]string{"shop-order"}, 0, []string{"domain=shop-order mode=RELAXED_WITH_DEDUP"}, []string{"unmatched"}},
		{"an entry seen before is not unmatched", map[string]writeprotect.DomainConfig{"shop-order": {Mode: writeprotect.Strict}},
			[]string{"shop-order", "billing"}, 0, []string{"domain=billing mode=RELAXED_WITH_DEDUP"}, []string{"unmatched"}},
	} {
		for _, overlapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/overlapped=%v", tc.name, overlapped), func(t *testing.T) {
				var logs bytes.Buffer
				g, err := writeprotect.New(memory.New(), writeprotect.Config{Domains: tc.domains},
					writeprotect.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
				if err != nil {
					t.Fatal(err)
				}
				for i, d := range tc.run {
					cmd := &topics.Envelope{Type: topics.TypeCommand, Region: "eu", Cluster: "default", Service: "order-service",
						Domain: d, TxID: fmt.Sprintf("tx-%d", i), Span: 1, Kind: topics.KindProcess, Endpoint: "charge", Attempt: 1}
					run := func(context.Context) *topics.Envelope {
						return &topics.Envelope{Type: topics.TypeReply, Outcome: topics.OutcomeOK}
					}
					if overlapped {
						_, wait, err := g.ExecuteOverlapped(context.Background(), cmd, run)
						if err != nil {
							t.Fatal(err)
						}
						wait()
					} else if _, err := g.Execute(context.Background(), cmd, run); err != nil {
						t.Fatal(err)
					}
				}
				out := logs.String()
				if n := strings.Count(out, "level=WARN"); n != tc.warnings {
					t.Errorf("%d warnings, want %d: %s", n, tc.warnings, out)
				}
				if n := strings.Count(out, "first command of a domain"); n != len(uniq(tc.run)) {
					t.Errorf("%d first-command notes, want one per domain (%d): %s", n, len(uniq(tc.run)), out)
				}
				for _, w := range tc.want {
					if !strings.Contains(out, w) {
						t.Errorf("log lacks %q: %s", w, out)
					}
				}
				for _, w := range tc.wantNot {
					if strings.Contains(out, w) {
						t.Errorf("log has %q: %s", w, out)
					}
				}
			})
		}
	}
}

func uniq(s []string) map[string]bool {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return m
}
