package memory

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Two writes of one saga at the same write time (the same Fence and
// Version) merge as Cassandra merges two cells of one timestamp: of each
// column, the value whose serialised bytes compare greater (unsigned,
// bytewise) wins. The functions below compare each field as the Cassandra
// store serialises it: text and blobs as their bytes, int and bigint
// big-endian (so a negative number compares above every positive one),
// a timestamp as big-endian milliseconds and the zero time as the empty
// value (lowest), the frozen completed list and hints map in their
// serialised form (element count first), the date of a restore path as
// days+2^31. A restore path without an instance is written as empty
// fields and no date.

// mergeTx returns the merge of two rows of one write time.
func mergeTx(a, b eventstore.Transaction) eventstore.Transaction {
	m := a
	m.Domain = maxString(a.Domain, b.Domain)
	m.State = eventstore.State(maxString(string(a.State), string(b.State)))
	m.Span = maxInt32(a.Span, b.Span)
	m.Kind = maxString(a.Kind, b.Kind)
	m.Endpoint = maxString(a.Endpoint, b.Endpoint)
	m.Attempt = maxInt32(a.Attempt, b.Attempt)
	m.Payload = maxBytes(a.Payload, b.Payload)
	if bytes.Compare(completedBytes(b.Completed), completedBytes(a.Completed)) > 0 {
		m.Completed = b.Completed
	}
	if bytes.Compare(hintsBytes(b.Hints), hintsBytes(a.Hints)) > 0 {
		m.Hints = b.Hints
	}
	m.Error = maxString(a.Error, b.Error)
	m.RestorePath = mergePath(a.RestorePath, b.RestorePath)
	m.PausedUntil = maxTime(a.PausedUntil, b.PausedUntil)
	m.LifetimeStart = maxTime(a.LifetimeStart, b.LifetimeStart)
	m.Definition = maxInt32(a.Definition, b.Definition)
	m.PauseEvent = maxString(a.PauseEvent, b.PauseEvent)
	m.TraceID = maxString(a.TraceID, b.TraceID)
	m.TraceParent = maxString(a.TraceParent, b.TraceParent)
	m.CreatedAt = maxTime(a.CreatedAt, b.CreatedAt)
	m.UpdatedAt = maxTime(a.UpdatedAt, b.UpdatedAt)
	return m
}

// mergeTryout returns the merge of two tryouts of one Index and write time.
func mergeTryout(a, b eventstore.Tryout) eventstore.Tryout {
	m := a
	m.Span = maxInt32(a.Span, b.Span)
	m.Kind = maxString(a.Kind, b.Kind)
	m.Endpoint = maxString(a.Endpoint, b.Endpoint)
	m.Attempt = maxInt32(a.Attempt, b.Attempt)
	m.Outcome = maxString(a.Outcome, b.Outcome)
	m.Error = maxString(a.Error, b.Error)
	m.Before = maxBytes(a.Before, b.Before)
	m.After = maxBytes(a.After, b.After)
	m.ResumeContext = maxBytes(a.ResumeContext, b.ResumeContext)
	m.StartedAt = maxTime(a.StartedAt, b.StartedAt)
	m.FinishedAt = maxTime(a.FinishedAt, b.FinishedAt)
	return m
}

// mergePath merges the restore path columns: each of instance, window and
// bucket (written empty without a path), and the date, which a row without
// a path does not write.
func mergePath(a, b *eventstore.RecoveryPath) *eventstore.RecoveryPath {
	var pa, pb eventstore.RecoveryPath
	if a != nil {
		pa = *a
	}
	if b != nil {
		pb = *b
	}
	m := eventstore.RecoveryPath{
		InstanceID:  maxString(pa.InstanceID, pb.InstanceID),
		MinuteOfDay: maxInt32(pa.MinuteOfDay, pb.MinuteOfDay),
		Bucket:      maxInt32(pa.Bucket, pb.Bucket),
	}
	switch {
	case a == nil:
		m.Day = pb.Day
	case b == nil || dateKey(pa.Day) >= dateKey(pb.Day):
		m.Day = pa.Day
	default:
		m.Day = pb.Day
	}
	if m.InstanceID == "" {
		return nil
	}
	return &m
}

func dateKey(t time.Time) uint32 {
	return uint32(int64(eventstore.DayOf(t).Unix()/86400) + 1<<31)
}

func maxString(a, b string) string { return max(a, b) }

func maxInt32(a, b int) int {
	if uint32(int32(b)) > uint32(int32(a)) {
		return b
	}
	return a
}

func maxBytes(a, b []byte) []byte {
	if bytes.Compare(b, a) > 0 {
		return b
	}
	return a
}

// maxTime compares times as stored: the zero time is empty, others are
// big-endian milliseconds.
func maxTime(a, b time.Time) time.Time {
	switch {
	case b.IsZero():
		return a
	case a.IsZero():
		return b
	case uint64(b.UnixMilli()) > uint64(a.UnixMilli()):
		return b
	}
	return a
}

// completedBytes is the completed list as Cassandra stores it: a frozen
// list of tuple<int, text, boolean>.
func completedBytes(c []eventstore.CompletedSpan) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(c)))
	for _, e := range c {
		var t []byte
		t = binary.BigEndian.AppendUint32(t, 4)
		t = binary.BigEndian.AppendUint32(t, uint32(int32(e.Span)))
		t = binary.BigEndian.AppendUint32(t, uint32(len(e.Endpoint)))
		t = append(t, e.Endpoint...)
		t = binary.BigEndian.AppendUint32(t, 1)
		if e.Compensable {
			t = append(t, 1)
		} else {
			t = append(t, 0)
		}
		out = binary.BigEndian.AppendUint32(out, uint32(len(t)))
		out = append(out, t...)
	}
	return out
}

// hintsBytes is the hints as Cassandra stores them: a frozen map, its
// entries ordered by key.
func hintsBytes(h map[string]string) []byte {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, strings.Compare)
	out := binary.BigEndian.AppendUint32(nil, uint32(len(h)))
	for _, k := range keys {
		out = binary.BigEndian.AppendUint32(out, uint32(len(k)))
		out = append(out, k...)
		out = binary.BigEndian.AppendUint32(out, uint32(len(h[k])))
		out = append(out, h[k]...)
	}
	return out
}
