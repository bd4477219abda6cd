package statestore

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// View is one task's state read at one point in time: its meta (the
// changelog sequence the copy has applied) and its keys come from one
// Pebble snapshot, so a commit applied meanwhile is in all of them or in
// none, and Meta().Applied is the sequence every read of the view reflects.
// A View is for one goroutine; Close it. Values it returns are the
// caller's to keep.
type View struct {
	s    *Store
	task string
	snap *pebble.Snapshot
	meta Meta
	ok   bool
}

// View opens a view of task. ok on the view's Meta is false when the store
// holds nothing of the task.
func (s *Store) View(task string) (*View, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	snap := s.db.NewSnapshot()
	v := &View{s: s, task: task, snap: snap}
	m, ok, err := v.readMeta()
	if err != nil {
		_ = snap.Close()
		s.mu.RUnlock()
		return nil, fmt.Errorf("view of task %q: %w", task, corruptErr(err))
	}
	v.meta, v.ok = m, ok
	return v, nil
}

func (v *View) readMeta() (Meta, bool, error) {
	val, closer, err := v.snap.Get(metaKey(v.task))
	if errors.Is(err, pebble.ErrNotFound) {
		return Meta{Task: v.task}, false, nil
	}
	if err != nil {
		return Meta{}, false, err
	}
	defer closer.Close()
	m, err := decodeMeta(v.task, val)
	return m, err == nil, err
}

// Meta returns the task's meta as of the view, and whether the store held
// anything of the task then.
func (v *View) Meta() (Meta, bool) { return v.meta, v.ok }

// Close releases the view's snapshot.
func (v *View) Close() error {
	err := v.snap.Close()
	v.s.mu.RUnlock()
	return err
}

// Get returns a copy of key's value as of the view, or an error wrapping
// ErrNotFound.
func (v *View) Get(key []byte) ([]byte, error) {
	vals, err := v.GetMany([][]byte{key}, 0)
	if err != nil {
		return nil, err
	}
	if vals[0] == nil {
		return nil, fmt.Errorf("get %q of task %q: %w", key, v.task, ErrNotFound)
	}
	return vals[0], nil
}

// GetMany is Store.GetMany as of the view.
func (v *View) GetMany(keys [][]byte, maxBytes int) ([][]byte, error) {
	return getMany(v.snap, v.task, keys, maxBytes)
}

// Scan is Store.Scan as of the view.
func (v *View) Scan(o ScanOptions) ([]KV, error) {
	return scan(v.snap, v.task, o)
}
