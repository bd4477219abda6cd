package restore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/snapshot/local"
	"github.com/handoffhq/handoff/statestore"
)

// Actions of TestSnapshotsRestoreLikeFullReplay.
const (
	actCommit = iota
	actOther  // another task's message in between
	actSnapshot
	actTrim  // trim again, possibly harder, without a new snapshot
	actSync  // a lagging member catches up
	actCount // number of actions
)

// TestSnapshotsRestoreLikeFullReplay checks that for any interleaving of
// commits, snapshots (each trimming the changelog and pruning snapshots
// with a random retention), extra trims and catch-ups of a lagging member,
// a restore through snapshots and the changelog's suffix gives exactly the
// state a full replay of the history gives (a map model of it): an empty
// store, and a member whose copy stopped anywhere in the history.
func TestSnapshotsRestoreLikeFullReplay(t *testing.T) {
	e := newEnv(t)
	b := openBucket(t, e)
	ctx := context.Background()
	run := 0
	rapid.Check(t, func(t *rapid.T) {
		run++
		task, other := fmt.Sprintf("s%d", run), fmt.Sprintf("o%d", run)
		w, lag := openMemT(t), openMemT(t)
		defer w.Close()
		defer lag.Close()

		model := map[string]string{}
		var meta statestore.Meta
		var last, otherLast uint64
		retention := func(t *rapid.T) snapshot.Retention {
			return snapshot.Retention{Keep: rapid.IntRange(1, 2).Draw(t, "keep"), Margin: rapid.Uint64Range(1, 4).Draw(t, "margin")}
		}
		for _, act := range rapid.SliceOfN(rapid.IntRange(0, actCount-1), 1, 40).Draw(t, "actions") {
			switch act {
			case actCommit:
				en := genEntry().Draw(t, "entry")
				seq, err := e.log.Append(ctx, task, last, en)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Apply(task, restore.Commit(en, seq)); err != nil {
					t.Fatal(err)
				}
				last = seq
				for _, kv := range en.Puts {
					model[string(kv.Key)] = string(kv.Value)
				}
				for _, k := range en.Deletes {
					delete(model, string(k))
				}
				meta.Applied, meta.Epoch = seq, en.Epoch
				if len(en.Checkpoint) > 0 {
					meta.Checkpoint = en.Checkpoint
				}
			case actOther:
				seq, err := e.log.Append(ctx, other, otherLast, changelog.Entry{Kind: changelog.KindCommit, Epoch: 1})
				if err != nil {
					t.Fatal(err)
				}
				otherLast = seq
			case actSnapshot:
				_, err := local.Take(ctx, b, w, e.log, task, retention(t))
				if err != nil && !errors.Is(err, local.ErrUpToDate) && !errors.Is(err, local.ErrNoState) {
					t.Fatalf("Take: %v", err)
				}
			case actTrim:
				if _, err := b.Trim(ctx, e.log, task, retention(t)); err != nil {
					t.Fatalf("Trim: %v", err)
				}
			case actSync:
				if _, err := restore.New(e.log, lag, restore.Options{Task: task, Snapshots: b}).Run(ctx); err != nil {
					t.Fatalf("lagging member's restore: %v", err)
				}
				requireModel(t, "lagging member", lag, task, meta, model)
			}
		}
		requireModel(t, "writer", w, task, meta, model)
		fresh := openMemT(t)
		defer fresh.Close()
		for name, s := range map[string]*statestore.Store{"empty store": fresh, "lagging member": lag} {
			if _, err := restore.New(e.log, s, restore.Options{Task: task, Snapshots: b}).Run(ctx); err != nil {
				t.Fatalf("%s's restore: %v", name, err)
			}
			requireModel(t, name, s, task, meta, model)
		}
	})
}

// requireModel checks s's copy of task against the model of the history.
func requireModel(t *rapid.T, name string, s *statestore.Store, task string, meta statestore.Meta, model map[string]string) {
	m, ok, err := s.Meta(task)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Applied == 0 {
		if ok {
			t.Fatalf("%s has meta %+v of an empty history", name, m)
		}
		return
	}
	if !ok || m.Applied != meta.Applied || m.Epoch != meta.Epoch || !bytes.Equal(m.Checkpoint, meta.Checkpoint) {
		t.Fatalf("%s meta = %+v (%v), want %+v", name, m, ok, meta)
	}
	kvs, err := s.Scan(task, statestore.ScanOptions{Limit: statestore.MaxScanLimit})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if fmt.Sprint(got) != fmt.Sprint(model) {
		t.Fatalf("%s data = %q, want %q", name, got, model)
	}
}
