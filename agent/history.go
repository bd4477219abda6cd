package agent

import (
	"slices"
	"time"

	"github.com/handoffhq/handoff/restore"
)

// lostRetry is how often an activation refused for lost state looks again,
// in case the changelog or a snapshot was restored meanwhile.
const lostRetry = 30 * time.Second

// taskHistory returns what the group's records say of task id's past when
// this member activates it at epoch: every earlier epoch had an owner,
// which appended its epoch marker, and handoffSeq is the last commit of the
// owner it takes over from. A task the operator accepts the loss of has
// none (Options.AcceptStateLoss).
func (a *Agent) taskHistory(id string, epoch, handoffSeq uint64) restore.History {
	if slices.Contains(a.opts.AcceptStateLoss, id) {
		return restore.History{}
	}
	h := restore.History{Seq: handoffSeq}
	if epoch > 1 {
		h.Epoch = epoch - 1
	}
	return h
}

// stateLost reports an activation refused because the task's state is
// nowhere to be found (restore.ErrLost).
func (a *Agent) stateLost(t *task, epoch uint64, err error) {
	a.metrics.restoreRefused.Inc()
	a.log.Error().Err(err).Str(fTask, t.id).Uint64(fEpoch, epoch).
		Msg("task state is lost: not activating it; restore its changelog or a snapshot, or accept the loss (--accept-state-loss) to start it empty")
}
