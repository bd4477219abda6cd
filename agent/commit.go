package agent

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
)

// taskState is a copy of a task's state, read under its lock.
type taskState struct {
	phase    taskPhase
	epoch    uint64
	revoking bool
	cache    *recordCache // nil unless active, or with the caches off
}

func (t *task) state() taskState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return taskState{phase: t.phase, epoch: t.epoch, revoking: t.revoke != nil, cache: t.cache}
}

// activeTask returns the runtime of a task the worker may use and a copy
// of its state, or an error that says why it may not. It holds no lock.
func (a *Agent) activeTask(id string) (*task, taskState, error) {
	if _, ok := a.taskKind(id); !ok {
		return nil, taskState{}, fmt.Errorf("%w: task %s is not in group %s; the group's tasks are in /group", api.ErrUnknownTask, id, a.opts.Group)
	}
	a.mu.Lock()
	t := a.tasks[id]
	a.mu.Unlock()
	if t == nil {
		return nil, taskState{}, fmt.Errorf("%w: task %s is not assigned to member %s; read /assignment", api.ErrNotOwner, id, a.opts.MemberID)
	}
	st := t.state()
	switch {
	case !st.phase.owned():
		role := st.phase.role()
		if role == "" {
			role = "not assigned here"
		}
		return nil, st, fmt.Errorf("%w: task %s is not active on member %s (%s); read /assignment", api.ErrNotOwner, id, a.opts.MemberID, role)
	case st.phase == phaseLost:
		return nil, st, fmt.Errorf("%w: task %s was taken over by another member; stop it and read /assignment", api.ErrNotOwner, id)
	case st.phase == phaseActivating:
		return nil, st, fmt.Errorf("%w: task %s is becoming active on member %s and is not current yet; wait for /assignment to list it active", api.ErrNotOwner, id, a.opts.MemberID)
	}
	return t, st, nil
}

// committable returns the task a commit may go to: its active owner here.
// A task becoming active again because its store missed a commit on a
// full disk waits for space: its commits are refused as the full disk's
// are (503), not as a task owned elsewhere's.
func (a *Agent) committable(id string) (*task, taskState, error) {
	t, st, err := a.activeTask(id)
	if err != nil && st.phase == phaseActivating {
		if werr := a.store.Writable(); werr != nil {
			return nil, st, fmt.Errorf("%w: the local store of member %s takes no writes (%w); task %s becomes active again once it does: retry once /readyz answers ready", api.ErrUnavailable, a.opts.MemberID, werr, id)
		}
	}
	return t, st, err
}

// Commit implements httpapi.Backend: fenced append, then apply, then
// acknowledge. Commits of one task are serialized by its commit lock; its
// state lock is held only to read the state, so views, generations and
// other tasks never wait on an append.
func (a *Agent) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	t, _, err := a.committable(id)
	if err != nil {
		return api.CommitResult{}, err
	}
	t.commitMu.Lock()
	defer t.commitMu.Unlock()
	// Read the state again under the commit lock: a release may have
	// happened while this commit waited for the one before it.
	t, st, err := a.committable(id)
	if err != nil {
		return api.CommitResult{}, err
	}
	switch {
	case !t.stateful:
		return api.CommitResult{}, fmt.Errorf("%w: task %s is stateless: it has no state to commit", api.ErrInvalid, id)
	case st.phase == phaseReleased:
		return api.CommitResult{}, fmt.Errorf("%w: task %s was released on member %s; its next owner resumes it", api.ErrNotOwner, id, a.opts.MemberID)
	case req.Epoch != 0 && req.Epoch != st.epoch:
		return api.CommitResult{}, fmt.Errorf("%w: commit for epoch %d, but task %s is at epoch %d here; restart the task from /assignment", api.ErrNotOwner, req.Epoch, id, st.epoch)
	}
	if err := a.store.Writable(); err != nil {
		// Refused before the append: nothing is in the changelog.
		return api.CommitResult{}, fmt.Errorf("%w: the local store of member %s takes no writes (%w); nothing was written: retry once /readyz answers ready", api.ErrUnavailable, a.opts.MemberID, err)
	}
	if err := a.recordCommitted(ctx, id, st.epoch); err != nil {
		return api.CommitResult{}, fmt.Errorf("%w: %w; nothing was written: retry", api.ErrUnavailable, err)
	}
	e := changelog.Entry{Kind: changelog.KindCommit, Epoch: st.epoch, Checkpoint: req.Checkpoint, Deletes: req.Deletes, Puts: changelogPuts(req.Puts)}
	t0 := time.Now()
	seq, err := a.clog.Append(ctx, id, t.lastSeq, e)
	switch {
	case errors.Is(err, changelog.ErrFenced):
		return api.CommitResult{}, a.fencedCommit(ctx, t, st.epoch, st.cache)
	case errors.Is(err, changelog.ErrTooLarge):
		return api.CommitResult{}, fmt.Errorf("%w: %w; split the commit", api.ErrTooLarge, err)
	case err != nil:
		return api.CommitResult{}, fmt.Errorf("%w: append to the changelog of %s: %w; the commit may or may not have landed: retry it (if it landed, the retry is refused with 409 resume)", api.ErrUnavailable, id, err)
	}
	t.lastSeq = seq
	if err := a.applyCommit(id, st.cache, e, seq); err != nil {
		// The commit is durable in the changelog but the local copy missed
		// it: stop serving until an activation has replayed it.
		a.log.Error().Err(err).Str(fTask, id).Uint64(fSeq, seq).Msg("apply a commit that is in the changelog; activating the task again")
		a.reactivate(t, st.epoch)
		return api.CommitResult{}, fmt.Errorf("%w: commit %d of %s is in the changelog but was not applied locally (%w); the agent replays it: don't retry the commit, restart the task from the checkpoint in /assignment once it is active again", api.ErrResume, seq, id, err)
	}
	t.applied.Store(seq)
	a.incoming.done(id) // a hand-off to this member ends with its first commit
	a.snapshotCommitted(id, st.epoch)
	a.metrics.commits.Inc()
	a.metrics.commitRecords.Add(float64(len(req.Puts) + len(req.Deletes)))
	a.metrics.commitSeconds.Observe(time.Since(t0).Seconds())
	return api.CommitResult{Task: id, Seq: seq, Epoch: st.epoch}, nil
}

// The worker's puts and the changelog's are the same struct but for its
// field tags, which a conversion ignores: this one compiles only while
// that holds.
var _ = changelog.KV(api.KV{})

// changelogPuts returns puts as the changelog's (and the store's) KV, in
// the same memory: the two types are the same struct but for their tags
// (checked above), so they have one layout.
func changelogPuts(puts []api.KV) []changelog.KV {
	if len(puts) == 0 {
		return nil
	}
	return unsafe.Slice((*changelog.KV)(unsafe.Pointer(unsafe.SliceData(puts))), len(puts))
}

// applyCommit applies a commit of the task's own, appended at seq, to the
// local store and to the task's record cache c (nil: none), in one critical
// section of the cache: no read of the task sees the store and the cache
// disagree. Callers hold the task's commitMu.
func (a *Agent) applyCommit(id string, c *recordCache, e changelog.Entry, seq uint64) error {
	if c == nil {
		return a.store.Apply(id, restore.Commit(e, seq))
	}
	c.applying.Lock()
	defer c.applying.Unlock()
	if err := a.store.Apply(id, restore.Commit(e, seq)); err != nil {
		return err // the task activates again: its cache goes with its phase
	}
	c.update(e.Puts, e.Deletes)
	return nil
}

// reactivate runs the activation of t at epoch again, when its local copy
// missed a commit of its own that is in the changelog (the store failed to
// apply it): the activation replays it and appends a marker before the
// worker may use the task again, without waiting for a new generation.
// Callers may hold t.commitMu (the activation takes it only to finish).
func (a *Agent) reactivate(t *task, epoch uint64) {
	l := a.lockTasks(false, t)
	defer l.unlock()
	if t.epoch == epoch {
		a.apply(t, change{ev: evReactivate})
	}
}

// fencedCommit handles a commit whose append was fenced. Either another
// member took the task over (its epoch marker is in the changelog), or an
// earlier append of this owner landed although its acknowledgement was lost
// (a NATS restart or a timeout): then the store catches up with it and the
// worker is told to resume from the checkpoint, which includes it, so that
// nothing is applied twice. c is the task's record cache (nil: none): the
// catch-up may apply a commit of the owner's own that the cache never saw,
// so the cache starts afresh, and no read fills it meanwhile. Callers hold
// t.commitMu (only).
func (a *Agent) fencedCommit(ctx context.Context, t *task, epoch uint64, c *recordCache) error {
	if c != nil {
		c.applying.Lock()
	}
	err := a.catchUp(ctx, t)
	if c != nil {
		c.clear()
		c.applying.Unlock()
	}
	if err != nil {
		return fmt.Errorf("%w: commit of %s conflicted and the changelog could not be read (%w); retry", api.ErrUnavailable, t.id, err)
	}
	meta, _, err := a.store.Meta(t.id)
	if err != nil {
		return fmt.Errorf("%w: read meta of %s: %w", api.ErrUnavailable, t.id, err)
	}
	if meta.Epoch == epoch {
		t.lastSeq = meta.Applied
		t.applied.Store(meta.Applied)
		a.viewChanged()
		a.log.Warn().Str(fTask, t.id).Uint64(fSeq, meta.Applied).Msg("an earlier commit landed without its acknowledgement; the worker resumes from the checkpoint")
		return fmt.Errorf("%w: an earlier commit of task %s reached the changelog although its acknowledgement was lost; "+
			"nothing of this commit was applied: don't retry it, restart the task from the checkpoint in /assignment, which includes the earlier one", api.ErrResume, t.id)
	}
	a.lose(t, epoch)
	return fmt.Errorf("%w: task %s was taken over by another member (epoch %d replaced %d); stop it", api.ErrNotOwner, t.id, meta.Epoch, epoch)
}
