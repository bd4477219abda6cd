package statestore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Store is the local state of a member's tasks. It is safe for concurrent
// use; commits to one task are serialized, commits to different tasks run in
// parallel. Values it returns are the caller's to keep.
type Store struct {
	db   *pebble.DB
	lock *pebble.Lock
	// releaseOnce releases lock when a failed store is closed (any number
	// of times).
	releaseOnce sync.Once
	write       *pebble.WriteOptions
	fs          vfs.FS
	dir         string // the database's directory on fs
	memTable    uint64 // Pebble's largest memtable size (memTableSizeFor)

	health  *health
	rebuilt *RebuildInfo // set by Open when it replaced a corrupt store

	// mu guards closed: methods hold it shared so Close waits for them.
	mu     sync.RWMutex
	closed bool

	tasks sync.Map // task string -> *taskState
}

// taskState serializes Apply and Drop of one task and caches its meta, so a
// commit does not read it back from Pebble.
type taskState struct {
	mu     sync.Mutex
	meta   Meta // valid when loaded; Checkpoint is owned
	loaded bool
}

// Open opens (creating if needed) the store in dir. It fails with an error
// wrapping ErrLocked when another process, or another Store of this process,
// has dir open, and with one wrapping ErrFull when dir's disk is short of
// space (OpenWait waits for space instead). A store found corrupt is moved
// aside and replaced by an empty one, or refused, by opts.OnCorrupt (see
// corrupt.go); Rebuilt tells which happened.
func Open(dir string, opts Options) (*Store, error) {
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
		// Pebble tracks in-process locks by path: make equal dirs equal paths.
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
	}
	switch opts.OnCorrupt {
	case "":
		opts.OnCorrupt = Rebuild
	case Rebuild, Fail:
	default:
		return nil, fmt.Errorf("open store in %s: corrupt policy %q: use %q or %q", dir, opts.OnCorrupt, Rebuild, Fail)
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	reason, marked, err := corruptMarkReason(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	if !marked {
		s, err := open(fs, dir, opts)
		if err == nil || !isCorrupt(err) {
			return s, err
		}
		reason = err.Error()
	}
	if opts.OnCorrupt == Fail {
		return nil, fmt.Errorf("open store in %s: %w (%s); move the directory aside to start empty and rebuild it from the changelog", dir, ErrCorrupt, reason)
	}
	to, err := moveAside(fs, dir)
	if err != nil {
		return nil, err
	}
	opts.Logger.Error().Str(logDir, dir).Str("movedTo", to).Str("reason", reason).
		Msg("LOCAL STORE WAS CORRUPT: moved it aside; starting empty, the member restores its tasks from snapshots and the changelog")
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	s, err := open(fs, dir, opts)
	if err != nil {
		return nil, err
	}
	s.rebuilt = &RebuildInfo{Reason: reason, MovedTo: to}
	return s, nil
}

// open opens the store in dir and reads what it keeps about its tasks, so
// that corruption there shows now rather than later.
func open(fs vfs.FS, dir string, opts Options) (*Store, error) {
	minFree := opts.minFree()
	if err := checkOpenSpace(fs, dir, minFree); err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	lock, err := pebble.LockDirectory(dir, fs)
	if err != nil {
		if isLockConflict(err) {
			return nil, fmt.Errorf("open store in %s: %w (%w)", dir, ErrLocked, err)
		}
		return nil, fmt.Errorf("open store in %s: lock: %w", dir, err)
	}
	var total uint64
	if du, err := fs.GetDiskUsage(dir); err == nil {
		total = du.TotalBytes
	}
	memTable := memTableSizeFor(total, minFree)
	h := newHealth(fs, dir, minFree, opts.Logger)
	popts := &pebble.Options{
		FS:            fs,
		Lock:          lock,
		Logger:        pebbleLogger{log: opts.Logger, h: h},
		EventListener: h.listener(),
		MemTableSize:  memTable,
	}
	cacheBytes := opts.CacheBytes
	if cacheBytes <= 0 {
		cacheBytes = DefaultCacheBytes
	}
	cache := pebble.NewCache(cacheBytes)
	defer cache.Unref() // the database holds its own reference
	popts.Cache = cache
	var db *pebble.DB
	err = h.guard("open", func() (err error) {
		db, err = pebble.Open(dir, popts)
		return err
	})
	if err != nil {
		h.stop()
		_ = lock.Close()
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	write := pebble.NoSync
	if opts.Sync {
		write = pebble.Sync
	}
	s := &Store{db: db, lock: lock, write: write, fs: fs, dir: dir, memTable: memTable, health: h}
	h.flush = s.flushForSpace
	err = s.dropIncompleteLoads(opts.Logger)
	if err == nil {
		_, err = s.Tasks()
	}
	if err == nil {
		err = h.err()
	}
	if err != nil {
		h.stop()
		_ = db.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	if minFree > 0 && total > 0 && total < minVolume(minFree) {
		opts.Logger.Warn().Str(logDir, dir).Str("disk", mib(total)).Str("minimum", mib(minVolume(minFree))).
			Msg("local store: its disk is smaller than the store needs (its reserve plus 128 MiB); commits will soon be refused for want of space: grow the volume")
	}
	return s, nil
}

// flushForSpace flushes the memtables once the disk is short of space
// (health.writable calls it with the free bytes), so that Pebble removes
// or recycles the WAL files that hold them: on a small disk those files
// take far more than their data, and as no write is let in below the
// reserve, no memtable would fill up to free them. It starts a flush only
// when the free space holds what the WAL files do (the sstables it writes
// hold about as much), and reports whether it did.
func (s *Store) flushForSpace(free uint64) bool {
	m := s.db.Metrics()
	if m.WAL.Size+openMargin > free { // the sstables hold about what the WALs do
		return false
	}
	err := s.health.guard("flush", func() error {
		_, err := s.db.AsyncFlush()
		return err
	})
	if err != nil {
		return false
	}
	s.health.log.Info().Str(logDir, s.dir).Str("data", mib(m.WAL.Size)).Str("walFiles", mib(m.WAL.PhysicalSize)).Str("free", mib(free)).
		Msg("local store: short of space; flushing its memtables so that their WAL files are freed")
	return true
}

// isLockConflict tells whether err from pebble.LockDirectory means someone
// else holds the lock (rather than, say, a permission problem).
func isLockConflict(err error) bool {
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return false // creating the LOCK file failed
	}
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process")
}

// Close closes the database (Pebble writes out what its WAL buffer holds)
// and releases the directory. It waits for calls in flight; later calls
// return ErrClosed.
//
// A store that failed (ErrFailed) is not closed: calls stuck in Pebble may
// never return, so Close only releases the directory and returns the
// failure; the process must exit to end Pebble's goroutines.
func (s *Store) Close() error {
	s.health.stop()
	if err := s.health.err(); errors.Is(err, ErrFailed) {
		s.releaseOnce.Do(func() { _ = s.lock.Close() })
		return fmt.Errorf("close store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.db.Close()
	if lerr := s.lock.Close(); err == nil && lerr != nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// enter takes the shared close guard; the caller must call s.mu.RUnlock.
// It fails when the store is closed or has failed.
func (s *Store) enter() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	if err := s.health.err(); err != nil {
		s.mu.RUnlock()
		return err
	}
	return nil
}

// enterWrite is enter for a call that writes: it also fails, with an error
// wrapping ErrFull, when the disk is short of space.
func (s *Store) enterWrite() error {
	if err := s.enter(); err != nil {
		return err
	}
	if err := s.health.writable(); err != nil {
		s.mu.RUnlock()
		return err
	}
	return nil
}

// commit commits b, turning a Pebble panic into an error (health.guard).
func (s *Store) commit(b *pebble.Batch) error {
	return s.health.guard("commit", func() error { return b.Commit(s.write) })
}

// Writable returns nil when the store accepts writes, or why not: an error
// wrapping ErrFull while its disk is short of space (this passes once
// space is freed), ErrFailed or ErrCorrupt once it failed for good, or
// ErrClosed.
func (s *Store) Writable() error {
	if err := s.enterWrite(); err != nil {
		return err
	}
	s.mu.RUnlock()
	return nil
}

// BatchBytes is the most a caller should gather into one Apply: Pebble
// treats a batch of half its memtable size or more as a large batch that
// forces a flush of its own, and the memtable size depends on the disk
// (memTableSizeFor): a quarter of it, 16 MiB on a disk of 2.6 GiB or
// more, 1 MiB on the smallest.
func (s *Store) BatchBytes() int { return int(s.memTable / 4) }

// Failed is closed when the store fails for good (Err says why): its owner
// should stop and reopen it, which rebuilds a corrupt store.
func (s *Store) Failed() <-chan struct{} { return s.health.failed }

// Err returns why the store failed for good (wrapping ErrFailed or
// ErrCorrupt), or nil.
func (s *Store) Err() error { return s.health.err() }

// lockTask locks task's state and returns it; the caller unlocks ts.mu.
func (s *Store) lockTask(task string) *taskState {
	v, ok := s.tasks.Load(task)
	if !ok {
		v, _ = s.tasks.LoadOrStore(task, new(taskState))
	}
	ts := v.(*taskState)
	ts.mu.Lock()
	return ts
}

// Apply writes commits of task in one atomic Pebble batch: their puts and
// deletes, in order, and the task's meta (applied sequence and epoch of the
// last commit, checkpoint of the last commit that has one). Commits whose Seq
// is at or below the task's applied sequence are skipped, so replaying a
// commit twice is harmless. Seqs must be positive and increase within the
// call. The caller may reuse the commits' memory once Apply returns.
func (s *Store) Apply(task string, commits ...Commit) error {
	if task == "" {
		return errors.New("apply: empty task")
	}
	if len(commits) == 0 {
		return nil
	}
	for i, c := range commits {
		if c.Seq == 0 || (i > 0 && c.Seq <= commits[i-1].Seq) {
			return fmt.Errorf("apply to task %q: commit %d has seq %d, want seqs positive and increasing", task, i, c.Seq)
		}
	}
	if err := s.enterWrite(); err != nil {
		return fmt.Errorf("apply to task %q: %w", task, err)
	}
	defer s.mu.RUnlock()
	ts := s.lockTask(task)
	defer ts.mu.Unlock()
	if !ts.loaded {
		m, _, err := s.meta(task)
		if err != nil {
			return fmt.Errorf("apply to task %q: %w", task, corruptErr(err))
		}
		ts.meta, ts.loaded = m, true
	}
	meta := ts.meta
	first := 0
	for first < len(commits) && commits[first].Seq <= meta.Applied {
		first++
	}
	commits = commits[first:]
	if len(commits) == 0 {
		return nil
	}

	var prefixBuf [64]byte
	prefix := appendDataPrefix(prefixBuf[:0], task)
	size := 64 + len(task)
	for i := range commits {
		c := &commits[i]
		for _, kv := range c.Puts {
			size += len(prefix) + len(kv.Key) + len(kv.Value) + 12
		}
		for _, k := range c.Deletes {
			size += len(prefix) + len(k) + 6
		}
		if len(c.Checkpoint) > 0 {
			meta.Checkpoint = c.Checkpoint
		}
	}
	last := commits[len(commits)-1]
	meta.Applied, meta.Epoch = last.Seq, last.Epoch

	b := s.db.NewBatchWithSize(size)
	defer b.Close()
	for i := range commits {
		c := &commits[i]
		for _, kv := range c.Puts {
			op := b.SetDeferred(len(prefix)+len(kv.Key), len(kv.Value))
			copy(op.Key[copy(op.Key, prefix):], kv.Key)
			copy(op.Value, kv.Value)
			if err := op.Finish(); err != nil {
				return fmt.Errorf("apply to task %q at seq %d: %w", task, c.Seq, err)
			}
		}
		for _, k := range c.Deletes {
			op := b.DeleteDeferred(len(prefix) + len(k))
			copy(op.Key[copy(op.Key, prefix):], k)
			if err := op.Finish(); err != nil {
				return fmt.Errorf("apply to task %q at seq %d: %w", task, c.Seq, err)
			}
		}
	}
	if err := b.Set(metaKey(task), encodeMeta(meta), nil); err != nil {
		return fmt.Errorf("apply to task %q: %w", task, err)
	}
	if err := s.commit(b); err != nil {
		return fmt.Errorf("apply to task %q up to seq %d: %w", task, last.Seq, err)
	}
	// meta.Checkpoint may be the caller's memory: keep an owned copy.
	if bytes.Equal(meta.Checkpoint, ts.meta.Checkpoint) {
		meta.Checkpoint = ts.meta.Checkpoint
	} else {
		meta.Checkpoint = bytes.Clone(meta.Checkpoint)
	}
	ts.meta = meta
	return nil
}

// Get returns a copy of the value of key in task's keyspace, or an error
// wrapping ErrNotFound.
func (s *Store) Get(task string, key []byte) ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	k := append(appendDataPrefix(make([]byte, 0, 16+len(task)+len(key)), task), key...)
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("get %q of task %q: %w", key, task, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %q of task %q: %w", key, task, corruptErr(err))
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	return out, closer.Close()
}

// GetMany returns the values of keys in task's keyspace, read from one
// snapshot of the store, so that a commit applied meanwhile is seen by all
// of them or none: nil for a key the task does not hold, a copy for one it
// does (an empty value is a non-nil empty slice). The copies share one
// buffer. Values over maxBytes in total (maxBytes <= 0: no bound) fail
// with an error wrapping ErrTooLarge.
func (s *Store) GetMany(task string, keys [][]byte, maxBytes int) ([][]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	snap := s.db.NewSnapshot()
	defer snap.Close()
	return getMany(snap, task, keys, maxBytes)
}

// getMany is GetMany on r.
func getMany(r pebble.Reader, task string, keys [][]byte, maxBytes int) ([][]byte, error) {
	prefix := appendDataPrefix(make([]byte, 0, 64), task)
	k := prefix
	// ends[i] is where value i ends in buf, or -1 for an absent key.
	ends := make([]int, len(keys))
	buf := make([]byte, 0, 128*len(keys))
	for i, key := range keys {
		k = append(k[:len(prefix)], key...)
		v, closer, err := r.Get(k)
		if errors.Is(err, pebble.ErrNotFound) {
			ends[i] = -1
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get %q of task %q: %w", key, task, corruptErr(err))
		}
		if maxBytes > 0 && len(buf)+len(v) > maxBytes {
			_ = closer.Close()
			return nil, fmt.Errorf("get %d keys of task %q: their values pass %d bytes at key %d: %w", len(keys), task, maxBytes, i, ErrTooLarge)
		}
		buf = append(buf, v...)
		ends[i] = len(buf)
		if err := closer.Close(); err != nil {
			return nil, fmt.Errorf("get %q of task %q: %w", key, task, err)
		}
	}
	out := make([][]byte, len(keys))
	start := 0
	for i, end := range ends {
		if end >= 0 {
			out[i] = buf[start:end:end]
			start = end
		}
	}
	return out, nil
}

// Scan returns task's keys and values in key order, selected by o. Keys are
// the task's own (without the store's prefix); everything returned is a copy.
func (s *Store) Scan(task string, o ScanOptions) ([]KV, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	return scan(s.db, task, o)
}

// scan is Scan on r.
func scan(r pebble.Reader, task string, o ScanOptions) ([]KV, error) {
	limit := o.Limit
	if limit <= 0 {
		limit = DefaultScanLimit
	}
	limit = min(limit, MaxScanLimit)

	prefix := appendDataPrefix(nil, task)
	lower := append(bytes.Clone(prefix), o.Prefix...)
	upper := successor(lower) // never nil: lower starts with spaceData
	if len(o.Start) > 0 {
		start := append(bytes.Clone(prefix), o.Start...)
		if bytes.Compare(start, lower) > 0 {
			lower = start
		}
	}
	if bytes.Compare(lower, upper) >= 0 {
		return nil, nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("scan task %q: %w", task, err)
	}
	var out []KV
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		k := it.Key()[len(prefix):]
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("scan task %q: %w", task, corruptErr(err))
		}
		buf := make([]byte, len(k)+len(v))
		copy(buf, k)
		copy(buf[len(k):], v)
		out = append(out, KV{Key: buf[:len(k):len(k)], Value: buf[len(k):]})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("scan task %q: %w", task, corruptErr(err))
	}
	return out, nil
}

// Meta returns what the store records about task; ok is false when the store
// holds nothing of it.
func (s *Store) Meta(task string) (Meta, bool, error) {
	if err := s.enter(); err != nil {
		return Meta{}, false, err
	}
	defer s.mu.RUnlock()
	m, ok, err := s.meta(task)
	if err != nil {
		return Meta{}, false, fmt.Errorf("meta of task %q: %w", task, corruptErr(err))
	}
	return m, ok, nil
}

func (s *Store) meta(task string) (Meta, bool, error) {
	v, closer, err := s.db.Get(metaKey(task))
	if errors.Is(err, pebble.ErrNotFound) {
		return Meta{Task: task}, false, nil
	}
	if err != nil {
		return Meta{}, false, err
	}
	defer closer.Close()
	m, err := decodeMeta(task, v)
	return m, err == nil, err
}

// Tasks returns the meta of every task the store holds, ordered by task, so a
// restarted member can say how far its local copy of each reaches.
func (s *Store) Tasks() ([]Meta, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{spaceMeta},
		UpperBound: []byte{spaceMeta + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	var out []Meta
	for ok := it.First(); ok; ok = it.Next() {
		task := string(it.Key()[1:])
		v, err := it.ValueAndErr()
		if err == nil {
			var m Meta
			if m, err = decodeMeta(task, v); err == nil {
				out = append(out, m)
				continue
			}
		}
		_ = it.Close()
		return nil, fmt.Errorf("list tasks: %w", corruptErr(err))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("list tasks: %w", corruptErr(err))
	}
	return out, nil
}

// Drop removes task's keyspace and meta in one atomic batch. Dropping a task
// the store does not hold is a no-op.
func (s *Store) Drop(task string) error {
	if err := s.enterWrite(); err != nil {
		return fmt.Errorf("drop task %q: %w", task, err)
	}
	defer s.mu.RUnlock()
	ts := s.lockTask(task)
	defer ts.mu.Unlock()
	ts.loaded = false

	b := s.db.NewBatch()
	defer b.Close()
	err := dropTaskKeys(b, task)
	if err == nil {
		err = s.commit(b)
	}
	if err != nil {
		return fmt.Errorf("drop task %q: %w", task, err)
	}
	return nil
}

// dropTaskKeys adds to b the deletion of every key of task: its data, its
// meta and its loading mark.
func dropTaskKeys(b *pebble.Batch, task string) error {
	prefix := appendDataPrefix(nil, task)
	if err := b.DeleteRange(prefix, successor(prefix), nil); err != nil {
		return err
	}
	if err := b.Delete(metaKey(task), nil); err != nil {
		return err
	}
	return b.Delete(loadingKey(task), nil)
}
