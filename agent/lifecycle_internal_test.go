package agent

import (
	"testing"

	"github.com/handoffhq/handoff/api"
)

// TestTaskLifecycle checks every event in every phase against the
// lifecycle in lifecycle.go: what it leads to, or that it is refused and
// leaves the phase as it was.
func TestTaskLifecycle(t *testing.T) {
	const x = numPhases // refused
	// want[event][phase]: the phase event leads to from phase, or x.
	want := [numEvents][numPhases]taskPhase{
		//              gone             learner          standby          activating       active           released         lost
		evLearn:        {phaseLearner, phaseLearner, phaseLearner, phaseLearner, phaseLearner, phaseLearner, phaseLearner},
		evStandBy:      {phaseStandby, phaseStandby, phaseStandby, phaseStandby, phaseStandby, phaseStandby, phaseStandby},
		evActivate:     {phaseActivating, phaseActivating, phaseActivating, phaseActivating, phaseActivating, phaseActivating, phaseActivating},
		evReactivate:   {x, x, x, phaseActivating, phaseActivating, x, x},
		evReady:        {x, x, x, phaseActive, x, x, x},
		evRelease:      {x, x, x, phaseReleased, phaseReleased, phaseReleased, x},
		evCancelRevoke: {x, x, x, x, x, phaseActive, x},
		evResume:       {x, x, x, x, x, phaseActive, x},
		evTakeOver:     {phaseActive, phaseActive, phaseActive, phaseActive, x, x, x},
		evLose:         {x, x, x, phaseLost, phaseLost, x, x},
		evDrop:         {phaseGone, phaseGone, phaseGone, phaseGone, phaseGone, phaseGone, phaseGone},
		// The events that leave the phase as it is, where they may happen.
		evKeep:          {x, x, x, phaseActivating, phaseActive, phaseReleased, x},
		evReleaseStands: {phaseGone, phaseLearner, phaseStandby, x, x, x, phaseLost},
		evWorkerBack:    {phaseGone, phaseLearner, phaseStandby, phaseActivating, phaseActive, phaseReleased, phaseLost},
	}
	for e := taskEvent(0); e < numEvents; e++ {
		for p := taskPhase(0); p < numPhases; p++ {
			got, err := p.next(e)
			w := want[e][p]
			switch {
			case w == x && err == nil:
				t.Errorf("%v.next(%v) = %v, want it refused", p, e, got)
			case w == x && got != p:
				t.Errorf("%v.next(%v) refused but moved to %v, want it left %v", p, e, got, p)
			case w != x && (err != nil || got != w):
				t.Errorf("%v.next(%v) = %v, %v; want %v", p, e, got, err, w)
			}
			tk := &task{phase: p}
			if moved := tk.move(e); moved != (w != x) || (moved && tk.phase != w) || (!moved && tk.phase != p) {
				t.Errorf("task in %v: move(%v) = %v to %v; want %v", p, e, moved, tk.phase, w)
			}
		}
	}
	if _, err := phaseActive.next(numEvents); err == nil {
		t.Errorf("an unknown event was accepted")
	}
}

// TestPhaseRoles: the worker API sees every phase of an ownership as
// active, tailing phases as their roles, and nothing of a task gone.
func TestPhaseRoles(t *testing.T) {
	want := map[taskPhase]string{
		phaseGone: "", phaseLearner: api.RoleLearner, phaseStandby: api.RoleStandby,
		phaseActivating: api.RoleActive, phaseActive: api.RoleActive,
		phaseReleased: api.RoleActive, phaseLost: api.RoleActive,
	}
	for p := taskPhase(0); p < numPhases; p++ {
		if got := p.role(); got != want[p] {
			t.Errorf("%v.role() = %q, want %q", p, got, want[p])
		}
	}
}
