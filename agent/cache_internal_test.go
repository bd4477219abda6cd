package agent

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/statestore"
)

// cacheStore is a store on an in-memory file system holding keys k0..k<n-1>
// of task t0, each with a 100-byte value.
func cacheStore(t *testing.T, n int) *statestore.Store {
	t.Helper()
	store, err := statestore.Open("db", statestore.Options{FS: vfs.NewMem(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	c := statestore.Commit{Seq: 1, Epoch: 1}
	for i := range n {
		c.Puts = append(c.Puts, statestore.KV{Key: fmt.Appendf(nil, "k%d", i), Value: make([]byte, 100)})
	}
	if err := store.Apply("t0", c); err != nil {
		t.Fatal(err)
	}
	return store
}

// TestCacheBound: the caches together never hold more than their bound;
// each evicts its least recently used keys, and a second active task's
// cache makes each one's share half the bound.
func TestCacheBound(t *testing.T) {
	store := cacheStore(t, 1000)
	const entry = 2 + 100 + cacheEntryOverhead // k<d> with a 100-byte value, roughly
	limit := int64(50 * entry)
	cs := newRecordCaches(limit, newMetrics(nil))
	c := cs.open()
	check := func(when string) {
		t.Helper()
		if held := cs.bytes.Load(); held > limit {
			t.Fatalf("%s: the caches hold %d bytes, over their bound of %d", when, held, limit)
		}
	}
	for i := range 200 {
		if _, err := c.getMany(store, "t0", [][]byte{[]byte("k0"), fmt.Appendf(nil, "k%d", i)}, 0); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after read %d", i))
	}
	n, held := c.len()
	if n < 40 || held > limit {
		t.Errorf("one cache holds %d keys in %d bytes, want it near its bound of %d", n, held, limit)
	}
	if !c.holds([]byte("k0"), make([]byte, 100), true) {
		t.Error("k0, read every time, was evicted")
	}
	if c.holds([]byte("k1"), make([]byte, 100), true) {
		t.Error("k1, read once long ago, is still cached")
	}

	// A second cache: each gets half.
	c2 := cs.open()
	for i := range 200 {
		if _, err := c2.get(store, "t0", fmt.Appendf(nil, "k%d", 500+i)); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after the second cache's read %d", i))
	}
	if _, held := c2.len(); held > limit/2 {
		t.Errorf("the second cache holds %d bytes, over its share of %d", held, limit/2)
	}
	if _, err := c.get(store, "t0", []byte("k999")); err != nil {
		t.Fatal(err)
	}
	if _, held := c.len(); held > limit/2 {
		t.Errorf("the first cache holds %d bytes after a read, over its share of %d", held, limit/2)
	}
	check("after both")

	c.drop()
	c2.drop()
	if held := cs.bytes.Load(); held != 0 || cs.live.Load() != 0 {
		t.Errorf("dropped caches still hold %d bytes (%d alive)", held, cs.live.Load())
	}
	if _, err := c.get(store, "t0", []byte("k1")); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.len(); n != 0 {
		t.Errorf("a dropped cache took in %d keys", n)
	}
}

// TestCacheGetManyBound: a batch read's values over the caller's bound fail
// with ErrTooLarge whether they come from the cache, the store or both.
func TestCacheGetManyBound(t *testing.T) {
	store := cacheStore(t, 10)
	c := newRecordCaches(1<<20, newMetrics(nil)).open()
	keys := [][]byte{[]byte("k0"), []byte("k1"), []byte("k2"), []byte("none")}
	for round := range 2 { // missed, then cached
		if _, err := c.getMany(store, "t0", keys, 299); err == nil {
			t.Errorf("round %d: 300 bytes of values within a bound of 299", round)
		}
		vals, err := c.getMany(store, "t0", keys, 300)
		if err != nil || len(vals) != 4 || len(vals[2]) != 100 || vals[3] != nil {
			t.Errorf("round %d: getMany = %d values, %v; want 3 of 100 bytes and an absent one", round, len(vals), err)
		}
	}
	if _, err := c.getMany(store, "t0", [][]byte{[]byte("k0"), []byte("k5")}, 150); err == nil {
		t.Error("a cached value and a missed one over the bound together were returned")
	}
}

// TestCacheReadHoldsOffCommits: between a read's store read of the keys
// it missed and its fill, no commit of the task can apply (its applying
// lock is held), so the value it fills is never one a commit replaced
// meanwhile; and a commit that waited for it then updates what it filled.
func TestCacheReadHoldsOffCommits(t *testing.T) {
	store := cacheStore(t, 10)
	cs := newRecordCaches(1<<20, newMetrics(nil))
	c := cs.open()
	for name, read := range map[string]func() error{
		"get":     func() error { _, err := c.get(store, "t0", []byte("k1")); return err },
		"getMany": func() error { _, err := c.getMany(store, "t0", [][]byte{[]byte("k1")}, 0); return err },
	} {
		c.clear()
		seq, _, _ := store.Meta("t0")
		committed := make(chan struct{})
		cs.afterStoreRead = func() {
			if c.applying.TryLock() {
				c.applying.Unlock()
				t.Errorf("%s: a commit could apply between the read's store read and its fill", name)
			}
			go func() { // a commit of k1, as Agent.applyCommit makes it
				defer close(committed)
				c.applying.Lock()
				defer c.applying.Unlock()
				v := []byte(name)
				if err := store.Apply("t0", statestore.Commit{Seq: seq.Applied + 1, Epoch: 1, Puts: []statestore.KV{{Key: []byte("k1"), Value: v}}}); err != nil {
					t.Error(err)
				}
				c.update([]statestore.KV{{Key: []byte("k1"), Value: v}}, nil)
			}()
		}
		if err := read(); err != nil {
			t.Fatal(err)
		}
		cs.afterStoreRead = nil
		<-committed
		if !c.holds([]byte("k1"), []byte(name), true) {
			t.Errorf("%s: after the read and the commit, the cache does not hold the commit's value of k1", name)
		}
	}
}

// len returns how many keys the cache holds, and in how many bytes.
func (c *recordCache) len() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), c.bytes
}

// holds reports whether the cache holds key with value v (present), or
// held absent (!present).
func (c *recordCache) holds(key, v []byte, present bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[string(key)]
	return e != nil && e.present == present && bytes.Equal(e.value, v)
}
