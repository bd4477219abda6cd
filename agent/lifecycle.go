package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
)

// taskPhase is where a task's runtime is in its lifecycle on this member.
// Whether the current generation revokes the task is a separate input
// (task.revoke): a revoke does not change what the member may do with the
// task until the worker releases it. The table transitions below is the
// lifecycle; docs/ARCHITECTURE.md ("The task lifecycle") draws it, and
// TestLifecycleDiagram keeps the drawing and the table in step.
//
// Activating, Active, Released and Lost are the worker API's role
// "active": the task is this member's at its epoch. Only Active (and
// Released, for reads) lets the worker use it; Released refuses commits.
// A release is the worker's (under revoke) or its agent's, for a worker
// lost (worker.go); resume undoes the latter when the worker comes back
// before the group moved the task. Take over is the successor's side of a
// direct hand-off (handoff.go): the previous owner's release entry named
// this member, so it owns the task at once, without an activation.
type taskPhase uint8

const (
	phaseGone       taskPhase = iota // not on this member (its local copy may stay)
	phaseLearner                     // tailing its changelog to take it over
	phaseStandby                     // tailing its changelog to take over on failure
	phaseActivating                  // owner at its epoch: catching up and appending the epoch marker
	phaseActive                      // owner and current: the worker may commit
	phaseReleased                    // the worker released it under revoke: commits are refused
	phaseLost                        // a fenced append showed that a newer owner has written
	numPhases
)

var phaseNames = [numPhases]string{"gone", "learner", "standby", "activating", "active", "released", "lost"}

func (p taskPhase) String() string {
	if p < numPhases {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// role is the phase as the worker API names the task's role ("" when the
// task is not on this member).
func (p taskPhase) role() string {
	switch p {
	case phaseLearner:
		return api.RoleLearner
	case phaseStandby:
		return api.RoleStandby
	case phaseActivating, phaseActive, phaseReleased, phaseLost:
		return api.RoleActive
	default:
		return ""
	}
}

// tailing reports whether the task is a learner or a standby here.
func (p taskPhase) tailing() bool { return p == phaseLearner || p == phaseStandby }

// owned reports whether this member owns the task at its epoch (in any
// state of that ownership).
func (p taskPhase) owned() bool { return p.role() == api.RoleActive }

// taskEvent is what happens to a task: most events move it from one phase
// to another, a few change what goes with its phase and leave the phase as
// it is.
type taskEvent uint8

const (
	evLearn         taskEvent = iota // a generation makes it a learner here
	evStandBy                        // a generation makes it a standby here
	evActivate                       // a generation gives it to this member at a new epoch (or again after it was lost)
	evReactivate                     // its copy missed a commit of its own: activate again at the same epoch
	evReady                          // the activation appended its epoch marker
	evRelease                        // the worker released it under revoke, or its agent did for its lost worker
	evCancelRevoke                   // the revoke was called off after a release through the leader: the worker serves it again
	evResume                         // the lost worker came back before the group moved the task: it serves it again
	evTakeOver                       // the previous owner's release entry named this member: it owns the task at once
	evLose                           // a fenced append showed a newer owner
	evDrop                           // a generation no longer places it here
	evKeep                           // a generation keeps it here at its epoch: it records a takeover, carries the revoke, keeps the releases it still waits for
	evReleaseStands                  // a release entry this member appended stands, though a generation moved the task meanwhile
	evWorkerBack                     // the lost worker polls again: no release is its agent's for it any more
	numEvents
)

var eventNames = [numEvents]string{"learn", "stand by", "activate", "reactivate", "ready", "release", "cancel revoke", "resume", "take over", "lose", "drop", "keep", "release stands", "worker back"}

func (e taskEvent) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

// phaseSame, as an event's "to", says that the event leaves the phase as
// it is.
const phaseSame = numPhases

// transitions is the task lifecycle: for each event, the phases it may
// happen in and the phase it leads to. An event in any other phase is
// illegal. What each event does besides is in apply.
var transitions = [numEvents]struct {
	from []taskPhase // nil: any phase
	to   taskPhase   // phaseSame: the phase stays
}{
	evLearn:      {nil, phaseLearner},
	evStandBy:    {nil, phaseStandby},
	evActivate:   {nil, phaseActivating},
	evReactivate: {[]taskPhase{phaseActivating, phaseActive}, phaseActivating},
	evReady:      {[]taskPhase{phaseActivating}, phaseActive},
	// A worker releases every task under revoke, including one whose
	// activation has not finished: it stays released once it does.
	evRelease:      {[]taskPhase{phaseActivating, phaseActive, phaseReleased}, phaseReleased},
	evCancelRevoke: {[]taskPhase{phaseReleased}, phaseActive},
	evResume:       {[]taskPhase{phaseReleased}, phaseActive},
	// A stateful task is taken over by its tailer, or by an activation at
	// the entry's epoch that meets the entry (its own catch-up's, or its
	// tailer's); a stateless one, which has no copy to tail, from wherever
	// it is not owned.
	evTakeOver: {[]taskPhase{phaseGone, phaseLearner, phaseStandby, phaseActivating}, phaseActive},
	evLose:     {[]taskPhase{phaseActivating, phaseActive}, phaseLost},
	evDrop:     {nil, phaseGone},
	evKeep:     {[]taskPhase{phaseActivating, phaseActive, phaseReleased}, phaseSame},
	// A release entry cannot be undone: if a generation moved the task
	// while its owner appended one, the member record carries it anyway.
	evReleaseStands: {[]taskPhase{phaseGone, phaseLearner, phaseStandby, phaseLost}, phaseSame},
	evWorkerBack:    {nil, phaseSame},
}

// next is the phase e leads to from p, or an error if e cannot happen in p.
func (p taskPhase) next(e taskEvent) (taskPhase, error) {
	if e >= numEvents || p >= numPhases {
		return p, fmt.Errorf("task lifecycle: unknown %v in %v", e, p)
	}
	tr := transitions[e]
	if tr.from != nil && !slices.Contains(tr.from, p) {
		return p, fmt.Errorf("task lifecycle: %v cannot happen to a task that is %v", e, p)
	}
	if tr.to == phaseSame {
		return p, nil
	}
	return tr.to, nil
}

// move applies e to t's phase, reporting whether it was legal; an illegal
// event leaves the phase as it is. Callers hold t.mu.
func (t *task) move(e taskEvent) bool {
	p, err := t.phase.next(e)
	if err != nil {
		return false
	}
	t.phase = p
	return true
}

// change is one event of a task's lifecycle with what the event carries.
type change struct {
	ev taskEvent
	// epoch: the ownership that activate and take over start.
	epoch uint64
	// revoke: the generation's revoke of the task that activate and keep
	// carry.
	revoke *revokeOrder
	// handoffSeq and handoffAt: the previous owner's last commit and its
	// release, that activate waits for and measures the pause from.
	handoffSeq uint64
	handoffAt  time.Time
	// seq: where the owner's appends continue after ready and take over.
	seq uint64
	// release: what the member record says of a release (release, keep,
	// release stands).
	release *assign.Release
	// forWorker: the agent released for its lost worker (release, keep);
	// resume undoes it.
	forWorker bool
	// takeover: what the member record says of a take over, until a
	// generation records it.
	takeover *assign.Takeover
}

// apply moves t by c.ev and does what the event does besides, in one
// place: the jobs it starts and stops, the state it sets, the worker's view
// and the member record it changes. It is the only writer of t's phase,
// epoch, revoke, release, takeover, forWorker, job and record cache (a
// test checks it): a stateful task entering phase active gets an empty
// cache, one leaving it loses its cache, whatever the event. It reports
// whether the event was legal in t's phase; an illegal one changes
// nothing. Callers hold a.mu and t.mu, and for ready and take over
// (which set lastSeq) t.commitMu too.
func (a *Agent) apply(t *task, c change) bool {
	from := t.phase
	if !t.move(c.ev) {
		return false
	}
	switch c.ev {
	case evLearn, evStandBy:
		t.revoke, t.release, t.takeover = nil, nil, nil
		if !from.tailing() || t.job == nil {
			a.startJobLocked(t, stopPrev, func(ctx context.Context, prev *job) bool { return a.tail(ctx, t) })
		}
	case evActivate:
		t.epoch, t.revoke, t.release, t.takeover, t.forWorker = c.epoch, c.revoke, nil, nil, false
		epoch, seq, at := c.epoch, c.handoffSeq, c.handoffAt
		// An activation lets a current tailer apply the previous owner's
		// last commit before it stops it.
		start := stopPrev
		if from.tailing() {
			start = keepPrev
		}
		a.startJobLocked(t, start, func(ctx context.Context, prev *job) bool {
			return a.activate(ctx, t, prev, epoch, seq, at)
		})
	case evReactivate:
		epoch := t.epoch
		a.startJobLocked(t, stopPrev, func(ctx context.Context, prev *job) bool {
			return a.activate(ctx, t, nil, epoch, 0, time.Time{})
		})
		a.bumpViewLocked()
	case evReady:
		a.incoming.owned(t.id) // a hand-off through the leader, until its first commit
		t.lastSeq = c.seq
		if c.seq > 0 {
			t.applied.Store(c.seq)
		}
		t.lag.Store(0)
		a.bumpViewLocked()
	case evTakeOver:
		t.epoch, t.revoke, t.release, t.takeover, t.forWorker = c.epoch, nil, nil, c.takeover, false
		t.lastSeq = c.seq
		if c.seq > 0 {
			t.applied.Store(c.seq)
		}
		t.lag.Store(0)
		// A stateful task's job is the tailer that met the release entry,
		// or an activation that met it or waits for that tailer: each ends
		// by itself.
		a.metrics.directTakeovers.Inc()
		a.incoming.owned(t.id) // until the new owner's first commit
		a.metrics.learnerLag.DeleteLabelValues(t.id)
		a.metrics.restoreRate.DeleteLabelValues(t.id)
		a.bumpViewLocked()
		a.kickHeartbeat()
	case evRelease:
		t.release, t.forWorker = c.release, c.forWorker
		a.bumpViewLocked()
		a.kickHeartbeat()
	case evCancelRevoke:
		t.release = nil
	case evResume:
		t.release, t.forWorker = nil, false
		a.bumpViewLocked()
	case evLose:
		a.incoming.done(t.id)
		a.metrics.fenced.Inc()
		a.bumpViewLocked()
	case evDrop:
		t.revoke, t.release, t.takeover, t.forWorker = nil, nil, nil, false
		t.job.stop()
		a.incoming.done(t.id)
		a.metrics.learnerLag.DeleteLabelValues(t.id)
		a.metrics.restoreRate.DeleteLabelValues(t.id)
	case evKeep:
		// The generation shows the task here at its epoch: a takeover is
		// recorded.
		if c.revoke != nil {
			if t.revoke != nil && t.revoke.target == c.revoke.target && t.revoke.epoch == c.revoke.epoch {
				c.revoke.since = t.revoke.since
			} else {
				a.revokeApplied(c.revoke)
			}
		}
		t.takeover, t.revoke, t.release, t.forWorker = nil, c.revoke, c.release, c.forWorker
	case evReleaseStands:
		t.release = c.release
		a.kickHeartbeat()
	case evWorkerBack:
		t.forWorker = false
	}
	switch {
	case t.phase == phaseActive && from != phaseActive:
		// Active at one epoch, from here until the task leaves the
		// phase: only its commits write its state meanwhile.
		t.cache.drop()
		t.cache = nil
		if t.stateful {
			t.cache = a.caches.open()
		}
	case t.phase != phaseActive && t.cache != nil:
		t.cache.drop()
		t.cache = nil
	}
	return true
}

// jobStart says what a new job of a task does with the task's previous
// one.
type jobStart bool

const (
	// stopPrev cancels the previous job; the new one runs once it has
	// ended.
	stopPrev jobStart = false
	// keepPrev leaves the previous job running: the new one gets it and
	// stops it itself (an activation lets a caught-up tailer apply the
	// previous owner's last commit first).
	keepPrev jobStart = true
)

// startJobLocked replaces t's background job with fn, which gets the
// previous job when start is keepPrev (nil otherwise) and reports whether it
// took the task over from a release entry (job.tookOver). Callers hold a.mu
// and t.mu. Once the agent stops its tasks, it starts nothing.
func (a *Agent) startJobLocked(t *task, start jobStart, fn func(ctx context.Context, prev *job) (tookOver bool)) {
	if a.bgCtx.Err() != nil {
		return
	}
	prev := t.job
	if start == stopPrev {
		prev.stop()
	}
	ctx, cancel := context.WithCancel(a.bgCtx)
	j := &job{cancel: cancel, done: make(chan struct{})}
	t.job = j
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		defer close(j.done)
		defer cancel()
		if start == stopPrev {
			prev.wait()
			prev = nil
		}
		if ctx.Err() != nil {
			prev.stop()
			prev.wait()
			return
		}
		j.tookOver = fn(ctx, prev)
	}()
}

// revokeOrder is a generation's revoke of a task from this member.
type revokeOrder struct {
	// since is when this member first applied the revoke.
	since time.Time
	// target is the member that takes the task over ("" for nobody).
	target string
	// epoch is the epoch target takes when the revoke asks for a direct
	// hand-off; 0 for a hand-off through the leader.
	epoch uint64
}
