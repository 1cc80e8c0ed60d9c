package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// The recovery cells' verdicts: p99 within the target is MET, beyond it
// MISSED (a verdict, exit 0); a cell that failed to run fails the run.
func TestRecoveryVerdicts(t *testing.T) {
	var out bytes.Buffer
	code := writeRecovery(&out, []recoveryResult{
		{Cell: "recovery-transient", N: 50, P50: 1300 * time.Millisecond, P99: 1600 * time.Millisecond, Max: 1600 * time.Millisecond, Target: 3 * time.Second},
		{Cell: "recovery-stalled-crash", N: 30, P50: 90 * time.Second, P99: 120 * time.Second, Max: 120 * time.Second, Target: 40 * time.Second},
	})
	got := out.String()
	if code != 0 || !strings.Contains(got, "p99 <= 3s: MET") || !strings.Contains(got, "p99 <= 40s: MISSED") {
		t.Fatalf("exit %d, output:\n%s", code, got)
	}
	out.Reset()
	if code := writeRecovery(&out, []recoveryResult{{Cell: "recovery-crash", Err: "boom"}}); code != 1 || !strings.Contains(out.String(), "failed: boom") {
		t.Fatalf("exit %d, output:\n%s", code, out.String())
	}
}

// An unknown recovery cell, or no real services, is a usage error.
func TestRecoveryUsage(t *testing.T) {
	var out, errs bytes.Buffer
	o := options{kafka: "127.0.0.1:1", cassandra: "127.0.0.1:1"}
	if code := runRecovery(context.Background(), o, "nope", &out, &errs); code != 2 || !strings.Contains(errs.String(), `unknown cell "nope"`) {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	errs.Reset()
	if code := runRecovery(context.Background(), options{}, "all", &out, &errs); code != 2 || !strings.Contains(errs.String(), "needs --kafka and --cassandra") {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
}
