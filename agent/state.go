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
// batch).

// Get implements httpapi.Backend.
func (a *Agent) Get(id string, key []byte) ([]byte, error) {
	t, err := a.readableTask(id)
	if err != nil {
		return nil, err
	}
	a.metrics.readsGet.Inc()
	a.metrics.readKeys.Inc()
	v, err := a.store.Get(id, key)
	if errors.Is(err, statestore.ErrNotFound) {
		return nil, fmt.Errorf("%w: task %s has no key %q", api.ErrNotFound, t.id, key)
	}
	return v, err
}

// GetMany implements httpapi.Backend: the values of keys, read from one
// snapshot of the store.
func (a *Agent) GetMany(id string, keys [][]byte, maxBytes int) ([][]byte, error) {
	if _, err := a.readableTask(id); err != nil {
		return nil, err
	}
	vals, err := a.store.GetMany(id, keys, maxBytes)
	if errors.Is(err, statestore.ErrTooLarge) {
		return nil, fmt.Errorf("%w: the values of these %d keys of task %s total more than %d bytes; ask for fewer keys at a time", api.ErrTooLarge, len(keys), id, maxBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("get %d keys of %s: %w", len(keys), id, err)
	}
	a.metrics.readsBatch.Inc()
	a.metrics.readKeys.Add(float64(len(keys)))
	return vals, nil
}

// Scan implements httpapi.Backend.
func (a *Agent) Scan(id string, o api.ScanOptions) ([]api.KV, error) {
	if _, err := a.readableTask(id); err != nil {
		return nil, err
	}
	kvs, err := a.store.Scan(id, statestore.ScanOptions{Prefix: o.Prefix, Start: o.Start, Limit: o.Limit})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", id, err)
	}
	a.metrics.readsScan.Inc()
	a.metrics.readKeys.Add(float64(len(kvs)))
	out := make([]api.KV, len(kvs))
	for i, kv := range kvs {
		out[i] = api.KV{Key: kv.Key, Value: kv.Value}
	}
	return out, nil
}

// readableTask checks that the worker may read a task's state: it is
// active here and current.
func (a *Agent) readableTask(id string) (*task, error) {
	t, _, err := a.activeTask(id)
	if err != nil {
		return nil, err
	}
	if !t.stateful {
		return nil, fmt.Errorf("%w: task %s is stateless: it has no state", api.ErrInvalid, id)
	}
	return t, nil
}
