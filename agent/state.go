package agent

import (
	"errors"
	"fmt"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/statestore"
)

// The worker's reads of its tasks' state. They take no lock of the task's
// beyond reading its phase: a read runs beside the task's commits, and
// sees each commit whole or not at all (the store applies one in one
// batch). Single and batch gets of an active task go through its record
// cache (cache.go), which waits for a commit's apply under way; scans read
// the store, which is never behind the cache, and fill nothing.

// Get implements httpapi.Backend.
func (a *Agent) Get(id string, key []byte) ([]byte, error) {
	t, c, err := a.readableTask(id)
	if err != nil {
		return nil, err
	}
	a.metrics.readsGet.Inc()
	a.metrics.readKeys.Inc()
	var v []byte
	if c != nil {
		v, err = c.get(a.store, id, key)
	} else {
		v, err = a.store.Get(id, key)
	}
	if errors.Is(err, statestore.ErrNotFound) {
		return nil, fmt.Errorf("%w: task %s has no key %q", api.ErrNotFound, t.id, key)
	}
	if err != nil {
		return nil, a.readFailed(id, err)
	}
	return v, nil
}

// GetMany implements httpapi.Backend: the values of keys, read from one
// snapshot of the store.
func (a *Agent) GetMany(id string, keys [][]byte, maxBytes int) ([][]byte, error) {
	_, c, err := a.readableTask(id)
	if err != nil {
		return nil, err
	}
	var vals [][]byte
	if c != nil {
		vals, err = c.getMany(a.store, id, keys, maxBytes)
	} else {
		vals, err = a.store.GetMany(id, keys, maxBytes)
	}
	if errors.Is(err, statestore.ErrTooLarge) {
		return nil, fmt.Errorf("%w: the values of these %d keys of task %s total more than %d bytes; ask for fewer keys at a time", api.ErrTooLarge, len(keys), id, maxBytes)
	}
	if err != nil {
		return nil, a.readFailed(id, err)
	}
	a.metrics.readsBatch.Inc()
	a.metrics.readKeys.Add(float64(len(keys)))
	return vals, nil
}

// Scan implements httpapi.Backend.
func (a *Agent) Scan(id string, o api.ScanOptions) ([]api.KV, error) {
	if _, _, err := a.readableTask(id); err != nil {
		return nil, err
	}
	kvs, err := a.store.Scan(id, statestore.ScanOptions{Prefix: o.Prefix, Start: o.Start, Limit: o.Limit})
	if err != nil {
		return nil, a.readFailed(id, err)
	}
	a.metrics.readsScan.Inc()
	a.metrics.readKeys.Add(float64(len(kvs)))
	out := make([]api.KV, len(kvs))
	for i, kv := range kvs {
		out[i] = api.KV{Key: kv.Key, Value: kv.Value}
	}
	return out, nil
}

// readFailed is the error of a read of task id that the local store
// failed: 503 unavailable at once. A store that failed for good or is
// corrupt refuses every call from then on, and the agent stops so that the
// group moves its tasks.
func (a *Agent) readFailed(id string, err error) error {
	if errors.Is(err, statestore.ErrCorrupt) || errors.Is(err, statestore.ErrFailed) || errors.Is(err, statestore.ErrClosed) {
		return fmt.Errorf("%w: the local store of member %s cannot serve task %s (%w); this member stops and the task moves: retry on its new owner once /assignment names it", api.ErrUnavailable, a.opts.MemberID, id, err)
	}
	return fmt.Errorf("%w: the local store of member %s failed to read task %s (%w); retry", api.ErrUnavailable, a.opts.MemberID, id, err)
}

// readableTask checks that the worker may read a task's state: it is
// active here and current. It returns the task and its record cache (nil
// when it has none: released, or the caches are off).
func (a *Agent) readableTask(id string) (*task, *recordCache, error) {
	t, st, err := a.activeTask(id)
	if err != nil {
		return nil, nil, err
	}
	if !t.stateful {
		return nil, nil, fmt.Errorf("%w: task %s is stateless: it has no state", api.ErrInvalid, id)
	}
	return t, st.cache, nil
}
