package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/ringcoordinator"
)

// sagactl ring prints the assignment of a running master and slave (over
// real RSocket on loopback).
func TestRing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const token = "sagactl-ring-test-token"
	t.Setenv(ringcoordinator.EnvToken, token) // sagactl ring presents it
	cyc := ringcoordinator.WithCycle(2 * time.Second)
	tok := ringcoordinator.WithToken(token)
	m, err := ringcoordinator.NewMaster(ringcoordinator.WithListen("127.0.0.1:0"), cyc, tok)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ringcoordinator.NewSlave(ringcoordinator.WithListen("127.0.0.1:0"), ringcoordinator.WithMaster(m.Addr()), cyc, tok)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { _ = m.Run(ctx); done <- struct{}{} }()
	go func() { _ = s.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()
	var out, errOut bytes.Buffer
	deadline := time.Now().Add(30 * time.Second)
	for {
		out.Reset()
		errOut.Reset()
		code := run(ctx, []string{"ring", "--master", m.Addr(), "--timeout", "5s"}, &out, &errOut)
		if code == exitOK && strings.Contains(out.String(), s.ID()) && !strings.Contains(out.String(), "no range published") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sagactl ring: exit %d, stdout %s, stderr %s", code, out.String(), errOut.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("sagactl ring:\n%s", out.String())
	out.Reset()
	if code := run(ctx, []string{"ring", "--master", m.Addr(), "--json"}, &out, &errOut); code != exitOK || !strings.Contains(out.String(), s.ID()) {
		t.Fatalf("--json: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out.String())
	}
	if code := run(ctx, []string{"ring", "--master", "127.0.0.1:1", "--timeout", "1s"}, &out, &errOut); code != exitFailure {
		t.Errorf("unreachable master: exit %d, want %d", code, exitFailure)
	}
	if code := run(ctx, []string{"ring", "extra"}, &out, &errOut); code != exitUsage {
		t.Errorf("extra argument: exit %d, want %d", code, exitUsage)
	}
}
