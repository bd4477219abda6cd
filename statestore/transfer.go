package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"
)

// Moving a task's whole state in and out of the store: a Snapshot reads a
// consistent copy of it without holding up commits, a Loader replaces it
// with a copy from elsewhere without ever showing a half-loaded task.
//
// A load writes the new data into sstables outside the database. To swap
// them in, it marks the task with a loading record ('l' | task, empty value)
// in the same batch that clears its data and meta, ingests the sstables,
// and then writes the meta and removes the mark in one last batch. Until then
// the store holds no meta for the task (Meta says it has none, Tasks leaves
// it out), and a marker left by a crash makes Open drop what was loaded.

const spaceLoading = 'l'

func loadingKey(task string) []byte {
	k := make([]byte, 0, 1+len(task))
	k = append(k, spaceLoading)
	return append(k, task...)
}

// Snapshot is a consistent, read-only copy of one task's state as of the
// moment Store.Snapshot was called: its meta and every key, pinned by a
// Pebble snapshot while commits go on. Iterate it with Next, Key and Value;
// Close it when done. A Snapshot is not safe for concurrent use. Once the
// store is closed its methods fail with ErrClosed.
type Snapshot struct {
	s      *Store
	meta   Meta
	snap   *pebble.Snapshot
	it     *pebble.Iterator
	lower  []byte
	upper  []byte
	key    []byte
	value  []byte
	done   bool
	err    error
	closed bool
}

// Snapshot pins task's current state. ok is false (and the Snapshot nil)
// when the store holds no meta for task: nothing was applied to it, or it
// is being loaded. Pinning costs about as much as a Get: it blocks no
// commit.
func (s *Store) Snapshot(task string) (sn *Snapshot, ok bool, err error) {
	if err := s.enter(); err != nil {
		return nil, false, err
	}
	defer s.mu.RUnlock()
	snap := s.db.NewSnapshot()
	// The meta and the data of a task change in one batch: read through
	// the snapshot, the meta names exactly the sequence the data is at.
	v, closer, err := snap.Get(metaKey(task))
	if errors.Is(err, pebble.ErrNotFound) {
		_ = snap.Close()
		return nil, false, nil
	}
	if err != nil {
		_ = snap.Close()
		return nil, false, fmt.Errorf("snapshot task %q: %w", task, err)
	}
	m, err := decodeMeta(task, v)
	_ = closer.Close()
	if err != nil {
		_ = snap.Close()
		return nil, false, fmt.Errorf("snapshot task %q: %w", task, err)
	}
	lower := appendDataPrefix(nil, task)
	return &Snapshot{s: s, meta: m, snap: snap, lower: lower, upper: successor(lower)}, true, nil
}

// Meta returns the task's meta as of the snapshot: Applied is the changelog
// sequence the snapshot's data is at.
func (sn *Snapshot) Meta() Meta { return sn.meta }

// Count returns how many keys the snapshot holds. It reads them all (keys
// only), so it costs a fraction of a full iteration.
func (sn *Snapshot) Count() (uint64, error) {
	if sn.closed {
		return 0, errors.New("count keys of a closed snapshot")
	}
	if err := sn.s.enter(); err != nil {
		return 0, err
	}
	defer sn.s.mu.RUnlock()
	it, err := sn.snap.NewIter(&pebble.IterOptions{LowerBound: sn.lower, UpperBound: sn.upper})
	if err != nil {
		return 0, fmt.Errorf("count keys of task %q: %w", sn.meta.Task, err)
	}
	var n uint64
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("count keys of task %q: %w", sn.meta.Task, err)
	}
	return n, nil
}

// Next moves to the snapshot's next key, in key order, and reports whether
// there is one. After it returns false, Err says whether the iteration
// ended early.
func (sn *Snapshot) Next() bool {
	if sn.done || sn.err != nil {
		return false
	}
	if sn.closed {
		sn.err = errors.New("iterate a closed snapshot")
		return false
	}
	if err := sn.s.enter(); err != nil {
		sn.err = err
		return false
	}
	defer sn.s.mu.RUnlock()
	var ok bool
	if sn.it == nil {
		it, err := sn.snap.NewIter(&pebble.IterOptions{LowerBound: sn.lower, UpperBound: sn.upper})
		if err != nil {
			sn.err = fmt.Errorf("iterate task %q: %w", sn.meta.Task, err)
			return false
		}
		sn.it = it
		ok = it.First()
	} else {
		ok = sn.it.Next()
	}
	if !ok {
		sn.done = true
		if err := sn.it.Error(); err != nil {
			sn.err = fmt.Errorf("iterate task %q: %w", sn.meta.Task, err)
		}
		return false
	}
	v, err := sn.it.ValueAndErr()
	if err != nil {
		sn.err = fmt.Errorf("iterate task %q: %w", sn.meta.Task, err)
		return false
	}
	// Copy under the close guard: the iterator's memory is Pebble's and
	// goes away with the store.
	sn.key = append(sn.key[:0], sn.it.Key()[len(sn.lower):]...)
	sn.value = append(sn.value[:0], v...)
	return true
}

// Key returns the current key (the task's own, without the store's
// prefix). It is valid until the next call of Next.
func (sn *Snapshot) Key() []byte { return sn.key }

// Value returns the current value, valid until the next call of Next.
func (sn *Snapshot) Value() []byte { return sn.value }

// Err returns the error that ended the iteration, if any.
func (sn *Snapshot) Err() error { return sn.err }

// Close releases the snapshot. It is safe to call more than once.
func (sn *Snapshot) Close() error {
	if sn.closed {
		return nil
	}
	sn.closed = true
	if err := sn.s.enter(); err != nil {
		return nil // the store is closed, and Pebble's resources with it
	}
	defer sn.s.mu.RUnlock()
	var err error
	if sn.it != nil {
		err = sn.it.Close()
	}
	if cerr := sn.snap.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close snapshot of task %q: %w", sn.meta.Task, err)
	}
	return nil
}

// Loader replaces a task's state with keys and values from elsewhere (a
// snapshot), so that no reader ever sees part of it. Put writes the keys
// into sstables in a directory of the store's own, outside the database;
// Finish swaps them in: it drops the old state, ingests the sstables in one
// step and writes the meta, which is what makes them the task's state.
// Ingesting costs a fraction of writing through batches (no WAL, no
// memtable, no flushes), and a load that fails before Finish (a snapshot
// found corrupt at its end) leaves the old state untouched. A Loader holds
// the task's lock from Load to Finish or Abort: Apply and Drop of the task
// wait meanwhile. Call Abort when a load does not finish (it is a no-op
// after Finish). A Loader is not safe for concurrent use.
type Loader struct {
	s      *Store
	task   string
	ts     *taskState
	prefix []byte
	key    []byte // scratch: the store key of the current put

	w      *sstable.Writer // the sstable being written, if any
	wBytes int             // what has been put into w
	paths  []string        // finished sstables, and w's
	keys   uint64
	last   []byte // the last key put, to check the order
	marked bool   // Finish has dropped the old state and marked the task
	done   bool
}

// loadDir is where Loaders write their sstables, under the store's
// directory; Open empties it.
const loadDir = "snapshot-load"

// loadFileBytes is about how much a Loader writes into one sstable (a
// variable so that tests can make loads span several).
var loadFileBytes = 128 << 20

// loadFiles numbers the sstables Loaders write.
var loadFiles atomic.Uint64

// Load starts replacing task's state. Nothing changes in the database
// until Finish: a load that fails or is aborted leaves the task's current
// state as it was.
func (s *Store) Load(task string) (*Loader, error) {
	if task == "" {
		return nil, errors.New("load: empty task")
	}
	if err := s.enterWrite(); err != nil {
		return nil, fmt.Errorf("start loading task %q: %w", task, err)
	}
	defer s.mu.RUnlock()
	if err := s.fs.MkdirAll(s.fs.PathJoin(s.dir, loadDir), 0o755); err != nil {
		return nil, fmt.Errorf("start loading task %q: %w", task, err)
	}
	ts := s.lockTask(task)
	return &Loader{s: s, task: task, ts: ts, prefix: appendDataPrefix(nil, task)}, nil
}

// Put adds one key of the task's new state. Keys must come in strictly
// increasing order, as a snapshot lists them.
func (l *Loader) Put(key, value []byte) error {
	if l.done {
		return fmt.Errorf("load task %q: put after the load ended", l.task)
	}
	if l.keys > 0 && bytes.Compare(key, l.last) <= 0 {
		return fmt.Errorf("load task %q: key %q after %q, want increasing keys", l.task, key, l.last)
	}
	if l.w == nil {
		if err := l.create(); err != nil {
			return err
		}
	}
	l.last = append(l.last[:0], key...)
	l.key = append(append(l.key[:0], l.prefix...), key...)
	if err := l.w.Set(l.key, value); err != nil {
		return fmt.Errorf("load task %q: %w", l.task, err)
	}
	l.keys++
	if l.wBytes += len(l.key) + len(value); l.wBytes >= loadFileBytes {
		return l.closeFile()
	}
	return nil
}

// create starts a new sstable.
func (l *Loader) create() error {
	if err := l.s.enterWrite(); err != nil {
		return fmt.Errorf("load task %q: %w", l.task, err)
	}
	defer l.s.mu.RUnlock()
	path := l.s.fs.PathJoin(l.s.dir, loadDir, fmt.Sprintf("%d.sst", loadFiles.Add(1)))
	f, err := l.s.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("load task %q: %w", l.task, err)
	}
	l.paths = append(l.paths, path)
	l.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: l.s.db.TableFormat()})
	l.wBytes = 0
	return nil
}

// closeFile finishes the current sstable.
func (l *Loader) closeFile() error {
	w := l.w
	l.w = nil
	if err := w.Close(); err != nil {
		return fmt.Errorf("load task %q after %d keys: %w", l.task, l.keys, err)
	}
	return nil
}

// Keys returns how many keys have been put.
func (l *Loader) Keys() uint64 { return l.keys }

// Finish makes the loaded keys the task's state at meta m (its Task field
// is ignored) and ends the load. After a failed Finish, call Abort.
func (l *Loader) Finish(m Meta) error {
	if l.done {
		return fmt.Errorf("finish loading task %q: the load already ended", l.task)
	}
	if m.Applied == 0 {
		return fmt.Errorf("finish loading task %q: applied sequence 0, want the snapshot's", l.task)
	}
	m.Task = l.task
	if l.w != nil {
		if err := l.closeFile(); err != nil {
			return err
		}
	}
	if err := l.s.enterWrite(); err != nil {
		return fmt.Errorf("finish loading task %q: %w", l.task, err)
	}
	defer l.s.mu.RUnlock()
	// Three steps; a crash between them leaves the loading mark, and Open
	// drops the task. First the old state goes and the mark comes.
	l.ts.loaded = false
	b := l.s.db.NewBatch()
	defer b.Close()
	err := dropTaskKeys(b, l.task)
	if err == nil {
		err = b.Set(loadingKey(l.task), nil, nil) // after the drop's delete of it: the set wins
	}
	if err == nil {
		err = l.s.commit(b)
	}
	if err != nil {
		return fmt.Errorf("finish loading task %q: drop the old state: %w", l.task, err)
	}
	l.marked = true
	// Then the sstables, all visible at once, above the range deletion.
	if len(l.paths) > 0 {
		err := l.s.health.guard("ingest", func() error { return l.s.db.Ingest(context.Background(), l.paths) })
		if err != nil {
			return fmt.Errorf("finish loading task %q: ingest %d keys: %w", l.task, l.keys, err)
		}
	}
	// Last the meta, which makes the data the task's state.
	b.Reset()
	err = b.Set(metaKey(l.task), encodeMeta(m), nil)
	if err == nil {
		err = b.Delete(loadingKey(l.task), nil)
	}
	if err == nil {
		err = l.s.commit(b)
	}
	if err != nil {
		return fmt.Errorf("finish loading task %q at seq %d: %w", l.task, m.Applied, err)
	}
	m.Checkpoint = bytes.Clone(m.Checkpoint)
	l.ts.meta, l.ts.loaded = m, true
	l.end()
	return nil
}

// Abort ends the load. Before Finish has begun it leaves the task's state
// as it was; after a failed Finish it drops the task, whose old state is
// gone. It is a no-op after Finish or Abort. If it fails, the task stays
// marked as loading and the next Open (or Drop) removes it.
func (l *Loader) Abort() error {
	if l.done {
		return nil
	}
	defer l.end()
	if l.w != nil {
		_ = l.w.Close()
		l.w = nil
	}
	if !l.marked {
		return nil // the database was not touched
	}
	if err := l.s.enter(); err != nil {
		return err
	}
	defer l.s.mu.RUnlock()
	b := l.s.db.NewBatch()
	defer b.Close()
	err := dropTaskKeys(b, l.task)
	if err == nil {
		err = l.s.commit(b)
	}
	if err != nil {
		return fmt.Errorf("abort loading task %q: %w", l.task, err)
	}
	return nil
}

// end removes the sstables (Ingest linked or copied them into the
// database) and releases the task's lock.
func (l *Loader) end() {
	l.done = true
	for _, p := range l.paths {
		_ = l.s.fs.Remove(p)
	}
	l.paths = nil
	l.ts.mu.Unlock()
}

// Loading reports whether task is marked as loading: a load of it began
// and has not finished (in this process, or before a crash).
func (s *Store) Loading(task string) (bool, error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.mu.RUnlock()
	_, closer, err := s.db.Get(loadingKey(task))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("loading mark of task %q: %w", task, err)
	}
	return true, closer.Close()
}

// dropIncompleteLoads removes every task a crash left half-loaded. Open
// calls it before anything else can use the store.
func (s *Store) dropIncompleteLoads(log zerolog.Logger) error {
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{spaceLoading},
		UpperBound: []byte{spaceLoading + 1},
	})
	if err != nil {
		return fmt.Errorf("find incomplete loads: %w", err)
	}
	var tasks []string
	for ok := it.First(); ok; ok = it.Next() {
		tasks = append(tasks, string(it.Key()[1:]))
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("find incomplete loads: %w", err)
	}
	// The sstables of loads that did not finish.
	if err := s.fs.RemoveAll(s.fs.PathJoin(s.dir, loadDir)); err != nil {
		return fmt.Errorf("remove files of incomplete loads: %w", err)
	}
	for _, task := range tasks {
		b := s.db.NewBatch()
		err := dropTaskKeys(b, task)
		if err == nil {
			err = s.health.guard("commit", func() error { return b.Commit(pebble.Sync) })
		}
		_ = b.Close()
		if err != nil {
			return fmt.Errorf("drop incomplete load of task %q: %w", task, err)
		}
		log.Warn().Str("task", task).Msg("dropped the state of a task whose snapshot load did not finish; it is restored again")
	}
	return nil
}
