package statestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// What the store's own files take of its disk. Pebble preallocates every
// WAL file to 110 % of the largest memtable size, however little it holds,
// and keeps one WAL file per memtable that is not flushed yet, plus up to
// three flushed ones for reuse. A new store's memtables start at 256 KiB
// and double up to the largest size, and none is flushed before half the
// largest size is queued: with 64 MiB memtables, nine WAL files (630 MiB
// of disk) hold 64 MiB of data at that point. So the largest memtable is
// sized to the disk (memTableSizeFor), and a store that runs short of
// space flushes its memtables (Store.flushForSpace), which frees their WAL
// files.
const (
	// maxMemTableSize is Pebble's largest memtable size on a disk that has
	// room for it. Pebble's 4 MiB default makes a restore's multi-MiB
	// batches "large batches" that each force a flush; 64 MiB keeps them
	// ordinary and halves flushes and L0 compactions during a restore.
	maxMemTableSize = 64 << 20
	// minMemTableSize is the smallest size memTableSizeFor picks: Pebble's
	// default.
	minMemTableSize = 4 << 20
	// firstMemTableSize is the size of Pebble's first memtable; each next
	// one is twice the last, up to the largest size.
	firstMemTableSize = 256 << 10
	// recycledWALs is how many flushed WAL files Pebble keeps for reuse
	// (MemTableStopWritesThreshold, 2 by default, plus one), and
	// queuedMemTables how many memtables can wait for a flush besides the
	// one being written (MemTableStopWritesThreshold).
	recycledWALs    = 3
	queuedMemTables = 2
	// walShare is the share of the disk, beyond the reserve, that the WAL
	// files may take at most.
	walShare = 4
	// openMargin is the room opening the store needs besides the flush of
	// what its WAL files hold: a new MANIFEST, OPTIONS and WAL file.
	openMargin = 8 << 20
	// minDataRoom is how much room for data a disk needs beyond the
	// reserve: the store warns at Open on a smaller disk (minVolume).
	minDataRoom = 128 << 20
)

// walFootprint is the most disk the WAL files of a store whose largest
// memtable is m can take: while the memtables grow (one file for each size
// from firstMemTableSize up to m), or in the steady state (the memtable
// written, the queued ones and the recycled files), each file preallocated
// to 110 % of m.
func walFootprint(m uint64) uint64 {
	growing := uint64(1)
	for size := uint64(firstMemTableSize); size < m; size *= 2 {
		growing++
	}
	files := max(growing, 1+queuedMemTables+recycledWALs)
	return files * (m + m/10)
}

// memTableSizeFor returns the largest memtable size for a store on a disk
// of total bytes that keeps minFree free: the largest power of two from
// minMemTableSize to maxMemTableSize whose WAL files take at most a
// walShare-th of what the reserve leaves. total 0 (unknown) gives the
// largest.
//
// On a 600 MiB disk with the default reserve that is 8 MiB (at most
// 53 MiB of WAL files); 64 MiB needs about 2.6 GiB.
func memTableSizeFor(total, minFree uint64) uint64 {
	if total == 0 {
		return maxMemTableSize
	}
	budget := (total - min(total, minFree)) / walShare
	m := uint64(maxMemTableSize)
	for m > minMemTableSize && walFootprint(m) > budget {
		m /= 2
	}
	return m
}

// minVolume is the smallest disk the store takes writes on with a reserve
// of minFree: the reserve, plus minDataRoom for the WAL files and the data.
func minVolume(minFree uint64) uint64 { return minFree + minDataRoom }

// usage is what the store's files take on its disk, in bytes the file
// system allocated to them (a preallocated WAL file counts whole).
type usage struct {
	files   uint64 // every file in the store's directory
	wal     uint64 // its WAL files
	walData uint64 // what its WAL files hold (their length)
}

// storeUsage measures the files in dir.
func storeUsage(fs vfs.FS, dir string) usage {
	var u usage
	names, err := fs.List(dir)
	if err != nil {
		return u
	}
	for _, name := range names {
		fi, err := fs.Stat(fs.PathJoin(dir, name))
		if err != nil || fi.IsDir() {
			continue
		}
		n := allocated(fi)
		u.files += n
		if strings.HasSuffix(name, ".log") {
			u.wal += n
			u.walData += uint64(max(fi.Size(), 0))
		}
	}
	return u
}

// describe says what the store's files take of a disk of total bytes
// (0: unknown) with free bytes free, and whether they or other files are
// what fills it.
func (u usage) describe(total, free uint64) string {
	own := fmt.Sprintf("the store's own files take %s (%s of it WAL files)", mib(u.files), mib(u.wal))
	if total == 0 || total < free {
		return own
	}
	if used := total - free; u.files >= used/2 {
		return fmt.Sprintf("%s of the %s disk: they are what fills it, so the disk is too small for this store's data: grow the volume", own, mib(total))
	}
	return own + ": other files fill the disk (the embedded NATS server's, if it shares the disk); free space on it"
}

// openRetryEvery is how often OpenWait tries again on a full disk.
const openRetryEvery = time.Second

// checkOpenSpace returns an error wrapping ErrFull when dir's disk has
// less room than opening the store needs. Open flushes what the WAL files
// hold into sstables before it returns (on a full disk Pebble would retry
// that for ever, and its new MANIFEST write cannot fail at all), then
// removes the old WAL files, so it needs room for their data and a
// margin, whatever the reserve; with a reserve, the disk must keep that
// much free once the old WAL files are gone.
func checkOpenSpace(fs vfs.FS, dir string, minFree uint64) error {
	du, err := fs.GetDiskUsage(dir)
	if err != nil {
		return nil // the file system cannot tell
	}
	free := du.AvailBytes
	u := storeUsage(fs, dir)
	need := u.walData + openMargin
	if free < need {
		return fmt.Errorf("%w: %s free on the disk of %s, and opening the store needs %s to flush what its WAL files hold (%s) into sstables; %s",
			ErrFull, mib(free), dir, mib(need), mib(u.walData), u.describe(du.TotalBytes, free))
	}
	after := free - need + u.wal // once the old WAL files are removed
	if minFree > 0 && after < minFree {
		return fmt.Errorf("%w: %s free on the disk of %s, and once open the store would have about %s, below the %s it keeps in reserve; %s",
			ErrFull, mib(free), dir, mib(after), mib(minFree), u.describe(du.TotalBytes, free))
	}
	return nil
}

// OpenWait is Open that, while dir's disk is short of space, waits for
// room instead of failing: it tries again every second, logging the wait
// at most once per 10 s, until Open succeeds or fails otherwise, or ctx
// ends (then it returns an error wrapping ctx's and the disk's).
//
// An attempt that Pebble itself holds up (a flush at open that fails for
// want of space, which Pebble retries for ever) does not hold OpenWait
// up: when ctx ends first, OpenWait returns an error wrapping ctx's, and
// the attempt is left to finish in the background (closing the store if
// it opens); the process should exit.
func OpenWait(ctx context.Context, dir string, opts Options) (*Store, error) {
	limit := newLogLimiter(logEvery)
	for {
		s, err := openOrGiveUp(ctx, dir, opts)
		if !errors.Is(err, ErrFull) {
			return s, err
		}
		if e, n, ok := limit.allow(opts.Logger.Warn(), "open wait"); ok {
			e.Err(err).Int(logSuppressed, n).Str(logDir, dir).Msg("local store: waiting for free space on its disk before opening it")
		}
		t := time.NewTimer(openRetryEvery)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("gave up waiting for free space (%w): %w", ctx.Err(), err)
		}
	}
}

// openOrGiveUp runs Open, and returns early with an error wrapping ctx's
// if ctx ends first. A disk short of space is refused before Open runs.
func openOrGiveUp(ctx context.Context, dir string, opts Options) (*Store, error) {
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	if err := checkOpenSpace(fs, dir, opts.minFree()); err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	type result struct {
		s   *Store
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := Open(dir, opts)
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		return r.s, r.err
	case <-ctx.Done():
	}
	go func() { // owned by nobody once abandoned: close what it opens
		if r := <-done; r.s != nil {
			_ = r.s.Close()
		}
	}()
	if errors.Is(ctx.Err(), context.Canceled) { // the caller stopped: nothing failed
		return nil, fmt.Errorf("stopped opening the store in %s before Pebble had opened it (%w)", dir, ctx.Err())
	}
	return nil, fmt.Errorf("gave up opening the store in %s (%w): Pebble is still opening it (a flush it retries may be failing: see the log)", dir, ctx.Err())
}
