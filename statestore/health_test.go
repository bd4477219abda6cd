package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/handoffhq/handoff/internal/logtest"
	"github.com/handoffhq/handoff/internal/poll"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/rs/zerolog"
)

// diskFS is the OS's file system with a disk that can fill up: it reports
// the free space a test sets, and fails writes with ENOSPC while told to.
type diskFS struct {
	*errorfs.FS
	free       atomic.Int64 // < 0: the OS's figure
	failWrites atomic.Bool
	failSST    atomic.Bool // only sstables fail
	sstErrs    atomic.Int64
	usageCalls atomic.Int64
}

func newDiskFS() *diskFS {
	d := &diskFS{}
	d.free.Store(-1)
	d.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(d.inject))
	return d
}

func (d *diskFS) inject(op errorfs.Op) error {
	if d.failSST.Load() && strings.HasSuffix(op.Path, ".sst") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && op.Kind != errorfs.OpRemove {
		d.sstErrs.Add(1)
		return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
	}
	if !d.failWrites.Load() {
		return nil
	}
	switch op.Kind {
	case errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate:
		return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
	}
	return nil
}

func (d *diskFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	d.usageCalls.Add(1)
	if f := d.free.Load(); f >= 0 {
		return vfs.DiskUsage{AvailBytes: uint64(f), TotalBytes: 1 << 30, UsedBytes: 1<<30 - uint64(f)}, nil
	}
	return d.FS.GetDiskUsage(path)
}

// fill makes the disk full: no free space, and writes fail.
func (d *diskFS) fill() { d.free.Store(0); d.failWrites.Store(true) }

// drain frees the disk again.
func (d *diskFS) drain() { d.failWrites.Store(false); d.free.Store(1 << 30) }

func openDisk(t *testing.T, fs vfs.FS, dir string, opts Options) *Store {
	t.Helper()
	opts.FS = fs
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func commitN(seq uint64, n int) Commit {
	return Commit{Seq: seq, Epoch: 1, Puts: []KV{{Key: []byte{byte(seq), byte(seq >> 8)}, Value: bytes.Repeat([]byte{'v'}, n)}}}
}

// A write on a full disk is refused with ErrFull, nothing crashes, and
// writes resume once there is room again.
func TestApplyOnFullDiskRefusedThenResumes(t *testing.T) {
	fs := newDiskFS()
	s := openDisk(t, fs, t.TempDir(), Options{MinFree: 1 << 20, Logger: zerolog.Nop()})
	s.health.checkEvery = 0
	mustApply(t, s, "t", commitN(1, 100))

	// Without the reserve these writes would reach the full disk, where
	// Pebble v2 panics in its WAL rotation with its lock released and the
	// process dies with "sync: unlock of unlocked mutex".
	fs.fill()
	for seq := uint64(2); seq < 300; seq++ {
		err := s.Apply("t", commitN(seq, 4096))
		if !errors.Is(err, ErrFull) {
			t.Fatalf("Apply on a full disk = %v, want ErrFull", err)
		}
	}
	if err := s.Writable(); !errors.Is(err, ErrFull) {
		t.Fatalf("Writable on a full disk = %v, want ErrFull", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err on a full disk = %v, want nil: a full disk is not a failure", err)
	}
	if v := mustGet(t, s, "t", string([]byte{1, 0})); len(v) != 100 {
		t.Fatalf("read on a full disk: got %d bytes, want 100", len(v))
	}

	fs.drain()
	mustApply(t, s, "t", commitN(2, 100))
	wantMeta(t, s, Meta{Task: "t", Applied: 2, Epoch: 1})
	if err := s.Writable(); err != nil {
		t.Fatalf("Writable after space returned = %v, want nil", err)
	}
}

// A flush that fails on a full disk is retried after a pause, logged once
// per interval, and refuses writes until a flush succeeds again.
func TestFailedFlushBacksOffAndRecovers(t *testing.T) {
	fs := newDiskFS()
	var logs logtest.Buffer
	s := openDisk(t, fs, t.TempDir(), Options{MinFree: -1, Logger: zerolog.New(&logs)})
	s.health.limit = newLogLimiter(time.Hour)
	mustApply(t, s, "t", commitN(1, 100))

	// Only sstables fail: the WAL keeps working.
	fs.failSST.Store(true)
	done := make(chan error, 1)
	go func() { done <- s.db.Flush() }()
	poll.Eventually(t, 20*time.Second, "writes refused while flushes fail", func() error {
		if s.Writable() == nil {
			return errors.New("Writable is nil")
		}
		return nil
	})
	if err := s.Apply("t", commitN(2, 10)); !errors.Is(err, ErrFull) {
		t.Fatalf("Apply while flushes fail for lack of space = %v, want ErrFull", err)
	}
	poll.Eventually(t, 20*time.Second, "a second flush attempt and its log line", func() error {
		if n := fs.sstErrs.Load(); logs.Count("flush or compaction failed") < 1 || n < 2 {
			return fmt.Errorf("%d flush errors, %d log lines", n, logs.Count("flush or compaction failed"))
		}
		return nil
	})
	if n := logs.Count("flush or compaction failed"); n != 1 {
		t.Fatalf("%d log lines for repeated flush failures, want 1", n)
	}
	fs.failSST.Store(false)
	if err := <-done; err != nil {
		t.Fatalf("Flush after space returned: %v", err)
	}
	poll.Eventually(t, 20*time.Second, "writes taken after a flush succeeded", s.Writable)
	mustApply(t, s, "t", commitN(2, 10))
}

// Open on a full disk fails with ErrFull; OpenWait waits, answering its
// context, and opens once there is room.
func TestOpenOnFullDisk(t *testing.T) {
	fs := newDiskFS()
	dir := t.TempDir()
	s := openDisk(t, fs, dir, Options{MinFree: 1 << 20, Logger: zerolog.Nop()})
	mustApply(t, s, "t", commitN(1, 100))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	fs.free.Store(1 << 10)
	opts := Options{FS: fs, MinFree: 1 << 20, Logger: zerolog.Nop()}
	if _, err := Open(dir, opts); !errors.Is(err, ErrFull) {
		t.Fatalf("Open on a full disk = %v, want ErrFull", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := OpenWait(ctx, dir, opts); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrFull) {
		t.Fatalf("OpenWait cancelled = %v, want context.Canceled and ErrFull", err)
	}

	type result struct {
		s   *Store
		err error
	}
	res := make(chan result, 1)
	calls := fs.usageCalls.Load()
	go func() {
		s, err := OpenWait(context.Background(), dir, opts)
		res <- result{s, err}
	}()
	poll.Eventually(t, 30*time.Second, "OpenWait on a full disk to check its space again", func() error {
		if n := fs.usageCalls.Load() - calls; n < 2 { // it tried at least twice
			return fmt.Errorf("it checked %d times, want it to keep trying", n)
		}
		return nil
	})
	fs.drain()
	r := <-res
	if r.err != nil {
		t.Fatalf("OpenWait after space returned: %v", r.err)
	}
	defer r.s.Close()
	wantMeta(t, r.s, Meta{Task: "t", Applied: 1, Epoch: 1})
}

// BenchmarkApply measures a one-put commit on the OS's disk, with the
// free-space check (reserve) and without it (off).
func BenchmarkApply(b *testing.B) {
	for _, c := range []struct {
		name    string
		minFree int64
	}{{"reserve", 1 << 20}, {"off", -1}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{MinFree: c.minFree, Logger: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ResetTimer()
			for i := range b.N {
				if err := s.Apply("t", commitN(uint64(i+1), 100)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
