package agent

import (
	"context"
	"testing"
	"testing/synctest"
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

// TestRevokeWaitIsOwned: the bump of the worker's view successorWait after
// a revoke comes from a wait the agent owns. It comes then and not before;
// once the agent has stopped (stopAllTasks returned), none runs any more,
// and a revoke applied after the stop starts none. It runs in a synctest
// bubble, whose clock moves only when every goroutine in it is blocked:
// the sleeps below move that clock, they wait for nothing.
func TestRevokeWaitIsOwned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &Agent{tasks: map[string]*task{}, changed: make(chan struct{})}
		a.bgCtx, a.bgStop = context.WithCancel(context.Background())
		revoke := func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.revokeApplied(&revokeOrder{target: "m2", epoch: 4})
		}
		// after returns the view's version once d has passed on the
		// bubble's clock and every goroutine it woke is done.
		after := func(d time.Duration) uint64 {
			time.Sleep(d) // allowed: it moves the bubble's fake clock
			synctest.Wait()
			a.mu.Lock()
			defer a.mu.Unlock()
			return a.version
		}

		revoke()
		if v := after(successorWait - time.Millisecond); v != 0 {
			t.Errorf("view version %d just before successorWait, want 0", v)
		}
		if v := after(2 * time.Millisecond); v != 1 {
			t.Errorf("view version %d once successorWait passed, want 1: the wait bumps it", v)
		}

		revoke()
		a.stopAllTasks()
		if v := after(2 * successorWait); v != 1 {
			t.Errorf("view version %d after the agent stopped, want 1: a revoke's wait ran after the stop", v)
		}
		revoke()
		if v := after(2 * successorWait); v != 1 {
			t.Errorf("view version %d after a revoke applied once the agent stopped, want 1: it started a wait", v)
		}
	})
}
