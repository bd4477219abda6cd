package restore_test

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"
	"pgregory.net/rapid"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/statestore"
)

var propertyKeys = [][]byte{[]byte("a"), []byte("b"), []byte("ab"), []byte("b\x00"), {}, []byte("\xff"), []byte("z")}

func genEntry() *rapid.Generator[changelog.Entry] {
	key := rapid.SampledFrom(propertyKeys)
	return rapid.Custom(func(t *rapid.T) changelog.Entry {
		if rapid.IntRange(0, 9).Draw(t, "marker") == 0 {
			return changelog.Entry{Kind: changelog.KindEpoch, Epoch: rapid.Uint64Range(0, 5).Draw(t, "epoch")}
		}
		e := changelog.Entry{Kind: changelog.KindCommit, Epoch: rapid.Uint64Range(0, 5).Draw(t, "epoch")}
		e.Checkpoint = rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, "checkpoint")
		for range rapid.IntRange(0, 4).Draw(t, "puts") {
			e.Puts = append(e.Puts, statestore.KV{Key: key.Draw(t, "key"), Value: rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "value")})
		}
		for range rapid.IntRange(0, 2).Draw(t, "deletes") {
			e.Deletes = append(e.Deletes, key.Draw(t, "del"))
		}
		return e
	})
}

func openMemT(t *rapid.T) *statestore.Store {
	s, err := statestore.Open("db", statestore.Options{FS: vfs.NewMem(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRestoreEqualsWriter checks that for random histories of commits, a
// store restored from the changelog equals the writer's own store, and both
// equal a plain map model of the history.
func TestRestoreEqualsWriter(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	run := 0
	rapid.Check(t, func(t *rapid.T) {
		run++
		task, other := fmt.Sprintf("p%d", run), fmt.Sprintf("q%d", run)
		a, b := openMemT(t), openMemT(t)
		defer a.Close()
		defer b.Close()

		model := map[string]string{}
		var last, otherLast uint64
		var meta statestore.Meta
		for _, en := range rapid.SliceOfN(genEntry(), 1, 25).Draw(t, "history") {
			seq, err := e.log.Append(ctx, task, last, en)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Apply(task, restore.Commit(en, seq)); err != nil {
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
			if rapid.Bool().Draw(t, "interleave") { // another task's message in between
				if otherLast, err = e.log.Append(ctx, other, otherLast, changelog.Entry{Kind: changelog.KindCommit, Puts: en.Puts}); err != nil {
					t.Fatal(err)
				}
			}
		}

		opts := restore.Options{Task: task, MaxBatchBytes: rapid.SampledFrom([]int{1, 64, 0}).Draw(t, "batch")}
		if _, err := restore.New(e.log, b, opts).Run(ctx); err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]*statestore.Store{"writer": a, "restored": b} {
			m, ok, err := s.Meta(task)
			if err != nil || !ok || m.Applied != meta.Applied || m.Epoch != meta.Epoch || !bytes.Equal(m.Checkpoint, meta.Checkpoint) {
				t.Fatalf("%s meta = %+v, %v, %v, want %+v", name, m, ok, err, meta)
			}
			kvs, err := s.Scan(task, statestore.ScanOptions{Limit: statestore.MaxScanLimit})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			var keys []string
			for _, kv := range kvs {
				got[string(kv.Key)] = string(kv.Value)
				keys = append(keys, string(kv.Key))
			}
			if fmt.Sprint(got) != fmt.Sprint(model) || !sort.StringsAreSorted(keys) {
				t.Fatalf("%s data = %q, want %q", name, kvs, model)
			}
			if _, ok, _ := s.Meta(other); ok {
				t.Fatalf("%s holds task %s", name, other)
			}
		}
	})
}
