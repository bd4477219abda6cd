package statestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/internal/logtest"
	"github.com/handoffhq/handoff/internal/poll"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/internal/disktest"
)

// sizedDiskFS is the OS's file system, reporting a disk of total bytes
// with the real free space: a store on it sizes its memtables for that
// disk.
type sizedDiskFS struct {
	vfs.FS
	total uint64
}

func (f sizedDiskFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	du, err := f.FS.GetDiskUsage(path)
	du.TotalBytes = f.total
	return du, err
}

// bigDiskFS reports a disk of 1 TiB.
func bigDiskFS(fs vfs.FS) sizedDiskFS { return sizedDiskFS{fs, 1 << 40} }

// filler applies commits of one 8 KiB random (incompressible) value each
// to task "t".
type filler struct {
	s   *Store
	seq uint64
	rng *rand.Rand
	val []byte
}

func newFiller(s *Store) *filler {
	return &filler{s: s, rng: rand.New(rand.NewPCG(1, 2)), val: make([]byte, 8<<10)}
}

// next applies the next commit.
func (f *filler) next() error {
	for i := 0; i < len(f.val); i += 8 {
		binary.LittleEndian.PutUint64(f.val[i:], f.rng.Uint64())
	}
	err := f.s.Apply("t", Commit{Seq: f.seq + 1, Epoch: 1, Puts: []KV{{Key: fmt.Appendf(nil, "k%07d", f.seq+1), Value: f.val}}})
	if err == nil {
		f.seq++
	}
	return err
}

// untilFull applies commits until one is refused and returns its error.
func (f *filler) untilFull(t *testing.T) error {
	t.Helper()
	for {
		if err := f.next(); err != nil {
			if !errors.Is(err, ErrFull) {
				t.Fatalf("commit %d: %v, want only ErrFull", f.seq+1, err)
			}
			return err
		}
	}
}

// data is what the commits so far hold, in bytes.
func (f *filler) data() uint64 { return f.seq * uint64(len(f.val)) }

// A store on a 600 MiB disk keeps taking commits until its data fills
// what the reserve leaves, not until its WAL files do (64 MiB memtables
// make nine WAL files of 70 MiB each before the first flush, and the
// reserve tripped with 23 MiB of data). A refusal says whether other files
// or the store's own fill the disk, and writes resume by themselves once
// space returns.
func TestSmallDiskTakesWritesWhileDataFits(t *testing.T) {
	disk := disktest.Mount(t, "600m")
	dir := filepath.Join(disk, "state")
	other := disktest.FillTo(t, disk, 300<<20)
	s := openDisk(t, vfs.Default, dir, Options{Logger: zerolog.Nop()})
	if s.memTable >= maxMemTableSize {
		t.Errorf("memtable size on a 600 MiB disk = %s, want it sized down", mib(s.memTable))
	}
	f := newFiller(s)
	err := f.untilFull(t)
	if msg := err.Error(); !strings.Contains(msg, "other files fill the disk") {
		t.Errorf("refusal with 300 MiB of other files = %q, want it to say that other files fill the disk", msg)
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, "writes to resume after space returned", f.next)

	err = f.untilFull(t)
	const wantData = 350 << 20
	if f.data() < wantData {
		t.Fatalf("the store refused writes after %s of data on a 600 MiB disk (%v), want at least %s", mib(f.data()), err, mib(wantData))
	}
	if msg := err.Error(); !strings.Contains(msg, "store's own files take") || !strings.Contains(msg, "disk is too small for this store's data") {
		t.Errorf("refusal = %q, want it to say that the store's own files fill the disk", msg)
	}
	u := storeUsage(vfs.Default, dir)
	t.Logf("%s of data taken (%d commits); the store's files take %s, %s of it WAL files; memtables of %s",
		mib(f.data()), f.seq, mib(u.files), mib(u.wal), mib(s.memTable))
}

// A store whose disk runs short of space flushes its memtables, which
// frees their WAL files: with 64 MiB memtables on a 600 MiB disk, the
// reserve trips with 16 MiB of data while the WAL files hold 490 MiB, and
// no refused write would ever fill a memtable to flush them. (Even so, 64
// MiB memtables leave such a disk little room: four to six WAL files of
// 70 MiB each stay for reuse; hence memTableSizeFor.)
func TestShortOfSpaceFlushesWALs(t *testing.T) {
	disk := disktest.Mount(t, "600m")
	dir := filepath.Join(disk, "state")
	var logs logtest.Buffer
	s := openDisk(t, bigDiskFS(vfs.Default), dir, Options{Logger: zerolog.New(&logs)})
	if s.memTable != maxMemTableSize {
		t.Fatalf("memtable size on a 1 TiB disk = %s, want %s", mib(s.memTable), mib(maxMemTableSize))
	}
	// A check of the free space before every write, so that the reserve
	// trips at the same point every run: when the seventh WAL file is
	// created, with 16 MiB of data, before Pebble would flush by itself.
	s.health.mu.Lock()
	s.health.checkEvery = 0
	s.health.mu.Unlock()
	f := newFiller(s)
	first := f.untilFull(t)
	atFirst := f.data()
	poll.Eventually(t, 30*time.Second, "writes to resume after the reserve tripped", func() error {
		if err := f.next(); err != nil {
			u := storeUsage(vfs.Default, dir)
			return fmt.Errorf("%w; the reserve tripped with %s of data (%v); WAL files take %s\n%s", err, mib(atFirst), first, mib(u.wal), logs.String())
		}
		return nil
	})
	if logs.Count("flushing its memtables") == 0 {
		t.Error("no log line for the flush")
	}
}

// A store closed while its WAL files fill its disk opens again: the check
// before opening counts the space that removing them frees (it used to ask
// for the reserve on top of what they hold, and wait for ever).
func TestOpenCountsWALFilesItFrees(t *testing.T) {
	disk := disktest.Mount(t, "600m")
	dir := filepath.Join(disk, "state")
	s, err := Open(dir, Options{FS: bigDiskFS(vfs.Default), MinFree: -1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	f := newFiller(s)
	for disktest.Free(t, disk) >= DefaultMinFree {
		if err := f.next(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	u := storeUsage(vfs.Default, dir)
	t.Logf("closed with %s of data, %s free, WAL files take %s and hold %s", mib(f.data()), mib(disktest.Free(t, disk)), mib(u.wal), mib(u.walData))
	s, err = Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("open with its own WAL files filling the disk: %v", err)
	}
	defer s.Close()
	wantMeta(t, s, Meta{Task: "t", Applied: f.seq, Epoch: 1})
	f.s = s
	// Pebble removes the old WAL files in the background.
	poll.Eventually(t, 30*time.Second, "a commit after reopening", f.next)
}

// storeOnFullDisk writes 1000 commits into a store on a small disk without
// a reserve, closes it (its WAL files hold the commits) and fills the disk.
// It returns the store's directory and the filling file.
func storeOnFullDisk(t *testing.T) (dir, fill string, applied uint64) {
	t.Helper()
	disk := disktest.Mount(t, "64m")
	dir = filepath.Join(disk, "state")
	s, err := Open(dir, Options{MinFree: -1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	f := newFiller(s)
	for range 1000 {
		if err := f.next(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, disktest.Fill(t, disk), f.seq
}

// openResult is what an Open run in the background returned.
type openResult struct {
	s   *Store
	err error
}

// A start on a disk too full for opening the store is refused (OpenWait
// waits), whatever the reserve (none here): Pebble's flush of the WAL files
// at open would fail and be retried for ever.
func TestOpenWithoutReserveOnFullDisk(t *testing.T) {
	dir, fill, applied := storeOnFullDisk(t)
	opts := Options{MinFree: -1, Logger: zerolog.Nop()}
	res := make(chan openResult, 1)
	go func() {
		s, err := Open(dir, opts)
		res <- openResult{s, err}
	}()
	select {
	case r := <-res:
		if !errors.Is(r.err, ErrFull) {
			t.Fatalf("Open without a reserve on a full disk = %v, want ErrFull", r.err)
		}
	case <-time.After(30 * time.Second): // a bound for a failure, not a measure
		t.Fatal("Open without a reserve on a full disk did not return in 30 s (Pebble retries its flush for ever)")
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open once space returned: %v", err)
	}
	defer s.Close()
	wantMeta(t, s, Meta{Task: "t", Applied: applied, Epoch: 1})
}

// noUsageFS cannot tell the free space, so the store's checks let every
// open and write through to Pebble.
type noUsageFS struct{ vfs.FS }

func (noUsageFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{}, errors.New("disk usage not supported")
}

// When Pebble itself holds an open up (its flush at open fails on a full
// disk that the store could not see coming), OpenWait still returns once
// its context ends; the abandoned open closes the store once it completes.
func TestOpenWaitAnswersContextWhilePebbleIsStuck(t *testing.T) {
	dir, fill, applied := storeOnFullDisk(t)
	var logs logtest.Buffer
	opts := Options{FS: noUsageFS{vfs.Default}, MinFree: -1, Logger: zerolog.New(&logs)}
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan openResult, 1)
	go func() {
		s, err := OpenWait(ctx, dir, opts)
		res <- openResult{s, err}
	}()
	poll.Eventually(t, 30*time.Second, "a failed flush while opening on a full disk", func() error {
		if logs.Count("a flush or compaction failed") == 0 {
			return errors.New("none logged:\n" + logs.String())
		}
		return nil
	})
	cancel()
	select {
	case r := <-res:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("OpenWait cancelled while Pebble is stuck = %v, want context.Canceled", r.err)
		}
	case <-time.After(30 * time.Second): // a bound for a failure, not a measure
		t.Fatal("OpenWait did not return in 30 s after its context ended")
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	var s *Store
	var err error
	poll.Eventually(t, 30*time.Second, "the abandoned open to release the store", func() error {
		if s, err = Open(dir, Options{MinFree: -1, Logger: zerolog.Nop()}); err != nil {
			return fmt.Errorf("%w\n%s", err, logs.String())
		}
		return nil
	})
	defer s.Close()
	wantMeta(t, s, Meta{Task: "t", Applied: applied, Epoch: 1})
}

func TestMemTableSizeFor(t *testing.T) {
	for _, c := range []struct {
		total, minFree, want uint64
	}{
		{0, DefaultMinFree, maxMemTableSize},
		{1 << 40, DefaultMinFree, maxMemTableSize},
		{3 << 30, DefaultMinFree, maxMemTableSize},
		{2 << 30, DefaultMinFree, 32 << 20},
		{1 << 30, DefaultMinFree, 16 << 20},
		{600 << 20, DefaultMinFree, 8 << 20},
		{256 << 20, DefaultMinFree, minMemTableSize},
		{16 << 20, 4 << 20, minMemTableSize},
	} {
		if got := memTableSizeFor(c.total, c.minFree); got != c.want {
			t.Errorf("memTableSizeFor(%s, %s) = %s, want %s", mib(c.total), mib(c.minFree), mib(got), mib(c.want))
		}
		if c.total > 0 && c.want > minMemTableSize && walFootprint(c.want)*walShare > c.total-c.minFree {
			t.Errorf("memTableSizeFor(%s, %s): WAL files of up to %s, more than a %d-th of the disk beyond the reserve", mib(c.total), mib(c.minFree), mib(walFootprint(c.want)), walShare)
		}
	}
}

// BenchmarkApplyMemTable measures a commit of 100 puts of 100 bytes on the
// OS's disk with the memtable sizes memTableSizeFor picks for disks from
// 3 GiB (64 MiB) down to 256 MiB (4 MiB).
func BenchmarkApplyMemTable(b *testing.B) {
	for _, total := range []uint64{3 << 30, 1 << 30, 600 << 20, 256 << 20} {
		m := memTableSizeFor(total, DefaultMinFree)
		b.Run(fmt.Sprintf("memtable=%dMiB", m>>20), func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{FS: sizedDiskFS{vfs.Default, total}, Logger: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if s.memTable != m {
				b.Fatalf("memtable %s, want %s", mib(s.memTable), mib(m))
			}
			puts := make([]KV, 100)
			for i := range puts {
				puts[i] = KV{Key: fmt.Appendf(nil, "key-%014d", i), Value: make([]byte, 100)}
			}
			b.ResetTimer()
			for i := range b.N {
				for j := range puts {
					binary.LittleEndian.PutUint64(puts[j].Value, uint64(i))
				}
				if err := s.Apply("t", Commit{Seq: uint64(i + 1), Epoch: 1, Checkpoint: []byte("c"), Puts: puts}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(puts))/b.Elapsed().Seconds(), "records/s")
		})
	}
}
