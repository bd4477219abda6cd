package changelog_test

import (
	"testing"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/statestore"
)

// TestReadTaskAndReplay appends a task's epoch marker and commits, reads
// them back in order (another task's commit in between is not read), and
// replays them.
func TestReadTaskAndReplay(t *testing.T) {
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := testContext(t)
	l := openLog(t, js, "g")

	if recs, err := changelog.ReadTask(ctx, js, "g", "t"); err != nil || len(recs) != 0 {
		t.Fatalf("ReadTask of an empty task = %v, %v; want none", recs, err)
	}
	kv := func(k, v string) statestore.KV { return statestore.KV{Key: []byte(k), Value: []byte(v)} }
	var last uint64
	for _, a := range []struct {
		task string
		e    changelog.Entry
	}{
		{"t", changelog.Entry{Kind: changelog.KindEpoch, Epoch: 1}},
		{"t", changelog.Entry{Kind: changelog.KindCommit, Epoch: 1, Puts: []statestore.KV{kv("a", "1"), kv("c", "1")}}},
		{"u", changelog.Entry{Kind: changelog.KindEpoch, Epoch: 1}},
		{"t", changelog.Entry{Kind: changelog.KindCommit, Epoch: 1, Puts: []statestore.KV{kv("a", "2"), kv("b", "1")}, Deletes: [][]byte{[]byte("c")}, Checkpoint: []byte{7}}},
	} {
		expected := last
		if a.task != "t" {
			expected = 0
		}
		seq, err := l.Append(ctx, a.task, expected, a.e)
		if err != nil {
			t.Fatalf("Append %s: %v", a.task, err)
		}
		if a.task == "t" {
			last = seq
		}
	}

	recs, err := changelog.ReadTask(ctx, js, "g", "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Entry.Kind != changelog.KindEpoch || recs[2].Seq != last {
		t.Fatalf("ReadTask = %+v; want t's marker and two commits, the last at seq %d", recs, last)
	}
	s := changelog.Replay(recs)
	if string(s.Data["a"]) != "2" || string(s.Data["b"]) != "1" || s.Epoch != 1 || s.LastSeq != last {
		t.Errorf("Replay = %+v; want a=2 b=1 at epoch 1, last seq %d", s, last)
	}
	if _, ok := s.Data["c"]; ok {
		t.Error("Replay kept c, which the last commit deletes")
	}
	if len(s.Checkpoint) != 1 || s.Checkpoint[0] != 7 {
		t.Errorf("Replay checkpoint = %v; want [7]", s.Checkpoint)
	}
}
