package statestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// openRetryEvery is how often OpenWait tries again on a full disk.
const openRetryEvery = time.Second

// checkOpenSpace returns an error wrapping ErrFull when dir's disk has
// less room than opening the store needs: its reserve, plus as much as
// its WALs hold, which Open flushes into sstables before it returns (and
// on a full disk would retry for ever).
func checkOpenSpace(fs vfs.FS, dir string, minFree uint64) error {
	if minFree == 0 {
		return nil
	}
	free, ok := freeBytes(fs, dir)
	if !ok {
		return nil
	}
	wal := walBytes(fs, dir)
	if free >= minFree+wal {
		return nil
	}
	return fmt.Errorf("%w: %s free on the disk of %s, and opening the store needs %s (its reserve of %s plus %s of WAL to flush); free space on that disk",
		ErrFull, mib(free), dir, mib(minFree+wal), mib(minFree), mib(wal))
}

// walBytes returns the size of the WAL files in dir.
func walBytes(fs vfs.FS, dir string) uint64 {
	names, err := fs.List(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, name := range names {
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		if fi, err := fs.Stat(fs.PathJoin(dir, name)); err == nil && fi.Size() > 0 {
			n += uint64(fi.Size())
		}
	}
	return n
}

// OpenWait is Open that, while dir's disk is short of space, waits for
// room instead of failing: it tries again every second, logging the wait
// at most once per 10 s, until Open succeeds or fails otherwise, or ctx
// ends (then it returns an error wrapping ctx's and the disk's).
func OpenWait(ctx context.Context, dir string, opts Options) (*Store, error) {
	limit := newLogLimiter(logEvery)
	for {
		s, err := Open(dir, opts)
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
