package agent_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/statestore"
)

// startSnapshotting starts member id like cluster.start, with snapshot
// options.
func (c *cluster) startSnapshotting(id string, snaps agent.SnapshotOptions) *member {
	c.t.Helper()
	m := &member{id: id, dir: filepath.Join(c.t.TempDir(), id)}
	c.members[id] = m
	return c.run(m, snaps)
}

// snapshotsOf lists task's snapshots in the group's bucket.
func (c *cluster) snapshotsOf(task string) []snapshot.Info {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := snapshot.OpenExisting(ctx, c.js, c.group)
	if err != nil {
		c.t.Fatal(err)
	}
	snaps, err := b.List(ctx, task)
	if err != nil {
		c.t.Fatal(err)
	}
	return snaps
}

// firstSeq returns the sequence of the first message left on task's
// changelog subject.
func (c *cluster) firstSeq(task string) uint64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, changelog.StreamName(c.group))
	if err != nil {
		c.t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(changelog.Subject(c.group, task)))
	if err != nil {
		c.t.Fatal(err)
	}
	return m.Sequence
}

// requireExactCounts checks a member's copy of a counting task against its
// checkpoint: the worker's input is a function of the position.
func requireExactCounts(t *testing.T, s *statestore.Store, task string) {
	t.Helper()
	m, ok, err := s.Meta(task)
	if err != nil || !ok || len(m.Checkpoint) != 8 {
		t.Fatalf("meta of %s = %+v, %v, %v; want a checkpoint", task, m, ok, err)
	}
	n := binary.BigEndian.Uint64(m.Checkpoint)
	want := map[string]uint64{}
	for i := range n {
		want[inputKey(task, i)]++
	}
	kvs, err := s.Scan(task, statestore.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != len(want) {
		t.Errorf("%s has %d keys, want %d", task, len(kvs), len(want))
	}
	for _, kv := range kvs {
		if got, w := string(kv.Value), strconv.FormatUint(want[string(kv.Key)], 10); got != w {
			t.Errorf("%s: count of %s = %s, want %s (input up to %d)", task, kv.Key, got, w, n)
		}
	}
}

// TestSnapshotsTrimAndTheNextOwnerLoadsOne runs a counting worker on a
// member that snapshots every 25 commits: snapshots appear by themselves,
// the changelog is trimmed, /group shows them, and when the member leaves,
// the next owner restores from a snapshot (the trimmed changelog alone
// would not do) with exact counts, and snapshots the task in its turn.
func TestSnapshotsTrimAndTheNextOwnerLoadsOne(t *testing.T) {
	cfg := testConfig("s0", "")
	cfg.ReleaseTimeout = cfgDuration(30 * time.Second)
	c := newCluster(t, cfg)
	opts := agent.SnapshotOptions{Every: 25, Check: time.Hour, Keep: 1, Margin: 10}
	m1 := c.startSnapshotting("m1", opts)
	w1 := c.startWorker("m1")
	firstSeq := uint64(0)
	poll.Eventually(t, 20*time.Second, "two snapshots of s0 and a trimmed changelog", func() error {
		snaps := c.snapshotsOf("s0")
		if len(snaps) == 0 || snaps[0].Keys == 0 {
			return fmt.Errorf("snapshots %v", snaps)
		}
		if firstSeq == 0 {
			firstSeq = snaps[0].Seq
		}
		if snaps[0].Seq == firstSeq {
			return errors.New("one snapshot so far")
		}
		if f := c.firstSeq("s0"); f <= 1 {
			return fmt.Errorf("changelog of s0 starts at %d", f)
		}
		if len(snaps) != 1 { // 2 only while a new one is being stored
			return fmt.Errorf("%d snapshots kept, want 1 (Keep: 1)", len(snaps))
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gv, err := m1.a.Group(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, gt := range gv.Tasks {
		if gt.ID == "s0" && (gt.SnapshotSeq < firstSeq || gt.SnapshotAge < 0 || gt.SnapshotAge > time.Minute) {
			t.Errorf("/group shows s0's snapshot at seq %d, age %s; want at least %d, recent", gt.SnapshotSeq, gt.SnapshotAge, firstSeq)
		}
	}
	read := c.view()
	if err := group.ReadSnapshots(ctx, c.js, &read, time.Now()); err != nil || read.Tasks[0].SnapshotSeq < firstSeq {
		t.Errorf("ReadSnapshots = %v, task %+v; want s0's snapshot", err, read.Tasks[0])
	}

	// m1 leaves: s0 moves to m2, a newcomer, which must load a snapshot.
	c.startSnapshotting("m2", opts)
	w2 := c.startWorker("m2")
	if _, err := m1.a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m1.a.WaitDone(ctx); err != nil {
		t.Fatalf("m1 not done after leave: %v", err)
	}
	w1.stop()
	var m2snap uint64
	poll.Eventually(t, 30*time.Second, "s0 on m2, committing and snapshotted by m2", func() error {
		gv := c.view()
		if gv.Tasks[0].Active != "m2" {
			return fmt.Errorf("s0 on %q", gv.Tasks[0].Active)
		}
		if err := w2.running(gv); err != nil {
			return err
		}
		snaps := c.snapshotsOf("s0")
		if len(snaps) == 0 || snaps[0].Epoch != gv.Tasks[0].Epoch {
			return fmt.Errorf("no snapshot at m2's epoch %d yet: %v", gv.Tasks[0].Epoch, snaps)
		}
		m2snap = snaps[0].Seq
		return nil
	})
	w2.stop()
	m2 := c.members["m2"]
	if tv := m2.a.Assignment().Tasks; len(tv) != 1 || tv[0].Role != api.RoleActive {
		t.Fatalf("m2's view %+v, want s0 active", tv)
	}
	requireExactCounts(t, m2.store, "s0")
	if m, _, _ := m2.store.Meta("s0"); m.Applied < m2snap {
		t.Errorf("m2 applied %d, below its own snapshot at %d", m.Applied, m2snap)
	}
}

// TestSnapshotOnlyByTheActiveOwner: the step snapshots a task its member
// owns, and refuses one it holds a copy of as a standby, a stateless one
// and an unknown one.
func TestSnapshotOnlyByTheActiveOwner(t *testing.T) {
	cfg := testConfig("s0", "x0")
	cfg.Standbys = 1
	c := newCluster(t, cfg)
	off := agent.SnapshotOptions{Disabled: true}
	m1 := c.startSnapshotting("m1", off)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n := m1.a.SnapshotDue(ctx); n != 0 {
		t.Errorf("SnapshotDue with nothing committed = %d, want 0", n)
	}
	poll.Eventually(t, 20*time.Second, "s0 active on m1", func() error {
		for _, tv := range m1.a.Assignment().Tasks {
			if tv.ID == "s0" && tv.Role == api.RoleActive {
				return nil
			}
		}
		return errors.New("not yet")
	})
	put := api.CommitRequest{Puts: []api.KV{{Key: []byte("k"), Value: []byte("v")}}, Checkpoint: []byte("1")}
	if _, err := m1.a.Commit(ctx, "s0", put); err != nil {
		t.Fatal(err)
	}
	m2 := c.startSnapshotting("m2", off)
	poll.Eventually(t, 20*time.Second, "a current standby copy of s0 on m2", func() error {
		for _, tv := range m2.a.Assignment().Tasks {
			if tv.ID == "s0" && tv.Role == api.RoleStandby && tv.Lag == 0 {
				if m, ok, err := m2.store.Meta("s0"); err != nil || !ok || m.Applied == 0 {
					return fmt.Errorf("m2's copy of s0: %+v %v %v", m, ok, err)
				}
				return nil
			}
		}
		return errors.New("not yet")
	})
	if info, err := m1.a.Snapshot(ctx, "s0"); err != nil || info.Keys != 1 {
		t.Errorf("owner's Snapshot(s0) = %+v, %v; want a snapshot of 1 key", info, err)
	}
	for _, tc := range []struct {
		m    *member
		task string
	}{{m2, "s0"}, {m1, "x0"}, {m2, "x0"}, {m1, "nope"}} {
		if _, err := tc.m.a.Snapshot(ctx, tc.task); err == nil {
			t.Errorf("%s: Snapshot(%s) = nil error, want a refusal", tc.m.id, tc.task)
		}
	}
}
