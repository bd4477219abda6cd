package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/snapshot/local"
)

// Snapshots: the active owner of a stateful task stores a snapshot of the
// task's state when the task has had Every commits here since its newest
// snapshot, or when that snapshot is older than Interval and the task has
// changed since. Each snapshot trims the changelog and prunes older
// snapshots (snapshot.Retention), so a restore loads the state and replays
// a bounded suffix. One member takes one snapshot at a time; commits go on
// meanwhile (the state is pinned by a Pebble snapshot).

// Defaults of SnapshotOptions.
const (
	DefaultSnapshotEvery    = 100_000
	DefaultSnapshotInterval = time.Hour
	DefaultSnapshotCheck    = 10 * time.Second

	// sweepInterval is how often a member removes what crashed uploads
	// left in the bucket, and sweepAge how old such leftovers must be.
	sweepInterval = time.Hour
	sweepAge      = time.Hour
	// maxSnapshotBackoff bounds the wait before retrying a failed snapshot.
	maxSnapshotBackoff = 10 * time.Minute
)

// SnapshotOptions configure the snapshots a member takes of the tasks it
// owns. Every member restores from snapshots whatever these say.
type SnapshotOptions struct {
	// Disabled stops this member from taking snapshots.
	Disabled bool
	// Every is how many commits to a task on this member trigger its next
	// snapshot; 0 means DefaultSnapshotEvery.
	Every uint64
	// Interval is the age at which a task's newest snapshot is replaced if
	// the task has changed since; 0 means DefaultSnapshotInterval. A task
	// without a snapshot counts from when this member became its owner.
	Interval time.Duration
	// Keep is how many snapshots of a task to keep; 0 means
	// snapshot.DefaultKeep.
	Keep int
	// Margin is how many changelog messages to keep below the oldest kept
	// snapshot; 0 means snapshot.DefaultMargin.
	Margin uint64
	// Check is how often the member looks for tasks due for a snapshot
	// (Every also triggers a look at once); 0 means DefaultSnapshotCheck.
	Check time.Duration
}

func (o SnapshotOptions) withDefaults() SnapshotOptions {
	if o.Every == 0 {
		o.Every = DefaultSnapshotEvery
	}
	if o.Interval <= 0 {
		o.Interval = DefaultSnapshotInterval
	}
	if o.Check <= 0 {
		o.Check = DefaultSnapshotCheck
	}
	return o
}

// snapshotter is the member's snapshot state: the bucket and, per task it
// owns, what it knows of the task's newest snapshot.
type snapshotter struct {
	bucket *snapshot.Bucket
	opts   SnapshotOptions
	kick   chan struct{}

	mu    sync.Mutex
	tasks map[string]*snapState
}

// snapState is one task's snapshot bookkeeping for one ownership (epoch).
type snapState struct {
	epoch   uint64
	known   bool      // seq and at are read from the bucket
	seq     uint64    // newest snapshot's sequence; 0: none
	at      time.Time // newest snapshot's time, or when this owner first saw the task
	commits uint64    // commits here since the newest snapshot
	fails   int
	retry   time.Time // after a failure: not before
}

func openSnapshots(ctx context.Context, js jetstream.JetStream, opts Options) (*snapshotter, error) {
	b, err := snapshot.Open(ctx, js, snapshot.Options{Group: opts.Group, Replicas: opts.Replicas})
	if err != nil {
		return nil, err
	}
	return &snapshotter{
		bucket: b,
		opts:   opts.Snapshots.withDefaults(),
		kick:   make(chan struct{}, 1),
		tasks:  map[string]*snapState{},
	}, nil
}

// stateLocked returns task's bookkeeping for epoch, starting it afresh for
// a new ownership. Callers hold s.mu.
func (s *snapshotter) stateLocked(task string, epoch uint64) *snapState {
	st := s.tasks[task]
	if st == nil || st.epoch != epoch {
		st = &snapState{epoch: epoch}
		s.tasks[task] = st
	}
	return st
}

// snapshotCommitted counts a commit to task (the commit path calls it) and
// wakes the snapshot loop when the task reaches Every commits.
func (a *Agent) snapshotCommitted(task string, epoch uint64) {
	s := a.snaps
	s.mu.Lock()
	st := s.stateLocked(task, epoch)
	st.commits++
	due := st.commits == s.opts.Every
	s.mu.Unlock()
	if due && !s.opts.Disabled {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// runSnapshots takes the snapshots that fall due until ctx ends, and now
// and then sweeps what crashed uploads left in the bucket.
func (a *Agent) runSnapshots(ctx context.Context) error {
	if a.snaps.opts.Disabled {
		return nil
	}
	tick := time.NewTicker(a.snaps.opts.Check)
	defer tick.Stop()
	var lastSweep time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-a.snaps.kick:
		}
		a.SnapshotDue(ctx)
		if time.Since(lastSweep) >= sweepInterval {
			lastSweep = time.Now()
			if n, err := a.snaps.bucket.Sweep(ctx, sweepAge); err != nil && ctx.Err() == nil {
				a.log.Warn().Err(err).Msg("sweep the snapshot bucket")
			} else if n > 0 {
				a.log.Info().Int("uploads", n).Msg("removed chunks that interrupted snapshot uploads left behind")
			}
		}
	}
}

// ownedTask is an active, current, stateful task of this member.
type ownedTask struct {
	id      string
	epoch   uint64
	applied uint64
}

// ownedTasks lists the tasks this member may snapshot.
func (a *Agent) ownedTasks() []ownedTask {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []ownedTask
	for _, id := range slices.Sorted(maps.Keys(a.tasks)) {
		t := a.tasks[id]
		t.mu.Lock()
		if t.stateful && t.phase == phaseActive {
			out = append(out, ownedTask{id: id, epoch: t.epoch, applied: t.applied.Load()})
		}
		t.mu.Unlock()
	}
	return out
}

// SnapshotDue takes a snapshot of every task this member owns that is due
// for one (see SnapshotOptions), one after the other, and returns how many
// it stored. Failures are logged and retried later with a backoff. The
// snapshot loop calls it; tests may call it directly.
func (a *Agent) SnapshotDue(ctx context.Context) int {
	s := a.snaps
	owned := a.ownedTasks()
	if len(owned) == 0 {
		return 0
	}
	if err := a.refreshSnapshots(ctx, owned); err != nil {
		if ctx.Err() == nil {
			a.log.Warn().Err(err).Msg("list snapshots")
		}
		return 0
	}
	now := time.Now()
	var due []string
	s.mu.Lock()
	for _, o := range owned {
		st := s.stateLocked(o.id, o.epoch)
		switch {
		case now.Before(st.retry), o.applied <= st.seq:
		case st.commits >= s.opts.Every, now.Sub(st.at) >= s.opts.Interval:
			due = append(due, o.id)
		}
	}
	s.mu.Unlock()
	taken := 0
	for _, id := range due {
		if ctx.Err() != nil {
			break
		}
		if _, err := a.Snapshot(ctx, id); err == nil {
			taken++
		}
	}
	return taken
}

// refreshSnapshots reads the newest snapshot of the owned tasks this
// member knows nothing of yet (newly owned ones), with one listing.
func (a *Agent) refreshSnapshots(ctx context.Context, owned []ownedTask) error {
	s := a.snaps
	s.mu.Lock()
	var unknown []ownedTask
	for _, o := range owned {
		if !s.stateLocked(o.id, o.epoch).known {
			unknown = append(unknown, o)
		}
	}
	s.mu.Unlock()
	if len(unknown) == 0 {
		return nil
	}
	all, err := s.bucket.ListAll(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range unknown {
		st := s.stateLocked(o.id, o.epoch)
		st.known, st.at = true, now
		if snaps := all[o.id]; len(snaps) > 0 {
			st.seq, st.at = snaps[0].Seq, snaps[0].Created
		}
	}
	return nil
}

// Snapshot stores a snapshot of task now, if this member is its active
// owner and the newest snapshot is not already current, then trims the
// changelog and prunes older snapshots. It returns the task's newest
// snapshot. The upload runs in the caller's goroutine; commits go on.
func (a *Agent) Snapshot(ctx context.Context, task string) (snapshot.Info, error) {
	var epoch uint64
	owned := false
	for _, o := range a.ownedTasks() {
		if o.id == task {
			epoch, owned = o.epoch, true
		}
	}
	if !owned {
		return snapshot.Info{}, fmt.Errorf("snapshot task %s: not an active stateful task of member %s", task, a.opts.MemberID)
	}
	s := a.snaps
	s.mu.Lock()
	st := s.stateLocked(task, epoch)
	before := st.commits
	st.commits = 0 // commits from now on count towards the next one
	s.mu.Unlock()

	start := time.Now()
	taken, err := local.Take(ctx, s.bucket, a.store, a.clog, task, snapshot.Retention{Keep: s.opts.Keep, Margin: s.opts.Margin})
	s.mu.Lock()
	defer s.mu.Unlock()
	st = s.stateLocked(task, epoch)
	switch {
	case err == nil || errors.Is(err, local.ErrUpToDate):
		st.known, st.seq, st.at = true, taken.Info.Seq, taken.Info.Created
		st.fails, st.retry = 0, time.Time{}
		if err != nil {
			return taken.Info, nil
		}
		a.log.Info().Str(fTask, task).Uint64(fSeq, taken.Info.Seq).Uint64("keys", taken.Info.Keys).
			Uint64("bytes", taken.Info.Size).Dur("upload", taken.Upload).Dur("took", time.Since(start)).
			Uint64("purgedBelow", taken.Trim.PurgedBelow).Int("deleted", len(taken.Trim.Deleted)).Msg("snapshot stored")
		return taken.Info, nil
	case taken.Info.Seq > 0:
		// Stored, but the trim failed: the next snapshot trims.
		st.known, st.seq, st.at = true, taken.Info.Seq, taken.Info.Created
		a.log.Warn().Err(err).Str(fTask, task).Uint64(fSeq, taken.Info.Seq).Msg("snapshot stored; trimming the changelog failed")
		return taken.Info, nil
	default:
		st.commits += before
		st.fails++
		backoff := min(time.Duration(1<<min(st.fails, 10))*time.Second, maxSnapshotBackoff)
		st.retry = time.Now().Add(backoff)
		if ctx.Err() == nil {
			a.log.Warn().Err(err).Str(fTask, task).Dur("retryIn", backoff).Msg("snapshot failed; the previous one stays in use")
		}
		return snapshot.Info{}, err
	}
}
