package statestore

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"
)

// snapshotKVs reads a Snapshot to its end.
func snapshotKVs(t *testing.T, sn *Snapshot) []KV {
	t.Helper()
	var out []KV
	for sn.Next() {
		out = append(out, KV{Key: bytes.Clone(sn.Key()), Value: bytes.Clone(sn.Value())})
	}
	if err := sn.Err(); err != nil {
		t.Fatalf("Snapshot iteration: %v", err)
	}
	return out
}

func TestSnapshotIsPinned(t *testing.T) {
	s := openMem(t)
	mustApply(t, s, "t", Commit{Seq: 3, Epoch: 2, Checkpoint: []byte("cp3"), Puts: []KV{kv("a", "1"), kv("b", "2")}})
	mustApply(t, s, "u", Commit{Seq: 4, Epoch: 1, Puts: []KV{kv("a", "other task")}})

	sn, ok, err := s.Snapshot("t")
	if err != nil || !ok {
		t.Fatalf("Snapshot(t) = _, %v, %v; want ok", ok, err)
	}
	defer sn.Close()
	// Commits after the pin are not in the snapshot.
	mustApply(t, s, "t", Commit{Seq: 5, Epoch: 2, Puts: []KV{kv("c", "3")}, Deletes: [][]byte{[]byte("a")}})

	if m := sn.Meta(); m.Applied != 3 || m.Epoch != 2 || string(m.Checkpoint) != "cp3" || m.Task != "t" {
		t.Errorf("Meta() = %+v, want applied 3, epoch 2, checkpoint cp3", m)
	}
	if n, err := sn.Count(); err != nil || n != 2 {
		t.Errorf("Count() = %d, %v; want 2", n, err)
	}
	got := snapshotKVs(t, sn)
	want := []KV{kv("a", "1"), kv("b", "2")}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("snapshot data = %q, want %q", got, want)
	}
	if sn.Next() {
		t.Error("Next after the end = true")
	}
}

func TestSnapshotOfUnknownTask(t *testing.T) {
	s := openMem(t)
	if sn, ok, err := s.Snapshot("nothing"); sn != nil || ok || err != nil {
		t.Fatalf("Snapshot(unknown) = %v, %v, %v; want nil, false, nil", sn, ok, err)
	}
}

func TestSnapshotAfterStoreClose(t *testing.T) {
	s, err := Open("db", Options{FS: vfs.NewMem(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, "t", Commit{Seq: 1, Puts: []KV{kv("a", "1"), kv("b", "2")}})
	sn, _, err := s.Snapshot("t")
	if err != nil {
		t.Fatal(err)
	}
	if !sn.Next() {
		t.Fatalf("first Next = false, %v", sn.Err())
	}
	_ = s.Close() // reports the leaked snapshot; must not break it
	if sn.Next() || !errors.Is(sn.Err(), ErrClosed) {
		t.Errorf("Next after Close = %v, %v; want false, ErrClosed", sn.Next(), sn.Err())
	}
	if err := sn.Close(); err != nil {
		t.Errorf("Snapshot.Close after store Close: %v", err)
	}
}

func TestLoadReplacesStateAtomically(t *testing.T) {
	s := openMem(t)
	mustApply(t, s, "t", Commit{Seq: 2, Epoch: 1, Checkpoint: []byte("old"), Puts: []KV{kv("old", "x"), kv("b", "old")}})
	mustApply(t, s, "u", Commit{Seq: 3, Epoch: 1, Puts: []KV{kv("keep", "y")}})

	defer func(n int) { loadFileBytes = n }(loadFileBytes)
	loadFileBytes = 1 << 20 // several sstables, ingested together
	filesBefore := loadFiles.Load()
	l, err := s.Load("t")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Abort()
	const n = 120000 // about 13 MB
	for i := range n {
		if err := l.Put(fmt.Appendf(nil, "k%06d", i), bytes.Repeat([]byte{'v'}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	// Mid-load the old state is the task's state, whole.
	wantMeta(t, s, Meta{Task: "t", Applied: 2, Epoch: 1, Checkpoint: []byte("old")})
	if got := mustGet(t, s, "t", "old"); got != "x" {
		t.Errorf("old key mid-load = %q", got)
	}
	if _, err := s.Get("t", []byte("k000000")); !errors.Is(err, ErrNotFound) {
		t.Errorf("a loaded key is visible before Finish: %v", err)
	}
	if files := loadFiles.Load() - filesBefore; files < 5 {
		t.Errorf("the load wrote %d sstables, want several", files)
	}
	if err := l.Finish(Meta{Applied: 50, Epoch: 4, Checkpoint: []byte("cp")}); err != nil {
		t.Fatal(err)
	}
	wantMeta(t, s, Meta{Task: "t", Applied: 50, Epoch: 4, Checkpoint: []byte("cp")})
	if loading, _ := s.Loading("t"); loading {
		t.Error("Loading after Finish = true")
	}
	if _, err := s.Get("t", []byte("old")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(old) after load = %v, want ErrNotFound: the old state is replaced", err)
	}
	if kvs := allKVs(t, s, "t"); len(kvs) != n || string(kvs[n-1].Key) != fmt.Sprintf("k%06d", n-1) {
		t.Errorf("loaded %d keys, want %d", len(kvs), n)
	}
	if got := mustGet(t, s, "u", "keep"); got != "y" {
		t.Errorf("other task's key = %q, want y", got)
	}
	// Apply continues from the loaded meta: at or below 50 is skipped.
	mustApply(t, s, "t", Commit{Seq: 50, Puts: []KV{kv("skipped", "1")}}, Commit{Seq: 51, Epoch: 4, Puts: []KV{kv("new", "1")}})
	if _, err := s.Get("t", []byte("skipped")); !errors.Is(err, ErrNotFound) {
		t.Errorf("commit at the loaded seq was applied: %v", err)
	}
	wantMeta(t, s, Meta{Task: "t", Applied: 51, Epoch: 4, Checkpoint: []byte("cp")})
	if len(l.paths) != 0 {
		t.Errorf("Loader still lists files %v", l.paths)
	}
	if files, err := s.fs.List(s.fs.PathJoin(s.dir, loadDir)); err != nil || len(files) != 0 {
		t.Errorf("load directory holds %v, %v; want nothing", files, err)
	}
}

func allKVs(t *testing.T, s *Store, task string) []KV {
	t.Helper()
	var out []KV
	var start []byte
	for {
		kvs, err := s.Scan(task, ScanOptions{Start: start, Limit: MaxScanLimit})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, kvs...)
		if len(kvs) < MaxScanLimit {
			return out
		}
		start = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
	}
}

func TestLoadAbortKeepsTheOldState(t *testing.T) {
	s := openMem(t)
	mustApply(t, s, "t", Commit{Seq: 2, Checkpoint: []byte("cp"), Puts: []KV{kv("old", "x")}})
	l, err := s.Load("t")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := l.Put([]byte("a"), []byte("again")); err == nil {
		t.Error("Put of a key not above the last = nil error, want an error")
	}
	if err := l.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := l.Abort(); err != nil {
		t.Errorf("second Abort: %v", err)
	}
	if err := l.Finish(Meta{Applied: 3}); err == nil {
		t.Error("Finish after Abort = nil error")
	}
	wantMeta(t, s, Meta{Task: "t", Applied: 2, Checkpoint: []byte("cp")})
	if kvs := allKVs(t, s, "t"); fmt.Sprint(kvs) != fmt.Sprint([]KV{kv("old", "x")}) {
		t.Errorf("state after Abort = %q, want the old one", kvs)
	}
	if loading, _ := s.Loading("t"); loading {
		t.Error("task marked loading after Abort")
	}
	// The task's lock was released.
	mustApply(t, s, "t", Commit{Seq: 3, Puts: []KV{kv("a", "1")}})
}

func TestApplyWaitsForLoad(t *testing.T) {
	s := openMem(t)
	l, err := s.Load("t")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Put([]byte("a"), []byte("loaded")); err != nil {
		t.Fatal(err)
	}
	applied := make(chan error, 1)
	go func() { applied <- s.Apply("t", Commit{Seq: 11, Epoch: 3, Puts: []KV{kv("b", "after")}}) }()
	select {
	case err := <-applied:
		t.Fatalf("Apply returned during the load: %v", err)
	case <-time.After(50 * time.Millisecond): // a negative check: Apply must still be blocked
	}
	if err := l.Finish(Meta{Applied: 10, Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	wantMeta(t, s, Meta{Task: "t", Applied: 11, Epoch: 3})
	if got := mustGet(t, s, "t", "a"); got != "loaded" {
		t.Errorf("a = %q, want loaded", got)
	}
}

// TestCrashDuringLoad: a store closed (as by a crash) while a load writes
// its sstables comes back with the old state and no leftover files; one
// closed between Finish's steps, with the loading mark set, comes back
// without the task.
func TestCrashDuringLoad(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", Options{FS: fs, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, "t", Commit{Seq: 1, Puts: []KV{kv("a", "1")}})
	mustApply(t, s, "half", Commit{Seq: 1, Puts: []KV{kv("a", "1")}})
	l, err := s.Load("t")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50000 {
		if err := l.Put(fmt.Appendf(nil, "k%06d", i), []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	// What Finish's first step leaves for "half": no meta, the mark, data.
	b := s.db.NewBatch()
	_ = b.Delete(metaKey("half"), nil)
	_ = b.Set(loadingKey("half"), nil, nil)
	_ = b.Set(append(appendDataPrefix(nil, "half"), "partial"...), []byte("x"), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open("db", Options{FS: fs, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantMeta(t, s, Meta{Task: "t", Applied: 1})
	if kvs := allKVs(t, s, "t"); len(kvs) != 1 {
		t.Errorf("task t after the crash holds %d keys, want its old 1", len(kvs))
	}
	if files, _ := fs.List(fs.PathJoin("db", loadDir)); len(files) != 0 {
		t.Errorf("leftover load files after reopen: %v", files)
	}
	if loading, _ := s.Loading("half"); loading {
		t.Error("half-loaded task still marked loading after reopen")
	}
	if _, ok, _ := s.Meta("half"); ok {
		t.Error("half-loaded task has meta after reopen")
	}
	if kvs := allKVs(t, s, "half"); len(kvs) != 0 {
		t.Errorf("half-loaded keys after reopen: %q", kvs)
	}
}

func TestDropClearsLoadingMark(t *testing.T) {
	s := openMem(t)
	if err := s.db.Set(loadingKey("t"), nil, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, "t", Commit{Seq: 1, Puts: []KV{kv("a", "1")}})
	if loading, _ := s.Loading("t"); !loading {
		t.Fatal("not marked loading")
	}
	if err := s.Drop("t"); err != nil {
		t.Fatal(err)
	}
	if loading, _ := s.Loading("t"); loading {
		t.Error("Drop left the loading mark")
	}
	if kvs, _ := s.Scan("t", ScanOptions{}); len(kvs) != 0 {
		t.Errorf("Drop left data: %q", kvs)
	}
}
