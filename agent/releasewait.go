package agent

import (
	"context"
	"time"

	"github.com/handoffhq/handoff/agent/group"
)

// successorWait bounds how long the worker's view keeps a direct revoke
// of a stateful task from it while the successor has not reported its
// copy current: a successor that is slow to report (busy, paused, dead)
// delays the move by that much at most, never the pause.
const successorWait = 250 * time.Millisecond

// revokeDueLocked reports whether the worker's view lists t's revoke. A
// direct revoke of a stateful task is listed once its successor reports
// its copy current (lag 0), or successorWait after this member applied
// the revoke: until then the old owner goes on processing, and the
// successor's tailer applies what it still lacks, so that when the
// release entry comes it has nothing left to apply before it. Other
// revokes are listed at once. Callers hold a.mu and t.mu.
func (a *Agent) revokeDueLocked(t *task) bool {
	rv := t.revoke
	if !t.stateful || rv.target == "" || rv.epoch == 0 || time.Since(rv.since) >= successorWait {
		return true
	}
	return a.progress.current(t.id, rv.target)
}

// revokeApplied notes that this member applied a new revoke: the worker's
// view is bumped once successorWait has passed (waitSuccessor), in case no
// report says the successor is current before. It runs inside apply, under
// a.mu: like a task's job, the wait is owned by the agent's bg group, none
// starts once the agent stopped, and stopping it ends and waits for the
// waits (stopAllTasks).
func (a *Agent) revokeApplied(rv *revokeOrder) {
	rv.since = time.Now()
	a.lastRevoke.Store(rv.since.UnixNano())
	a.kickProgress() // hear the successor (followProgress)
	if a.bgCtx.Err() != nil {
		return
	}
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		a.waitSuccessor(a.bgCtx)
	}()
}

// waitSuccessor bumps the worker's view once successorWait has passed,
// unless ctx ends first (the agent stopped).
func (a *Agent) waitSuccessor(ctx context.Context) {
	t := time.NewTimer(successorWait)
	defer t.Stop()
	select {
	case <-t.C:
		a.viewChanged()
	case <-ctx.Done():
	}
}

// successorReported bumps the worker's view when p says that a task this
// member is revoking to p's member is current there. It runs for every
// report of the group: only those of a current copy that come within
// successorWait of a revoke here take a.mu.
func (a *Agent) successorReported(p group.Progress) {
	if p.Lag != 0 || time.Since(time.Unix(0, a.lastRevoke.Load())) > successorWait {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.tasks[p.Task]
	if !ok {
		return
	}
	t.mu.Lock()
	waiting := t.revoke != nil && t.revoke.target == p.Member
	t.mu.Unlock()
	if waiting {
		a.bumpViewLocked()
	}
}

// current reports whether member's latest report of task says its copy is
// current.
func (b *progressBook) current(task, member string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.byTask[task][member]
	return ok && p.Lag == 0
}
