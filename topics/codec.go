package topics

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"sort"
	"sync/atomic"

	"github.com/vmihailenco/msgpack/v5"
)

// This file is the envelope's hand-written msgpack codec: every saga step
// encodes and decodes envelopes several times, and msgpack's reflection
// path spent about a fifth of the embedded benchmark's CPU on it.
//
// appendEnvelope writes exactly the bytes msgpack.Marshal writes for an
// Envelope (a map of its non-empty fields in declaration order, compact
// ints, int64 fields as int64, raw payload), except that the entries of a
// map field are sorted by key instead of in Go's random map order; the
// tests compare the two byte for byte. decodeEnvelope reads the formats
// any msgpack writer uses for these fields and reports false for anything
// else (a float where an int belongs, a nil map, nesting deeper than
// maxSkipDepth), so that Decode falls back to msgpack's reflection decoder
// and both accept and reject exactly the same inputs.

// Field names on the wire, in declaration order.
const (
	keyVersion    = "v"
	keyType       = "type"
	keyRegion     = "region"
	keyCluster    = "cluster"
	keyService    = "service"
	keyDomain     = "domain"
	keyTx         = "tx"
	keySpan       = "span"
	keyKind       = "kind"
	keyEndpoint   = "endpoint"
	keyIKey       = "ikey"
	keyAttempt    = "attempt"
	keyReplyTo    = "reply_to"
	keyActionDone = "action_done"
	keyPayload    = "payload"
	keyHints      = "hints"
	keyTrace      = "trace"
	keySentMs     = "sent_ms"
	keyResume     = "resume"
	keyOutcome    = "outcome"
	keyError      = "error"
	keyPause      = "pause"

	keyPauseEvent    = "event"
	keyPauseDeadline = "deadline_ms"
)

// msgpack format codes used here.
const (
	codeNil      = 0xc0
	codeFalse    = 0xc2
	codeTrue     = 0xc3
	codeBin8     = 0xc4
	codeBin16    = 0xc5
	codeBin32    = 0xc6
	codeExt8     = 0xc7
	codeExt16    = 0xc8
	codeExt32    = 0xc9
	codeFloat32  = 0xca
	codeFloat64  = 0xcb
	codeUint8    = 0xcc
	codeUint16   = 0xcd
	codeUint32   = 0xce
	codeUint64   = 0xcf
	codeInt8     = 0xd0
	codeInt16    = 0xd1
	codeInt32    = 0xd2
	codeInt64    = 0xd3
	codeFixExt1  = 0xd4
	codeFixExt16 = 0xd8
	codeStr8     = 0xd9
	codeStr16    = 0xda
	codeStr32    = 0xdb
	codeArray16  = 0xdc
	codeArray32  = 0xdd
	codeMap16    = 0xde
	codeMap32    = 0xdf
)

// appendEnvelope appends e's msgpack encoding to b. The caller has set
// e.Version and e.SentMs.
func appendEnvelope(b []byte, e *Envelope) []byte {
	n := 10 // the fields without omitempty
	for _, set := range [...]bool{
		e.Region != "", e.Cluster != "", e.Service != "", e.ReplyTo != "",
		e.ActionDone, len(e.Payload) > 0, len(e.Hints) > 0, len(e.Trace) > 0,
		len(e.ResumeContext) > 0, e.Outcome != "", e.Error != "", e.Pause != nil,
	} {
		if set {
			n++
		}
	}
	b = appendMapLen(b, n)
	b = appendInt(appendStr(b, keyVersion), int64(e.Version))
	b = appendStr(appendStr(b, keyType), string(e.Type))
	b = appendStrField(b, keyRegion, e.Region)
	b = appendStrField(b, keyCluster, e.Cluster)
	b = appendStrField(b, keyService, e.Service)
	b = appendStr(appendStr(b, keyDomain), e.Domain)
	b = appendStr(appendStr(b, keyTx), e.TxID)
	b = appendInt(appendStr(b, keySpan), int64(e.Span))
	b = appendStr(appendStr(b, keyKind), string(e.Kind))
	b = appendStr(appendStr(b, keyEndpoint), e.Endpoint)
	b = appendStr(appendStr(b, keyIKey), e.IdempotencyKey)
	b = appendInt(appendStr(b, keyAttempt), int64(e.Attempt))
	b = appendStrField(b, keyReplyTo, e.ReplyTo)
	if e.ActionDone {
		b = append(appendStr(b, keyActionDone), codeTrue)
	}
	if len(e.Payload) > 0 {
		b = append(appendStr(b, keyPayload), e.Payload...)
	}
	b = appendMapField(b, keyHints, e.Hints)
	b = appendMapField(b, keyTrace, e.Trace)
	b = appendInt64(appendStr(b, keySentMs), e.SentMs)
	b = appendMapField(b, keyResume, e.ResumeContext)
	b = appendStrField(b, keyOutcome, string(e.Outcome))
	b = appendStrField(b, keyError, e.Error)
	if p := e.Pause; p != nil {
		b = appendStr(b, keyPause)
		if p.DeadlineMs != 0 {
			b = appendMapLen(b, 2)
		} else {
			b = appendMapLen(b, 1)
		}
		b = appendStr(appendStr(b, keyPauseEvent), p.Event)
		if p.DeadlineMs != 0 {
			b = appendInt64(appendStr(b, keyPauseDeadline), p.DeadlineMs)
		}
	}
	return b
}

// envelopeSize bounds the length of e's encoding from above, so that
// Encode allocates once.
func envelopeSize(e *Envelope) int {
	// The map header, and per field (22, and the pause's 2) its key (a
	// fixstr of at most 11 bytes) and its value's header (at most 9).
	const perField = 1 + 11 + 9
	n := 3 + 24*perField + len(e.Payload)
	for _, s := range [...]string{
		string(e.Type), e.Region, e.Cluster, e.Service, e.Domain, e.TxID,
		string(e.Kind), e.Endpoint, e.IdempotencyKey, e.ReplyTo,
		string(e.Outcome), e.Error,
	} {
		n += len(s)
	}
	if e.Pause != nil {
		n += len(e.Pause.Event)
	}
	for _, m := range [...]map[string]string{e.Hints, e.Trace, e.ResumeContext} {
		for k, v := range m {
			n += 10 + len(k) + len(v)
		}
	}
	return n
}

func appendStrField(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return appendStr(appendStr(b, key), v)
}

func appendMapField(b []byte, key string, m map[string]string) []byte {
	if len(m) == 0 {
		return b
	}
	b = appendMapLen(appendStr(b, key), len(m))
	if len(m) == 1 {
		for k, v := range m {
			return appendStr(appendStr(b, k), v)
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b = appendStr(appendStr(b, k), m[k])
	}
	return b
}

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, codeMap16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, codeMap32), uint32(n))
	}
}

func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, codeStr8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, codeStr16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, codeStr32), uint32(n))
	}
	return append(b, s...)
}

// appendInt writes n in the fewest bytes, as msgpack does for an int.
func appendInt(b []byte, n int64) []byte {
	if n >= 0 {
		switch u := uint64(n); {
		case u <= math.MaxInt8:
			return append(b, byte(u))
		case u <= math.MaxUint8:
			return append(b, codeUint8, byte(u))
		case u <= math.MaxUint16:
			return binary.BigEndian.AppendUint16(append(b, codeUint16), uint16(u))
		case u <= math.MaxUint32:
			return binary.BigEndian.AppendUint32(append(b, codeUint32), uint32(u))
		default:
			return binary.BigEndian.AppendUint64(append(b, codeUint64), u)
		}
	}
	switch {
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, codeInt8, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, codeInt16), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, codeInt32), uint32(n))
	default:
		return appendInt64(b, n)
	}
}

// appendInt64 writes n in nine bytes, as msgpack does for an int64.
func appendInt64(b []byte, n int64) []byte {
	return binary.BigEndian.AppendUint64(append(b, codeInt64), uint64(n))
}

// reader walks a msgpack buffer. Its methods report false on anything the
// fast path leaves to the reflection decoder, including a short buffer.
type reader struct {
	b []byte
	i int
}

func (r *reader) byte() (byte, bool) {
	if r.i >= len(r.b) {
		return 0, false
	}
	c := r.b[r.i]
	r.i++
	return c, true
}

func (r *reader) bytes(n int) ([]byte, bool) {
	if n < 0 || len(r.b)-r.i < n {
		return nil, false
	}
	s := r.b[r.i : r.i+n]
	r.i += n
	return s, true
}

// uint reads an n-byte big-endian unsigned integer.
func (r *reader) uint(n int) (uint64, bool) {
	s, ok := r.bytes(n)
	if !ok {
		return 0, false
	}
	var u uint64
	for _, c := range s {
		u = u<<8 | uint64(c)
	}
	return u, true
}

// mapLen reads a map header.
func (r *reader) mapLen() (int, bool) {
	c, ok := r.byte()
	switch {
	case !ok:
		return 0, false
	case c&0xf0 == 0x80:
		return int(c & 0x0f), true
	case c == codeMap16:
		u, ok := r.uint(2)
		return int(u), ok
	case c == codeMap32:
		u, ok := r.uint(4)
		return int(u), ok && u <= math.MaxInt32
	}
	return 0, false
}

// str reads a string or binary value (msgpack decodes either into a Go
// string) without copying it.
func (r *reader) str() ([]byte, bool) {
	c, ok := r.byte()
	if !ok {
		return nil, false
	}
	var n uint64
	switch {
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == codeStr8 || c == codeBin8:
		n, ok = r.uint(1)
	case c == codeStr16 || c == codeBin16:
		n, ok = r.uint(2)
	case c == codeStr32 || c == codeBin32:
		n, ok = r.uint(4)
	default:
		return nil, false
	}
	if !ok || n > math.MaxInt32 {
		return nil, false
	}
	return r.bytes(int(n))
}

// string reads a string value into a new Go string; nil reads as "".
func (r *reader) string() (string, bool) {
	s, ok := r.strOrNil()
	return string(s), ok
}

// name reads a string value that takes few distinct values in a process (a
// region, a service, a domain, an endpoint, a reply topic): it is shared
// with the earlier decodes of the same bytes instead of allocated again.
func (r *reader) name() (string, bool) {
	s, ok := r.strOrNil()
	return intern(s), ok
}

// names is intern's table: two slots per hash of a name, each holding a
// name that hashed there. It is bounded (names that take many values only
// evict others, costing the allocation intern saves) and lock-free (a slot
// is replaced whole; strings are immutable). Two slots per hash keep two
// names that collide from evicting each other on every decode.
var (
	names     [512]atomic.Pointer[string]
	namesSeed = maphash.MakeSeed()
)

// internMax: longer values are copied as usual.
const internMax = 64

// intern returns b as a string, the one in names when it holds the same
// bytes. The result never aliases b.
func intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > internMax {
		return string(b)
	}
	h := maphash.Bytes(namesSeed, b)
	i := int(h%(uint64(len(names))/2)) * 2
	first, second := names[i].Load(), names[i+1].Load()
	switch {
	case first != nil && *first == string(b):
		return *first
	case second != nil && *second == string(b):
		return *second
	}
	// A miss goes first, the first moves second, the second is evicted:
	// the two names most recently missed keep the pair.
	s := string(b)
	if first != nil {
		names[i+1].Store(first)
	}
	names[i].Store(&s)
	return s
}

// nil moves past a nil value and reports whether there was one.
func (r *reader) nil() bool {
	if r.i < len(r.b) && r.b[r.i] == codeNil {
		r.i++
		return true
	}
	return false
}

// int reads an integer value; nil reads as 0. A uint64 beyond MaxInt64 is
// left to the reflection decoder.
func (r *reader) int() (int64, bool) {
	c, ok := r.byte()
	if !ok {
		return 0, false
	}
	switch {
	case c <= 0x7f:
		return int64(c), true
	case c >= 0xe0:
		return int64(int8(c)), true
	case c == codeNil:
		return 0, true
	case c >= codeUint8 && c <= codeUint64:
		u, ok := r.uint(1 << (c - codeUint8))
		return int64(u), ok && u <= math.MaxInt64
	case c >= codeInt8 && c <= codeInt64:
		size := 1 << (c - codeInt8)
		u, ok := r.uint(size)
		shift := 64 - 8*size
		return int64(u<<shift) >> shift, ok
	}
	return 0, false
}

// strMap reads a map of strings into m (allocated if nil), as msgpack's
// decoder does: entries are added to what m holds.
func (r *reader) strMap(m map[string]string) (map[string]string, bool) {
	n, ok := r.mapLen()
	if !ok || n > len(r.b)-r.i { // every entry takes at least two bytes
		return nil, false
	}
	if m == nil {
		m = make(map[string]string, n)
	}
	for range n {
		k, ok := r.str()
		if !ok {
			return nil, false
		}
		v, ok := r.string()
		if !ok {
			return nil, false
		}
		m[mapKey(k)] = v
	}
	return m, true
}

// knownMapKeys are the keys the envelope's maps carry on every record (the
// W3C trace context's): decoding them allocates no string.
var knownMapKeys = [...]string{"traceparent", "tracestate", "baggage"}

// mapKey is k as a string, without allocating when it is a known key.
func mapKey(k []byte) string {
	for _, s := range knownMapKeys {
		if string(k) == s {
			return s
		}
	}
	return string(k)
}

// maxSkipDepth bounds the nesting the fast path walks through in unknown
// fields and payloads; deeper values are left to the reflection decoder.
const maxSkipDepth = 32

// skip moves past one value of any type.
func (r *reader) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	c, ok := r.byte()
	if !ok {
		return false
	}
	var n uint64 // bytes to skip, or elements for an array or a map
	switch {
	case c <= 0x7f || c >= 0xe0 || c == codeNil || c == codeFalse || c == codeTrue:
		return true
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c&0xf0 == 0x90:
		return r.skipN(uint64(c&0x0f), depth)
	case c&0xf0 == 0x80:
		return r.skipN(2*uint64(c&0x0f), depth)
	case c == codeStr8 || c == codeBin8:
		n, ok = r.uint(1)
	case c == codeStr16 || c == codeBin16:
		n, ok = r.uint(2)
	case c == codeStr32 || c == codeBin32:
		n, ok = r.uint(4)
	case c == codeFloat32:
		n = 4
	case c == codeFloat64:
		n = 8
	case c >= codeUint8 && c <= codeUint64:
		n = 1 << (c - codeUint8)
	case c >= codeInt8 && c <= codeInt64:
		n = 1 << (c - codeInt8)
	case c >= codeFixExt1 && c <= codeFixExt16:
		n = 1 + 1<<(c-codeFixExt1)
	case c >= codeExt8 && c <= codeExt32:
		n, ok = r.uint(1 << (c - codeExt8))
		n++
	case c == codeArray16 || c == codeArray32:
		n, ok = r.uint(2 << (c - codeArray16))
		return ok && r.skipN(n, depth)
	case c == codeMap16 || c == codeMap32:
		n, ok = r.uint(2 << (c - codeMap16))
		return ok && r.skipN(2*n, depth)
	default:
		return false // 0xc1, never used
	}
	if !ok || n > uint64(len(r.b)-r.i) {
		return false
	}
	r.i += int(n)
	return true
}

// skipN skips n values nested one level below depth.
func (r *reader) skipN(n uint64, depth int) bool {
	if n > uint64(len(r.b)-r.i) { // every value takes at least a byte
		return false
	}
	for range n {
		if !r.skip(depth + 1) {
			return false
		}
	}
	return true
}

// decodeEnvelope decodes b into e by the fast path. It reports false when
// b holds anything the fast path leaves to msgpack's reflection decoder,
// which Decode then uses.
func decodeEnvelope(b []byte, e *Envelope) bool {
	r := reader{b: b}
	n, ok := r.mapLen()
	if !ok {
		return false
	}
	for range n {
		key, ok := r.str()
		if !ok {
			return false
		}
		if !r.field(e, key) {
			return false
		}
	}
	// Bytes after the envelope are ignored, as msgpack.Unmarshal does.
	return true
}

// field decodes the value of the field named key into e.
func (r *reader) field(e *Envelope, key []byte) bool {
	var ok bool
	var n int64
	switch string(key) {
	case keyVersion:
		n, ok = r.int()
		e.Version = int(n)
	case keyType:
		var s string
		s, ok = r.known(string(TypeCommand), string(TypeReply))
		e.Type = Type(s)
	case keyRegion:
		e.Region, ok = r.name()
	case keyCluster:
		e.Cluster, ok = r.name()
	case keyService:
		e.Service, ok = r.name()
	case keyDomain:
		e.Domain, ok = r.name()
	case keyTx:
		e.TxID, ok = r.string()
	case keySpan:
		n, ok = r.int()
		e.Span = int(n)
	case keyKind:
		var s string
		s, ok = r.known(string(KindProcess), string(KindRevert))
		e.Kind = Kind(s)
	case keyEndpoint:
		e.Endpoint, ok = r.name()
	case keyIKey:
		e.IdempotencyKey, ok = r.string()
	case keyAttempt:
		n, ok = r.int()
		e.Attempt = int(n)
	case keyReplyTo:
		e.ReplyTo, ok = r.name()
	case keyActionDone:
		var c byte
		c, ok = r.byte()
		e.ActionDone = c == codeTrue
		ok = ok && (c == codeTrue || c == codeFalse || c == codeNil)
	case keyPayload:
		start := r.i
		if r.nil() { // msgpack decodes nil into a nil RawMessage
			e.Payload, ok = nil, true
		} else if ok = r.skip(0); ok {
			e.Payload = append(msgpack.RawMessage(nil), r.b[start:r.i]...)
		}
	case keyHints:
		e.Hints, ok = r.strMap(e.Hints)
	case keyTrace:
		e.Trace, ok = r.strMap(e.Trace)
	case keySentMs:
		e.SentMs, ok = r.int()
	case keyResume:
		e.ResumeContext, ok = r.strMap(e.ResumeContext)
	case keyOutcome:
		var s string
		s, ok = r.known(string(OutcomeOK), string(OutcomeRetryable), string(OutcomeNonRetryable))
		e.Outcome = Outcome(s)
	case keyError:
		e.Error, ok = r.string()
	case keyPause:
		e.Pause, ok = r.pause(e.Pause)
	default:
		ok = r.skip(0)
	}
	return ok
}

// strOrNil reads a string value without copying it; nil reads as empty.
func (r *reader) strOrNil() ([]byte, bool) {
	if r.nil() {
		return nil, true
	}
	return r.str()
}

// known reads a string value that is usually one of the constants known:
// that constant is returned without allocating, anything else as a copy.
func (r *reader) known(known ...string) (string, bool) {
	s, ok := r.strOrNil()
	for _, k := range known {
		if string(s) == k {
			return k, ok
		}
	}
	return string(s), ok
}

// pause reads a Pause (into p when the field repeats, as msgpack does).
func (r *reader) pause(p *Pause) (*Pause, bool) {
	n, ok := r.mapLen()
	if !ok {
		return nil, false // nil, or a struct encoded as an array
	}
	if p == nil {
		p = new(Pause)
	}
	for range n {
		key, ok := r.str()
		if !ok {
			return nil, false
		}
		switch string(key) {
		case keyPauseEvent:
			p.Event, ok = r.string()
		case keyPauseDeadline:
			p.DeadlineMs, ok = r.int()
		default:
			ok = r.skip(1)
		}
		if !ok {
			return nil, false
		}
	}
	return p, true
}
