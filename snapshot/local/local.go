// Package local takes a task's snapshot out of a member's local store
// (statestore) into the group's snapshot bucket: it pins the state, puts it,
// and trims the changelog and the older snapshots below it. It is apart
// from snapshot, which owns the bucket, the format and the listing, so that
// what only lists or reads the bucket (the CLI's status, through
// agent/group) links no Pebble; the agent's snapshotter and the tests that
// need a stored snapshot take one here.
package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/statestore"
)

// Errors Take wraps.
var (
	// ErrNoState: the store holds nothing of the task.
	ErrNoState = errors.New("snapshot: no local state")
	// ErrUpToDate: the newest stored snapshot is at or past the local
	// copy's applied sequence.
	ErrUpToDate = errors.New("snapshot: the newest snapshot is current")
)

// Taken reports what Take did.
type Taken struct {
	Info snapshot.Info
	// Upload is how long storing the snapshot took: counting its keys,
	// encoding, putting and reading back its metadata.
	Upload time.Duration
	Trim   snapshot.Trimmed
}

// Take snapshots task's local state in store: it pins the state, streams it
// to b, and once it is stored and reads back whole, trims the changelog
// and prunes older snapshots per r. The pin is a Pebble snapshot: commits
// to the task go on meanwhile. When the newest stored snapshot is already
// at the pinned sequence it stores nothing and returns an error wrapping
// ErrUpToDate (with that snapshot in Taken.Info); with no local state,
// ErrNoState.
func Take(ctx context.Context, b *snapshot.Bucket, store *statestore.Store, log *changelog.Log, task string, r snapshot.Retention) (Taken, error) {
	sn, ok, err := store.Snapshot(task)
	if err != nil {
		return Taken{}, err
	}
	if !ok {
		return Taken{}, fmt.Errorf("snapshot task %s: %w", task, ErrNoState)
	}
	defer sn.Close()
	existing, err := b.List(ctx, task)
	if err != nil {
		return Taken{}, err
	}
	if len(existing) > 0 && existing[0].Seq >= sn.Meta().Applied {
		return Taken{Info: existing[0]}, fmt.Errorf("snapshot task %s at seq %d: %w", task, sn.Meta().Applied, ErrUpToDate)
	}
	start := time.Now()
	info, err := Put(ctx, b, sn)
	if err != nil {
		return Taken{}, err
	}
	taken := Taken{Info: info, Upload: time.Since(start)}
	_ = sn.Close() // unpin before the trim
	taken.Trim, err = b.Trim(ctx, log, task, r)
	return taken, err
}

// Put streams sn to b as the snapshot of its task at its applied sequence
// (see snapshot.Bucket.PutSource: it returns once the snapshot reads back
// whole). Put reads sn to its end; the caller closes it.
func Put(ctx context.Context, b *snapshot.Bucket, sn *statestore.Snapshot) (snapshot.Info, error) {
	m := sn.Meta()
	if m.Applied == 0 {
		return snapshot.Info{}, fmt.Errorf("snapshot task %s: nothing applied", m.Task)
	}
	keys, err := sn.Count()
	if err != nil {
		return snapshot.Info{}, fmt.Errorf("snapshot task %s: %w", m.Task, err)
	}
	h := snapshot.Header{Task: m.Task, Seq: m.Applied, Epoch: m.Epoch, Checkpoint: m.Checkpoint, Keys: keys, Created: time.Now()}
	return b.PutSource(ctx, h, sn)
}
