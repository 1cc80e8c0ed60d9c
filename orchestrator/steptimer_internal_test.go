package orchestrator

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A timer record's header is read strictly: a version in range and at
// most the deadline flag; anything else is malformed (the record is
// dead-lettered), and a record without it is a reply.
func TestStepTimerHeader(t *testing.T) {
	rec := func(v string) *kgo.Record {
		return &kgo.Record{Headers: []kgo.RecordHeader{{Key: stepTimerHeader, Value: []byte(v)}}}
	}
	for v, want := range map[string]struct {
		version  int64
		deadline bool
	}{"1": {1, false}, "42;deadline": {42, true}} {
		version, deadline, ok, err := stepTimerOf(rec(v))
		if !ok || err != nil || version != want.version || deadline != want.deadline {
			t.Errorf("%q: %d %v %v %v, want %d %v", v, version, deadline, ok, err, want.version, want.deadline)
		}
	}
	for _, v := range []string{"", "0", "-1", "x", "1;", "1;later", "99999999999999999999", "1;deadline;deadline"} {
		if _, _, ok, err := stepTimerOf(rec(v)); !ok || err == nil {
			t.Errorf("%q: ok %v, err %v; want a malformed header", v, ok, err)
		}
	}
	if _, _, ok, err := stepTimerOf(&kgo.Record{}); ok || err != nil {
		t.Errorf("no header: ok %v, err %v", ok, err)
	}
}
