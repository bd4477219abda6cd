package agent

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoffhq/handoff/statestore"
)

// DefaultRecordCacheBytes is the record cache of an agent without
// Options.RecordCacheBytes: 64 MiB for all its active tasks together.
const DefaultRecordCacheBytes = 64 << 20

// recordCacheBytes is the bound Options.RecordCacheBytes asks for.
func recordCacheBytes(o int64) int64 {
	switch {
	case o < 0:
		return 0
	case o == 0:
		return DefaultRecordCacheBytes
	}
	return o
}

// cacheEntryOverhead is what a cached record costs besides its key and
// value: the entry, its place in the map and in the recency list.
const cacheEntryOverhead = 96

// recordCaches is the member's record caches: the bound they share and
// what they report. Each active task has one recordCache of its own
// (task.cache), made and dropped by the task's lifecycle (Agent.apply).
type recordCaches struct {
	limit int64         // bytes all the caches together may hold; 0: no caches
	live  atomic.Int64  // caches made and not dropped
	bytes *atomic.Int64 // what they hold together (the metrics' gauge)

	hits, misses prometheus.Counter

	// afterStoreRead, if set (by tests only), runs between a read's store
	// read of the keys it missed and its fill.
	afterStoreRead func()
}

// newRecordCaches returns the caches of a member bounded by limit bytes
// (0 or less: none), reporting to m.
func newRecordCaches(limit int64, m *metrics) *recordCaches {
	return &recordCaches{limit: max(limit, 0), bytes: &m.cacheHeld, hits: m.cacheHits, misses: m.cacheMisses}
}

// open returns a new, empty cache for an active task, or nil when caches
// are off.
func (cs *recordCaches) open() *recordCache {
	if cs == nil || cs.limit == 0 {
		return nil
	}
	cs.live.Add(1)
	c := &recordCache{caches: cs, entries: map[string]*cacheEntry{}}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// share is what one cache may hold: the bound, shared evenly by the caches
// alive.
func (cs *recordCaches) share() int64 { return cs.limit / max(cs.live.Load(), 1) }

// recordCache is the record cache of one task while it is active on this
// member: the values of the keys its worker read, and which keys it read
// that the task does not hold, in front of the local store. It is filled by
// the worker's reads and updated by the task's commits, and is coherent
// without invalidation from outside because the active owner is the only
// writer of the task's state (docs/ARCHITECTURE.md, "The record cache").
// A dropped cache holds nothing and takes nothing in.
type recordCache struct {
	caches *recordCaches

	// applying keeps the task's cached reads and the applies of its
	// commits apart: a commit holds it across the store's apply and the
	// cache's update, a read across its lookups, its store read and its
	// fill. So a read sees a commit whole or not at all, and never fills
	// the cache with a value the store held before a commit the cache
	// then misses. It is taken after task.commitMu and before Agent.mu.
	applying sync.RWMutex

	mu      sync.Mutex // guards the rest; a leaf
	entries map[string]*cacheEntry
	lru     cacheEntry // the sentinel of the recency ring: next is the most recent
	bytes   int64
	dropped bool
}

// cacheEntry is one key of a task, and its value when the task holds it.
type cacheEntry struct {
	key        string
	value      []byte // owned by the cache; nil when !present
	present    bool
	prev, next *cacheEntry
}

func (e *cacheEntry) size() int64 { return int64(len(e.key) + cap(e.value) + cacheEntryOverhead) }

// get returns a copy of key's value in task's state: from the cache, or
// read from store and kept. The error wraps statestore.ErrNotFound for a
// key the task does not hold.
func (c *recordCache) get(store *statestore.Store, task string, key []byte) ([]byte, error) {
	c.applying.RLock()
	defer c.applying.RUnlock()
	c.mu.Lock()
	e := c.lookupLocked(key)
	var v []byte
	if e != nil && e.present {
		v = append(make([]byte, 0, len(e.value)), e.value...)
	}
	c.mu.Unlock()
	switch {
	case e != nil && e.present:
		c.caches.hits.Inc()
		return v, nil
	case e != nil:
		c.caches.hits.Inc()
		return nil, fmt.Errorf("get %q of task %q: %w", key, task, statestore.ErrNotFound)
	}
	c.caches.misses.Inc()
	v, err := store.Get(task, key)
	if h := c.caches.afterStoreRead; h != nil {
		h()
	}
	switch {
	case errors.Is(err, statestore.ErrNotFound):
		c.fill([][]byte{key}, [][]byte{nil})
	case err == nil:
		c.fill([][]byte{key}, [][]byte{v})
	}
	return v, err
}

// getMany is statestore.Store.GetMany through the cache: the values of
// keys, from the cache where it has them and from one store read for the
// others, which it keeps. A commit of the task is seen by all of them or
// none.
func (c *recordCache) getMany(store *statestore.Store, task string, keys [][]byte, maxBytes int) ([][]byte, error) {
	c.applying.RLock()
	defer c.applying.RUnlock()
	out := make([][]byte, len(keys))
	var missed []int // the indexes of keys not in the cache
	c.mu.Lock()
	found := make([]*cacheEntry, len(keys))
	size := 0
	for i, k := range keys {
		if e := c.lookupLocked(k); e != nil {
			found[i] = e
			size += len(e.value)
		} else {
			missed = append(missed, i)
		}
	}
	if maxBytes > 0 && size > maxBytes {
		c.mu.Unlock()
		return nil, fmt.Errorf("get %d keys of task %q: their values pass %d bytes: %w", len(keys), task, maxBytes, statestore.ErrTooLarge)
	}
	// The values found, copied into one buffer: the cache's own may be
	// overwritten by the next commit once c.mu is released.
	buf := make([]byte, 0, size)
	for i, e := range found {
		if e != nil && e.present {
			start := len(buf)
			buf = append(buf, e.value...)
			out[i] = buf[start:len(buf):len(buf)] // buf is not nil: an empty value stays a non-nil slice
		}
	}
	c.mu.Unlock()
	c.caches.hits.Add(float64(len(keys) - len(missed)))
	c.caches.misses.Add(float64(len(missed)))
	if len(missed) == 0 {
		return out, nil
	}
	mkeys := make([][]byte, len(missed))
	for j, i := range missed {
		mkeys[j] = keys[i]
	}
	rest := 0
	if maxBytes > 0 {
		rest = max(maxBytes-len(buf), 1)
	}
	vals, err := store.GetMany(task, mkeys, rest)
	if err != nil {
		return nil, err
	}
	if h := c.caches.afterStoreRead; h != nil {
		h()
	}
	total := len(buf)
	for j, i := range missed {
		out[i] = vals[j]
		total += len(vals[j])
	}
	if maxBytes > 0 && total > maxBytes {
		return nil, fmt.Errorf("get %d keys of task %q: their values pass %d bytes: %w", len(keys), task, maxBytes, statestore.ErrTooLarge)
	}
	c.fill(mkeys, vals)
	return out, nil
}

// lookupLocked returns key's entry, made the most recent, or nil. Callers
// hold c.mu.
func (c *recordCache) lookupLocked(key []byte) *cacheEntry {
	if c.dropped {
		return nil
	}
	e := c.entries[string(key)]
	if e != nil && c.lru.next != e {
		c.unlink(e)
		c.pushFront(e)
	}
	return e
}

// fill keeps what a read found in the store: vals[i] is keys[i]'s value,
// nil for a key the task does not hold. Callers hold c.applying (shared).
func (c *recordCache) fill(keys, vals [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var grew int64
	for i, k := range keys {
		grew += c.setLocked(k, vals[i], vals[i] != nil, true)
	}
	c.evictLocked(grew)
}

// update applies a commit of the task to the cache: the keys it puts and
// deletes that the cache holds take their new values. Keys the cache does
// not hold stay out of it: a commit does not fill it. Callers hold
// c.applying, across the store's apply of the commit and this.
func (c *recordCache) update(puts []statestore.KV, deletes [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var grew int64
	for _, kv := range puts {
		grew += c.setLocked(kv.Key, kv.Value, true, false)
	}
	for _, k := range deletes {
		grew += c.setLocked(k, nil, false, false)
	}
	c.evictLocked(grew)
}

// setLocked gives key the value v (present) or none, and returns how
// many bytes the cache grew by (or shrank, when negative). A key not in
// the cache is added only when add is set. Callers hold c.mu.
func (c *recordCache) setLocked(key, v []byte, present, add bool) int64 {
	if c.dropped {
		return 0
	}
	var was int64
	e := c.entries[string(key)]
	if e == nil {
		if !add {
			return 0
		}
		e = &cacheEntry{key: string(key)}
		c.entries[e.key] = e
		c.pushFront(e)
	} else {
		was = e.size()
	}
	switch {
	case !present:
		e.value = nil
	case cap(e.value) >= len(v) && cap(e.value) <= 2*len(v)+16:
		// Readers copy values out under c.mu: this one can be overwritten.
		e.value = append(e.value[:0], v...)
	default:
		e.value = append(make([]byte, 0, len(v)), v...)
	}
	e.present = present
	c.bytes += e.size() - was
	return e.size() - was
}

// evictLocked drops the least recently used entries until the cache is
// within its share of the bound and every cache together within the
// bound, having grown by grew bytes since it last was. Callers hold c.mu.
func (c *recordCache) evictLocked(grew int64) {
	if c.dropped {
		return
	}
	cs := c.caches
	before := c.bytes
	total := cs.bytes.Add(grew) // may pass the bound until the eviction below
	share := cs.share()
	for c.lru.prev != &c.lru && (c.bytes > share || total-(before-c.bytes) > cs.limit) {
		e := c.lru.prev
		c.unlink(e)
		delete(c.entries, e.key)
		c.bytes -= e.size()
	}
	if freed := before - c.bytes; freed > 0 {
		cs.bytes.Add(-freed)
	}
}

// drop empties the cache for good: its task is no longer active here at
// the epoch it was made for.
func (c *recordCache) drop() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped {
		return
	}
	c.dropped = true
	c.caches.bytes.Add(-c.bytes)
	c.caches.live.Add(-1)
	c.entries, c.bytes = nil, 0
	c.lru.prev, c.lru.next = &c.lru, &c.lru
}

// clear empties the cache and keeps it: the task's store was written by
// other than its commits (a catch-up that applied a commit of its own whose
// acknowledgement was lost). Callers hold c.applying.
func (c *recordCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped {
		return
	}
	c.caches.bytes.Add(-c.bytes)
	clear(c.entries)
	c.bytes = 0
	c.lru.prev, c.lru.next = &c.lru, &c.lru
}

func (c *recordCache) unlink(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *recordCache) pushFront(e *cacheEntry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}
