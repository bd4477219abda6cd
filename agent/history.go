package agent

import (
	"context"
	"slices"
	"time"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/restore"
)

// lostRetry is how often an activation refused for lost state looks again,
// in case the changelog or a snapshot was restored meanwhile.
const lostRetry = 30 * time.Second

// taskHistory returns what the group's records say of task id's past when
// this member activates it at epoch: every earlier epoch had an owner,
// which appended its epoch marker; handoffSeq is the last commit of the
// owner it takes over from; and the task's committed record says whether a
// worker ever committed to it (at epoch 1 too). The record is read only
// when the local store holds nothing of the task and nothing else shows a
// past: a copy, or an earlier epoch, decides without it. A read that fails
// is retried until ctx ends. A task the operator accepts the loss of has no
// history (Options.AcceptStateLoss).
func (a *Agent) taskHistory(ctx context.Context, id string, epoch, handoffSeq uint64) restore.History {
	if slices.Contains(a.opts.AcceptStateLoss, id) {
		return restore.History{}
	}
	h := restore.History{Seq: handoffSeq, Current: epoch}
	if epoch > 1 {
		h.Epoch = epoch - 1
	}
	if h.Known() {
		return h
	}
	if meta, _, err := a.store.Meta(id); err == nil && meta.Applied > 0 {
		return h
	}
	for ctx.Err() == nil {
		_, ok, err := group.ReadCommitted(ctx, a.kv, id)
		if err == nil {
			if ok {
				a.committed.Store(id, true)
			}
			h.Committed = ok
			return h
		}
		a.log.Warn().Err(err).Str(fTask, id).Msg("read whether the task has commits before activating it; retrying")
		group.Sleep(ctx, time.Second)
	}
	return h
}

// recordCommitted makes sure the group records that task id has commits
// before this member appends its first commit of it (once per task and
// process): a changelog purged whole together with the local copy then
// makes the task lost, not empty, at its first epoch too.
func (a *Agent) recordCommitted(ctx context.Context, id string, epoch uint64) error {
	if _, ok := a.committed.Load(id); ok {
		return nil
	}
	r := group.CommittedRecord{Member: a.opts.MemberID, Epoch: epoch, At: time.Now().UTC()}
	if err := group.RecordCommitted(ctx, a.kv, id, r); err != nil {
		return err
	}
	a.committed.Store(id, true)
	return nil
}

// stateLost reports an activation refused because the task's state is
// nowhere to be found (restore.ErrLost).
func (a *Agent) stateLost(t *task, epoch uint64, err error) {
	a.metrics.restoreRefused.Inc()
	a.log.Error().Err(err).Str(fTask, t.id).Uint64(fEpoch, epoch).
		Msg("task state is lost: not activating it; restore its changelog or a snapshot, or accept the loss (--accept-state-loss) to start it empty")
}
