package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
)

// The hand-off of a revoked task, on both sides. A revoke that names the
// epoch its target takes asks for a direct hand-off: the old owner's agent
// appends a release entry that names the successor and that epoch, fenced
// on the task's last sequence, and the successor's tailer, which sees it
// within moments, makes the successor the owner at once; a stateless task,
// which has no changelog, is handed over with a message to the successor.
// The leader learns of the hand-off from the member records afterwards and
// records it in a generation; it is not on the pause's path. Other releases
// (a revoke to nobody, one from an older leader, a release for a lost
// worker) go through the leader: the member record carries the release and
// the leader promotes the target, which appends its epoch marker.
// docs/ARCHITECTURE.md argues why this is safe.

// releaseAttempts bounds the appends of one release entry whose
// acknowledgement was lost and that did not land.
const releaseAttempts = 3

// staleDelivery is how long after it was stored a release entry may be
// taken over from for the successor to trust that nothing followed it (the
// pending count the server sent with it). Later (the process was paused
// before the entry was delivered, or after and before it was applied, or
// the clocks disagree), the successor asks the server first.
const staleDelivery = time.Second

// Release implements httpapi.Backend: the worker stopped a revoked task.
// From now on this member refuses the task's commits. It waits for a
// commit in flight. Under a revoke that asks for a direct hand-off the
// release entry is in the changelog when Release returns; nothing is
// released when it returns an error.
func (a *Agent) Release(ctx context.Context, id string, epoch uint64) (api.ReleaseResult, error) {
	received := time.Now()
	t, _, err := a.activeTask(id)
	if err != nil {
		return api.ReleaseResult{}, err
	}
	// The commit lock waits for a commit in flight; a.mu is held too, so
	// that the release is stamped with the generation whose revoke it
	// answers: none can be applied in between.
	l := a.lockTasks(true, t)
	defer l.unlock()
	if epoch != 0 && epoch != t.epoch {
		return api.ReleaseResult{}, fmt.Errorf("%w: release of task %s at epoch %d, but it is at epoch %d on member %s; a worker releases only the ownership it ran", api.ErrNotOwner, id, epoch, t.epoch, a.opts.MemberID)
	}
	if !t.phase.owned() || t.revoke == nil {
		return api.ReleaseResult{}, fmt.Errorf("%w: task %s is not being revoked on member %s; release only the tasks /assignment lists under revoke", api.ErrNotRevoked, id, a.opts.MemberID)
	}
	res := api.ReleaseResult{Task: id, Epoch: t.epoch, Seq: t.lastSeq}
	if t.phase == phaseReleased {
		return res, nil
	}
	if t.phase != phaseActive && t.phase != phaseActivating {
		// A commit that held commitMu before us found the task taken
		// over (its append was fenced): this member may not release it.
		return api.ReleaseResult{}, fmt.Errorf("%w: task %s is %s on member %s, not active: it cannot be released now; read /assignment", api.ErrNotOwner, id, t.phase, a.opts.MemberID)
	}
	rv := *t.revoke
	rel := &assign.Release{Epoch: t.epoch, Seq: t.lastSeq, Generation: a.generation}
	why := throughLeader(rv, t.phase)
	direct := why == ""
	if !direct || !t.stateful {
		if direct {
			rel.To, rel.ToEpoch = rv.target, rv.epoch
		}
		rel.At = time.Now()
		a.apply(t, change{ev: evRelease, release: rel})
		l.unlock()
		if direct {
			a.sendHandoff(id, rv, rel.At)
		}
		a.log.Info().Str(fTask, id).Uint64(fEpoch, res.Epoch).Uint64(fSeq, res.Seq).Str("to", rel.To).
			Bool(fDirect, direct).Str(fWhy, why).Str(fReceived, stamp(received)).Msg(logTaskReleased)
		return res, nil
	}
	l.unlockState()

	// The release entry, appended under the commit lock only: a
	// generation may be applied meanwhile, but no commit.
	seq, err := a.appendRelease(ctx, t, rv, res.Epoch)
	if err != nil {
		return api.ReleaseResult{}, err
	}
	appended := time.Now()
	if a.afterReleaseAppend != nil {
		a.afterReleaseAppend()
	}
	// The entry is not applied to this member's store: it holds no data,
	// and the store takes it like any other entry if this member tails or
	// owns the task again.
	t.lastSeq = seq
	rel.Seq, rel.At, rel.To, rel.ToEpoch = seq, appended, rv.target, rv.epoch
	l.lockState()
	if !a.apply(t, change{ev: evRelease, release: rel}) {
		// A generation dropped the task while the entry was appended: the
		// entry stands, and the member record says so.
		a.apply(t, change{ev: evReleaseStands, release: rel})
	}
	l.unlock()
	a.log.Info().Str(fTask, id).Uint64(fEpoch, res.Epoch).Uint64(fSeq, res.Seq).Str("to", rv.target).
		Uint64("toEpoch", rv.epoch).Uint64("releaseSeq", seq).Bool(fDirect, true).
		Str(fReceived, stamp(received)).Str(fAppended, stamp(appended)).Msg(logTaskReleased)
	return res, nil
}

// throughLeader says why the release of a task in phase p under revoke rv
// goes through the leader, or "" when it is handed over directly.
func throughLeader(rv revokeOrder, p taskPhase) string {
	switch {
	case rv.target == "":
		return "revoked to nobody"
	case rv.epoch == 0:
		return "the revoke asks for no direct hand-off"
	case p != phaseActive:
		return "the task was still becoming active"
	}
	return ""
}

// appendRelease appends t's release entry for revoke rv, fenced on the
// last sequence this owner appended or applied, and returns its sequence.
// When an append's acknowledgement is lost, the message after that
// sequence tells whether it landed. An entry that another writer's message
// precedes cannot land: the task is then lost here at epoch. Callers hold
// t.commitMu.
func (a *Agent) appendRelease(ctx context.Context, t *task, rv revokeOrder, epoch uint64) (uint64, error) {
	e := changelog.Entry{Kind: changelog.KindRelease, Epoch: rv.epoch, Successor: rv.target}
	var err error
	for attempt := 0; attempt < releaseAttempts && ctx.Err() == nil; attempt++ {
		var seq uint64
		if seq, err = a.clog.Append(ctx, t.id, t.lastSeq, e); err == nil {
			return seq, nil
		}
		next, ok, rerr := a.clog.After(ctx, t.id, t.lastSeq)
		switch {
		case rerr != nil:
			err = rerr
			continue
		case !ok:
			continue // nothing landed: append again
		case next.Entry.Kind == changelog.KindRelease && next.Entry.Successor == rv.target && next.Entry.Epoch == rv.epoch:
			return next.Seq, nil // an earlier attempt landed
		default:
			return 0, a.fencedCommit(ctx, t, epoch, t.state().cache)
		}
	}
	return 0, fmt.Errorf("%w: append the release entry of task %s: %w; nothing was released: retry the release", api.ErrUnavailable, t.id, err)
}

// sendHandoff tells the target of a stateless task's revoke that it owns
// the task now. A lost message costs the leader's round trip, not the
// task: the member record carries the release.
func (a *Agent) sendHandoff(id string, rv revokeOrder, at time.Time) {
	h := group.Handoff{Task: id, Epoch: rv.epoch, From: a.opts.MemberID, At: at}
	if err := group.PublishHandoff(a.nc, a.opts.Group, rv.target, h); err != nil {
		a.log.Warn().Err(err).Str(fTask, id).Str("to", rv.target).Msg("tell the successor of its hand-off; the leader will")
	}
}

// takeOver makes this member the owner of t from a release entry that
// names it, which a restore of t's changelog stopped at (restore.AtRelease)
// with everything before it applied, and reports whether it did. It runs on
// the goroutine of t's job: its tailer's, or an activation's at the entry's
// epoch that met the entry (the leader recorded the hand-off before the
// tailer saw it), which then appends no marker. A release entry that is not
// the last message of the subject is left to the group: whoever wrote after
// it owns the task at a later epoch. Once the task is this member's, the
// entry is applied to its store.
func (a *Agent) takeOver(t *task, rel restore.Release) bool {
	if rel.Successor != a.opts.MemberID {
		return false
	}
	seen := time.Now()
	if !rel.Last {
		a.log.Warn().Str(fTask, t.id).Uint64(fSeq, rel.Seq).Uint64(fEpoch, rel.Epoch).
			Msg("a release entry names this member but later messages follow it; not taking the task over")
		return false
	}
	if (!a.sessionLive() || seen.Sub(rel.Stored) > staleDelivery) && !a.stillLast(t.id, rel.Seq) {
		// The entry is taken over long after it was stored (its delivery
		// or its turn in the tailer came late: a pause), or while this
		// member's session may have lapsed: its pending count is old, and
		// the group may have moved on since.
		a.log.Warn().Str(fTask, t.id).Uint64(fSeq, rel.Seq).Uint64(fEpoch, rel.Epoch).
			Msg("a release entry names this member, but this member's session may have lapsed and later messages follow it; not taking the task over")
		return false
	}
	l := a.lockTasks(true, t)
	from := t.phase.tailing() && rel.Epoch > t.epoch || t.phase == phaseActivating && rel.Epoch == t.epoch
	ok := t.stateful && from &&
		a.apply(t, change{ev: evTakeOver, epoch: rel.Epoch, seq: rel.Seq,
			takeover: &assign.Takeover{Epoch: rel.Epoch, Seq: rel.Seq, At: rel.Stored}})
	l.unlock() // the worker's view is bumped: its long-poll should not wait for the log
	if !ok {
		return false
	}
	a.metrics.handoffPause.Observe(time.Since(rel.Stored).Seconds())
	a.log.Info().Str(fTask, t.id).Uint64(fEpoch, rel.Epoch).Uint64(fSeq, rel.Seq).
		Str(fStored, stamp(rel.Stored)).Str(fReceived, stamp(rel.Received)).Str(fSeen, stamp(seen)).Msg(logTaskTakenOver)
	// The entry itself holds no data: the store may take it after the new
	// owner's first commit (fenced on it), which then skips it.
	if err := a.applyRelease(t, rel); err != nil {
		a.log.Warn().Err(err).Str(fTask, t.id).Msg("the new owner's first commit moves the store's epoch on")
	}
	return true
}

// stillLast reports whether seq is still the last message of task's
// subject, asking the server.
func (a *Agent) stillLast(task string, seq uint64) bool {
	ctx, cancel := context.WithTimeout(a.bgCtx, 5*time.Second)
	defer cancel()
	last, err := a.tails.log.Last(ctx, task)
	return err == nil && last == seq
}

// takeOverStateless makes this member the owner of the stateless task a
// hand-off message names, unless it owns it already or the message is
// stale. A message that came while this member's session may have lapsed
// is ignored: the leader hands the task over from the release it recorded,
// or has moved it elsewhere.
func (a *Agent) takeOverStateless(h group.Handoff) {
	seen := time.Now()
	if stateful, ok := a.taskKind(h.Task); !ok || stateful || h.Epoch == 0 || !a.sessionLive() {
		return
	}
	a.mu.Lock()
	t := a.taskLocked(h.Task)
	a.mu.Unlock()
	l := a.lockTasks(true, t)
	ok := h.Epoch > t.epoch && a.apply(t, change{ev: evTakeOver, epoch: h.Epoch,
		takeover: &assign.Takeover{Epoch: h.Epoch, At: h.At}})
	l.unlock()
	if !ok {
		return
	}
	a.metrics.handoffPause.Observe(time.Since(h.At).Seconds())
	a.log.Info().Str(fTask, h.Task).Uint64(fEpoch, h.Epoch).Str("from", h.From).
		Str(fStored, stamp(h.At)).Str(fSeen, stamp(seen)).Msg(logTaskTakenOver)
}

// runHandoffs takes over the stateless tasks handed over to this member,
// until ctx ends.
func (a *Agent) runHandoffs(ctx context.Context) error {
	stop, err := group.WatchHandoffs(a.nc, a.opts.Group, a.opts.MemberID, a.takeOverStateless)
	if err != nil {
		return err
	}
	<-ctx.Done()
	stop()
	return nil
}
