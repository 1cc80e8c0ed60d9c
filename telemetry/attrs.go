package telemetry

import (
	"reflect"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// SpanAttrs is a buffer of the attributes a span is about to be given in
// one SetAttributes call. With the OpenTelemetry SDK's spans, which copy
// the attributes they are given, the buffer comes from a pool and goes back
// to it once set: describing a finished step then allocates nothing on our
// side (the SDK still copies). Any other span gets a fresh buffer it may
// keep. ExampleSpanAttrs shows its use.
//
// A SpanAttrs is used by one goroutine and must not be touched after SetOn.
type SpanAttrs struct {
	kv     []attribute.KeyValue
	pooled bool
}

// spanAttrsCap is the capacity of a pooled buffer: StackSaga's spans carry
// at most ten attributes.
const spanAttrsCap = 12

var spanAttrsPool = sync.Pool{New: func() any {
	return &SpanAttrs{kv: make([]attribute.KeyValue, 0, spanAttrsCap), pooled: true}
}}

// sdkTracePkg is the package of the SDK's span types.
const sdkTracePkg = "go.opentelemetry.io/otel/sdk/trace"

// copying caches, per span type, whether its SetAttributes copies what it
// is given (the SDK's does).
var copying sync.Map // reflect.Type -> bool

// copiesAttrs reports whether span is one of the OpenTelemetry SDK's,
// whose SetAttributes copies the attributes (into its own slice, or drops
// them when not recording) and keeps no reference to the argument.
func copiesAttrs(span trace.Span) bool {
	t := reflect.TypeOf(span)
	if t == nil {
		return false
	}
	if v, ok := copying.Load(t); ok {
		return v.(bool)
	}
	named := t
	if named.Kind() == reflect.Pointer {
		named = named.Elem()
	}
	ok := named.PkgPath() == sdkTracePkg
	copying.Store(t, ok)
	return ok
}

// NewSpanAttrs returns an empty buffer for span's attributes: a pooled one
// when span is the SDK's, a new one otherwise.
func NewSpanAttrs(span trace.Span) *SpanAttrs {
	if copiesAttrs(span) {
		return spanAttrsPool.Get().(*SpanAttrs)
	}
	return &SpanAttrs{kv: make([]attribute.KeyValue, 0, spanAttrsCap)}
}

// Add appends kv to the buffer.
func (a *SpanAttrs) Add(kv ...attribute.KeyValue) { a.kv = append(a.kv, kv...) }

// SetOn sets the buffered attributes on span in one call, then returns a
// pooled buffer to the pool.
func (a *SpanAttrs) SetOn(span trace.Span) {
	span.SetAttributes(a.kv...)
	if !a.pooled {
		return
	}
	if cap(a.kv) > 4*spanAttrsCap { // do not keep an outsized buffer
		return
	}
	clear(a.kv) // drop the strings the attributes point to
	a.kv = a.kv[:0]
	spanAttrsPool.Put(a)
}
