package scenario

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/record"
)

// Settled checks that gv is a finished, balanced assignment over exactly
// members: every task active on one of them, no learner or revoke in
// flight, each member's count within one of the others' (stateful and
// stateless separately), and every member in the group's generation.
func Settled(gv api.GroupView, members ...string) error {
	if err := record.Balanced(gv, members...); err != nil {
		return err
	}
	want := make(map[string]bool, len(members))
	for _, m := range members {
		want[m] = true
	}
	present := 0
	for _, mv := range gv.Members {
		if want[mv.ID] {
			present++
			if mv.State != api.StateMember {
				return fmt.Errorf("member %s is %s", mv.ID, mv.State)
			}
		} else if mv.State != "dead" && mv.State != api.StateDone {
			return fmt.Errorf("member %s is %s, want it gone", mv.ID, mv.State)
		}
	}
	if present != len(want) {
		return fmt.Errorf("%d of the members %v are in the group", present, members)
	}
	return nil
}

// running checks that each task's owner in gv has started it at its epoch
// in its worker: the activation finished and the worker follows it.
func (h *Harness) running(gv api.GroupView) error {
	started, err := h.started()
	if err != nil {
		return err
	}
	for _, t := range gv.Tasks {
		if started[t.Active][t.ID] != t.Epoch {
			return fmt.Errorf("worker of %s has not started %s at epoch %d", t.Active, t.ID, t.Epoch)
		}
	}
	return nil
}

// started returns, per member and task, the highest epoch its worker has
// started the task at.
func (h *Harness) started() (map[string]map[string]uint64, error) {
	out := map[string]map[string]uint64{}
	for _, m := range h.Members() {
		events, err := m.Events.Events()
		if err != nil {
			return nil, err
		}
		s := map[string]uint64{}
		for _, e := range events {
			if e.Type == client.EventStart {
				s[e.Task] = max(s[e.Task], e.Epoch)
			}
		}
		out[m.ID] = s
	}
	return out, nil
}

// WaitSettled waits until the group is settled over exactly members and
// every worker runs its tasks, and returns that view.
func (h *Harness) WaitSettled(timeout time.Duration, members ...string) api.GroupView {
	h.t.Helper()
	var gv api.GroupView
	h.Eventually("group settled on "+strings.Join(members, ","), timeout, func() error {
		var err error
		if gv, err = h.Group(); err != nil {
			return err
		}
		if err := h.exited(); err != nil {
			return poll.Permanent(err)
		}
		if err := Settled(gv, members...); err != nil {
			return err
		}
		return h.running(gv)
	})
	return gv
}

// exited returns an error naming the member processes that exited
// although the scenario did not stop them.
func (h *Harness) exited() error {
	var errs []error
	for _, m := range h.Members() {
		for _, p := range m.Expected() {
			if !p.Running() {
				errs = append(errs, fmt.Errorf("%s exited unexpectedly: %v (see %s)", p.Name, p.ExitErr(), p.LogPath))
			}
		}
	}
	return errors.Join(errs...)
}

// WaitCommitting waits until every stateful task has at least n commits
// acknowledged since the call: the whole group processes input.
func (h *Harness) WaitCommitting(timeout time.Duration, n int) {
	h.t.Helper()
	base := h.commitsPerTask()
	h.Eventually(fmt.Sprintf("%d new commits on every stateful task", n), timeout, func() error {
		now := h.commitsPerTask()
		for _, task := range h.stateful {
			if now[task]-base[task] < n {
				return fmt.Errorf("task %s: %d new commits", task, now[task]-base[task])
			}
		}
		return nil
	})
}

func (h *Harness) commitsPerTask() map[string]int {
	out := map[string]int{}
	for _, e := range h.allEvents() {
		if e.Type == client.EventCommit {
			out[e.Task]++
		}
	}
	return out
}

// allEvents returns every worker's events, member by member.
func (h *Harness) allEvents() []record.Event {
	var out []record.Event
	for _, m := range h.Members() {
		events, err := m.Events.Events()
		if err != nil {
			h.t.Logf("read events of %s: %v", m.ID, err)
		}
		out = append(out, events...)
	}
	return out
}

// Mark remembers how far every agent's log has been read, so that Verify
// judges only the activations logged after it (not the group's start).
func (h *Harness) Mark() map[string]int {
	out := map[string]int{}
	for _, m := range h.Members() {
		out[m.ID] = m.Log.Lines()
	}
	return out
}

// Start starts count members m1..mN and the input, and waits until they
// settled and every task commits: the steady state scenarios begin from.
func (h *Harness) Start(count int) {
	h.t.Helper()
	ids := make([]string, count)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%d", i+1)
		h.AddMember(ids[i])
	}
	h.Gen.Start(h.opts.Rate)
	h.WaitSettled(90*time.Second, ids...)
	h.WaitCommitting(60*time.Second, 5)
}
