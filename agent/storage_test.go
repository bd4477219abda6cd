package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/internal/logtest"
	"github.com/handoffhq/handoff/internal/poll"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/statestore"
)

func putReq(v string) api.CommitRequest {
	return api.CommitRequest{Puts: []api.KV{{Key: []byte("k"), Value: []byte(v)}}, Checkpoint: []byte(v)}
}

// diskMember is member m1 of a group of one stateful task, orders-0, whose
// store is on an in-memory disk the test fills and frees (the store keeps
// 64 MiB in reserve).
type diskMember struct {
	c  *cluster
	m1 *member
	fs *vfs.MemFS
}

// startOnDisk starts m1 on a disk with room and waits until it owns orders-0.
func startOnDisk(t *testing.T) *diskMember {
	t.Helper()
	d := &diskMember{fs: vfs.NewMem()}
	d.free()
	d.c = newCluster(t, testConfig("orders-0", ""))
	d.c.storeOptions = func(string) statestore.Options {
		return statestore.Options{FS: d.fs, MinFree: 64 << 20}
	}
	d.m1 = d.c.start("m1")
	poll.Eventually(t, 20*time.Second, "orders-0 active", func() error { return d.c.activeEverywhere(d.c.view()) })
	return d
}

// fill leaves 1 MiB free and waits until m1's readiness reports the full disk.
func (d *diskMember) fill(t *testing.T) {
	t.Helper()
	d.fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 20, TotalBytes: 1 << 31})
	poll.Eventually(t, 10*time.Second, "readiness to report the full disk", func() error {
		if err := d.m1.a.Ready(); !errors.Is(err, statestore.ErrFull) {
			return fmt.Errorf("Ready() = %v, want ErrFull", err)
		}
		return nil
	})
}

// free gives the disk room again.
func (d *diskMember) free() {
	d.fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 1 << 31})
}

// A commit while the local store's disk is full is refused with 503
// before anything reaches the changelog, readiness says why, and commits
// resume once the disk has room.
func TestCommitOnFullDiskRefusedThenResumes(t *testing.T) {
	d := startOnDisk(t)
	c, m1 := d.c, d.m1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	poll.Eventually(t, 10*time.Second, "a first commit", func() error {
		_, err := m1.a.Commit(ctx, "orders-0", putReq("1"))
		return err
	})
	log, err := changelog.Open(ctx, c.js, changelog.Options{Group: c.group})
	if err != nil {
		t.Fatal(err)
	}
	before, err := log.Last(ctx, "orders-0")
	if err != nil {
		t.Fatal(err)
	}

	d.fill(t)
	for i := range 20 {
		_, err := m1.a.Commit(ctx, "orders-0", putReq(fmt.Sprint(i+2)))
		if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "nothing was written") {
			t.Fatalf("commit on a full disk = %v, want ErrUnavailable, nothing written", err)
		}
	}
	if last, err := log.Last(ctx, "orders-0"); err != nil || last != before {
		t.Fatalf("changelog of orders-0 ends at %d (%v) after refused commits, want %d", last, err, before)
	}

	d.free()
	poll.Eventually(t, 10*time.Second, "commits to resume", func() error {
		_, err := m1.a.Commit(ctx, "orders-0", putReq("ok"))
		return err
	})
	if err := m1.a.Ready(); err != nil {
		t.Fatalf("Ready after space returned: %v", err)
	}
	if v, err := m1.store.Get("orders-0", []byte("k")); err != nil || string(v) != "ok" {
		t.Fatalf("k = %q, %v; want ok", v, err)
	}
}

// A task that cannot become active because its store's disk is full
// (here a task added to the group while the disk is short) answers
// commits as the full disk does, 503, not as a task owned elsewhere: its
// worker retries instead of stopping, and the task serves once the disk
// has room.
func TestCommitWhileActivatingOnFullDisk(t *testing.T) {
	d := startOnDisk(t)
	c, m1 := d.c, d.m1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	d.fill(t)
	cfg, rev, _, err := group.LoadConfig(ctx, c.kv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Stateful = append(cfg.Stateful, "orders-1")
	if _, err := group.UpdateConfig(ctx, c.kv, cfg, rev); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "orders-1 assigned to m1, and m1 applying it", func() error {
		for _, tv := range m1.a.Assignment().Tasks {
			if tv.ID == "orders-1" {
				return nil // shown as a learner while it becomes active
			}
		}
		return errors.New("not yet")
	})
	for i := range 5 {
		if _, err := m1.a.Commit(ctx, "orders-1", putReq(fmt.Sprint(i))); !errors.Is(err, api.ErrUnavailable) {
			t.Fatalf("commit to a task becoming active on a full disk = %v, want ErrUnavailable", err)
		}
	}

	d.free()
	poll.Eventually(t, 10*time.Second, "orders-1 to take commits", func() error {
		_, err := m1.a.Commit(ctx, "orders-1", putReq("ok"))
		return err
	})
}

// loseOrders0 starts m1, makes five commits to orders-0 there, ends m1
// with end (c.crash or c.stop), deletes its data dir and purges the task's
// changelog: nothing of the task's state is left.
func loseOrders0(ctx context.Context, t *testing.T, c *cluster, end func(string)) {
	t.Helper()
	m1 := c.start("m1")
	poll.Eventually(t, 20*time.Second, "orders-0 active on m1", func() error { return c.activeEverywhere(c.view()) })
	for i := range 5 {
		if _, err := m1.a.Commit(ctx, "orders-0", putReq(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	end("m1")
	if err := os.RemoveAll(m1.dir); err != nil {
		t.Fatal(err)
	}
	log, err := changelog.Open(ctx, c.js, changelog.Options{Group: c.group})
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Stream().Purge(ctx, jetstream.WithPurgeSubject(log.Subject("orders-0"))); err != nil {
		t.Fatal(err)
	}
}

// A task whose changelog was purged whole, failing over to a member
// without a copy, is not served empty: the activation is refused and
// counted, until the operator accepts the loss.
func TestPurgedChangelogRefusesActivation(t *testing.T) {
	c := newCluster(t, testConfig("orders-0", ""))
	c.registry = map[string]*prometheus.Registry{"m2": prometheus.NewRegistry()}
	accept := false
	c.agentOptions = func(id string, o *agent.Options) {
		if accept {
			o.AcceptStateLoss = []string{"orders-0"}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	loseOrders0(ctx, t, c, c.crash)

	m2 := c.start("m2")
	poll.Eventually(t, 30*time.Second, "the refused activation to be counted", func() error {
		if n := counterValue(t, c.registry["m2"], "handoff_restore_refused_total"); n != 1 {
			return fmt.Errorf("handoff_restore_refused_total = %v", n)
		}
		return nil
	})
	if _, err := m2.a.Commit(ctx, "orders-0", putReq("x")); !errors.Is(err, api.ErrNotOwner) {
		t.Fatalf("commit to a task whose state is lost = %v, want ErrNotOwner", err)
	}
	if _, ok, err := m2.store.Meta("orders-0"); ok || err != nil {
		t.Fatalf("m2 holds orders-0 (%v, %v), want nothing", ok, err)
	}

	c.stop("m2")
	accept = true
	c.registry["m2"] = prometheus.NewRegistry()
	m2 = c.start("m2")
	poll.Eventually(t, 30*time.Second, "orders-0 to start empty once its loss is accepted", func() error {
		_, err := m2.a.Commit(ctx, "orders-0", putReq("after"))
		return err
	})
}

// A task that never changed owner (still at epoch 1) but had commits, whose
// changelog was purged whole while its only copy was lost with its
// member's data dir, is refused as lost too, not started empty: the
// group recorded its first commit. The refusal names the epoch /group
// shows.
func TestPurgedChangelogRefusesTaskThatNeverMoved(t *testing.T) {
	c := newCluster(t, testConfig("orders-0", ""))
	c.registry = map[string]*prometheus.Registry{"m1": prometheus.NewRegistry()}
	var logs logtest.Buffer
	c.agentOptions = func(id string, o *agent.Options) { o.Logger = zerolog.New(&logs) }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	loseOrders0(ctx, t, c, c.stop)

	c.registry["m1"] = prometheus.NewRegistry()
	m1 := c.start("m1")
	poll.Eventually(t, 30*time.Second, "the refused activation to be counted", func() error {
		if n := counterValue(t, c.registry["m1"], "handoff_restore_refused_total"); n != 1 {
			return fmt.Errorf("handoff_restore_refused_total = %v", n)
		}
		return nil
	})
	if _, err := m1.a.Commit(ctx, "orders-0", putReq("x")); !errors.Is(err, api.ErrNotOwner) {
		t.Fatalf("commit to a task whose state is lost = %v, want ErrNotOwner", err)
	}
	if _, ok, err := m1.store.Meta("orders-0"); ok || err != nil {
		t.Fatalf("m1 holds orders-0 (%v, %v), want nothing", ok, err)
	}
	var epoch uint64
	for _, task := range c.view().Tasks {
		if task.ID == "orders-0" {
			epoch = task.Epoch
		}
	}
	if epoch != 1 {
		t.Fatalf("/group shows orders-0 at epoch %d, want the task never to have moved (epoch 1)", epoch)
	}
	if logs.Count("task state is lost") != 1 || logs.Count(fmt.Sprintf("records it at epoch %d, with a commit of its worker", epoch)) != 1 {
		t.Fatalf("want one refusal naming epoch %d and the recorded commit; log:\n%s", epoch, logs.String())
	}
}

// A member whose store was found corrupt starts with it moved aside and
// empty, counts the rebuild, and restores its task from the changelog.
func TestCorruptStoreRebuiltFromChangelog(t *testing.T) {
	c := newCluster(t, testConfig("orders-0", ""))
	c.registry = map[string]*prometheus.Registry{"m1": prometheus.NewRegistry()}
	m1 := c.start("m1")
	poll.Eventually(t, 20*time.Second, "orders-0 active", func() error { return c.activeEverywhere(c.view()) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 5 {
		if _, err := m1.a.Commit(ctx, "orders-0", putReq(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	c.stop("m1")
	manifests, _ := filepath.Glob(filepath.Join(m1.dir, "state", "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no MANIFEST in the store")
	}
	b, err := os.ReadFile(manifests[len(manifests)-1])
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(manifests[len(manifests)-1], b, 0o644); err != nil {
		t.Fatal(err)
	}

	c.registry["m1"] = prometheus.NewRegistry()
	m1 = c.start("m1")
	if n := counterValue(t, c.registry["m1"], "handoff_store_rebuilds_total"); n != 1 {
		t.Fatalf("handoff_store_rebuilds_total = %v, want 1", n)
	}
	if aside, _ := filepath.Glob(filepath.Join(m1.dir, "state.corrupt-*")); len(aside) != 1 {
		t.Fatalf("moved-aside stores: %v, want one", aside)
	}
	poll.Eventually(t, 20*time.Second, "orders-0 restored", func() error {
		v, err := m1.a.Get("orders-0", []byte("k"))
		if err != nil || string(v) != "4" {
			return fmt.Errorf("k = %q, %v; want the last commit's 4", v, err)
		}
		return nil
	})
}
