package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/internal/poll"
)

// cacheCounts reads member id's record cache hits and misses.
func cacheCounts(t *testing.T, c *cluster, id string) (hits, misses float64) {
	reg := c.registry[id]
	return counterValue(t, reg, "handoff_record_cache_hits_total"), counterValue(t, reg, "handoff_record_cache_misses_total")
}

// commitKV commits puts (key, value pairs) and deletes to task on member
// id.
func (c *cluster) commitKV(id, task string, deletes []string, puts ...string) {
	c.t.Helper()
	req := api.CommitRequest{}
	for i := 0; i+1 < len(puts); i += 2 {
		req.Puts = append(req.Puts, api.KV{Key: []byte(puts[i]), Value: []byte(puts[i+1])})
	}
	for _, k := range deletes {
		req.Deletes = append(req.Deletes, []byte(k))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.members[id].a.Commit(ctx, task, req); err != nil {
		c.t.Fatalf("commit %v to %s on %s: %v", req, task, id, err)
	}
}

// values reads keys of task on member id in one batch, absent keys as "-".
func (c *cluster) values(id, task string, keys ...string) []string {
	c.t.Helper()
	bk := make([][]byte, len(keys))
	for i, k := range keys {
		bk[i] = []byte(k)
	}
	vals, err := c.members[id].a.GetMany(task, bk, 0)
	if err != nil {
		c.t.Fatalf("get %v of %s on %s: %v", keys, task, id, err)
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = "-"
		if v != nil {
			out[i] = string(v)
		}
	}
	return out
}

// TestCacheReadAfterCommitIsTheCommits: keys the worker read are cached
// (present and absent alike), and a read after a commit gets the commit's
// values from the cache: a put, a delete, and a put of a key cached
// absent.
func TestCacheReadAfterCommitIsTheCommits(t *testing.T) {
	c := newCluster(t, testConfig("orders-0", ""))
	c.registry = map[string]*prometheus.Registry{"m1": prometheus.NewRegistry()}
	c.start("m1")
	poll.Eventually(t, 20*time.Second, "orders-0 active", func() error { return c.activeEverywhere(c.view()) })
	c.commitKV("m1", "orders-0", nil, "k", "1", "j", "1")

	if got := fmt.Sprint(c.values("m1", "orders-0", "k", "j", "n")); got != "[1 1 -]" {
		t.Fatalf("first read = %s, want [1 1 -]", got)
	}
	if n, ok := agent.CachedKeys(c.members["m1"].a, "orders-0"); !ok || n != 3 {
		t.Fatalf("cache after the first read: %d keys (has one: %v), want the 3 read", n, ok)
	}
	hits0, misses0 := cacheCounts(t, c, "m1")

	c.commitKV("m1", "orders-0", []string{"j"}, "k", "2", "n", "3")
	if got := fmt.Sprint(c.values("m1", "orders-0", "k", "j", "n")); got != "[2 - 3]" {
		t.Errorf("batch read after the commit = %s, want the commit's [2 - 3]", got)
	}
	if v, err := c.members["m1"].a.Get("orders-0", []byte("k")); err != nil || string(v) != "2" {
		t.Errorf("single read of k after the commit = %q, %v; want the commit's 2", v, err)
	}
	if _, err := c.members["m1"].a.Get("orders-0", []byte("j")); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("single read of the deleted j = %v, want not found", err)
	}
	hits, misses := cacheCounts(t, c, "m1")
	if hits-hits0 != 5 || misses != misses0 {
		t.Errorf("reads after the commit: %v hits, %v misses; want all 5 keys from the cache", hits-hits0, misses-misses0)
	}
}

// TestCacheNeverOlderThanTheLastAcknowledgedCommit: reads of a key that
// a commit changes at the same moment see, each, a value at least as new
// as the last commit acknowledged before the read began: a read that
// fetched the store before a commit's apply never leaves its older value
// in the cache.
func TestCacheNeverOlderThanTheLastAcknowledgedCommit(t *testing.T) {
	c := newCluster(t, testConfig("orders-0", ""))
	m1 := c.start("m1")
	poll.Eventually(t, 20*time.Second, "orders-0 active", func() error { return c.activeEverywhere(c.view()) })
	const commits = 150
	var acked atomic.Int64
	c.commitKV("m1", "orders-0", nil, "k", "0")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				floor := acked.Load()
				vals, err := m1.a.GetMany("orders-0", [][]byte{[]byte("k")}, 0)
				if err == nil {
					var n int64
					if n, err = strconv.ParseInt(string(vals[0]), 10, 64); err == nil && n < floor {
						err = fmt.Errorf("read k = %d after commit %d was acknowledged", n, floor)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := 1; i <= commits; i++ {
		c.commitKV("m1", "orders-0", nil, "k", strconv.Itoa(i))
		acked.Store(int64(i))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCacheDroppedByFencedCommit: another member's epoch marker behind the
// owner's back fences its next commit; the task's cache goes with the task,
// and the member's caches hold nothing.
func TestCacheDroppedByFencedCommit(t *testing.T) {
	c := newCluster(t, testConfig("orders-0", ""))
	c.registry = map[string]*prometheus.Registry{"m1": prometheus.NewRegistry()}
	m1 := c.start("m1")
	poll.Eventually(t, 20*time.Second, "orders-0 active", func() error { return c.activeEverywhere(c.view()) })
	c.commitKV("m1", "orders-0", nil, "k", "1")
	if got := fmt.Sprint(c.values("m1", "orders-0", "k")); got != "[1]" {
		t.Fatalf("read = %s, want [1]", got)
	}
	if n, ok := agent.CachedKeys(m1.a, "orders-0"); !ok || n != 1 {
		t.Fatalf("cache before the takeover: %d keys (has one: %v), want k", n, ok)
	}
	if b := counterValue(t, c.registry["m1"], "handoff_record_cache_bytes"); b <= 0 {
		t.Fatalf("handoff_record_cache_bytes = %v with k cached, want more than 0", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.appendForeignMarker(ctx, "orders-0", 99)
	_, err := m1.a.Commit(ctx, "orders-0", api.CommitRequest{Puts: []api.KV{{Key: []byte("k"), Value: []byte("2")}}})
	if !errors.Is(err, api.ErrNotOwner) {
		t.Fatalf("commit after a takeover: %v, want ErrNotOwner", err)
	}
	if n, ok := agent.CachedKeys(m1.a, "orders-0"); ok {
		t.Errorf("the task taken over keeps a cache of %d keys", n)
	}
	if b := counterValue(t, c.registry["m1"], "handoff_record_cache_bytes"); b != 0 {
		t.Errorf("handoff_record_cache_bytes = %v after the only active task was taken over, want 0", b)
	}
}

// TestCacheEmptyAfterMovingAwayAndBack: a task read on m1 moves to m2,
// which commits to it, and back to m1: m1's cache of it starts empty, and
// its reads get m2's commit.
func TestCacheEmptyAfterMovingAwayAndBack(t *testing.T) {
	if testing.Short() {
		t.Skip("two agents and two hand-offs")
	}
	cfg := testConfig("s0..1", "")
	cfg.ReleaseTimeout = cfgDuration(time.Minute) // every move waits for the test's release
	c := newCluster(t, cfg)
	m1 := c.start("m1")
	poll.Eventually(t, 20*time.Second, "m1 owning both tasks", func() error {
		gv := c.view()
		if err := balanced(gv, "m1"); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
	for _, task := range []string{"s0", "s1"} {
		c.commitKV("m1", task, nil, "k", "m1")
		if got := fmt.Sprint(c.values("m1", task, "k")); got != "[m1]" {
			t.Fatalf("read of %s = %s, want [m1]", task, got)
		}
	}

	c.start("m2")
	var moved string
	poll.Eventually(t, 60*time.Second, "a task moved to m2", func() error {
		c.releaseRevoked("m1")
		for _, task := range []string{"s0", "s1"} {
			if _, ok := c.activeAt("m2", task); ok {
				moved = task
				return nil
			}
		}
		return errors.New("none yet")
	})
	if n, ok := agent.CachedKeys(m1.a, moved); ok {
		t.Errorf("m1 keeps a cache of %d keys of %s, which moved to m2", n, moved)
	}
	c.commitKV("m2", moved, nil, "k", "m2")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.members["m2"].a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 60*time.Second, moved+" back on m1", func() error {
		c.releaseRevoked("m2")
		if _, ok := c.activeAt("m1", moved); !ok {
			return errors.New("not yet")
		}
		return nil
	})
	if n, ok := agent.CachedKeys(m1.a, moved); !ok || n != 0 {
		t.Errorf("%s back on m1: cache of %d keys (has one: %v), want an empty one", moved, n, ok)
	}
	if got := fmt.Sprint(c.values("m1", moved, "k")); got != "[m2]" {
		t.Errorf("read of %s back on m1 = %s, want m2's commit [m2]", moved, got)
	}
}
