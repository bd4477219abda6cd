package restore_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/handoffhq/handoff/internal/logtest"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/snapshot/local"
	"github.com/handoffhq/handoff/statestore"
)

func openBucket(t testing.TB, e *env) *snapshot.Bucket {
	t.Helper()
	b, err := snapshot.Open(testContext(t), e.js, snapshot.Options{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshotHistory commits n entries to task, snapshotting after each
// commit listed in at (0-based indexes), with retention r.
func snapshotHistory(t *testing.T, e *env, b *snapshot.Bucket, w *writer, n int, r snapshot.Retention, at ...int) []snapshot.Info {
	t.Helper()
	var out []snapshot.Info
	for i := range n {
		w.commit(t, entry(i))
		for _, a := range at {
			if a == i {
				tk, err := local.Take(testContext(t), b, w.store, e.log, w.task, r)
				if err != nil {
					t.Fatalf("Take after commit %d: %v", i, err)
				}
				out = append(out, tk.Info)
			}
		}
	}
	return out
}

// copyUpTo applies task's changelog messages up to seq to store, as a
// member that followed the task up to there has them.
func copyUpTo(t *testing.T, e *env, store *statestore.Store, task string, seq uint64) {
	t.Helper()
	ctx := testContext(t)
	for next := uint64(1); ; {
		m, err := e.log.Stream().GetMsg(ctx, next, jetstream.WithGetMsgSubject(e.log.Subject(task)))
		if errors.Is(err, jetstream.ErrMsgNotFound) || (err == nil && m.Sequence > seq) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		en, err := changelog.Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Apply(task, restore.Commit(en, m.Sequence)); err != nil {
			t.Fatal(err)
		}
		next = m.Sequence + 1
	}
}

func TestLearnerRestoresFromSnapshotAfterTrim(t *testing.T) {
	e := newEnv(t)
	b := openBucket(t, e)
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	snaps := snapshotHistory(t, e, b, w, 220, snapshot.Retention{Keep: 1, Margin: 5}, 199)

	// Without the bucket, a fresh store cannot be restored: refused.
	bare := memStore(t)
	_, err := restore.New(e.log, bare, restore.Options{Task: "t"}).Run(testContext(t))
	if !errors.Is(err, restore.ErrGap) {
		t.Fatalf("Run without snapshots after a trim = %v, want ErrGap", err)
	}
	if st := stateOf(t, bare, "t"); st.ok || len(st.data) > 0 {
		t.Fatalf("refused restore left state behind: %+v", st.meta)
	}

	fresh := memStore(t)
	r := restore.New(e.log, fresh, restore.Options{Task: "t", Snapshots: b})
	if _, err := r.Run(testContext(t)); err != nil {
		t.Fatal(err)
	}
	requireSameState(t, fresh, w.store, "t")
	if got, ok := r.LoadedSnapshot(); !ok || got.Seq != snaps[0].Seq {
		t.Errorf("LoadedSnapshot() = %+v, %v; want the snapshot at %d", got, ok, snaps[0].Seq)
	}
	if p := r.Progress(); p.Replayed != 20 {
		t.Errorf("replayed %d messages, want the 20 after the snapshot", p.Replayed)
	}
}

func TestLocalCopyDecidesWhetherToLoad(t *testing.T) {
	e := newEnv(t)
	b := openBucket(t, e)
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	var seqs []uint64
	for i := range 210 {
		seqs = append(seqs, w.commit(t, entry(i)))
	}
	// The local copies are made before the trim.
	newer, near, far := memStore(t), memStore(t), memStore(t)
	copyUpTo(t, e, newer, "t", seqs[209])
	copyUpTo(t, e, near, "t", seqs[205]) // within the margin below the snapshot
	copyUpTo(t, e, far, "t", seqs[100])  // trimmed past
	tk, err := local.Take(testContext(t), b, w.store, e.log, "t", snapshot.Retention{Keep: 1, Margin: 5})
	if err != nil {
		t.Fatal(err)
	}
	if tk.Info.Seq != seqs[209] || tk.Trim.PurgedBelow != seqs[204] {
		t.Fatalf("snapshot at %d, purged below %d; want %d, %d", tk.Info.Seq, tk.Trim.PurgedBelow, seqs[209], seqs[204])
	}
	for i := 210; i < 220; i++ {
		seqs = append(seqs, w.commit(t, entry(i)))
	}
	copyUpTo(t, e, newer, "t", seqs[214]) // past the snapshot
	tests := []struct {
		name     string
		store    *statestore.Store
		load     bool
		replayed uint64
	}{
		{"newer than the snapshot: skips it", newer, false, 5},
		{"continued by the changelog: replays", near, false, 14},
		{"trimmed past: loads the snapshot", far, true, 10},
		{"empty: loads the snapshot", memStore(t), true, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := restore.New(e.log, tc.store, restore.Options{Task: "t", Snapshots: b})
			if _, err := r.Run(testContext(t)); err != nil {
				t.Fatal(err)
			}
			requireSameState(t, tc.store, w.store, "t")
			if _, loaded := r.LoadedSnapshot(); loaded != tc.load {
				t.Errorf("loaded a snapshot: %v, want %v", loaded, tc.load)
			}
			if p := r.Progress(); p.Replayed != tc.replayed {
				t.Errorf("replayed %d messages, want %d", p.Replayed, tc.replayed)
			}
		})
	}
}

// storedObject returns the object store behind b and the stored object of
// snapshot info.
func storedObject(t *testing.T, e *env, b *snapshot.Bucket, info snapshot.Info) (jetstream.ObjectStore, *jetstream.ObjectInfo) {
	t.Helper()
	ctx := testContext(t)
	obs, err := e.js.ObjectStore(ctx, b.Name())
	if err != nil {
		t.Fatal(err)
	}
	oi, err := obs.GetInfo(ctx, info.Name)
	if err != nil {
		t.Fatal(err)
	}
	return obs, oi
}

// corruptObject rewrites a stored snapshot's content with one byte flipped
// in the middle, keeping its name and metadata (the object store's own
// digest then matches: only the snapshot's checksum can tell).
func corruptObject(t *testing.T, e *env, b *snapshot.Bucket, info snapshot.Info) {
	t.Helper()
	ctx := testContext(t)
	obs, oi := storedObject(t, e, b, info)
	data, err := obs.GetBytes(ctx, info.Name)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x10
	if _, err := obs.Put(ctx, oi.ObjectMeta, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// dropChunks removes a stored snapshot's content, leaving its metadata.
func dropChunks(t *testing.T, e *env, b *snapshot.Bucket, info snapshot.Info) {
	t.Helper()
	ctx := testContext(t)
	_, oi := storedObject(t, e, b, info)
	s, err := e.js.Stream(ctx, "OBJ_"+b.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject("$O."+b.Name()+".C."+oi.NUID)); err != nil {
		t.Fatal(err)
	}
}

func TestUnusableSnapshotFallsBack(t *testing.T) {
	tests := []struct {
		name     string
		keep     int
		margin   uint64
		spoil    func(*testing.T, *env, *snapshot.Bucket, snapshot.Info)
		wantSnap int // index of the snapshot the restore should load; -1: none
		wantErr  error
	}{
		{"corrupt newest: older snapshot", 2, 5, corruptObject, 0, nil},
		{"missing newest: older snapshot", 2, 5, dropChunks, 0, nil},
		{"corrupt, changelog whole: full replay", 1, 1 << 20, corruptObject, -1, nil},
		{"corrupt, changelog trimmed: refused", 1, 5, corruptObject, -1, restore.ErrGap},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			b := openBucket(t, e)
			w := &writer{log: e.log, store: memStore(t), task: "t"}
			snaps := snapshotHistory(t, e, b, w, 120, snapshot.Retention{Keep: tc.keep, Margin: tc.margin}, 59, 109)
			tc.spoil(t, e, b, snaps[1])

			logs := &logtest.Buffer{}
			fresh := memStore(t)
			r := restore.New(e.log, fresh, restore.Options{Task: "t", Snapshots: b, Logger: zerolog.New(logs)})
			_, err := r.Run(testContext(t))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Run = %v, want %v", err, tc.wantErr)
				}
				if st := stateOf(t, fresh, "t"); st.ok || len(st.data) > 0 {
					t.Fatalf("refused restore left state behind: meta %+v, %d keys", st.meta, len(st.data))
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				requireSameState(t, fresh, w.store, "t")
				got, loaded := r.LoadedSnapshot()
				switch {
				case tc.wantSnap < 0 && loaded:
					t.Errorf("loaded %v, want a full replay", got)
				case tc.wantSnap >= 0 && got.Seq != snaps[tc.wantSnap].Seq:
					t.Errorf("loaded %v (%v), want the snapshot at %d", got, loaded, snaps[tc.wantSnap].Seq)
				}
			}
			if !strings.Contains(logs.String(), "snapshot unusable") || !strings.Contains(logs.String(), snaps[1].Name) {
				t.Errorf("no log line names the unusable snapshot %s:\n%s", snaps[1].Name, logs)
			}
		})
	}
}

// TestTrimOvertakesRunningRestore trims the changelog while a restore is
// replaying far behind: it meets the gap, starts over from the snapshot,
// and ends with the writer's state.
func TestTrimOvertakesRunningRestore(t *testing.T) {
	e := newEnv(t)
	b := openBucket(t, e)
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	for i := range 10 {
		w.commit(t, entry(i))
	}
	member := memStore(t)
	copyUpTo(t, e, member, "t", w.last)
	for i := 10; i < 1500; i++ {
		w.commit(t, entry(i))
	}

	started, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := restore.New(e.log, member, restore.Options{
		Task:         "t",
		Snapshots:    b,
		PullMaxBytes: 1024, // buffer little, so the trim shows soon
		OnProgress: func(restore.Progress) {
			once.Do(func() {
				close(started)
				<-resume // hold the replay while the changelog is trimmed
			})
		},
	})
	done := runReplayer(testContext(t), r)
	<-started
	if _, err := local.Take(testContext(t), b, w.store, e.log, "t", snapshot.Retention{Keep: 1, Margin: 5}); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if end := <-done; end.err != nil {
		t.Fatal(end.err)
	}
	requireSameState(t, member, w.store, "t")
	if _, loaded := r.LoadedSnapshot(); !loaded {
		t.Error("the restore did not load the snapshot after meeting the trim")
	}
}

// TestLongReplayLoadsSnapshotAndKeepsCopyIfUnusable: a local copy the
// changelog still continues from, but with more messages to replay than
// the newest snapshot has keys, loads the snapshot; if that snapshot is
// corrupt, the copy is untouched and replayed instead.
func TestLongReplayLoadsSnapshotAndKeepsCopyIfUnusable(t *testing.T) {
	for _, corrupt := range []bool{false, true} {
		t.Run(map[bool]string{false: "snapshot", true: "corrupt snapshot"}[corrupt], func(t *testing.T) {
			e := newEnv(t)
			b := openBucket(t, e)
			w := &writer{log: e.log, store: memStore(t), task: "t"}
			for i := range 50 {
				w.commit(t, entry(i))
			}
			member := memStore(t)
			copyUpTo(t, e, member, "t", w.last)
			// Keep the whole changelog: the copy stays continuable.
			snaps := snapshotHistory(t, e, b, w, 300, snapshot.Retention{Keep: 1, Margin: 1 << 20}, 289)
			if corrupt {
				corruptObject(t, e, b, snaps[0])
			}
			logs := &logtest.Buffer{}
			r := restore.New(e.log, member, restore.Options{Task: "t", Snapshots: b, Logger: zerolog.New(logs)})
			if _, err := r.Run(testContext(t)); err != nil {
				t.Fatal(err)
			}
			requireSameState(t, member, w.store, "t")
			_, loaded := r.LoadedSnapshot()
			wantReplayed := uint64(10)
			if corrupt {
				wantReplayed = 300
			}
			if loaded == corrupt || r.Progress().Replayed != wantReplayed {
				t.Errorf("loaded a snapshot: %v, replayed %d; want %v, %d", loaded, r.Progress().Replayed, !corrupt, wantReplayed)
			}
			if corrupt && !strings.Contains(logs.String(), "snapshot unusable") {
				t.Errorf("no log line about the corrupt snapshot:\n%s", logs)
			}
		})
	}
}
