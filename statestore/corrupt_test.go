package statestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/handoffhq/handoff/internal/logtest"

	"github.com/rs/zerolog"
)

// corruptStore writes n keys of task "t" into a store in dir, flushes them
// into an sstable, closes the store and flips bytes in the middle of that
// sstable's data.
func corruptStore(t *testing.T, dir string, n int) {
	t.Helper()
	s, err := Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		mustApply(t, s, "t", Commit{Seq: uint64(i), Epoch: 1, Puts: []KV{kv(fmt.Sprintf("k%05d", i), strings.Repeat("v", 200))}})
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) != 1 {
		t.Fatalf("%d sstables after a flush, want 1", len(ssts))
	}
	b, err := os.ReadFile(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 4; i < len(b)/4+64; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(ssts[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// readAll reads every key of task "t" and returns the first error.
func readAll(s *Store, n int) error {
	for i := 1; i <= n; i++ {
		if _, err := s.Get("t", []byte(fmt.Sprintf("k%05d", i))); err != nil {
			return err
		}
	}
	return nil
}

// A store whose sstable is corrupt fails on the first read of the bad
// block, without a panic; the next Open moves it aside and starts empty.
func TestCorruptSSTableRebuilt(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "state")
	const n = 2000
	corruptStore(t, dir, n)

	var logs logtest.Buffer
	s, err := Open(dir, Options{Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatalf("Open of a store with a corrupt data block: %v", err)
	}
	if err := readAll(s, n); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reading a corrupt block = %v, want ErrCorrupt", err)
	}
	select {
	case <-s.Failed():
	default:
		t.Fatal("Failed not closed after corruption")
	}
	if err := s.Apply("t", Commit{Seq: n + 1, Epoch: 1}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Apply on a corrupt store = %v, want ErrCorrupt", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close of a corrupt store: %v", err)
	}
	if logs.Count("LOCAL STORE IS CORRUPT") != 1 {
		t.Fatalf("corruption logged %d times, want once", logs.Count("LOCAL STORE IS CORRUPT"))
	}

	// The fail policy leaves it where it is.
	if _, err := Open(dir, Options{Logger: zerolog.Nop(), OnCorrupt: Fail}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of a marked store with OnCorrupt fail = %v, want ErrCorrupt", err)
	}

	s, err = Open(dir, Options{Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatalf("reopen of a marked store: %v", err)
	}
	defer s.Close()
	info, ok := s.Rebuilt()
	if !ok || !strings.HasPrefix(info.MovedTo, dir+".corrupt-") {
		t.Fatalf("Rebuilt() = %+v, %v; want moved to %s.corrupt-*", info, ok, dir)
	}
	if _, err := os.Stat(filepath.Join(info.MovedTo, corruptMark)); err != nil {
		t.Fatalf("the moved-aside store lost its mark: %v", err)
	}
	if ssts, _ := filepath.Glob(filepath.Join(info.MovedTo, "*.sst")); len(ssts) != 1 {
		t.Fatalf("the moved-aside store holds %d sstables, want its 1", len(ssts))
	}
	if metas, err := s.Tasks(); err != nil || len(metas) != 0 {
		t.Fatalf("Tasks of the rebuilt store = %v, %v; want none", metas, err)
	}
	mustApply(t, s, "t", Commit{Seq: 1, Epoch: 1, Puts: []KV{kv("a", "b")}})
	if logs.Count("LOCAL STORE WAS CORRUPT") != 1 {
		t.Fatal("the rebuild was not logged")
	}
}

// A compaction that meets a corrupt sstable fails the store instead of
// panicking (Pebble's default reaction is Logger.Fatalf).
func TestCorruptSSTableCompaction(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	const n = 2000
	corruptStore(t, dir, n)
	s, err := Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// An overlapping sstable, so that the compaction must read the bad one.
	for i := 1; i <= n; i += 2 {
		mustApply(t, s, "u", Commit{Seq: uint64(i), Epoch: 1, Puts: []KV{kv(fmt.Sprintf("k%05d", i), "w")}})
	}
	mustApply(t, s, "t", Commit{Seq: n + 1, Epoch: 1, Puts: []KV{kv("k00001", "w")}})
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	// Pebble retries a manual compaction until it is cancelled.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		select {
		case <-s.Failed():
			cancel()
		case <-ctx.Done():
		}
	}()
	err = s.db.Compact(ctx, []byte{0}, []byte{0xff}, false)
	if err == nil {
		t.Fatal("compaction over a corrupt sstable succeeded")
	}
	if !errors.Is(s.Err(), ErrCorrupt) {
		t.Fatalf("Err after a compaction met corruption = %v, want ErrCorrupt", s.Err())
	}
}

// A store Pebble cannot open for corruption (here its MANIFEST) is moved
// aside at once, or refused under the fail policy.
func TestCorruptManifestRebuilt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, "t", Commit{Seq: 1, Epoch: 1, Puts: []KV{kv("a", "b")}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	manifests, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no MANIFEST")
	}
	b, _ := os.ReadFile(manifests[len(manifests)-1])
	for i := range b {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(manifests[len(manifests)-1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{Logger: zerolog.Nop(), OnCorrupt: Fail}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of a store with a corrupt MANIFEST, fail policy = %v, want ErrCorrupt", err)
	}
	s, err = Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("Open of a store with a corrupt MANIFEST: %v", err)
	}
	defer s.Close()
	if _, ok := s.Rebuilt(); !ok {
		t.Fatal("a store with a corrupt MANIFEST was not rebuilt")
	}
}
