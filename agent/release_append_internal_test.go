package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/statestore"
)

// appendAgent is an Agent with just what a direct release's append uses: a
// changelog on a real server, a store and its replay connections, owning
// task t0 at epoch 1 after one commit, revoked to m2 at epoch 2.
func appendAgent(t *testing.T) (*Agent, *task) {
	t.Helper()
	srv := natstest.Start(t)
	nc := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := srv.JetStream(t)
	clog, err := changelog.Open(ctx, js, changelog.Options{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	store, err := statestore.Open("db", statestore.Options{FS: vfs.NewMem(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	tk := &task{id: "t0", stateful: true, phase: phaseActive, epoch: 1, revoke: &revokeOrder{target: "m2", epoch: 2}}
	a := releaseAgent(5, tk)
	a.nc, a.clog, a.store, a.log = nc, clog, store, zerolog.Nop()
	a.progress = newProgressBook(func(group.Progress) {})
	if _, err := openSnapshots(ctx, js, a.opts); err != nil {
		t.Fatal(err)
	}
	if a.replays, err = openReplayConn(ctx, nc, "replays", a.opts, a.log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.replays.close)
	for _, e := range []changelog.Entry{{Kind: changelog.KindEpoch, Epoch: 1}, {Kind: changelog.KindCommit, Epoch: 1, Checkpoint: []byte("c1")}} {
		seq, err := clog.Append(ctx, "t0", tk.lastSeq, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Apply("t0", statestore.Commit{Seq: seq, Epoch: 1, Checkpoint: e.Checkpoint}); err != nil {
			t.Fatal(err)
		}
		tk.lastSeq = seq
	}
	return a, tk
}

// TestReleaseEntryLandedWithoutAck: a release whose entry an earlier
// attempt appended, its acknowledgement lost, finds the entry after the
// owner's last sequence and completes with it: no second entry.
func TestReleaseEntryLandedWithoutAck(t *testing.T) {
	a, tk := appendAgent(t)
	ctx := context.Background()
	landed, err := a.clog.Append(ctx, "t0", tk.lastSeq, changelog.Entry{Kind: changelog.KindRelease, Epoch: 2, Successor: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(ctx, "t0", 1); err != nil {
		t.Fatalf("release whose entry had landed = %v, want it completed", err)
	}
	r := a.releases()["t0"]
	if r.Seq != landed || r.To != "m2" || r.ToEpoch != 2 {
		t.Errorf("recorded release %+v, want the entry at %d, to m2 at epoch 2", r, landed)
	}
	if last, err := a.clog.Last(ctx, "t0"); err != nil || last != landed {
		t.Errorf("the subject ends at %d (%v), want the one release entry at %d", last, err, landed)
	}
}

// TestReleaseFencedByANewerOwner: a release whose entry cannot land, since
// a newer owner's marker follows the owner's last sequence, refuses with
// not_owner, appends nothing, and leaves the task lost here.
func TestReleaseFencedByANewerOwner(t *testing.T) {
	a, tk := appendAgent(t)
	ctx := context.Background()
	marker, err := a.clog.Append(ctx, "t0", tk.lastSeq, changelog.Entry{Kind: changelog.KindEpoch, Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(ctx, "t0", 1); !errors.Is(err, api.ErrNotOwner) {
		t.Fatalf("release after a newer owner's marker = %v, want ErrNotOwner", err)
	}
	if last, err := a.clog.Last(ctx, "t0"); err != nil || last != marker {
		t.Errorf("the subject ends at %d (%v), want the newer owner's marker at %d", last, err, marker)
	}
	if st := tk.state(); st.phase != phaseLost {
		t.Errorf("t0 is %v after the refused release, want lost", st.phase)
	}
	if len(a.releases()) != 0 {
		t.Errorf("a refused release was recorded: %+v", a.releases())
	}
}
