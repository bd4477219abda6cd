package agent

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
)

// DefaultWorkerTimeout is how long a worker may stay detached before its
// agent declares it lost, when Options.WorkerTimeout is zero. It covers an
// in-place restart of a crashed worker (docs/operations.md says why).
const DefaultWorkerTimeout = 30 * time.Second

// workerWatch is what the agent knows of the worker next to it, as the
// worker API reports it. It is guarded by the agent's mu.
type workerWatch struct {
	state assign.WorkerState // "" when the member requires no worker
	// since is, for a detached or lost worker, when its last poll ended
	// (or when the agent started, if no worker has attached yet).
	since time.Time
	kick  chan struct{} // wakes runWorkerWatch when the state changes
}

// newWorkerWatch returns the watch of an agent started at start: detached
// since then if it requires a worker, untracked if not.
func newWorkerWatch(required bool, start time.Time) workerWatch {
	w := workerWatch{kick: make(chan struct{}, 1)}
	if required {
		w.state, w.since = assign.WorkerDetached, start
	}
	return w
}

// WorkerAttached implements httpapi.WorkerObserver: the worker polls
// again. A worker that was lost gets back the tasks its agent released for
// it that the group has not moved yet (not planned yet, or nowhere else to
// go): they are still this member's at the same epoch, so it serves them
// again. If the leader moves one anyway, on the release it saw, the new
// owner's fenced epoch marker finds the commits made meanwhile and replays
// them: nothing acknowledged is lost.
func (a *Agent) WorkerAttached(time.Time) {
	if !a.opts.RequireWorker {
		return
	}
	a.mu.Lock()
	prev := a.worker.state
	a.worker.state, a.worker.since = assign.WorkerAttached, time.Time{}
	var resumed []string
	for _, id := range slices.Sorted(maps.Keys(a.tasks)) {
		t := a.tasks[id]
		t.mu.Lock()
		switch {
		case !t.forWorker:
		case t.revoke == nil && a.apply(t, change{ev: evResume}):
			resumed = append(resumed, id)
		default:
			a.apply(t, change{ev: evWorkerBack})
		}
		t.mu.Unlock()
	}
	a.metrics.setWorkerState(assign.WorkerAttached)
	a.mu.Unlock()
	a.kickHeartbeat()
	a.kickWorkerWatch()
	if prev != assign.WorkerAttached {
		a.log.Info().Str(fWorker, string(prev)).Strs("resumed", resumed).Msg("worker attached")
	}
}

// WorkerDetached implements httpapi.WorkerObserver: the worker has not
// polled since since, the grace included. It keeps its active tasks until
// the worker timeout has passed from since.
func (a *Agent) WorkerDetached(since time.Time) {
	if !a.opts.RequireWorker {
		return
	}
	a.mu.Lock()
	if a.worker.state != assign.WorkerAttached {
		a.mu.Unlock()
		return
	}
	a.worker.state, a.worker.since = assign.WorkerDetached, since
	a.metrics.setWorkerState(assign.WorkerDetached)
	a.mu.Unlock()
	a.kickHeartbeat()
	a.kickWorkerWatch()
	a.log.Warn().Str("since", stamp(since)).Dur("timeout", a.workerTimeout()).
		Msg("worker detached: it has not polled /assignment; it keeps its tasks until the worker timeout")
}

func (a *Agent) kickWorkerWatch() {
	select {
	case a.worker.kick <- struct{}{}:
	default:
	}
}

func (a *Agent) workerTimeout() time.Duration {
	if a.opts.WorkerTimeout > 0 {
		return a.opts.WorkerTimeout
	}
	return DefaultWorkerTimeout
}

// runWorkerWatch declares the worker lost once it has been detached for the
// worker timeout (CheckWorker), until ctx ends.
func (a *Agent) runWorkerWatch(ctx context.Context) error {
	if !a.opts.RequireWorker {
		return nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		a.mu.Lock()
		state, since := a.worker.state, a.worker.since
		a.mu.Unlock()
		timer.Stop()
		var due <-chan time.Time
		if state == assign.WorkerDetached {
			timer.Reset(time.Until(since.Add(a.workerTimeout())))
			due = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.worker.kick:
		case now := <-due:
			a.CheckWorker(now)
		}
	}
}

// CheckWorker declares the worker lost if, at now, it has been detached for
// the worker timeout. The agent then releases each active task on the
// worker's behalf at the last commit it acknowledged (a commit in flight
// finishes first), refuses every later commit, and publishes its record
// with the worker lost and the releases, so that the leader moves the
// tasks at once. The local copies stay. A task still becoming active is
// not released (the worker never served it at its epoch); the leader
// moves it all the same. CheckWorker reports whether it declared the
// worker lost.
func (a *Agent) CheckWorker(now time.Time) bool {
	a.mu.Lock()
	due := a.worker.state == assign.WorkerDetached && !now.Before(a.worker.since.Add(a.workerTimeout()))
	var actives []*task
	if due {
		for _, id := range slices.Sorted(maps.Keys(a.tasks)) {
			if a.tasks[id].state().phase == phaseActive {
				actives = append(actives, a.tasks[id])
			}
		}
	}
	a.mu.Unlock()
	if !due {
		return false
	}
	l := a.lockTasks(true, actives...)
	defer l.unlock()
	if a.worker.state != assign.WorkerDetached { // attached again meanwhile
		return false
	}
	var released []string
	for _, t := range actives {
		r := &assign.Release{Epoch: t.epoch, Seq: t.lastSeq, At: now, Generation: a.generation}
		if a.tasks[t.id] == t && t.phase == phaseActive && a.apply(t, change{ev: evRelease, release: r, forWorker: true}) {
			released = append(released, t.id)
		}
	}
	a.worker.state = assign.WorkerLost
	since := a.worker.since
	a.metrics.setWorkerState(assign.WorkerLost)
	a.metrics.workerLostTasks.Add(float64(len(released)))
	a.bumpViewLocked()
	l.unlock()
	a.kickHeartbeat()
	a.log.Warn().Str("since", stamp(since)).Strs("released", released).
		Msg("worker lost: released its active tasks on its behalf; the group moves them")
	return true
}
