package telemetry

import "sync"

// Options caches, per key, the option slice an instrument's Add or Record
// is given (metric.AddOption or metric.RecordOption), made by build on the
// key's first use. A measurement then allocates nothing: making the
// attribute set and its option, or passing a single option (its variadic
// slice escapes), would allocate on every call. The zero value is not
// usable; make one with NewOptions. Safe for concurrent use.
type Options[K comparable, O any] struct {
	build func(K) []O
	m     sync.Map // K -> []O
}

// NewOptions returns a cache whose options for key k are build(k).
func NewOptions[K comparable, O any](build func(K) []O) *Options[K, O] {
	return &Options[K, O]{build: build}
}

// Get returns the options of k, building them on first use.
func (c *Options[K, O]) Get(k K) []O {
	if v, ok := c.m.Load(k); ok {
		return v.([]O)
	}
	v, _ := c.m.LoadOrStore(k, c.build(k))
	return v.([]O)
}
