package agent

import (
	"testing"
	"time"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
)

// TestRevokeDueOnceTheSuccessorIsCurrent: the worker's view lists a
// direct revoke of a stateful task once the successor's latest report says
// its copy is current, or successorWait after the revoke came; any other
// revoke at once.
func TestRevokeDueOnceTheSuccessorIsCurrent(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name     string
		stateful bool
		rv       revokeOrder
		lag      int // the successor's latest report; -1: none
		want     bool
	}{
		{"direct, no report yet", true, revokeOrder{target: "m2", epoch: 4, since: now}, -1, false},
		{"direct, successor behind", true, revokeOrder{target: "m2", epoch: 4, since: now}, 7, false},
		{"direct, successor current", true, revokeOrder{target: "m2", epoch: 4, since: now}, 0, true},
		{"direct, successor behind for too long", true, revokeOrder{target: "m2", epoch: 4, since: now.Add(-successorWait)}, 7, true},
		{"through the leader", true, revokeOrder{target: "m2", since: now}, 7, true},
		{"to nobody", true, revokeOrder{since: now}, -1, true},
		{"stateless", false, revokeOrder{target: "m2", epoch: 4, since: now}, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Agent{progress: newProgressBook(func(group.Progress) {})}
			if tc.lag >= 0 {
				a.progress.add(group.Progress{LearnerProgress: api.LearnerProgress{Member: "m2", Task: "t1", Lag: uint64(tc.lag)}})
				// Another member's report says nothing of the successor.
				a.progress.add(group.Progress{LearnerProgress: api.LearnerProgress{Member: "m3", Task: "t1"}})
			}
			rv := tc.rv
			tk := &task{id: "t1", stateful: tc.stateful, revoke: &rv}
			if got := a.revokeDueLocked(tk); got != tc.want {
				t.Errorf("revokeDueLocked = %v, want %v", got, tc.want)
			}
		})
	}
}
