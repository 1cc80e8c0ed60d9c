package telemetry

import "sync"

// Memo holds, per key, a value made by build on the key's first use: what
// the hot path needs per endpoint, topic or table (an instrument's option
// slice, a span name) is then built once instead of on every call. The
// zero value is not usable; make one with NewMemo. Safe for concurrent use.
type Memo[K comparable, V any] struct {
	build func(K) V
	m     sync.Map // K -> V
}

// NewMemo returns a memo whose value for key k is build(k).
func NewMemo[K comparable, V any](build func(K) V) *Memo[K, V] {
	return &Memo[K, V]{build: build}
}

// Get returns the value of k, building it on first use.
func (c *Memo[K, V]) Get(k K) V {
	if v, ok := c.m.Load(k); ok {
		return v.(V)
	}
	v, _ := c.m.LoadOrStore(k, c.build(k))
	return v.(V)
}

// Options caches, per key, the option slice an instrument's Add or Record
// is given (metric.AddOption or metric.RecordOption). A measurement then
// allocates nothing: making the attribute set and its option, or passing a
// single option (its variadic slice escapes), would allocate on every call.
type Options[K comparable, O any] = Memo[K, []O]

// NewOptions returns a cache whose options for key k are build(k).
func NewOptions[K comparable, O any](build func(K) []O) *Options[K, O] {
	return NewMemo(build)
}
