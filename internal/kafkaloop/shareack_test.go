package kafkaloop

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Successful acknowledge results cost nothing: no allocation, no log, no
// count.
func TestShareAckFailuresSuccessIsFree(t *testing.T) {
	var buf bytes.Buffer
	counted := 0
	cb := shareAckFailures(slog.New(slog.NewTextHandler(&buf, nil)), func(string, int32, error) { counted++ })
	ok := kgo.ShareAckResults{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}, {Topic: "u", Partition: 0}}
	if n := testing.AllocsPerRun(1000, func() { cb(nil, ok) }); n != 0 {
		t.Errorf("%v allocations per successful result set, want 0", n)
	}
	if buf.Len() != 0 || counted != 0 {
		t.Errorf("logged %q, counted %d for successes", buf.String(), counted)
	}
}

// The failures of one result set are logged one line per topic and error,
// with their partitions, and each is counted; failed_total adds up over
// the result sets.
func TestShareAckFailuresAggregates(t *testing.T) {
	var buf bytes.Buffer
	var counted []int32
	cb := shareAckFailures(slog.New(slog.NewTextHandler(&buf, nil)), func(_ string, p int32, _ error) { counted = append(counted, p) })
	down := errors.New("connection reset")
	cb(nil, kgo.ShareAckResults{
		{Topic: "t", Partition: 0, Err: kerr.InvalidRecordState},
		{Topic: "t", Partition: 1},
		{Topic: "t", Partition: 2, Err: kerr.InvalidRecordState},
		{Topic: "t", Partition: 3, Err: down},
		{Topic: "u", Partition: 2, Err: kerr.InvalidRecordState},
	})
	cb(nil, kgo.ShareAckResults{{Topic: "t", Partition: 4, Err: down}})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		"topic=t partitions=\"[0 2]\" err=\"INVALID_RECORD_STATE",
		"topic=t partitions=[3] err=\"connection reset\"",
		"topic=u partitions=[2] err=\"INVALID_RECORD_STATE",
		"topic=t partitions=[4] err=\"connection reset\"",
	}
	if len(lines) != len(want) {
		t.Fatalf("logged %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, l := range lines {
		total := []string{"failed_total=4", "failed_total=4", "failed_total=4", "failed_total=5"}[i]
		if !strings.Contains(l, "level=WARN") || !strings.Contains(l, want[i]) || !strings.Contains(l, total) || !strings.Contains(l, "effect=") {
			t.Errorf("line %d: %s\nwant level=WARN, %s, %s and an effect", i, l, want[i], total)
		}
	}
	if got := len(counted); got != 5 {
		t.Errorf("counted %v, want the five failures", counted)
	}
}
