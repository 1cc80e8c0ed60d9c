package memory

import (
	"cmp"
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// dayNum is a calendar day as days since the Unix epoch (UTC).
type dayNum int64

func dayOf(t time.Time) dayNum { return dayNum(eventstore.DayOf(t).Unix() / 86400) }

func (d dayNum) time() time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

type yearPK struct {
	scope eventstore.Scope
	year  int
}

type dayPK struct {
	scope eventstore.Scope
	day   dayNum
}

type windowPK struct {
	scope  eventstore.Scope
	day    dayNum
	minute int
}

type instancePK struct {
	scope    eventstore.Scope
	day      dayNum
	minute   int
	instance string
}

type bucketPK struct {
	scope    eventstore.Scope
	day      dayNum
	minute   int
	instance string
	bucket   int
}

type entryRow struct {
	domain, status string
	token          int64
}

// bucketPart is one tier-5 partition: rows by transaction id, with a sorted
// id list rebuilt lazily for reads (writes and single-row deletes are on the
// hot path, traversal reads are rare).
type bucketPart struct {
	mu     sync.Mutex
	rows   map[string]entryRow
	sorted []string
	dirty  bool
	dead   bool // removed from directory.parts; writers must look again
}

// directory holds tiers 1-4 under one RWMutex (idempotent upserts hit the
// read-locked fast path) and tier-5 partitions each under its own mutex.
type directory struct {
	mu        sync.RWMutex
	days      map[yearPK]map[dayNum]struct{}
	windows   map[dayPK]map[int]struct{}
	instances map[windowPK]map[eventstore.Instance]struct{}
	buckets   map[instancePK]map[int]struct{}

	partsMu sync.RWMutex
	parts   map[bucketPK]*bucketPart
}

func (d *directory) init() {
	d.days = make(map[yearPK]map[dayNum]struct{})
	d.windows = make(map[dayPK]map[int]struct{})
	d.instances = make(map[windowPK]map[eventstore.Instance]struct{})
	d.buckets = make(map[instancePK]map[int]struct{})
	d.parts = make(map[bucketPK]*bucketPart)
}

func bucketKey(scope eventstore.Scope, p eventstore.RecoveryPath) bucketPK {
	return bucketPK{scope, dayOf(p.Day), p.MinuteOfDay, p.InstanceID, p.Bucket}
}

func addTo[K comparable, V comparable](m map[K]map[V]struct{}, k K, v V) {
	set := m[k]
	if set == nil {
		set = make(map[V]struct{})
		m[k] = set
	}
	set[v] = struct{}{}
}

func removeFrom[K comparable, V comparable](m map[K]map[V]struct{}, k K, v V) {
	if set := m[k]; set != nil {
		delete(set, v)
		if len(set) == 0 {
			delete(m, k)
		}
	}
}

func has[K comparable, V comparable](m map[K]map[V]struct{}, k K, v V) bool {
	_, ok := m[k][v]
	return ok
}

// putPath upserts tiers 1-4 of p.
func (d *directory) putPath(scope eventstore.Scope, p eventstore.RecoveryPath, token int64) {
	day := dayOf(p.Day)
	yk := yearPK{scope, p.Day.UTC().Year()}
	dk := dayPK{scope, day}
	wk := windowPK{scope, day, p.MinuteOfDay}
	ik := instancePK{scope, day, p.MinuteOfDay, p.InstanceID}
	inst := eventstore.Instance{Token: token, ID: p.InstanceID}
	present := func() bool {
		return has(d.days, yk, day) && has(d.windows, dk, p.MinuteOfDay) &&
			has(d.instances, wk, inst) && has(d.buckets, ik, p.Bucket)
	}
	d.mu.RLock()
	ok := present()
	d.mu.RUnlock()
	if ok {
		return
	}
	d.mu.Lock()
	addTo(d.days, yk, day)
	addTo(d.windows, dk, p.MinuteOfDay)
	addTo(d.instances, wk, inst)
	addTo(d.buckets, ik, p.Bucket)
	d.mu.Unlock()
}

func (d *directory) putEntry(scope eventstore.Scope, e eventstore.RecoveryEntry) {
	k := bucketKey(scope, e.RecoveryPath)
	for {
		d.partsMu.RLock()
		part := d.parts[k]
		d.partsMu.RUnlock()
		if part == nil {
			d.partsMu.Lock()
			if part = d.parts[k]; part == nil {
				part = &bucketPart{rows: make(map[string]entryRow)}
				d.parts[k] = part
			}
			d.partsMu.Unlock()
		}
		part.mu.Lock()
		if part.dead {
			part.mu.Unlock()
			continue
		}
		if _, ok := part.rows[e.TxID]; !ok {
			part.dirty = true
		}
		part.rows[e.TxID] = entryRow{domain: e.Domain, status: e.Status, token: e.InstanceToken}
		part.mu.Unlock()
		return
	}
}

// removeIfEmpty drops part from the map when it holds no row, so that the
// restore watchdogs of sagas that ended leave nothing behind.
func (d *directory) removeIfEmpty(k bucketPK, part *bucketPart) {
	d.partsMu.Lock()
	defer d.partsMu.Unlock()
	part.mu.Lock()
	defer part.mu.Unlock()
	if len(part.rows) == 0 && d.parts[k] == part {
		delete(d.parts, k)
		part.dead = true
	}
}

// RegisterRecovery upserts tiers 1-4 of e's path and its tier-5 row.
func (s *Store) RegisterRecovery(ctx context.Context, scope eventstore.Scope, e eventstore.RecoveryEntry) error {
	if err := s.check(ctx, scope.Validate(), e.Validate()); err != nil {
		return err
	}
	s.dir.putPath(scope, e.RecoveryPath, e.InstanceToken)
	s.dir.putEntry(scope, e)
	return nil
}

// PutDirectoryPath upserts tiers 1-4 of path.
func (s *Store) PutDirectoryPath(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath, instanceToken int64) error {
	if err := s.check(ctx, scope.Validate(), path.Validate()); err != nil {
		return err
	}
	s.dir.putPath(scope, path, instanceToken)
	return nil
}

// PutRecoveryEntry upserts the tier-5 row of e.
func (s *Store) PutRecoveryEntry(ctx context.Context, scope eventstore.Scope, e eventstore.RecoveryEntry) error {
	if err := s.check(ctx, scope.Validate(), e.Validate()); err != nil {
		return err
	}
	s.dir.putEntry(scope, e)
	return nil
}

// ListDays returns the tier-1 days from..to, ascending.
func (s *Store) ListDays(ctx context.Context, scope eventstore.Scope, from, to time.Time) ([]time.Time, error) {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateDaySpan(from, to)); err != nil {
		return nil, err
	}
	lo, hi := dayOf(from), dayOf(to)
	var days []dayNum
	s.dir.mu.RLock()
	for y := from.UTC().Year(); y <= to.UTC().Year(); y++ {
		for d := range s.dir.days[yearPK{scope, y}] {
			if d >= lo && d <= hi {
				days = append(days, d)
			}
		}
	}
	s.dir.mu.RUnlock()
	slices.Sort(days)
	var out []time.Time
	for _, d := range days {
		out = append(out, d.time())
	}
	return out, nil
}

// ListWindows returns the tier-2 windows of day, ascending.
func (s *Store) ListWindows(ctx context.Context, scope eventstore.Scope, day time.Time) ([]int, error) {
	if err := s.check(ctx, scope.Validate()); err != nil {
		return nil, err
	}
	s.dir.mu.RLock()
	out := sortedKeys(s.dir.windows[dayPK{scope, dayOf(day)}])
	s.dir.mu.RUnlock()
	return out, nil
}

func sortedKeys(set map[int]struct{}) []int {
	if len(set) == 0 {
		return nil
	}
	out := make([]int, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ListInstances returns the tier-3 instances of a window in r, ordered by
// (token, id).
func (s *Store) ListInstances(ctx context.Context, scope eventstore.Scope, day time.Time, minuteOfDay int, r eventstore.TokenRange) ([]eventstore.Instance, error) {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateWindow(minuteOfDay)); err != nil {
		return nil, err
	}
	var out []eventstore.Instance
	s.dir.mu.RLock()
	for inst := range s.dir.instances[windowPK{scope, dayOf(day), minuteOfDay}] {
		if r.Contains(inst.Token) {
			out = append(out, inst)
		}
	}
	s.dir.mu.RUnlock()
	slices.SortFunc(out, func(a, b eventstore.Instance) int {
		return cmp.Or(cmp.Compare(a.Token, b.Token), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// HasInstances reports whether any tier-3 row of the window is left.
func (s *Store) HasInstances(ctx context.Context, scope eventstore.Scope, day time.Time, minuteOfDay int) (bool, error) {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateWindow(minuteOfDay)); err != nil {
		return false, err
	}
	s.dir.mu.RLock()
	defer s.dir.mu.RUnlock()
	return len(s.dir.instances[windowPK{scope, dayOf(day), minuteOfDay}]) > 0, nil
}

// ListBuckets returns the tier-4 buckets of an instance, ascending.
func (s *Store) ListBuckets(ctx context.Context, scope eventstore.Scope, day time.Time, minuteOfDay int, instanceID string) ([]int, error) {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateWindow(minuteOfDay), eventstore.ValidateInstanceID(instanceID)); err != nil {
		return nil, err
	}
	s.dir.mu.RLock()
	out := sortedKeys(s.dir.buckets[instancePK{scope, dayOf(day), minuteOfDay, instanceID}])
	s.dir.mu.RUnlock()
	return out, nil
}

// ListRecoveryEntries returns tier-5 rows of a bucket after afterTxID,
// ordered by TxID, at most limit (<= 0: all).
func (s *Store) ListRecoveryEntries(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath, afterTxID string, limit int) ([]eventstore.RecoveryEntry, error) {
	if err := s.check(ctx, scope.Validate(), path.Validate()); err != nil {
		return nil, err
	}
	s.dir.partsMu.RLock()
	part := s.dir.parts[bucketKey(scope, path)]
	s.dir.partsMu.RUnlock()
	if part == nil {
		return nil, nil
	}
	path.Day = eventstore.DayOf(path.Day)
	part.mu.Lock()
	defer part.mu.Unlock()
	if part.dirty {
		part.sorted = part.sorted[:0]
		for id := range part.rows {
			part.sorted = append(part.sorted, id)
		}
		slices.Sort(part.sorted)
		part.dirty = false
	}
	i := sort.SearchStrings(part.sorted, afterTxID)
	if i < len(part.sorted) && part.sorted[i] == afterTxID {
		i++
	}
	var out []eventstore.RecoveryEntry
	for ; i < len(part.sorted) && (limit <= 0 || len(out) < limit); i++ {
		id := part.sorted[i]
		row, ok := part.rows[id]
		if !ok { // deleted since the last sort
			continue
		}
		out = append(out, eventstore.RecoveryEntry{RecoveryPath: path, TxID: id, Domain: row.domain, Status: row.status, InstanceToken: row.token})
	}
	return out, nil
}

// DeleteRecoveryEntry deletes one tier-5 row.
func (s *Store) DeleteRecoveryEntry(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath, txID string) error {
	if err := s.check(ctx, scope.Validate(), eventstore.RecoveryEntry{RecoveryPath: path, TxID: txID}.Validate()); err != nil {
		return err
	}
	k := bucketKey(scope, path)
	s.dir.partsMu.RLock()
	part := s.dir.parts[k]
	s.dir.partsMu.RUnlock()
	if part == nil {
		return nil
	}
	part.mu.Lock()
	delete(part.rows, txID)
	// The sorted list may keep txID; reads skip ids missing from rows and
	// the next write that adds an id rebuilds it. Rebuild when it would
	// otherwise grow without bound.
	if len(part.sorted) > 2*len(part.rows)+64 {
		part.dirty = true
	}
	empty := len(part.rows) == 0
	part.mu.Unlock()
	if empty {
		s.dir.removeIfEmpty(k, part)
	}
	return nil
}

// DropBucket deletes a whole tier-5 partition.
func (s *Store) DropBucket(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath) error {
	if err := s.check(ctx, scope.Validate(), path.Validate()); err != nil {
		return err
	}
	k := bucketKey(scope, path)
	s.dir.partsMu.Lock()
	defer s.dir.partsMu.Unlock()
	if part := s.dir.parts[k]; part != nil {
		part.mu.Lock()
		part.dead = true
		part.mu.Unlock()
		delete(s.dir.parts, k)
	}
	return nil
}

// DeleteBucket deletes the tier-4 row of path's bucket.
func (s *Store) DeleteBucket(ctx context.Context, scope eventstore.Scope, path eventstore.RecoveryPath) error {
	if err := s.check(ctx, scope.Validate(), path.Validate()); err != nil {
		return err
	}
	s.dir.mu.Lock()
	removeFrom(s.dir.buckets, instancePK{scope, dayOf(path.Day), path.MinuteOfDay, path.InstanceID}, path.Bucket)
	s.dir.mu.Unlock()
	return nil
}

// DeleteInstance deletes one tier-3 row.
func (s *Store) DeleteInstance(ctx context.Context, scope eventstore.Scope, day time.Time, minuteOfDay int, inst eventstore.Instance) error {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateWindow(minuteOfDay), eventstore.ValidateInstanceID(inst.ID)); err != nil {
		return err
	}
	s.dir.mu.Lock()
	removeFrom(s.dir.instances, windowPK{scope, dayOf(day), minuteOfDay}, inst)
	s.dir.mu.Unlock()
	return nil
}

// DeleteWindow deletes one tier-2 row.
func (s *Store) DeleteWindow(ctx context.Context, scope eventstore.Scope, day time.Time, minuteOfDay int) error {
	if err := s.check(ctx, scope.Validate(), eventstore.ValidateWindow(minuteOfDay)); err != nil {
		return err
	}
	s.dir.mu.Lock()
	removeFrom(s.dir.windows, dayPK{scope, dayOf(day)}, minuteOfDay)
	s.dir.mu.Unlock()
	return nil
}

// DeleteDay deletes one tier-1 row.
func (s *Store) DeleteDay(ctx context.Context, scope eventstore.Scope, day time.Time) error {
	if err := s.check(ctx, scope.Validate()); err != nil {
		return err
	}
	s.dir.mu.Lock()
	removeFrom(s.dir.days, yearPK{scope, day.UTC().Year()}, dayOf(day))
	s.dir.mu.Unlock()
	return nil
}
