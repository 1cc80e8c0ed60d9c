package tracewindow

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// DefaultMemoryEntries is how many sagas a MemoryIndex keeps by default.
const DefaultMemoryEntries = 100_000

// MemoryIndex is an Index held in memory, for an orchestrator on the
// in-memory store (the embedded default) and for tests. It keeps at most
// a fixed number of sagas: beyond it, it forgets the oldest (by creation),
// a 64th of the capacity at a time.
// It is safe for concurrent use.
type MemoryIndex struct {
	max int

	mu     sync.RWMutex
	scopes map[eventstore.Scope]map[string]*memDomain
	total  int
}

type memDomain struct {
	ids  []string // ascending
	byID map[string]Entry
}

var _ Index = (*MemoryIndex)(nil)

// NewMemoryIndex returns an empty index that keeps at most maxEntries
// sagas (<= 0: DefaultMemoryEntries).
func NewMemoryIndex(maxEntries int) *MemoryIndex {
	if maxEntries <= 0 {
		maxEntries = DefaultMemoryEntries
	}
	return &MemoryIndex{max: maxEntries, scopes: map[eventstore.Scope]map[string]*memDomain{}}
}

// Len returns how many sagas the index holds.
func (m *MemoryIndex) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.total
}

// Observe implements Index.
func (m *MemoryIndex) Observe(scope eventstore.Scope, e Entry) {
	e, ok := Normalize(e)
	if !ok || scope.Validate() != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	doms := m.scopes[scope]
	if doms == nil {
		doms = map[string]*memDomain{}
		m.scopes[scope] = doms
	}
	d := doms[e.Domain]
	if d == nil {
		d = &memDomain{byID: map[string]Entry{}}
		doms[e.Domain] = d
	}
	if old, ok := d.byID[e.TxID]; ok {
		if e.UpdatedAt.Before(old.UpdatedAt) {
			return // a late write of an older state
		}
		d.byID[e.TxID] = e
		return
	}
	d.byID[e.TxID] = e
	i, _ := slices.BinarySearch(d.ids, e.TxID)
	d.ids = slices.Insert(d.ids, i, e.TxID)
	m.total++
	if m.total > m.max {
		// Forget a 64th at once, so that a full index does not copy its
		// id slices at every new saga.
		m.evict(m.total - m.max + m.max/64)
	}
}

// evict drops the n sagas with the lowest ids of all. m.mu is held.
func (m *MemoryIndex) evict(n int) {
	var doms []*memDomain
	for _, byName := range m.scopes {
		for _, d := range byName {
			doms = append(doms, d)
		}
	}
	cut := make([]int, len(doms))
	for ; n > 0; n-- {
		best := -1
		for i, d := range doms {
			if cut[i] < len(d.ids) && (best < 0 || d.ids[cut[i]] < doms[best].ids[cut[best]]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		cut[best]++
	}
	for i, d := range doms {
		for _, id := range d.ids[:cut[i]] {
			delete(d.byID, id)
		}
		d.ids = slices.Delete(d.ids, 0, cut[i])
		m.total -= cut[i]
	}
}

// Recent implements Index.
func (m *MemoryIndex) Recent(ctx context.Context, q Query) (Page, error) {
	var p Page
	if err := q.Validate(); err != nil {
		return p, err
	}
	if err := ctx.Err(); err != nil {
		return p, fmt.Errorf("tracewindow: recent: %w", err)
	}
	upper, lower := idBounds(q)
	m.mu.RLock()
	defer m.mu.RUnlock()
	d := m.scopes[q.Scope][q.Domain]
	if d == nil {
		return p, nil
	}
	i := sort.SearchStrings(d.ids, upper) - 1 // last id < upper
	for ; i >= 0 && d.ids[i] >= lower; i-- {
		e := d.byID[d.ids[i]]
		p.Scanned++
		if !stateIn(e.State, q.States) {
			continue
		}
		if len(p.Entries) == q.Limit {
			p.Next = p.Entries[q.Limit-1].TxID
			break
		}
		p.Entries = append(p.Entries, e)
	}
	return p, nil
}

// idBounds returns the id range of q: ids >= lower and < upper.
func idBounds(q Query) (upper, lower string) {
	upper = IDPrefix(q.To.Add(time.Millisecond))
	if q.After != "" && q.After < upper {
		upper = q.After
	}
	return upper, IDPrefix(q.From)
}

func stateIn(s eventstore.State, states []eventstore.State) bool {
	return len(states) == 0 || slices.Contains(states, s)
}

// Domains implements Index.
func (m *MemoryIndex) Domains(ctx context.Context, scope eventstore.Scope) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tracewindow: domains: %w", err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.scopes[scope]))
	for name := range m.scopes[scope] {
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

// Census implements Index. It reads every saga of the scope it holds.
func (m *MemoryIndex) Census(ctx context.Context, scope eventstore.Scope, from, to time.Time) (Census, error) {
	c := Census{ByDomain: map[string]map[eventstore.State]int{}}
	if err := ctx.Err(); err != nil {
		return c, fmt.Errorf("tracewindow: census: %w", err)
	}
	lower, upper := IDPrefix(from), IDPrefix(to.Add(time.Millisecond))
	m.mu.RLock()
	defer m.mu.RUnlock()
	for name, d := range m.scopes[scope] {
		counts := map[eventstore.State]int{}
		lo := sort.SearchStrings(d.ids, lower)
		hi := sort.SearchStrings(d.ids, upper)
		for _, id := range d.ids[lo:hi] {
			e := d.byID[id]
			c.Scanned++
			counts[e.State]++
			if InFlight(e.State) && (c.Oldest == nil || e.TxID < c.Oldest.TxID) {
				e := e
				c.Oldest = &e
			}
		}
		if len(counts) > 0 {
			c.ByDomain[name] = counts
		}
	}
	return c, nil
}
