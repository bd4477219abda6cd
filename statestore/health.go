package statestore

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"
)

// Storage trouble. The store is a cache of the changelog, so on trouble it
// refuses rather than risking its consistency, and a restart rebuilds it:
//
//   - Short of space, it refuses writes (ErrFull) before Pebble meets the
//     full disk. Pebble v2.1.7 does not survive that: a failed WAL write
//     panics while it holds its commit pipeline's lock (every later write
//     hangs), a failed close of the old WAL in a WAL rotation panics after
//     it released DB.mu, which its caller's deferred unlock turns into the
//     unrecoverable "fatal error: sync: unlock of unlocked mutex", and a
//     failed MANIFEST write calls Logger.Fatalf. Writes resume by
//     themselves once the disk has room again.
//   - Failed flushes and compactions (Pebble retries them at once, in a
//     loop) are retried after a pause instead, and logged at most once per
//     logEvery per kind of message.
//   - When Pebble still fails for good, or finds on-disk corruption, the
//     store fails (ErrFailed, ErrCorrupt): every call returns the error
//     and Failed is closed, so that its owner stops and restarts. A
//     corrupt store is marked so that the next Open moves it aside and
//     starts empty (OnCorrupt), to be rebuilt from the changelog.

// Defaults of Options.
const (
	// DefaultMinFree is the free space below which the store refuses
	// writes: room for a flush of Pebble's largest memtable and its WAL.
	DefaultMinFree = 2 * maxMemTableSize
)

const (
	// diskCheckEvery bounds how often a write asks the file system for its
	// free space; the reserve covers what is written in between.
	diskCheckEvery = 100 * time.Millisecond
	// backgroundBackoff is the pause before Pebble retries a failed flush
	// or compaction.
	backgroundBackoff = time.Second
)

// health tracks the store's storage trouble; Pebble's logger and event
// listener report to it, and every Store call asks it first.
type health struct {
	fs      vfs.FS
	dir     string
	minFree uint64 // 0: no free-space check
	log     zerolog.Logger
	limit   *logLimiter

	closing  chan struct{} // closed by stop: a paused retry stops waiting
	stopOnce sync.Once

	// flush, set once Pebble is open, flushes the memtables when the disk
	// runs short of space (Store.flushForSpace); it gets the free bytes
	// and reports whether it started a flush.
	flush func(free uint64) bool

	mu         sync.Mutex
	checkEvery time.Duration
	checkedAt  time.Time
	spaceErr   error // why the disk is short of space; nil when it is not
	// flushed is set when the disk ran short of space and flush was
	// called, and cleared when a write is let in again: one flush per
	// shortage, not one per check.
	flushed bool
	bgErr   error // the last failed flush or compaction, nil after one succeeds
	failure error // wraps ErrFailed or ErrCorrupt: for good
	failed  chan struct{}
}

func newHealth(fs vfs.FS, dir string, minFree uint64, log zerolog.Logger) *health {
	return &health{
		fs:         fs,
		dir:        dir,
		minFree:    minFree,
		log:        log,
		limit:      newLogLimiter(logEvery),
		closing:    make(chan struct{}),
		checkEvery: diskCheckEvery,
		failed:     make(chan struct{}),
	}
}

// err returns the store's failure, if it failed.
func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failure
}

// writable returns nil when a write may go to Pebble, or an error wrapping
// ErrFull, ErrFailed or ErrCorrupt. The first check that finds the disk
// short of space since a write was last let in has the memtables flushed
// (h.flush), so that their WAL files do not hold the disk.
func (h *health) writable() error {
	var flushFree uint64
	flush, failed := false, false
	err := func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.failure != nil {
			failed = true
			return h.failure
		}
		if h.minFree > 0 && time.Since(h.checkedAt) >= h.checkEvery {
			h.checkedAt = time.Now()
			h.spaceErr = nil
			du, err := h.fs.GetDiskUsage(h.dir)
			free, ok := du.AvailBytes, err == nil
			switch {
			case ok && free < h.minFree:
				h.spaceErr = fmt.Errorf("%w: %s free on the disk of %s, below the %s the store keeps in reserve; %s",
					ErrFull, mib(free), h.dir, mib(h.minFree), storeUsage(h.fs, h.dir).describe(du.TotalBytes, free))
				if !h.flushed && h.bgErr == nil && h.flush != nil {
					h.flushed, flush, flushFree = true, true, free
				}
			case ok && h.bgErr != nil && isNoSpace(h.bgErr):
				// The disk has room again: a background job that failed for
				// want of space is retried, so writes need not wait for it
				// (refused writes fill no memtable that would make it run).
				h.bgErr = nil
			}
		}
		err := h.spaceErr
		if err == nil && h.bgErr != nil && isNoSpace(h.bgErr) {
			err = fmt.Errorf("%w: Pebble could not write to %s: %w", ErrFull, h.dir, h.bgErr)
		}
		if err == nil {
			h.flushed = false
		}
		return err
	}()
	if flush && !h.flush(flushFree) {
		h.mu.Lock()
		h.flushed = false // try again at the next check
		h.mu.Unlock()
	}
	if err != nil && !failed {
		if e, n, ok := h.limit.allow(h.log.Warn(), "refusing writes"); ok {
			e.Err(err).Int(logSuppressed, n).Str(logDir, h.dir).Msg("local store: refusing writes until its disk has room")
		}
	}
	return err
}

// fail makes the store fail for good with err (wrapping ErrFailed or
// ErrCorrupt); the first failure wins. It reports whether err was first.
func (h *health) fail(err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failure != nil {
		return false
	}
	h.failure = err
	close(h.failed)
	return true
}

// backgroundError is Pebble's EventListener.BackgroundError. Pebble calls
// it from the failed flush or compaction, holding its own lock, and
// retries at once when it returns: the pause makes a full disk cost a try
// a second, not a busy loop. Reads do not wait for that lock; writes are
// refused meanwhile.
func (h *health) backgroundError(err error) {
	h.mu.Lock()
	h.bgErr = err
	h.mu.Unlock()
	if pebble.IsCorruptionError(err) {
		h.corrupt(firstLine(err.Error()))
	} else if e, n, ok := h.limit.allow(h.log.Error(), "background "+err.Error()); ok {
		e.Err(err).Int(logSuppressed, n).Str(logDir, h.dir).Msg("local store: a flush or compaction failed; retrying in a second")
	}
	t := time.NewTimer(backgroundBackoff)
	defer t.Stop()
	select {
	case <-t.C:
	case <-h.closing:
	}
}

// jobEnd is Pebble's FlushEnd and CompactionEnd: one that succeeds clears
// the last background error.
func (h *health) jobEnd(err error) {
	if err != nil {
		return
	}
	h.mu.Lock()
	cleared := h.bgErr != nil
	h.bgErr = nil
	h.mu.Unlock()
	if cleared {
		h.log.Info().Str(logDir, h.dir).Msg("local store: flushes and compactions succeed again")
	}
}

// corrupt fails the store with ErrCorrupt and marks its directory for the
// next Open.
func (h *health) corrupt(reason string) {
	err := fmt.Errorf("%w: %s", ErrCorrupt, reason)
	if !h.fail(err) {
		return
	}
	if merr := writeCorruptMark(h.fs, h.dir, reason); merr != nil {
		h.log.Error().Err(merr).Str(logDir, h.dir).Msg("local store: cannot mark the store corrupt; the next start finds the corruption again")
	}
	h.log.Error().Str(logDir, h.dir).Str("reason", reason).
		Msg("LOCAL STORE IS CORRUPT: refusing to use it; the next start moves it aside and rebuilds it from the changelog (unless the agent runs with the fail policy)")
}

// listener returns the Pebble event listener reporting to h.
func (h *health) listener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: h.backgroundError,
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			h.corrupt(corruptionReason(info))
		},
		FlushEnd:      func(info pebble.FlushInfo) { h.jobEnd(info.Err) },
		CompactionEnd: func(info pebble.CompactionInfo) { h.jobEnd(info.Err) },
	}
}

// guard runs fn, a call into Pebble that writes. When Pebble panics there
// (a failed WAL write, or Fatalf) and the panic can be recovered, the store
// fails for good and the caller gets an error wrapping ErrFailed: Pebble's
// commit pipeline is unusable afterwards. (Some of Pebble's panics cannot be
// recovered at all; the free-space reserve is what keeps them away.)
func (h *health) guard(what string, fn func() error) (err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		ferr, ok := p.(fatalError)
		if !ok {
			ferr = fatalError{fmt.Errorf("%w: pebble panicked in %s: %v", ErrFailed, what, p)}
			h.fatal(ferr.err)
		}
		err = ferr.err
	}()
	return fn()
}

// fatal fails the store with err, which wraps ErrFailed, logging it once.
func (h *health) fatal(err error) {
	if h.fail(err) {
		h.log.Error().Err(err).Str(logDir, h.dir).
			Msg("LOCAL STORE FAILED: Pebble cannot go on; refusing every call until the agent restarts")
	}
}

// fatalError is the panic of pebbleLogger.Fatalf, recovered by guard.
type fatalError struct{ err error }

// isNoSpace tells whether err means the disk (or the quota) is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, ErrFull)
}

// mib formats a byte count in MiB.
func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// stop ends paused retries, so that closing does not wait for them.
func (h *health) stop() {
	h.stopOnce.Do(func() { close(h.closing) })
}
