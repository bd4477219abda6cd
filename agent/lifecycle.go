package agent

import (
	"fmt"

	"github.com/handoffhq/handoff/api"
)

// taskPhase is where a task's runtime is in its lifecycle on this member.
// Whether the current generation revokes the task is a separate input
// (task.revoking): a revoke does not change what the member may do with
// the task until the worker releases it.
//
//	                learn / stand by
//	   ┌────────────────────────────────────────┐
//	   ▼                                        │
//	Learner ◀──▶ Standby                        │ (from any phase)
//	   │            │                           │
//	   └──activate──┴──▶ Activating ──ready──▶ Active ──release──▶ Released
//	  (from any phase)      │  ▲                 │  ▲                  │
//	                        │  └──reactivate─────┘  └────cancel revoke──┘ (or resume)
//	                       lose                 lose
//	                        ▼                    │
//	                       Lost ◀────────────────┘
//
//	release also from Activating (a revoked task the worker never started).
//	drop: from any phase to Gone (the task left this member).
//
// Activating, Active, Released and Lost are the worker API's role
// "active": the task is this member's at its epoch. Only Active (and
// Released, for reads) lets the worker use it; Released refuses commits.
// A release is the worker's (under revoke) or its agent's, for a worker
// lost (worker.go); resume undoes the latter when the worker comes back
// before the group moved the task.
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

// taskEvent is what moves a task from one phase to another.
type taskEvent uint8

const (
	evLearn        taskEvent = iota // a generation makes it a learner here
	evStandBy                       // a generation makes it a standby here
	evActivate                      // a generation gives it to this member at a new epoch (or again after it was lost)
	evReactivate                    // its copy missed a commit of its own: activate again at the same epoch
	evReady                         // the activation appended its epoch marker
	evRelease                       // the worker released it under revoke, or its agent did for its lost worker
	evCancelRevoke                  // the revoke was called off after the release: the worker serves it again
	evResume                        // the lost worker came back before the group moved the task: it serves it again
	evLose                          // a fenced append showed a newer owner
	evDrop                          // a generation no longer places it here
	numEvents
)

var eventNames = [numEvents]string{"learn", "stand by", "activate", "reactivate", "ready", "release", "cancel revoke", "resume", "lose", "drop"}

func (e taskEvent) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

// transitions is the task lifecycle: for each event, the phases it may
// happen in and the phase it leads to. An event in any other phase is
// illegal.
var transitions = [numEvents]struct {
	from []taskPhase // nil: any phase
	to   taskPhase
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
	evLose:         {[]taskPhase{phaseActivating, phaseActive}, phaseLost},
	evDrop:         {nil, phaseGone},
}

// next is the phase e leads to from p, or an error if e cannot happen in p.
func (p taskPhase) next(e taskEvent) (taskPhase, error) {
	if e >= numEvents || p >= numPhases {
		return p, fmt.Errorf("task lifecycle: unknown %v in %v", e, p)
	}
	tr := transitions[e]
	if tr.from == nil {
		return tr.to, nil
	}
	for _, f := range tr.from {
		if f == p {
			return tr.to, nil
		}
	}
	return p, fmt.Errorf("task lifecycle: %v cannot happen to a task that is %v", e, p)
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
