package scenario

import (
	"fmt"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
)

// WorkerState returns the state of member's worker in gv ("" if gv does
// not list the member, or it requires no worker).
func WorkerState(gv api.GroupView, member string) string {
	for _, mv := range gv.Members {
		if mv.ID == member {
			return mv.Worker
		}
	}
	return ""
}

// WaitMovedAway waits until every one of tasks is active on a member other
// than from, at an epoch above its epoch in before, and that member's
// worker has started it there. It returns the group's view then.
func (h *Harness) WaitMovedAway(timeout time.Duration, from string, tasks []string, before map[string]uint64) api.GroupView {
	h.t.Helper()
	var gv api.GroupView
	h.Eventually(fmt.Sprintf("%v moved away from %s", tasks, from), timeout, func() error {
		var err error
		if gv, err = h.Group(); err != nil {
			return err
		}
		placed := map[string]api.GroupTask{}
		for _, gt := range gv.Tasks {
			placed[gt.ID] = gt
		}
		started, err := h.started()
		if err != nil {
			return err
		}
		for _, task := range tasks {
			gt := placed[task]
			if gt.Active == from || gt.Active == "" || gt.Epoch <= before[task] {
				return fmt.Errorf("%s on %q at epoch %d", task, gt.Active, gt.Epoch)
			}
			if started[gt.Active][task] < gt.Epoch {
				return fmt.Errorf("%s: the worker of %s has not started it at epoch %d", task, gt.Active, gt.Epoch)
			}
		}
		return nil
	})
	return gv
}

// FirstCommits returns, for each of tasks, the time of the first commit
// acknowledged to a member other than from at an epoch above before's:
// when the task's new owner first made progress.
func (h *Harness) FirstCommits(from string, tasks []string, before map[string]uint64) map[string]time.Time {
	want := map[string]bool{}
	for _, task := range tasks {
		want[task] = true
	}
	out := map[string]time.Time{}
	for _, e := range h.allEvents() {
		if e.Type != client.EventCommit || !want[e.Task] || e.Member == from || e.Epoch <= before[e.Task] {
			continue
		}
		if t, ok := out[e.Task]; !ok || e.Time.Before(t) {
			out[e.Task] = e.Time
		}
	}
	return out
}

// Hold checks cond every poll interval for d and fails the test the first
// time it does not hold: a state that must last, rather than one to wait
// for.
func (h *Harness) Hold(what string, d time.Duration, cond func() error) {
	h.t.Helper()
	end := time.NewTimer(d)
	defer end.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	checks := 0
	for {
		if err := h.exited(); err != nil {
			h.t.Fatal(err)
		}
		if err := cond(); err != nil {
			h.t.Fatalf("%s: broken after %d checks: %v", what, checks, err)
		}
		checks++
		select {
		case <-end.C:
			h.Logf("%s: held for %s (%d checks)", what, d, checks)
			return
		case <-tick.C:
		}
	}
}
